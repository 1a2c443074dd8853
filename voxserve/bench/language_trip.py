"""Language round trips: the server speaks sentences in each of Kokoro's languages and a
transcription model hears them back, over HTTP.

    python -m voxserve.bench.language_trip --base-url http://127.0.0.1:8000 \
        --asr-model whisper-1 [--languages en-US,fr,zh] [--voices-per-language 1] [--out F]

For each language, the first voice that `GET /v1/audio/voices` lists for `tts-1-hd`
with that language (or `--voices-per-language` of them) speaks the language's sentences
(`POST /v1/audio/speech`, pcm at 24 kHz); each clip is sent to
`POST /v1/audio/transcriptions` with the language set (pt for pt-BR, en for en-US and
en-GB). The error rate is taken on `real_speech_mix.normalize`: characters for ja and
zh, words otherwise. The transcription model must know the languages: an English-only
model answers 400 for the others, which is reported, not counted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx
import numpy as np

from voxserve.audio.encode import wav_file
from voxserve.bench.real_speech_mix import errors, uses_characters

__all__ = ["SENTENCES", "main", "voices_by_language"]

SPEECH_RATE = 24000
SENTENCES: dict[str, tuple[str, ...]] = {
    "en-US": ("The bus to the airport leaves every twenty minutes.",
              "Could you tell me where the nearest pharmacy is?",
              "We painted the kitchen a pale shade of green last weekend.",
              "My grandmother keeps her letters in a wooden box.",
              "The meeting was moved to Thursday afternoon."),
    "en-GB": ("I'll put the kettle on while you find the biscuits.",
              "The train was held outside the station for half an hour.",
              "She left her umbrella on the bench by the river.",
              "We walked along the cliffs until the rain came in.",
              "The library closes early on Saturdays."),
    "es": ("El autobús llega a la plaza a las ocho de la mañana.",
           "Mi hermana trabaja en un hospital cerca del puerto.",
           "¿Puedes cerrar la ventana, por favor?",
           "Esta tarde vamos a comprar pan y fruta en el mercado.",
           "El perro duerme en el jardín cuando hace calor."),
    "fr": ("Le boulanger ouvre sa boutique très tôt le matin.",
           "Nous avons visité un petit village au bord de la mer.",
           "Pouvez-vous m'indiquer le chemin de la gare ?",
           "Les enfants jouent dans le parc après l'école.",
           "Il pleut souvent en automne dans cette région."),
    "hi": ("मैं हर सुबह पार्क में टहलने जाता हूँ।",
           "आज बाज़ार में बहुत भीड़ थी।",
           "क्या आप मुझे स्टेशन का रास्ता बता सकते हैं?",
           "मेरी बहन को किताबें पढ़ना पसंद है।",
           "बारिश के बाद मौसम ठंडा हो गया।"),
    "it": ("Ogni mattina bevo un caffè al bar sotto casa.",
           "Il treno per Milano parte dal secondo binario.",
           "Mia nonna prepara la pasta fatta in casa.",
           "Domani andiamo al mare con gli amici.",
           "La biblioteca è chiusa la domenica."),
    "ja": ("今日はいい天気ですね。",
           "駅までどうやって行けばいいですか。",
           "毎朝コーヒーを飲みます。",
           "図書館はとても静かです。",
           "子供たちは公園で遊んでいます。"),
    "pt-BR": ("Eu gosto de caminhar na praia no fim da tarde.",
              "O mercado abre cedo aos sábados.",
              "Você pode me ajudar com estas caixas?",
              "Minha mãe faz um bolo de laranja delicioso.",
              "O ônibus estava cheio hoje de manhã."),
    "zh": ("今天天气很好，我们一起去公园散步吧。",
           "请问火车站怎么走？",
           "我每天早上喝一杯咖啡。",
           "图书馆里很安静。",
           "孩子们在操场上踢足球。"),
}
PROMPTS = {"zh": "以下是普通话的句子。"}
"""Whisper writes Mandarin in traditional characters unless primed with simplified ones."""


def _code(language: str) -> str:
    return language.split("-")[0].lower()


def voices_by_language(client: httpx.Client, model: str) -> dict[str, list[str]]:
    """Each language's voices of `model` (its OpenAI name), aliases left out."""
    response = client.get("/v1/audio/voices")
    response.raise_for_status()
    found: dict[str, list[str]] = {}
    for voice in response.json()["voices"]:
        if voice.get("openai_model") == model and voice.get("alias_of") is None:
            found.setdefault(str(voice["language"]), []).append(str(voice["id"]))
    return found


def trip(client: httpx.Client, tts_model: str, asr_model: str, voice: str,
         language: str) -> dict[str, object]:
    """One voice's sentences spoken and heard back: its error rate and every pair."""
    code = _code(language)
    pairs: list[dict[str, object]] = []
    edits = units = 0
    for sentence in SENTENCES[language]:
        spoken = client.post("/v1/audio/speech", json={
            "model": tts_model, "input": sentence, "voice": voice, "response_format": "pcm"})
        spoken.raise_for_status()
        pcm = np.frombuffer(spoken.content, dtype="<i2")
        form = {"model": asr_model, "language": code}
        if code in PROMPTS:
            form["prompt"] = PROMPTS[code]
        heard = client.post("/v1/audio/transcriptions", data=form,
                            files={"file": ("s.wav", wav_file(pcm, SPEECH_RATE), "audio/wav")})
        if heard.status_code != 200:
            return {"voice": voice, "language": language, "error":
                    f"HTTP {heard.status_code}: {heard.text[:200]}"}
        text = str(heard.json()["text"])
        counted = errors(sentence, text, code)
        edits += counted.edits
        units += counted.units
        pairs.append({"reference": sentence, "heard": text, "edits": counted.edits,
                      "units": counted.units, "seconds": len(pcm) / SPEECH_RATE})
    return {"voice": voice, "language": language, "metric":
            "CER" if uses_characters(code) else "WER", "rate": edits / units, "pairs": pairs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--asr-model", default="whisper-1", help="the model that listens")
    parser.add_argument("--tts-model", default="tts-1-hd", help="the model that speaks")
    parser.add_argument("--languages", default=",".join(SENTENCES),
                        help="comma-separated, from: " + ", ".join(SENTENCES))
    parser.add_argument("--voices-per-language", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=None, help="write the results JSON here")
    args = parser.parse_args(argv)
    languages = [lang for lang in args.languages.split(",") if lang]
    if unknown := [lang for lang in languages if lang not in SENTENCES]:
        parser.error(f"no sentences for {unknown}; choose from {list(SENTENCES)}")
    results: list[dict[str, object]] = []
    with httpx.Client(base_url=args.base_url, timeout=args.timeout) as client:
        voices = voices_by_language(client, args.tts_model)
        for language in languages:
            if not voices.get(language):
                results.append({"language": language, "error": f"no {args.tts_model} voice"})
                continue
            for voice in voices[language][:args.voices_per_language]:
                results.append(trip(client, args.tts_model, args.asr_model, voice, language))
                print(json.dumps({k: v for k, v in results[-1].items() if k != "pairs"},
                                 ensure_ascii=False), file=sys.stderr)
    print("| language | voice | metric | error rate |\n|---|---|---|---|")
    for r in results:
        rate = r.get("rate")
        cell = f"{100 * rate:.1f} %" if isinstance(rate, float) else str(r.get("error"))
        print(f"| {r['language']} | {r.get('voice', '-')} | {r.get('metric', '-')} | {cell} |")
    if args.out is not None:
        args.out.write_text(json.dumps({"asr_model": args.asr_model, "tts_model":
                                        args.tts_model, "results": results},
                                       indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

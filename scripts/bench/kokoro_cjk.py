"""Every Mandarin and Japanese Kokoro voice round-tripped through Whisper base: character
error rate per voice.

    PYTHONPATH=$PWD .venv/bin/python scripts/bench/kokoro_cjk.py [--max-cer 0.25] [--languages zh,ja]
        [--voices zf_xiaoni,zf_xiaobei] [--reference] [--sentences FILE]
    PYTHONPATH=$PWD .venv/bin/python scripts/bench/kokoro_cjk.py --tones [--voices zf_xiaoni,zf_xiaobei]
        [--min-gap 1] [--as-shipped]

Starts a server on loopback with Kokoro and, as its ASR model, the multilingual Whisper
base (`--asr-models whisper-base`). Every voice of the given languages speaks ten everyday sentences
without numerals (`tts-1-hd`, pcm); each clip is transcribed by the server with its
language forced (Mandarin prompted in simplified characters, so that the judge writes
them rather than traditional ones), and the character error rate is computed over each
voice's ten sentences: NFKC, lower case, punctuation, symbols and spaces removed
(`voxserve.bench.metrics.character_errors`). Prints the CER per voice, worst first, and
each language's mean; exits 1 when a voice is over `--max-cer`. Two streams at a time
(one per worker): about ten minutes on two cores. The test suite round-trips one voice
per language (tests/test_kokoro_voice.py).

`--reference` also has the judge read another system's Mandarin of the same sentences, so
that its figures can be read: espeak-ng's own formant voice `cmn`, from the libespeak-ng
that the `espeakng-loader` package ships, offline. Japanese has none: espeak-ng's
Japanese voice reads kana only and names each kanji "Chinese letter".

`--tones`: the pitch stage A predicts for each of Mandarin's lexical tones, with no server,
decoder or Whisper (about 10 s on one core). Mandarin tells words apart by tone: tone 1 (→)
is high and level, tone 2 (↗) rises, tone 3 (↓) is low, tone 4 (↘) falls. For each Mandarin
voice, on the ten sentences, this reads the F0 that stage A (the prosody predictor) gives
over each toned syllable's vowels (the run of vowels before the tone arrow, and the arrow,
at the durations stage A predicts), in semitones against the voice's median F0 over the
sentences. It prints, per voice and tone, the mean height and the slope (the last third of
the vowels less the first third), and the height of tone 1 above tone 3; exits 1 when a
voice's tone 1 is less than `--min-gap` semitones above its tone 3. `--as-shipped` reads
the voices' style rows as Kokoro ships them, without the server's prosody repairs
(`PROSODY_REPAIRS` in runners/kokoro/onnx_runner.py, docs/KOKORO.md).
"""

from __future__ import annotations

import argparse
import ctypes
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np

from tests.asr_support import wav_bytes
from tests.conftest import run_server
from voxserve.bench.metrics import character_errors
from voxserve.config import ASRConfig, ServerConfig, TTSConfig
from voxserve.engine.adapters.kokoro import KokoroVoice
from voxserve.runners.kokoro.onnx_runner import (
    KokoroInput,
    KokoroModel,
    list_voices,
    load_voice,
    style_row,
)
from voxserve.text.kokoro_vocab import KOKORO_VOCAB

SENTENCES = {
    "zh": [
        "今天天气很好，我们一起去公园散步吧。",
        "请问火车站怎么走？",
        "我每天早上喝一杯咖啡。",
        "这家餐厅的菜非常好吃。",
        "周末我想在家里看书。",
        "你能帮我打开窗户吗？",
        "他正在学习做饭。",
        "图书馆里很安静。",
        "我们明天早上见面吧。",
        "孩子们在操场上踢足球。",
    ],
    "ja": [
        "今日はいい天気ですね。",
        "駅までどうやって行けばいいですか。",
        "毎朝コーヒーを飲みます。",
        "このレストランの料理はとてもおいしいです。",
        "週末は家で本を読みたいです。",
        "窓を開けてもらえますか。",
        "彼は料理を勉強しています。",
        "図書館はとても静かです。",
        "明日の朝に会いましょう。",
        "子供たちは公園で遊んでいます。",
    ],
}
PROMPTS = {"zh": "以下是普通话的句子。"}
ESPEAK_VOICES = {"zh": "cmn"}
"""espeak-ng's voice for each language it can read these sentences in, for `--reference`."""


def judge(client: httpx.Client, language: str, clips: list[tuple[np.ndarray, int]]) -> tuple[float, list[str]]:
    """(CER over the language's sentences, what Whisper heard for each) for one clip
    (int16 PCM, rate) per sentence."""
    pairs: list[tuple[str, str]] = []
    for sentence, (pcm, rate) in zip(SENTENCES[language], clips, strict=True):
        form = {"model": "whisper-1", "language": language}
        if language in PROMPTS:
            form["prompt"] = PROMPTS[language]
        heard = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", wav_bytes(pcm, rate))}, data=form)
        heard.raise_for_status()
        pairs.append((sentence, heard.json()["text"]))
    counts = [character_errors(ref, hyp) for ref, hyp in pairs]
    return sum(c.errors for c in counts) / sum(c.reference_words for c in counts), [hyp for _, hyp in pairs]


def round_trip(client: httpx.Client, voice: str, language: str) -> tuple[float, str, list[str]]:
    """(CER over the voice's sentences, voice, what Whisper heard for each)."""
    clips = []
    for sentence in SENTENCES[language]:
        spoken = client.post("/v1/audio/speech", json={
            "model": "tts-1-hd", "input": sentence, "voice": voice, "response_format": "pcm"})
        spoken.raise_for_status()
        clips.append((np.frombuffer(spoken.content, dtype=np.int16), 24000))
    rate, heard = judge(client, language, clips)
    return rate, voice, heard


def espeak_speech(language: str) -> list[tuple[np.ndarray, int]]:
    """espeak-ng's formant voice for `language` speaking its sentences: (int16 PCM, rate)
    each. espeak-ng keeps its state in globals, so this runs in a process of its own
    (`reference_speech`), away from the server's phonemizer."""
    import espeakng_loader  # type: ignore[import-untyped]

    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    rate = lib.espeak_Initialize(2, 0, espeakng_loader.get_data_path().encode(), 0)  # synchronous
    if rate <= 0 or lib.espeak_SetVoiceByName(ESPEAK_VOICES[language].encode()) != 0:
        raise RuntimeError(f"espeak-ng has no voice {ESPEAK_VOICES[language]!r}")
    pieces: list[np.ndarray] = []
    callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

    def collect(wav: ctypes._Pointer[ctypes.c_short], count: int, events: int) -> int:
        if count > 0:
            pieces.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        return 0

    callback = callback_type(collect)
    lib.espeak_SetSynthCallback(callback)
    lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                 ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
    clips = []
    for sentence in SENTENCES[language]:
        text = sentence.encode()
        pieces.clear()
        if lib.espeak_Synth(text, len(text) + 1, 0, 0, 0, 1, None, None) != 0:  # 1: UTF-8
            raise RuntimeError("espeak-ng could not speak a sentence")
        lib.espeak_Synchronize()
        clips.append((np.concatenate(pieces).astype(np.int16), int(rate)))
    return clips


def reference_speech(languages: list[str]) -> dict[str, list[tuple[np.ndarray, int]]]:
    with multiprocessing.get_context("spawn").Pool(1) as child:
        return dict(zip(languages, child.map(espeak_speech, languages), strict=True))


TONES = {"→": 1, "↗": 2, "↓": 3, "↘": 4}
VOWELS = frozenset("aeiouyɤəɛɨʊɚɔ")
"""The vowels `text/kokoro_zh.py` writes (j, w and ɥ are glides, and stay out)."""
_SYMBOL = {i: s for s, i in KOKORO_VOCAB.items()}


def nuclei(ids: np.ndarray, durations: np.ndarray) -> list[tuple[int, int, int]]:
    """(tone, first frame, end frame) of each toned syllable's vowels and arrow. `durations`
    are stage A's frames per token, the pads included (token k + 1 is ids[k])."""
    starts = np.concatenate(([0], np.cumsum(durations)))
    symbols = [_SYMBOL[int(i)] for i in ids]
    found = []
    for k, symbol in enumerate(symbols):
        if symbol not in TONES:
            continue
        first = k
        while first > 0 and symbols[first - 1] in VOWELS:
            first -= 1
        found.append((TONES[symbol], int(starts[first + 1]), int(starts[k + 2])))
    return found


def tone_heights(voice: KokoroVoice, name: str, as_shipped: bool = False) -> dict[int, tuple[float, float, int]]:
    """Tone -> (mean height, mean slope, syllables), in semitones against the voice's median
    F0; with the voice's style rows as served, or as Kokoro ships them."""
    ref = voice.resolve_voice(name)
    rows = load_voice(name, as_shipped=as_shipped)
    acoustic, _ = voice.model.runners(1)
    spoken = []
    for sentence in SENTENCES["zh"]:
        for item in voice.inputs(sentence, ref, 1.0):
            style = style_row(rows, len(item.ids))
            (frames,) = acoustic.run([KokoroInput(item.ids, style, 1.0)])
            f0 = frames.decoder_input.f0.reshape(-1, 2).mean(axis=1)  # two points per frame
            spoken.append((nuclei(item.ids, frames.durations), f0))
    median = float(np.median(np.concatenate([f0[f0 > 10] for _, f0 in spoken])))
    per_tone: dict[int, list[tuple[float, float]]] = {t: [] for t in TONES.values()}
    for syllables, f0 in spoken:
        for tone, lo, hi in syllables:
            voiced = f0[lo:hi][f0[lo:hi] > 10]
            if len(voiced) < 2:
                continue
            semitones = 12 * np.log2(voiced / median)
            third = max(1, len(semitones) // 3)
            slope = semitones[-third:].mean() - semitones[:third].mean()
            per_tone[tone].append((float(semitones.mean()), float(slope)))
    return {
        t: (float(np.mean([h for h, _ in v])), float(np.mean([s for _, s in v])), len(v))
        for t, v in per_tone.items() if v
    }


def tones(names: list[str], min_gap: float, as_shipped: bool) -> int:
    """Print each Mandarin voice's tone heights and slopes; 1 when a voice's tone 1 is too low."""
    voice = KokoroVoice(KokoroModel(threads=1))
    print("voice          " + "   ".join(f"tone {t}: height slope" for t in (1, 2, 3, 4)) + "   tone 1 - tone 3")
    low = []
    for name in names:
        heights = tone_heights(voice, name, as_shipped)
        gap = heights[1][0] - heights[3][0]
        cells = "   ".join(f"{heights[t][0]:+5.1f} st {heights[t][1]:+5.1f} st" for t in (1, 2, 3, 4))
        print(f"{name:14s} {cells}   {gap:+5.1f} st")
        if gap < min_gap:
            low.append(name)
    print(f"tone 1 less than {min_gap:g} semitones above tone 3: {', '.join(low) or 'none'}")
    return 1 if low else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--languages", default="zh,ja", help="voice languages to speak")
    parser.add_argument("--voices", default="", help="only these voices (comma-separated names), e.g. one and a control")
    parser.add_argument("--max-cer", type=float, default=0.25, help="fail when a voice's CER is above this")
    parser.add_argument("--reference", action="store_true", help="also judge espeak-ng's own Mandarin voice on the sentences")
    parser.add_argument("--sentences", type=Path,
                        help="speak these sentences (one a line) instead of the built-in ten; one language only")
    parser.add_argument("--tones", action="store_true", help="stage A's pitch per Mandarin tone, no round trip")
    parser.add_argument("--min-gap", type=float, default=1.0, help="with --tones: semitones tone 1 must be above tone 3")
    parser.add_argument("--as-shipped", action="store_true",
                        help="with --tones: the voices' style rows as Kokoro ships them, without the server's prosody repairs")
    args = parser.parse_args(argv)
    if args.tones:
        args.languages = "zh"
    languages = args.languages.split(",")
    if args.sentences:
        if len(languages) != 1:
            parser.error("--sentences needs one language in --languages")
        SENTENCES[languages[0]] = [line.strip() for line in args.sentences.read_text().splitlines() if line.strip()]
    voices = [(v.name, v.language) for v in list_voices() if v.language in languages]
    if args.voices:
        wanted = set(args.voices.split(","))
        if unknown := wanted - {name for name, _ in voices}:
            parser.error(f"not a {'/'.join(languages)} voice: {', '.join(sorted(unknown))}")
        voices = [(name, lang) for name, lang in voices if name in wanted]
    if args.tones:
        return tones([name for name, _ in voices], args.min_gap, args.as_shipped)
    start = time.monotonic()
    references = reference_speech([lang for lang in languages if lang in ESPEAK_VOICES]) if args.reference else {}
    config = ServerConfig(tts=replace(TTSConfig(), models=("piper", "kokoro")), asr=replace(ASRConfig(), models=("whisper-base",)))
    with (run_server(config, kokoro=True) as server,
          httpx.Client(base_url=server.base_url, timeout=300) as client,
          ThreadPoolExecutor(2) as pool):  # one stream per worker
        results = sorted(pool.map(lambda v: round_trip(client, *v), voices), reverse=True)
        judged = {lang: judge(client, lang, clips) for lang, clips in references.items()}
    for rate, voice, heard in results:
        print(f"{voice:14s} CER {rate * 100:5.1f} %  {' | '.join(heard)}")
    by_language = {lang: [r for r, v, _ in results if v[0] == lang[0]] for lang in languages}
    for lang, rates in by_language.items():
        if rates:
            print(f"{lang}: mean CER {statistics.mean(rates) * 100:.1f} % over {len(rates)} voices, worst {max(rates) * 100:.1f} %")
    for lang, (rate, heard) in judged.items():
        print(f"espeak-ng {ESPEAK_VOICES[lang]} (reference) CER {rate * 100:5.1f} %  {' | '.join(heard)}")
    bad = [voice for rate, voice, _ in results if rate > args.max_cer]
    print(f"{len(voices)} voices in {time.monotonic() - start:.0f} s; over {args.max_cer:.0%}: {', '.join(bad) or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

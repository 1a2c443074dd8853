"""Transcription accuracy on recordings of real people, clean and in noise, over HTTP.

    python -m voxserve.bench.real_speech --base-url http://127.0.0.1:8000 \
        --model whisper-1 [--model other] [--give-language] [--out results.json]

Every clip of `real_speech_set.CLIPS` is sent to `POST /v1/audio/transcriptions` three
ways: clean, in pink noise at 5 dB SNR, and in babble at 10 dB SNR (six other speakers of
the set, never the clip's own). One request at a time; the models alternate clip by clip,
starting with a different one each clip, so that a drift of the machine falls on all.
Any OpenAI-compatible server works (faster-whisper-server included): only the
endpoint, `model`, `language` and the JSON `text` field are used.

Prints per model the error rate of each condition and their mean, for the English clips,
the English clips over 30 s, and each language (word error rate; character error rate
for ja and zh). `--out` writes every request's record and the run's settings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np

from voxserve.audio.encode import wav_file
from voxserve.bench.real_speech_mix import (
    Errors,
    babble,
    errors,
    mix_at_snr,
    pink_noise,
    uses_characters,
)
from voxserve.bench.real_speech_set import CLIPS, SAMPLE_RATE, Clip, default_cache, load_clip

__all__ = ["CONDITIONS", "Record", "main", "noisy", "summarize"]

CONDITIONS = ("clean", "pink 5 dB", "babble 10 dB")
BABBLE_TALKERS = 6
LONG_S = 30.0


@dataclass(frozen=True)
class Record:
    model: str
    clip: str
    language: str
    condition: str
    seconds: float
    latency_s: float
    text: str
    edits: int
    units: int
    error: str | None = None


def _rng(seed: int, *names: str) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


def noisy(clip: Clip, audio: np.ndarray, condition: str, others: dict[str, np.ndarray],
          seed: int) -> np.ndarray:
    """`audio` under `condition`; the noise depends only on the seed and the clip."""
    if condition == "clean":
        return audio
    rng = _rng(seed, clip.id, condition)
    if condition == "pink 5 dB":
        return mix_at_snr(audio, pink_noise(len(audio), rng), 5.0, SAMPLE_RATE)
    by_speaker: dict[str, str] = {}
    for other in CLIPS:
        if other.speaker != clip.speaker and other.id in others:
            by_speaker.setdefault(other.speaker, other.id)
    speakers = sorted(by_speaker)
    if len(speakers) < BABBLE_TALKERS:
        raise ValueError(f"babble needs {BABBLE_TALKERS} other speakers, the set has "
                         f"{len(speakers)}")
    chosen = rng.choice(len(speakers), size=BABBLE_TALKERS, replace=False)
    talkers = [others[by_speaker[speakers[int(i)]]] for i in chosen]
    return mix_at_snr(audio, babble(talkers, len(audio), SAMPLE_RATE, rng), 10.0, SAMPLE_RATE)


def transcribe(client: httpx.Client, model: str, audio: np.ndarray,
               language: str | None) -> str:
    pcm = np.clip(np.round(audio * 32767.0), -32768, 32767).astype(np.int16)
    data = {"model": model, "response_format": "json"}
    if language is not None:
        data["language"] = language
    response = client.post("/v1/audio/transcriptions", data=data,
                           files={"file": ("clip.wav", wav_file(pcm, SAMPLE_RATE), "audio/wav")})
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
    return str(response.json()["text"])


def _rate(records: list[Record]) -> float:
    done = [r for r in records if r.error is None]
    units = sum(r.units for r in done)
    return sum(r.edits for r in done) / units if units and len(done) == len(records) \
        else float("nan")


def summarize(records: list[Record], clips: tuple[Clip, ...]) -> list[dict[str, object]]:
    """Rows of (model, set): the error rate per condition and their mean. A cell with a
    failed request is NaN rather than a rate over fewer clips."""
    long_ids = {r.clip for r in records if r.seconds > LONG_S and r.language == "en"}
    groups: list[tuple[str, set[str]]] = [
        ("en", {c.id for c in clips if c.language == "en"}),
        (f"en > {LONG_S:.0f} s", long_ids)]
    for language in sorted({c.language for c in clips} - {"en"}):
        groups.append((language, {c.id for c in clips if c.language == language}))
    rows: list[dict[str, object]] = []
    for model in dict.fromkeys(r.model for r in records):
        for name, ids in groups:
            if not ids:
                continue
            language = name.split()[0]
            rates = {cond: _rate([r for r in records if r.model == model
                                  and r.clip in ids and r.condition == cond])
                     for cond in CONDITIONS}
            rows.append({"model": model, "set": name, "clips": len(ids),
                         "metric": "CER" if uses_characters(language) else "WER",
                         **rates, "mean": float(np.mean(list(rates.values())))})
    return rows


def _cell(value: object) -> str:
    if not isinstance(value, float):
        return str(value)
    return "n/a" if np.isnan(value) else f"{100 * value:.1f} %"


def _table(rows: list[dict[str, object]]) -> str:
    head = ["model", "set", "clips", "metric", *CONDITIONS, "mean"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [_cell(row[k]) for k in head]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", action="append", default=None,
                        help="model name; repeat or comma-separate to run several, "
                             "alternating (default whisper-1)")
    parser.add_argument("--give-language", action="store_true",
                        help="send each non-English clip's language")
    parser.add_argument("--clips", default="", help="only these clip ids (comma-separated)")
    parser.add_argument("--conditions", default=",".join(CONDITIONS),
                        help=f"comma-separated subset of: {', '.join(CONDITIONS)}")
    parser.add_argument("--cache", type=Path, default=default_cache(),
                        help="where the archives and decoded clips are kept")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    parser.add_argument("--out", type=Path, default=None, help="write the results JSON here")
    parser.add_argument("--prepare-only", action="store_true",
                        help="fetch and check the set, then stop")
    args = parser.parse_args(argv)
    models = [m for arg in (args.model or ["whisper-1"]) for m in arg.split(",") if m]
    conditions = [c for c in args.conditions.split(",") if c]
    if unknown := set(conditions) - set(CONDITIONS):
        parser.error(f"unknown conditions {sorted(unknown)}; choose from {list(CONDITIONS)}")
    wanted = {c for c in args.clips.split(",") if c}
    clips = tuple(c for c in CLIPS if not wanted or c.id in wanted)
    if wanted - {c.id for c in clips}:
        parser.error(f"unknown clips {sorted(wanted - {c.id for c in clips})}")

    audio = {c.id: load_clip(c, args.cache) for c in CLIPS}
    for c in clips:
        print(f"{c.id:22s} {len(audio[c.id]) / SAMPLE_RATE:6.1f} s  {c.language}  "
              f"{c.description}", file=sys.stderr)
    if args.prepare_only:
        return 0

    records: list[Record] = []
    started = time.time()
    with httpx.Client(base_url=args.base_url, timeout=args.timeout) as client:
        turn = 0
        for condition in conditions:
            for clip in clips:
                sound = noisy(clip, audio[clip.id], condition, audio, args.seed)
                language = clip.language if args.give_language and clip.language != "en" \
                    else None
                order = models[turn % len(models):] + models[:turn % len(models)]
                turn += 1
                for model in order:
                    records.append(_one(client, model, clip, condition, sound, language))
                    r = records[-1]
                    print(f"{model} {condition:12s} {clip.id:22s} "
                          f"{r.error or f'{r.edits}/{r.units}'}  {r.text[:70]!r}",
                          file=sys.stderr)
    rows = summarize(records, clips)
    print(_table(rows))
    if args.out is not None:
        args.out.write_text(json.dumps({
            "settings": {"base_url": args.base_url, "models": models,
                         "give_language": args.give_language, "seed": args.seed,
                         "conditions": conditions, "started": started,
                         "wall_s": time.time() - started,
                         "snr": "active speech level (20 ms frames within 40 dB of the "
                                "loudest) over the noise's whole-clip RMS"},
            "clips": [{**asdict(c), "seconds": len(audio[c.id]) / SAMPLE_RATE} for c in clips],
            "summary": rows,
            "records": [asdict(r) for r in records],
        }, indent=1, ensure_ascii=False))
    return 0


def _one(client: httpx.Client, model: str, clip: Clip, condition: str, sound: np.ndarray,
         language: str | None) -> Record:
    t0 = time.perf_counter()
    seconds = len(sound) / SAMPLE_RATE
    try:
        text = transcribe(client, model, sound, language)
    except (httpx.HTTPError, RuntimeError) as exc:
        return Record(model, clip.id, clip.language, condition, seconds,
                      time.perf_counter() - t0, "", 0, 0, str(exc))
    counted: Errors = errors(clip.text, text, clip.language)
    return Record(model, clip.id, clip.language, condition, seconds,
                  time.perf_counter() - t0, text, counted.edits, counted.units)


if __name__ == "__main__":
    sys.exit(main())

"""Transcription accuracy on recordings of real people, clean and in noise, over HTTP.

    python -m voxserve.bench.real_speech --base-url http://127.0.0.1:8000 \
        --model whisper-1 [--model other] [--give-language] [--out results.json] \
        [--conditions all] [--filter off,near_field,far_field] [--false-turns 30] [--stop-delay]

Every clip of `real_speech_set.CLIPS` is sent to `POST /v1/audio/transcriptions` under
each condition: by default clean, in pink noise at 5 dB SNR, and in babble at 10 dB SNR
(six other speakers of the set, never the clip's own); `--conditions all` adds pink noise
(stationary) and babble at 10, 5 and 0 dB. One request at a time; the models alternate
clip by clip, starting with a different one each clip, so that a drift of the machine
falls on all. Any OpenAI-compatible server works (faster-whisper-server included): only
the endpoint, `model`, `language` and the JSON `text` field are used.

`--filter` also sends each clip through voxserve's noise filter (`engine/denoise.py`,
`near_field` or `far_field`), run here in process: what the recognizer would hear if it
were given the filtered audio, beside the audio as it is (`off`), in the same run. The
filter's CPU time per second of audio (one thread, at 16 kHz) is printed with them.
`--false-turns S` counts the turns the server's VAD (Silero, default `server_vad`) starts
in S seconds of noise alone (pink, and babble of six speakers), heard raw and through
each filter, in 20 ms pieces as a live session gets them. `--stop-delay` streams each clip
(in each condition) through the VAD the same way and says how much later, through each
filter, its last turn ends: the latency the filter adds to a final.

Prints per model (and filter) the error rate of each condition and their mean, for the
English clips, the English clips over 30 s, and each language (word error rate;
character error rate for ja and zh). `--out` writes every request's record and the run's
settings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from dataclasses import asdict, dataclass, replace
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
from voxserve.engine.denoise import NOISE_REDUCTION_TYPES, STRENGTHS
from voxserve.engine.turns import Start, Stop, TurnDetector
from voxserve.engine.vad import SileroVAD, VADStream
from voxserve.runners.denoise import Denoiser, DenoiseStream

__all__ = ["CONDITIONS", "DEFAULT_CONDITIONS", "FILTERS", "Record", "false_turns", "main", "noisy",
           "summarize"]

CONDITIONS = ("clean", "pink 10 dB", "pink 5 dB", "pink 0 dB", "babble 10 dB", "babble 5 dB",
              "babble 0 dB")
DEFAULT_CONDITIONS = ("clean", "pink 5 dB", "babble 10 dB")
FILTERS = ("off", *NOISE_REDUCTION_TYPES)
NOISE_ALONE_RMS = 0.03
"""Level of the noise alone for `--false-turns` (-30 dBFS)."""
PIECE = SAMPLE_RATE // 50
"""Samples per piece a live session's VAD gets them in (20 ms)."""
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
    filter: str = "off"


def _rng(seed: int, *names: str) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


def noisy(clip: Clip, audio: np.ndarray, condition: str, others: dict[str, np.ndarray],
          seed: int) -> np.ndarray:
    """`audio` under `condition`; the noise depends only on the seed and the clip."""
    if condition == "clean":
        return audio
    rng = _rng(seed, clip.id, condition)
    kind, snr = condition.split()[0], float(condition.split()[1])
    if kind == "pink":
        return mix_at_snr(audio, pink_noise(len(audio), rng), snr, SAMPLE_RATE)
    return mix_at_snr(audio, _babble(clip.speaker, others, len(audio), rng), snr, SAMPLE_RATE)


def _babble(speaker: str, others: dict[str, np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    """Six speakers of the set talking at once, none of them `speaker`."""
    by_speaker: dict[str, str] = {}
    for other in CLIPS:
        if other.speaker != speaker and other.id in others:
            by_speaker.setdefault(other.speaker, other.id)
    speakers = sorted(by_speaker)
    if len(speakers) < BABBLE_TALKERS:
        raise ValueError(f"babble needs {BABBLE_TALKERS} other speakers, the set has "
                         f"{len(speakers)}")
    chosen = rng.choice(len(speakers), size=BABBLE_TALKERS, replace=False)
    talkers = [others[by_speaker[speakers[int(i)]]] for i in chosen]
    return babble(talkers, n, SAMPLE_RATE, rng)


class Filters:
    """voxserve's noise filter, run in process on whole clips as a live session would
    stream them; keeps the CPU time it took per kind."""

    def __init__(self) -> None:
        self.model = Denoiser()
        self.cpu_s: dict[str, float] = {}
        self.audio_s: dict[str, float] = {}

    def __call__(self, kind: str, audio: np.ndarray) -> np.ndarray:
        if kind == "off":
            return audio
        stream = DenoiseStream(STRENGTHS[kind])
        started = time.process_time()
        samples = audio.astype(np.float32)
        out = np.concatenate([self.model.feed(stream, samples), self.model.flush(stream)])
        self.cpu_s[kind] = self.cpu_s.get(kind, 0.0) + time.process_time() - started
        self.audio_s[kind] = self.audio_s.get(kind, 0.0) + len(audio) / SAMPLE_RATE
        clipped: np.ndarray = np.clip(out, -1.0, 1.0)
        return clipped

    def cost(self) -> dict[str, float]:
        """CPU-seconds per second of audio, per kind."""
        return {k: self.cpu_s[k] / self.audio_s[k] for k in self.cpu_s if self.audio_s[k] > 0}


def false_turns(noise: np.ndarray, filters: Filters, kind: str, vad: SileroVAD) -> int:
    """Turns the default server VAD starts in `noise` alone, heard through `kind`."""
    detector = TurnDetector(0.5, 500.0)
    stream = VADStream()
    denoise = None if kind == "off" else DenoiseStream(STRENGTHS[kind])
    starts = 0
    for at in range(0, len(noise), PIECE):
        piece = noise[at:at + PIECE].astype(np.float32)
        if denoise is not None:
            piece = filters.model.feed(denoise, piece)
        first = stream.frames_done
        probs = vad.score(stream, piece)
        starts += sum(isinstance(e, Start) for e in detector.feed(probs, first))
    return starts


def last_stop_heard(audio: np.ndarray, filters: Filters, kind: str, vad: SileroVAD) -> int | None:
    """How many samples of `audio` (then 1.5 s of silence) a live session has received when
    the default server VAD, hearing it through `kind`, ends its last turn; None if no turn
    ends. The difference between filters is the latency the filter adds to a final."""
    detector = TurnDetector(0.5, 500.0)
    stream = VADStream()
    denoise = None if kind == "off" else DenoiseStream(STRENGTHS[kind])
    padded = np.concatenate([audio, np.zeros(int(1.5 * SAMPLE_RATE))]).astype(np.float32)
    last = None
    for at in range(0, len(padded), PIECE):
        piece = padded[at:at + PIECE]
        if denoise is not None:
            piece = filters.model.feed(denoise, piece)
        first = stream.frames_done
        if any(isinstance(e, Stop) for e in detector.feed(vad.score(stream, piece), first)):
            last = at + PIECE
    return last


def _noise_alone(seconds: float, others: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    n = int(seconds * SAMPLE_RATE)
    pink = pink_noise(n, _rng(seed, "alone", "pink"))
    talk = _babble("", others, n, _rng(seed, "alone", "babble"))
    return {name: (x * NOISE_ALONE_RMS / max(float(np.sqrt(np.mean(x ** 2))), 1e-9)).astype(np.float32)
            for name, x in (("pink", pink), ("babble", talk))}


def transcribe(client: httpx.Client, model: str, audio: np.ndarray,
               language: str | None, word_times: bool = False) -> str:
    pcm = np.clip(np.round(audio * 32767.0), -32768, 32767).astype(np.int16)
    data = {"model": model, "response_format": "json"}
    if word_times:
        data |= {"response_format": "verbose_json", "timestamp_granularities[]": "word"}
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
    """Rows of (model, filter, set): the error rate per condition run and their mean. A
    cell with a failed request is NaN rather than a rate over fewer clips."""
    long_ids = {r.clip for r in records if r.seconds > LONG_S and r.language == "en"}
    groups: list[tuple[str, set[str]]] = [
        ("en", {c.id for c in clips if c.language == "en"}),
        (f"en > {LONG_S:.0f} s", long_ids)]
    for language in sorted({c.language for c in clips} - {"en"}):
        groups.append((language, {c.id for c in clips if c.language == language}))
    rows: list[dict[str, object]] = []
    conditions = [c for c in CONDITIONS if any(r.condition == c for r in records)]
    for model, kind in dict.fromkeys((r.model, r.filter) for r in records):
        for name, ids in groups:
            if not ids:
                continue
            language = name.split()[0]
            rates = {cond: _rate([r for r in records if r.model == model and r.filter == kind
                                  and r.clip in ids and r.condition == cond])
                     for cond in conditions}
            rows.append({"model": model, "filter": kind, "set": name, "clips": len(ids),
                         "metric": "CER" if uses_characters(language) else "WER",
                         **rates, "mean": float(np.mean(list(rates.values())))})
    return rows


def _cell(value: object) -> str:
    if not isinstance(value, float):
        return str(value)
    return "n/a" if np.isnan(value) else f"{100 * value:.1f} %"


def _table(rows: list[dict[str, object]]) -> str:
    head = ["model", "filter", "set", "clips", "metric", *[c for c in CONDITIONS if rows and c in rows[0]], "mean"]
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
    parser.add_argument("--conditions", default=",".join(DEFAULT_CONDITIONS),
                        help=f"comma-separated subset of: {', '.join(CONDITIONS)}; or all")
    parser.add_argument("--filter", default="off",
                        help=f"comma-separated noise filters to send each clip through, here in "
                             f"process: {', '.join(FILTERS)} (default off)")
    parser.add_argument("--false-turns", type=float, default=0.0, metavar="SECONDS",
                        help="also count the VAD's turns in this much noise alone, per filter")
    parser.add_argument("--stop-delay", action="store_true",
                        help="also time when the VAD ends each clip's last turn, per filter, "
                             "against the raw audio (clips in each condition, streamed in 20 ms)")
    parser.add_argument("--cache", type=Path, default=default_cache(),
                        help="where the archives and decoded clips are kept")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    parser.add_argument("--out", type=Path, default=None, help="write the results JSON here")
    parser.add_argument("--word-times", action="store_true",
                        help="ask for word times (verbose_json, timestamp_granularities[]=word), "
                             "as the diarizing model's transcription does")
    parser.add_argument("--prepare-only", action="store_true",
                        help="fetch and check the set, then stop")
    args = parser.parse_args(argv)
    models = [m for arg in (args.model or ["whisper-1"]) for m in arg.split(",") if m]
    conditions = list(CONDITIONS) if args.conditions == "all" else [c for c in args.conditions.split(",") if c]
    if unknown := set(conditions) - set(CONDITIONS):
        parser.error(f"unknown conditions {sorted(unknown)}; choose from {list(CONDITIONS)}")
    kinds = [k for k in args.filter.split(",") if k]
    if unknown := set(kinds) - set(FILTERS):
        parser.error(f"unknown filters {sorted(unknown)}; choose from {list(FILTERS)}")
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

    filters = Filters() if set(kinds) - {"off"} or args.false_turns > 0 else None
    turns: dict[str, dict[str, int]] = {}
    if args.false_turns > 0:
        assert filters is not None
        vad = SileroVAD()
        for noise_name, noise in _noise_alone(args.false_turns, audio, args.seed).items():
            turns[noise_name] = {k: false_turns(noise, filters, k, vad) for k in FILTERS}
            print(f"turns started in {args.false_turns:g} s of {noise_name} alone: {turns[noise_name]}")
    delays: dict[str, list[float]] = {}
    if args.stop_delay:
        filters = filters or Filters()
        vad = SileroVAD()
        for condition in conditions:
            for clip in clips:
                sound = noisy(clip, audio[clip.id], condition, audio, args.seed)
                raw_at = last_stop_heard(sound, filters, "off", vad)
                for kind in NOISE_REDUCTION_TYPES:
                    filtered_at = last_stop_heard(sound, filters, kind, vad)
                    if raw_at is not None and filtered_at is not None:
                        delays.setdefault(kind, []).append((filtered_at - raw_at) * 1000 / SAMPLE_RATE)
        for kind, ms in delays.items():
            p10, p50, p90 = np.percentile(ms, [10, 50, 90])
            print(f"last turn ends later through {kind}: median {p50:.0f} ms, p10 {p10:.0f} ms, "
                  f"p90 {p90:.0f} ms over {len(ms)} clips")
    records: list[Record] = []
    started = time.time()
    with httpx.Client(base_url=args.base_url, timeout=args.timeout) as client:
        turn = 0
        pairs = [(m, k) for m in models for k in kinds]
        for condition in conditions:
            for clip in clips:
                sound = noisy(clip, audio[clip.id], condition, audio, args.seed)
                heard = {k: sound if filters is None else filters(k, sound) for k in kinds}
                language = clip.language if args.give_language and clip.language != "en" \
                    else None
                order = pairs[turn % len(pairs):] + pairs[:turn % len(pairs)]
                turn += 1
                for model, kind in order:
                    records.append(replace(_one(client, model, clip, condition, heard[kind], language, args.word_times),
                                           filter=kind))
                    r = records[-1]
                    print(f"{model} {kind} {condition:12s} {clip.id:22s} "
                          f"{r.error or f'{r.edits}/{r.units}'}  {r.text[:70]!r}",
                          file=sys.stderr)
    rows = summarize(records, clips)
    print(_table(rows))
    cost = filters.cost() if filters is not None else {}
    if cost:
        print("filter CPU per second of audio: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in cost.items()))
    if args.out is not None:
        args.out.write_text(json.dumps({
            "settings": {"base_url": args.base_url, "models": models,
                         "give_language": args.give_language, "seed": args.seed,
                         "word_times": args.word_times,
                         "conditions": conditions, "filters": kinds, "started": started,
                         "filter_cpu_per_audio_s": cost, "false_turns": turns,
                         "false_turns_noise_s": args.false_turns, "stop_delay_ms": delays,
                         "wall_s": time.time() - started,
                         "snr": "active speech level (20 ms frames within 40 dB of the "
                                "loudest) over the noise's whole-clip RMS"},
            "clips": [{**asdict(c), "seconds": len(audio[c.id]) / SAMPLE_RATE} for c in clips],
            "summary": rows,
            "records": [asdict(r) for r in records],
        }, indent=1, ensure_ascii=False))
    return 0


def _one(client: httpx.Client, model: str, clip: Clip, condition: str, sound: np.ndarray,
         language: str | None, word_times: bool = False) -> Record:
    t0 = time.perf_counter()
    seconds = len(sound) / SAMPLE_RATE
    try:
        text = transcribe(client, model, sound, language, word_times)
    except (httpx.HTTPError, RuntimeError) as exc:
        return Record(model, clip.id, clip.language, condition, seconds,
                      time.perf_counter() - t0, "", 0, 0, str(exc))
    counted: Errors = errors(clip.text, text, clip.language)
    return Record(model, clip.id, clip.language, condition, seconds,
                  time.perf_counter() - t0, text, counted.edits, counted.units)


if __name__ == "__main__":
    sys.exit(main())

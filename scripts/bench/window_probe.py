"""Fitted Whisper windows: WER and decode time of shorter encoder windows against 30 s, for live turns and short files.

Whisper encodes a fixed 30 s window (3000 log-mel frames), the audio followed by padding.
CTranslate2 also accepts fewer frames, and the encoder's cost falls with them. This probe
decodes the same short utterances with several window rules and compares them with the
30 s window, in this process, with voxserve's own pieces: `InputDecoder` (24 kHz PCM to
16 kHz, as `/v1/realtime` receives it), `LogMel` (features of the real audio, padded to
3000 frames; a shorter window is their first N frames, so the padding's values follow the
audio as they do today) and `WhisperRunner` with one intra-op thread, decoding as the ASR
engine does (beam search, then the temperature-fallback ladder, `window_segments`).

The test set is voxserve's TTS speaking the built-in bench prompts and the ASR tests'
SHORT sentences, 1-12 s each (longer prompts are spoken in groups of whole sentences),
each with 300 ms of silence before and 200 ms after, as a live turn has. A second
condition adds white noise. Rules are interleaved per utterance (rotating order) so
machine noise hits them alike; timing ratios are taken per utterance against the 30 s
window. A last pass decodes with word alignment and compares word times with the 30 s
window's. Measures the model, like `bench offline`. From the repository root (each run
speaks the set anew: Piper samples, so transcripts differ a little per run):

    python scripts/bench/window_probe.py -o window-probe.json
    python scripts/bench/window_probe.py --rules 1,2,3,4 --no-clean --no-align --noise-seeds 4 \
        -o window-probe-noise.json
    python scripts/bench/window_probe.py --rules 4,9,10,11 --noise-seeds 4 --no-align \
        -o window-probe-min.json
    python scripts/bench/window_probe.py --rescore FILE.json   # recount a stored run

`--manifest FILE` measures uploaded files instead (fitted windows for short
file clips): each clip of a `bench transcribe` manifest, decoded as an upload is
(`decode_audio`, 16 kHz), as it is, without added silence:

    python scripts/bench/window_probe.py --manifest /tmp/asrset/manifest.jsonl --rules 3 \
        -o window-probe-files.json   # (no word-alignment pass)

`--manifest` may be given several times (the sets are joined). Rules 12-14 try larger
minimums and more padding after the audio, 15-17 decode with timestamp tokens as
faster-whisper does. Like the engine, a fitted window whose text ends in a loop is decoded
again in 30 s (`widened` in the rows). The 56-clip run behind the fitted-window rule of
`docs/BENCHMARKS.md` ("Transcription of files"):

    python scripts/bench/window_probe.py --manifest SET36/manifest.jsonl --manifest SET20/manifest.jsonl \
        --rules 2,3,12,13,15,16 --noise-seeds 0 --no-encode-timing -o window-probe-56-clean.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ctranslate2
import numpy as np

from voxserve.audio.decode import decode_audio
from voxserve.audio.mel import N_FRAMES, LogMel
from voxserve.audio.pcm import InputDecoder
from voxserve.bench.asr_offline import SHORT
from voxserve.bench.metrics import normalize_text, word_errors
from voxserve.bench.prompts import BUILTIN_PROMPTS
from voxserve.config import TTSConfig
from voxserve.engine.adapters.whisper import FALLBACK_TEMPERATURES, best_attempt
from voxserve.engine.segments import (
    Word,
    ends_in_a_loop,
    needs_fallback,
    window_segments,
)
from voxserve.engine.tts import TTSEngine
from voxserve.runners.whisper.ct2_runner import (
    DecodeInput,
    DecodeOptions,
    DecodeOutput,
    WhisperRunner,
)
from voxserve.text.split import split_sentences

RATE = 16000
SOURCE_RATE = 24000
"""What a realtime client sends (audio/pcm)."""
BEFORE_S = 0.3
AFTER_S = 0.2
MAX_UTTERANCE_S = 12.0
FRAMES_PER_S = 100
BEAM_SIZE = 5
HALLUCINATION_EXTRA_WORDS = 3
"""An output with this many more words than the reference counts as hallucinated."""
GARBLED_WER = 1.0
"""So does one with at least as many word errors as the reference has words (a misheard
word in a short turn is not a hallucination)."""

HALLUCINATION_RULE = f">= {HALLUCINATION_EXTRA_WORDS} extra words or utterance WER >= {GARBLED_WER}"


@dataclass(frozen=True)
class Rule:
    """A window size from an utterance's length: round length + margin up to a multiple
    of `step_s`, at least `min_s`, at most 30 s."""

    name: str
    margin_s: float
    step_s: float
    min_s: float
    timestamps: bool = False
    """Decode with timestamp tokens, as faster-whisper does (the engine decodes without)."""

    def frames(self, seconds: float) -> int:
        window = max(self.min_s, math.ceil((seconds + self.margin_s) / self.step_s - 1e-9) * self.step_s)
        return min(N_FRAMES, 2 * math.ceil(window * FRAMES_PER_S / 2 - 1e-9))


RULES = (
    Rule("30 s (today)", 0.0, 30.0, 30.0),
    Rule("min 20 s, step 10 s", 1.0, 10.0, 20.0),
    Rule("min 15 s, step 5 s", 1.0, 5.0, 15.0),
    Rule("min 10 s, step 5 s", 1.0, 5.0, 10.0),
    Rule("min 10 s, audio + 1 s", 1.0, 0.02, 10.0),
    Rule("min 5 s, step 5 s", 1.0, 5.0, 5.0),
    Rule("audio + 5 s", 5.0, 0.02, 0.0),
    Rule("audio + 2 s", 2.0, 0.02, 0.0),
    Rule("audio + 1 s", 1.0, 0.02, 0.0),
    Rule("min 9 s, audio + 1 s", 1.0, 0.02, 9.0),
    Rule("min 8 s, audio + 1 s", 1.0, 0.02, 8.0),
    Rule("min 7 s, audio + 1 s", 1.0, 0.02, 7.0),
    Rule("min 20 s, step 5 s", 1.0, 5.0, 20.0),
    Rule("min 10 s, +2 s, step 5 s", 2.0, 5.0, 10.0),
    Rule("min 10 s, +4 s, step 5 s", 4.0, 5.0, 10.0),
    Rule("30 s, timestamps", 0.0, 30.0, 30.0, timestamps=True),
    Rule("min 10 s step 5 s, ts", 1.0, 5.0, 10.0, timestamps=True),
    Rule("min 15 s step 5 s, ts", 1.0, 5.0, 15.0, timestamps=True),
)
"""Stepped rules add 1 s of margin to the utterance (which already holds its 0.5 s of
silence) before rounding up. The first `DEFAULT_RULES` run unless `--rules` picks; the
last ones find the smallest minimum that short turns need."""
DEFAULT_RULES = 9


@dataclass(frozen=True)
class Utterance:
    text: str
    clean: np.ndarray
    """16 kHz float32, silence before and after included."""

    @property
    def seconds(self) -> float:
        return len(self.clean) / RATE


# -- the test set -------------------------------------------------------------------------
def to_live(pcm: np.ndarray) -> np.ndarray:
    """24 kHz int16 speech -> 16 kHz float32 as the realtime channel decodes it, with the
    silence a live turn has around it."""
    decoder = InputDecoder("audio/pcm", RATE)
    speech = np.concatenate([decoder.feed(pcm.astype("<i2").tobytes()), decoder.flush()])
    return np.concatenate([
        np.zeros(int(BEFORE_S * RATE), np.float32),
        speech.astype(np.float32),
        np.zeros(int(AFTER_S * RATE), np.float32),
    ])


def make_set() -> list[Utterance]:
    """Each prompt whole when it is short enough, else groups of its sentences."""
    tts = TTSEngine(TTSConfig())
    tts.start()
    voice = tts.default_model.voices[0]
    cache: dict[str, np.ndarray] = {}

    def speak(text: str) -> np.ndarray:
        if text not in cache:
            cache[text] = to_live(tts.synthesize(text, voice, sample_rate=SOURCE_RATE))
        spoken: np.ndarray = cache[text]
        return spoken

    def fits(text: str) -> bool:
        return len(speak(text)) <= (MAX_UTTERANCE_S + BEFORE_S + AFTER_S) * RATE

    out: list[Utterance] = []
    try:
        for prompt in (*BUILTIN_PROMPTS, *SHORT):
            if fits(prompt):
                out.append(Utterance(prompt, speak(prompt)))
                continue
            group: list[str] = []
            for sentence in split_sentences(prompt):
                joined = " ".join([*group, sentence])
                if group and not fits(joined):
                    text = " ".join(group)
                    out.append(Utterance(text, speak(text)))
                    group = [sentence]
                else:
                    group.append(sentence)
            if group:
                text = " ".join(group)
                out.append(Utterance(text, speak(text)))
    finally:
        tts.stop()
    return out


def load_manifest(path: Path) -> list[Utterance]:
    """Clips of a JSON-lines manifest (`{"audio": path, "text": reference}`, paths relative
    to the manifest), decoded as an upload is; those of 30 s or more are left out."""
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        clip = json.loads(line)
        audio = decode_audio((path.parent / clip["audio"]).read_bytes(), max_seconds=60)
        if len(audio) < 30 * RATE:
            out.append(Utterance(clip["text"], audio))
    return out


def with_noise(audio: np.ndarray, dbfs: float, seed: int) -> np.ndarray:
    """White noise at `dbfs` RMS over the whole clip, its silences included."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(len(audio)).astype(np.float32) * np.float32(10 ** (dbfs / 20))
    noisy: np.ndarray = np.clip(audio + noise, -1.0, 1.0).astype(np.float32)
    return noisy


# -- decoding as the engine does ----------------------------------------------------------
@dataclass
class Decoded:
    text: str
    words: list[Word]
    attempts: int
    encode_s: float
    decode_s: float
    """Encode + generate of every attempt on the ladder (runner.run), alignment included
    when asked."""
    widened: bool = False
    """A fitted window's text ended in a loop and was decoded again in 30 s."""


class Decoder:
    def __init__(self) -> None:
        self.runner = WhisperRunner(workers=1)
        self.mel = LogMel(self.runner.n_mels)
        self.tok = self.runner.tokenizer("transcribe", "en")
        self.ladder: list[DecodeOptions] = [
            self.runner.options("transcribe", "en", None, BEAM_SIZE, t) for t in FALLBACK_TEMPERATURES
        ]
        self.time_encoder = True
        """Time one encoder pass alone before each decode (costs one more pass)."""
        self.ladder_timestamps = [replace(o, without_timestamps=False) for o in self.ladder]

    def features(self, audio: np.ndarray) -> tuple[np.ndarray, int]:
        return self.mel(audio)

    def encode_s(self, features: np.ndarray) -> float:
        """One encoder pass alone, timed."""
        view = ctranslate2.StorageView.from_array(features[np.newaxis])
        started = time.perf_counter()
        self.runner.model.encode(view, to_cpu=False)
        return time.perf_counter() - started

    def decode(
        self, features: np.ndarray, frames: int, window: int, seconds: float, align: bool, timestamps: bool = False
    ) -> Decoded:
        x = DecodeInput(np.ascontiguousarray(features[:, :window]), min(frames, window), align)
        encode_s = self.encode_s(x.features) if self.time_encoder else 0.0
        tried: list[tuple[DecodeOutput, str, float]] = []
        spent = 0.0
        widened = False
        ladder = self.ladder_timestamps if timestamps else self.ladder
        attempt = 0
        while attempt < len(ladder):
            opts = ladder[attempt]
            started = time.perf_counter()
            out = self.runner.run([x], opts)[0]
            spent += time.perf_counter() - started
            text = self.tok.decode([t for t in out.tokens if t < self.tok.eot])
            if x.features.shape[-1] < N_FRAMES and ends_in_a_loop(text):
                # As the engine does: a fitted window whose text loops is decoded again in 30 s.
                x = DecodeInput(np.ascontiguousarray(features[:, :N_FRAMES]), frames, align)
                widened = True
                continue
            tried.append((out, text, opts.temperature))
            if not needs_fallback(out, text):
                break
            attempt += 1
        out, _, temperature = best_attempt(tried)
        segments = window_segments(out, self.tok, 0.0, seconds, temperature)
        words = [w for s in segments for w in (s.words or ())]
        return Decoded("".join(s.text for s in segments), words, len(tried), encode_s, spent, widened)


# -- the runs -----------------------------------------------------------------------------
Rows = dict[str, list[dict[str, Any]]]
"""Per rule, one row per decoded utterance."""


def hallucinated(reference: str, hypothesis: str) -> bool:
    ref, hyp = normalize_text(reference).split(), normalize_text(hypothesis).split()
    errors = word_errors(reference, hypothesis)
    return bool(hyp) and (len(hyp) >= len(ref) + HALLUCINATION_EXTRA_WORDS or errors.wer >= GARBLED_WER)


def run_condition(
    decoder: Decoder,
    clips: list[tuple[Utterance, np.ndarray]],
    rules: tuple[Rule, ...],
    log: Callable[[str], None],
) -> Rows:
    rows: Rows = {r.name: [] for r in rules}
    for i, (utt, audio) in enumerate(clips):
        features, frames = decoder.features(audio)
        for rule in rules[i % len(rules) :] + rules[: i % len(rules)]:
            window = rule.frames(utt.seconds)
            d = decoder.decode(features, frames, window, utt.seconds, align=False, timestamps=rule.timestamps)
            rows[rule.name].append({
                "utterance": i,
                "window_s": window / FRAMES_PER_S,
                "text": d.text.strip(),
                "reference_words": len(normalize_text(utt.text).split()),
                "errors": word_errors(utt.text, d.text).errors,
                "hallucinated": hallucinated(utt.text, d.text),
                "attempts": d.attempts,
                "widened": d.widened,
                "encode_ms": round(d.encode_s * 1000, 1),
                "decode_ms": round(d.decode_s * 1000, 1),
            })
        log(f"  {i + 1}/{len(clips)} {utt.seconds:.1f} s")
    return rows


def summarize(rows: Rows) -> dict[str, dict[str, Any]]:
    """WER and failures per rule, and each rule against the 30 s window utterance by
    utterance (`better`/`worse`: fewer/more word errors; `vs_30s`: the median ratio of
    encode + decode times)."""
    base = rows[RULES[0].name]
    words = sum(x["reference_words"] for x in base)
    summary = {}
    for name, r in rows.items():
        pairs = list(zip(r, base, strict=True))
        summary[name] = {
            "window_s_median": statistics.median(x["window_s"] for x in r),
            "wer_pct": round(100 * sum(x["errors"] for x in r) / words, 2),
            "utterances_with_errors": sum(1 for x in r if x["errors"]),
            "better_than_30s": sum(1 for x, b in pairs if x["errors"] < b["errors"]),
            "worse_than_30s": sum(1 for x, b in pairs if x["errors"] > b["errors"]),
            "empty": sum(1 for x in r if not normalize_text(x["text"])),
            "hallucinated": sum(1 for x in r if x["hallucinated"]),
            "fallbacks": sum(1 for x in r if x["attempts"] > 1),
            "widened": sum(1 for x in r if x.get("widened")),
            "encode_ms_median": round(statistics.median(x["encode_ms"] for x in r), 1),
            "decode_ms_median": round(statistics.median(x["decode_ms"] for x in r), 1),
            "decode_ms_max": round(max(x["decode_ms"] for x in r), 1),
            "vs_30s": round(statistics.median(x["decode_ms"] / b["decode_ms"] for x, b in pairs), 3),
        }
    return summary


def alignment_check(
    decoder: Decoder, clips: list[tuple[Utterance, np.ndarray]], rules: tuple[Rule, ...]
) -> dict[str, Any]:
    """Word alignment with each window: the last word's end against the end of the
    speech, and word times against the 30 s window's where the words agree. (The first
    word starts where the alignment path starts, at 0, with any window.)"""
    words_of: dict[str, list[list[Word]]] = {r.name: [] for r in rules}
    for i, (utt, audio) in enumerate(clips):
        features, frames = decoder.features(audio)
        for rule in rules[i % len(rules) :] + rules[: i % len(rules)]:
            window = rule.frames(utt.seconds)
            words_of[rule.name].append(decoder.decode(features, frames, window, utt.seconds, True).words)
    base = words_of[RULES[0].name]
    out: dict[str, Any] = {}
    for rule in rules:
        shifts: list[float] = []
        ends: list[float] = []
        compared = missing = 0
        for (utt, _), words, ref in zip(clips, words_of[rule.name], base, strict=True):
            if not words:
                missing += 1
                continue
            ends.append(words[-1].end - (utt.seconds - AFTER_S))
            if [w.word for w in words] != [w.word for w in ref]:
                continue
            compared += 1
            shifts += [abs(a.start - b.start) for a, b in zip(words, ref, strict=True)]
            shifts += [abs(a.end - b.end) for a, b in zip(words, ref, strict=True)]
        out[rule.name] = {
            "no_words": missing,
            "last_end_minus_speech_end_ms_median": round(1000 * statistics.median(ends), 1),
            "last_end_minus_speech_end_ms_max": round(1000 * max(ends), 1),
            "utterances_compared": compared,
            "shift_ms_median": round(1000 * statistics.median(shifts), 1) if shifts else None,
            "shift_ms_p95": round(1000 * float(np.percentile(shifts, 95)), 1) if shifts else None,
            "shift_ms_max": round(1000 * max(shifts), 1) if shifts else None,
        }
    return out


def summaries_of(rows: dict[str, Rows]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each condition's summary, and the noisy conditions pooled when there are several."""
    out = {name: summarize(r) for name, r in rows.items()}
    noisy = [name for name in rows if name != "clean"]
    if len(noisy) > 1:
        rules = list(rows[noisy[0]])
        pooled = {rule: [x for name in noisy for x in rows[name][rule]] for rule in rules}
        out[noisy[0].rsplit(", seed", 1)[0] + ", all seeds"] = summarize(pooled)
    return out


def rescore(path: Path) -> dict[str, Any]:
    """Recount the errors and failures of a stored run (its rows keep every transcript)
    with the definitions in this file, and redo its summaries; nothing is decoded."""
    report: dict[str, Any] = json.loads(path.read_text())
    references = [u["text"] for u in report["utterances"]]
    for rows in report["rows"].values():
        for row in (x for per_rule in rows.values() for x in per_rule):
            reference = references[row["utterance"]]
            row["reference_words"] = len(normalize_text(reference).split())
            row["errors"] = word_errors(reference, row["text"]).errors
            row["hallucinated"] = hallucinated(reference, row["text"])
    report["summary"] = summaries_of(report["rows"])
    report["settings"]["hallucinated"] = HALLUCINATION_RULE
    report["settings"]["rescored"] = "summaries recounted from the stored rows by --rescore"
    return report


def table(name: str, summary: dict[str, dict[str, Any]]) -> str:
    lines = [
        name,
        (
            f"{'rule':24} {'win s':>5} {'WER %':>6} {'bad':>3} {'+':>2} {'-':>2} {'empty':>5} "
            f"{'halluc':>6} {'fallbk':>6} {'enc ms':>6} {'enc+dec':>7} {'max':>6} {'vs 30s':>6}"
        ),
    ]
    for rule, s in summary.items():
        lines.append(
            f"{rule:24} {s['window_s_median']:5.1f} {s['wer_pct']:6.2f} {s['utterances_with_errors']:3d} "
            f"{s['better_than_30s']:2d} {s['worse_than_30s']:2d} {s['empty']:5d} {s['hallucinated']:6d} "
            f"{s['fallbacks']:6d} {s['encode_ms_median']:6.0f} {s['decode_ms_median']:7.0f} "
            f"{s['decode_ms_max']:6.0f} {s['vs_30s']:6.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", type=Path, help="write the results here as JSON")
    p.add_argument("--rules", help="comma-separated indices into RULES (default: the first nine); 0 always runs")
    p.add_argument("--noise-dbfs", type=float, default=-40.0, help="white noise level of the noisy conditions")
    p.add_argument("--noise-seeds", type=int, default=1, help="noisy conditions, one per noise seed")
    p.add_argument("--no-clean", action="store_true", help="skip the clean condition")
    p.add_argument("--limit", type=int, help="use only the first N utterances (a quick look)")
    p.add_argument("--no-align", action="store_true", help="skip the word-alignment pass")
    p.add_argument("--no-encode-timing", action="store_true",
                   help="do not time an encoder pass alone per decode (enc ms reads 0; halves a 30 s decode's cost)")
    p.add_argument("--rescore", type=Path, help="recount a stored run's JSON in place instead of running")
    p.add_argument("--manifest", type=Path, action="append",
                   help="measure the clips of this manifest instead of speaking the set (repeat to join sets)")
    args = p.parse_args(argv)
    if args.rescore:
        report = rescore(args.rescore)
        args.rescore.write_text(json.dumps(report, indent=1) + "\n")
        for name, summary in report["summary"].items():
            print(table(name, summary))
            print()
        return 0
    picked = sorted({0, *(int(x) for x in args.rules.split(","))}) if args.rules else range(DEFAULT_RULES)
    rules = tuple(RULES[i] for i in picked)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    load_start = os.getloadavg()
    if args.manifest:
        utterances = [u for m in args.manifest for u in load_manifest(m)][: args.limit]
    else:
        log("speaking the test set with voxserve's TTS...")
        utterances = make_set()[: args.limit]
    seconds = [u.seconds for u in utterances]
    log(f"{len(utterances)} utterances, {min(seconds):.1f}-{max(seconds):.1f} s")
    decoder = Decoder()
    decoder.time_encoder = not args.no_encode_timing
    features, frames = decoder.features(utterances[0].clean)
    decoder.decode(features, frames, N_FRAMES, utterances[0].seconds, align=True)  # warm-up

    clean = [(u, u.clean) for u in utterances]
    conditions: dict[str, list[tuple[Utterance, np.ndarray]]] = {} if args.no_clean else {"clean": clean}
    for seed in range(args.noise_seeds):
        conditions[f"white noise {args.noise_dbfs:g} dBFS, seed {seed}"] = [
            (u, with_noise(u.clean, args.noise_dbfs, seed=seed * 1000 + i)) for i, u in enumerate(utterances)
        ]
    rows: dict[str, Rows] = {}
    for name, clips in conditions.items():
        log(f"condition: {name}")
        rows[name] = run_condition(decoder, clips, rules, log)
        log(table(name, summarize(rows[name])))
    summaries = summaries_of(rows)
    alignment = None
    if not args.no_align and not args.manifest:  # its end check assumes the added silence
        log("word alignment (clean)...")
        alignment = alignment_check(decoder, clean, rules)
        log(json.dumps(alignment, indent=1))
    report = {
        "settings": {
            "command": " ".join(["python", "scripts/bench/window_probe.py", *(argv or sys.argv[1:])]),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "loadavg_at_start": load_start,
            "loadavg_at_end": os.getloadavg(),
            "ctranslate2": ctranslate2.__version__,
            "model": decoder.runner.name,
            "compute_type": "int8",
            "intra_threads": 1,
            "beam_size": BEAM_SIZE,
            "temperatures": list(FALLBACK_TEMPERATURES),
            "silence_before_s": 0.0 if args.manifest else BEFORE_S,
            "silence_after_s": 0.0 if args.manifest else AFTER_S,
            "manifest": [str(m) for m in args.manifest] if args.manifest else None,
            "rules": [vars(r) for r in rules],
            "hallucinated": HALLUCINATION_RULE,
        },
        "utterances": [{"text": u.text, "seconds": round(u.seconds, 3)} for u in utterances],
        "summary": summaries,
        "alignment_vs_30s": alignment,
        "rows": rows,
    }
    for name, summary in summaries.items():
        print(table(name, summary))
        print()
    if alignment:
        print(json.dumps(alignment, indent=1))
    if args.output:
        args.output.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

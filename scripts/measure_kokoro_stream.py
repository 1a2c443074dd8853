"""Measure Kokoro's first segment as the engine serves it: stage A + stage B of the first
piece of the segment plan, on 1 and 2 intra-op threads, with and without the leading pad
trimmed, and what the 2-thread sessions cost in memory (`--only threads`); and how much
cropping the silence before and after a segment's speech moves its decode (`--only
crop`). In process, through the voice model the engine uses (`KokoroVoice`); prints a
report.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_kokoro_stream.py [--repeat 10] [--only threads,crop]

The configurations take turns round by round, so that the ratios hold on a shared, noisy
machine; medians are reported, with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from measure_kokoro import mel_distance_db  # scripts/, beside this one

from voxserve.engine.kokoro_voice import SEGMENTS, KokoroItem, KokoroVoice
from voxserve.engine.voices import Span
from voxserve.runners.kokoro import HOP, SAMPLE_RATE, KokoroInput, KokoroModel
from voxserve.text.split import grow_segments, normalize

TEXTS = (
    "Before you leave the building, make sure that every window on the second floor is closed.",
    "The museum opens at nine, but the guided tours of the east wing do not start until ten.",
    "Thank you for calling. All of our agents are busy at the moment.",
    "Hello there.",
)


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def first_segment(voice: KokoroVoice, text: str) -> KokoroItem:
    piece = grow_segments(normalize(text), SEGMENTS)[0]
    return voice.inputs(piece, voice.voices[0], 1.0)[0]


def untrimmed_ms(model: KokoroModel, item: KokoroItem, threads: int) -> tuple[float, float]:
    """Stage A + B of the whole latent, leading pad included (the old path)."""
    acoustic, decoder = model.runners(threads)
    started = time.perf_counter()
    frames = acoustic.run([KokoroInput(item.ids, item.style, item.speed)])[0]
    decoder.run([frames.decoder_input])
    return (time.perf_counter() - started) * 1000, frames.frames * HOP / SAMPLE_RATE


def served_ms(voice: KokoroVoice, item: KokoroItem, threads: int) -> tuple[float, float]:
    """Stage A + B as the engine runs them now (leading pad trimmed)."""
    started = time.perf_counter()
    latent = voice.acoustic([item], threads=threads)[0]
    voice.decode([Span(latent, 0, latent.frames)], threads=threads)
    return (time.perf_counter() - started) * 1000, latent.frames * HOP / SAMPLE_RATE


CROP_TEXTS = ("Hello there.", "Thank you for calling.", "Before you leave,", "Your package will arrive",
              "The museum opens at nine,")
CROP_VOICES = ("af_heart", "am_michael", "bf_emma")


def crop(voice: KokoroVoice) -> None:
    """Log-mel distance between the whole decode's speech and the speech of decodes that
    skip silence: `lead` frames kept before the first phoneme, `tail` after the start of
    the last phoneme (99: all)."""
    model = voice.model
    cases = []
    for name in CROP_VOICES:
        ref = voice.resolve_voice(name)
        for text in CROP_TEXTS:
            item = voice.inputs(text, ref, 1.0)[0]
            whole = model.acoustic.run([KokoroInput(item.ids, item.style, item.speed)])[0]
            full = model.decoder.run([whole.decoder_input])[0]
            cum = np.concatenate(([0], np.cumsum(whole.durations)))
            last = max(b for _, a, b in item.words if b > a)  # just past the last spoken id
            cases.append((whole, full, int(whole.durations[0]), int(cum[last])))
    print("\nkept lead / tail frames: log-mel distance on the speech (median, max), frames saved")
    for lead in (6, 8, 10, 99):
        for tail in (10, 14, 18, 99):
            distances, saved = [], []
            for whole, full, pad, last_start in cases:
                a, b = max(0, pad - lead), min(whole.frames, last_start + tail)
                pcm = model.decoder.run([whole.crop(a, b).decoder_input])[0]
                s0, s1 = pad, min(b, last_start + 4)
                distances.append(mel_distance_db(full[s0 * HOP : s1 * HOP], pcm[(s0 - a) * HOP : (s1 - a) * HOP]))
                saved.append(1 - (b - a) / whole.frames)
            print(f"  {lead:2d} / {tail:2d}: {statistics.median(distances):.2f} dB, {max(distances):.2f} dB; "
                  f"{100 * statistics.mean(saved):.0f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--only", default="threads,crop")
    args = parser.parse_args()
    steps = args.only.split(",")
    if "crop" in steps:
        crop(KokoroVoice(KokoroModel()))
    if "threads" in steps:
        threads(args.repeat)


def threads(repeat: int) -> None:
    print(f"load average before: {os.getloadavg()}")
    base = rss_mb()
    model = KokoroModel()
    voice = KokoroVoice(model)
    items = [first_segment(voice, text) for text in TEXTS]
    for item in items:
        served_ms(voice, item, 1)  # first-run costs and the 1-thread arenas
    one = rss_mb()
    model.runners(2)
    made = rss_mb()
    for item in items:
        served_ms(voice, item, 2)
    two = rss_mb()
    print(
        f"RSS: {one - base:.0f} MB for the model with 1-thread sessions (after a run); "
        f"2-thread sessions +{made - one:.0f} MB when made, +{two - one:.0f} MB after a run"
    )
    configs = [("untrimmed", 1), ("untrimmed", 2), ("served", 1), ("served", 2)]
    for text, item in zip(TEXTS, items, strict=True):
        times: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
        audio: dict[tuple[str, int], float] = {}
        for _ in range(repeat):
            for kind, threads in configs:
                if kind == "untrimmed":
                    ms, seconds = untrimmed_ms(model, item, threads)
                else:
                    ms, seconds = served_ms(voice, item, threads)
                times[kind, threads].append(ms)
                audio[kind, threads] = seconds
        piece = grow_segments(normalize(text), SEGMENTS)[0]
        print(f"\nfirst segment {piece!r} ({len(item.ids)} phoneme ids)")
        for config in configs:
            median = statistics.median(times[config])
            print(
                f"  {config[0]:>9}, {config[1]} thread(s): stage A + B {median:6.0f} ms "
                f"(min {min(times[config]):.0f}) for {audio[config]:.2f} s of audio"
            )
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

"""Measure Kokoro's first segment with its silence cut before stage B: how far each cut
moves the decode of the speech, what Whisper hears, and how long the first segment takes.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_kokoro_first.py [--only quality,whisper,time]

The texts are the first segments (as `SEGMENTS` plans them) of the bench's built-in
prompts. Variants of one segment's stage B, all from the same stage A output:

- `whole`: every frame (the reference);
- `lead`: from `LEAD_FRAMES` before the first phoneme, frames weighted 1 (the engine
  before the frame weights);
- `lead9`: the same from 9 frames before: another window of the same segment, for the
  change a different window brings by itself;
- `lead_w`: `lead`, with the left-out frames' weight on the first frame (`KokoroFrames.crop`);
- `tailN_w`: `lead_w` also cut N frames after the last spoken phoneme starts (the rest
  sent as zeros), weights on both edges; `tail14_w` is what the engine serves now;
- `tail12`: the same cut with no weights.

`quality`: log-mel distance on the speech (from the first phoneme to 4 frames into the
last one) against `whole`, with and without its mean offset (`shape`), the RMS and the
spectral centroid change, and the level of the last decoded frame (where the zeros
begin). `whisper`: every English voice speaks each text as `lead` and as `tail12_w` (a cut 2 frames harder than served);
tiny.en's word errors on both. `time`: stage A + B of the first segment on 2 threads,
`lead` and the engine's path taking turns, medians. Prints a report.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
from measure_kokoro import log_mel, mel_distance_db  # scripts/, beside this one

from voxserve.bench.metrics import word_errors
from voxserve.bench.prompts import BUILTIN_PROMPTS
from voxserve.engine.kokoro_voice import LEAD_FRAMES, SEGMENTS, KokoroItem, KokoroVoice, speech_end
from voxserve.engine.voices import Span
from voxserve.runners.kokoro import HOP, SAMPLE_RATE, KokoroFrames, KokoroInput, KokoroModel
from voxserve.text.split import grow_segments, normalize

ENGLISH = ("af_", "am_", "bf_", "bm_")
QUALITY_VOICES = ("af_heart", "am_michael", "bf_emma")


def first_segments(step: int) -> list[str]:
    firsts = [grow_segments(normalize(t), SEGMENTS)[0] for t in BUILTIN_PROMPTS]
    return list(dict.fromkeys(firsts))[::step]


Variant = Callable[[KokoroFrames, KokoroItem], tuple[KokoroFrames, int]]
"""(stage A's whole output, the item) -> (the window stage B decodes, its first frame)."""


def _lead(keep: int, weighted: bool) -> Variant:
    def cut(whole: KokoroFrames, item: KokoroItem) -> tuple[KokoroFrames, int]:
        f = whole.trim_lead(keep)
        if not weighted:
            f = KokoroFrames(f.durations, replace(f.decoder_input, left_out=(0.0, 0.0)))
        return f, whole.frames - f.frames

    return cut


def _tail(tail: int, weighted: bool) -> Variant:
    def cut(whole: KokoroFrames, item: KokoroItem) -> tuple[KokoroFrames, int]:
        f = whole.trim_lead(LEAD_FRAMES)
        g = f.crop(0, speech_end(f.durations, item.words, tail))
        if not weighted:
            g = KokoroFrames(g.durations, replace(g.decoder_input, left_out=(0.0, 0.0)))
        return g, whole.frames - f.frames

    return cut


VARIANTS: dict[str, Variant] = {
    "lead": _lead(LEAD_FRAMES, False),
    "lead9": _lead(9, False),
    "lead_w": _lead(LEAD_FRAMES, True),
    "tail14_w": _tail(14, True),
    "tail12_w": _tail(12, True),
    "tail10_w": _tail(10, True),
    "tail12": _tail(12, False),
}


def decode(model: KokoroModel, whole: KokoroFrames, item: KokoroItem, variant: str) -> tuple[np.ndarray, int, int]:
    """The variant's audio in the whole decode's time (zeros where it decoded nothing),
    the frames it decoded, and its last decoded frame."""
    window, start = VARIANTS[variant](whole, item)
    pcm = model.decoder.run([window.decoder_input])[0]
    out = np.zeros(whole.frames * HOP, np.float32)
    out[start * HOP : start * HOP + len(pcm)] = pcm
    return out, window.frames, start + window.frames


def _centroid(x: np.ndarray) -> float:
    power = np.abs(np.fft.rfft(x * np.hanning(len(x)))) ** 2
    return float(np.sum(power * np.fft.rfftfreq(len(x), 1 / SAMPLE_RATE)) / np.sum(power))


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(np.float64) ** 2)) + 1e-12)


def quality(voice: KokoroVoice, texts: list[str]) -> None:
    model = voice.model
    rows: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for name in QUALITY_VOICES:
        ref = voice.resolve_voice(name)
        for text in texts:
            item = voice.inputs(text, ref, 1.0)[0]
            whole = model.acoustic.run([KokoroInput(item.ids, item.style, item.speed)])[0]
            full = model.decoder.run([whole.decoder_input])[0]
            cum = np.concatenate(([0], np.cumsum(whole.durations)))
            last = max(b for _, a, b in item.words if b > a)
            s0, s1 = int(whole.durations[0]) * HOP, min(whole.frames, int(cum[last]) + 4) * HOP
            speech = full[s0:s1]
            for variant in VARIANTS:
                pcm, frames, end = decode(model, whole, item, variant)
                got = pcm[s0:s1]
                ma, mb = log_mel(speech), log_mel(got)
                loud = ma.max(axis=1) > ma.max() - 60
                diff = mb[loud] - ma[loud]
                rows[variant].append({
                    "frames": frames / whole.frames,
                    "mel": mel_distance_db(speech, got),
                    "shape": float(np.mean(np.abs(diff - diff.mean()))),
                    "rms": 20 * np.log10(_rms(got) / _rms(speech)),
                    "centroid": _centroid(got) / _centroid(speech),
                    "edge": 20 * np.log10(_rms(pcm[(end - 1) * HOP : end * HOP]) / _rms(speech)),
                })  # fmt: skip
    print(f"\nquality: {len(QUALITY_VOICES)} voices x {len(texts)} first segments, against the whole decode")
    print("  variant    frames   log-mel dB (median, max)   shape dB   RMS dB   centroid   last frame dB")
    for variant, found in rows.items():
        med = {k: statistics.median(r[k] for r in found) for k in found[0]}
        print(f"  {variant:9s} {100 * med['frames']:5.0f} %   {med['mel']:5.2f}, {max(r['mel'] for r in found):5.2f}"
              f"               {med['shape']:5.2f}   {med['rms']:+5.2f}   {med['centroid']:6.3f}"
              f"     {max(r['edge'] for r in found):+6.1f}")


def whisper(voice: KokoroVoice, texts: list[str], shard: tuple[int, int] = (0, 1),
            variants: tuple[str, ...] = ("lead", "tail12_w")) -> None:
    import soxr
    from faster_whisper import WhisperModel

    from voxserve.runners.whisper import bundled_model

    asr = WhisperModel(str(bundled_model()[0]), device="cpu", compute_type="int8", cpu_threads=1)
    model = voice.model
    errors = {v: 0 for v in variants}
    words = 0
    worse: list[str] = []
    names = [v.name for v in voice.voices if v.name.startswith(ENGLISH)][shard[0] :: shard[1]]
    for name in names:
        ref = voice.resolve_voice(name)
        for text in texts:
            item = voice.inputs(text, ref, 1.0)[0]
            whole = model.acoustic.run([KokoroInput(item.ids, item.style, item.speed)])[0]
            words += len(normalize(text).split())
            got = {}
            for variant in variants:
                pcm = soxr.resample(decode(model, whole, item, variant)[0], SAMPLE_RATE, 16000)
                segments, _ = asr.transcribe(pcm, language="en", beam_size=1, without_timestamps=True)
                heard = " ".join(s.text for s in segments)
                got[variant] = word_errors(text, heard).errors
                errors[variant] += got[variant]
            if got[variants[-1]] > got[variants[0]]:
                worse.append(f"{name} {text!r}")
        print(f"  {name}: {errors}", flush=True)
    print(f"\nwhisper tiny.en: {len(names)} English voices x {len(texts)} first segments, {words} words")
    for variant in variants:
        print(f"  {variant:9s} {errors[variant]} word errors, WER {100 * errors[variant] / words:.1f} %")
    print(f"  {variants[-1]} worse than {variants[0]} on {len(worse)}: {worse}")


def timing(voice: KokoroVoice, texts: list[str], repeat: int) -> None:
    model = voice.model
    ref = voice.resolve_voice("af_alloy")
    items = [voice.inputs(text, ref, 1.0)[0] for text in texts]
    acoustic, decoder = model.runners(2)

    def before(item: KokoroItem) -> None:
        whole = acoustic.run([KokoroInput(item.ids, item.style, item.speed)])[0]
        decoder.run([VARIANTS["lead"](whole, item)[0].decoder_input])

    def served(item: KokoroItem) -> None:
        latent = voice.acoustic([item], threads=2)[0]
        voice.decode([Span(latent, 0, latent.frames)], threads=2)

    for item in items:
        before(item)
        served(item)
    print(f"\ntime, stage A + B on 2 threads, median of {repeat}; load average before {os.getloadavg()}")
    ratios = []
    for text, item in zip(texts, items, strict=True):
        times: dict[str, list[float]] = {"lead": [], "served": []}
        for _ in range(repeat):
            for name, run in (("lead", before), ("served", served)):
                started = time.perf_counter()
                run(item)
                times[name].append(1000 * (time.perf_counter() - started))
        a, b = statistics.median(times["lead"]), statistics.median(times["served"])
        ratios.append(b / a)
        print(f"  {text!r:34s} lead only {a:5.0f} ms, served (lead + tail, weighted) {b:5.0f} ms: {b / a:.2f}x")
    print(f"  median ratio {statistics.median(ratios):.2f}; load average after {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="quality,whisper,time")
    parser.add_argument("--step", type=int, default=3, help="every step-th first segment")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--shard", default="0/1", help="whisper: voices i, i+n, ... (i/n)")
    args = parser.parse_args()
    voice = KokoroVoice(KokoroModel())
    texts = first_segments(args.step)
    print("first segments:", texts)
    steps = args.only.split(",")
    if "quality" in steps:
        quality(voice, texts)
    if "whisper" in steps:
        i, n = args.shard.split("/")
        whisper(voice, texts, (int(i), int(n)))
    if "time" in steps:
        timing(voice, texts, args.repeat)


if __name__ == "__main__":
    main()

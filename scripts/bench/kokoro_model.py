"""Measure the Kokoro runner: int8 against float32, chunked against whole decoding, first
audio and real-time factor on one and two threads, and the served window plans against the
whole-sentence decode. Offline, in process; prints a report.

    PYTHONPATH=$PWD .venv/bin/python scripts/bench/kokoro_model.py [--repeat 5] [--only speed,chunks,latency]
    PYTHONPATH=$PWD .venv/bin/python scripts/bench/kokoro_model.py --only windows --plans 48,48,1.25,12 36,48,1.25,12

`windows` renders each plan (FIRST,LATER,GROWTH,CONTEXT[,CROSSFADE], the crossfade in
samples, 0 for hard cuts) exactly as the engine streams it and prints its log-mel distance,
level, energy dips and clicks at the joins against the whole decode (docs/KOKORO.md,
"Choosing the windows").

Every comparison runs inside one process, one configuration after the other with the same
inputs, and reports medians, so that ratios hold even on a shared, noisy machine.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from dataclasses import replace
from typing import cast

import numpy as np
import onnxruntime as ort

from voxserve.bench import kokoro_prosody as kp
from voxserve.engine.adapters.kokoro import CHUNKING, KokoroVoice
from voxserve.runners.kokoro.onnx_runner import (
    HOP,
    SAMPLE_RATE,
    DecoderInput,
    KokoroAcousticRunner,
    KokoroDecoderRunner,
    KokoroInput,
    KokoroModel,
    Precision,
    decode_span,
    load_voice,
    model_file,
    split_model,
    style_row,
)
from voxserve.text.kokoro_vocab import phonemes_to_ids

# Misaki-style US English phonemes, written by hand (the G2P lives elsewhere).
SHORT = "həlˈO ðˈɛɹ."  # "Hello there.": 0.6 s of speech, 1.5 s with the pads' silence
LONG = (
    "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˌOvəɹ ðə lˈAzi dˈɔɡ, ænd ðˈɛn ɪt ɹˈʌnz fˈɑɹ əwˈA ˌɪntə ðə "
    "wˈʊdz. ˈæftəɹ ə lˈɔŋ dˈA, ðə fˈɑks slˈips ˌʌndəɹ ə tˈɔl tɹˈi, ænd dɹˈimz ʌv ðə nˈɛkst "
    "mˈɔɹnɪŋ."
)
MID = LONG[: LONG.index("wˈʊdz.") + len("wˈʊdz.")]  # its first sentence, ~5 s
VOICE = "af_heart"


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    n = min(len(reference), len(test))
    ref, err = reference[:n].astype(np.float64), reference[:n].astype(np.float64) - test[:n]
    return float(10 * np.log10(np.sum(ref**2) / max(float(np.sum(err**2)), 1e-30)))


def log_mel(pcm: np.ndarray, n_fft: int = 1024, hop: int = 256, bands: int = 80) -> np.ndarray:
    """A plain log-mel spectrogram (dB), enough to compare two renderings."""
    frames = 1 + max(0, len(pcm) - n_fft) // hop
    window = np.hanning(n_fft)
    spec = np.abs(
        np.fft.rfft(np.stack([pcm[i * hop : i * hop + n_fft] * window for i in range(frames)]), axis=1)
    ) ** 2
    freqs = np.linspace(0, SAMPLE_RATE / 2, spec.shape[1])
    mel = 2595 * np.log10(1 + freqs / 700)
    edges = np.linspace(0, mel[-1], bands + 2)
    fb = np.zeros((bands, spec.shape[1]))
    for b in range(bands):
        lo, mid, hi = edges[b], edges[b + 1], edges[b + 2]
        fb[b] = np.clip(np.minimum((mel - lo) / (mid - lo), (hi - mel) / (hi - mid)), 0, None)
    return np.asarray(10 * np.log10(spec @ fb.T + 1e-10))


def mel_distance_db(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute log-mel difference in dB, over the frames louder than -60 dB of a's peak."""
    n = min(len(a), len(b))
    ma, mb = log_mel(a[:n]), log_mel(b[:n])
    loud = ma.max(axis=1) > ma.max() - 60
    return float(np.mean(np.abs(ma[loud] - mb[loud])))


def item(phonemes: str, speed: float = 1.0) -> KokoroInput:
    ids = phonemes_to_ids(phonemes)
    return KokoroInput(ids, style_row(load_voice(VOICE), len(ids)), speed)


def check_split() -> None:
    """The two int8 stages against the full int8 graph, and durations against the length."""
    full = ort.InferenceSession(str(model_file()), providers=["CPUExecutionProvider"])
    a, b = split_model(model_file(), "int8")
    acoustic, decoder = KokoroAcousticRunner(a), KokoroDecoderRunner(b)
    for text in (SHORT, LONG):
        x = item(text)
        tokens = np.concatenate([[0], x.ids, [0]]).astype(np.int64)[np.newaxis]
        reference = full.run(
            None, {"tokens": tokens, "style": x.style[np.newaxis], "speed": np.array([1.0], np.float32)}
        )[0].reshape(-1)
        frames = acoustic.run([x])[0]
        pcm = decoder.run([frames.decoder_input])[0]
        print(
            f"split  {len(x.ids):3d} ids: frames {frames.frames} sum(durations) {frames.durations.sum()} "
            f"samples {len(pcm)} (= {len(pcm) / frames.frames:.1f}/frame), full graph {len(reference)}, "
            f"max |staged - full| {np.max(np.abs(pcm - reference)) if len(pcm) == len(reference) else 'len differs'}"
        )


def speed(repeat: int) -> None:
    """int8 against float32, 1 and 2 threads, and how far float32's output is from int8's.

    The four configurations take turns, round after round, so that a change in the
    machine's load hits all of them alike; each reports its median."""
    runners = {}
    precisions: tuple[Precision, ...] = ("int8", "float32")
    for precision in precisions:
        a, b = split_model(model_file(), precision)
        for threads in (1, 2):
            runners[precision, threads] = (KokoroAcousticRunner(a, threads), KokoroDecoderRunner(b, threads))
    x = item(MID)
    out: dict[tuple[str, int], tuple[DecoderInput, np.ndarray, np.ndarray]] = {}
    for key, (acoustic, decoder) in runners.items():
        frames = acoustic.run([x])[0]
        out[key] = (frames.decoder_input, frames.durations, decoder.run([frames.decoder_input])[0])
    times: dict[tuple[str, int], tuple[list[float], list[float]]] = {key: ([], []) for key in runners}
    for _ in range(repeat):
        for key, (acoustic, decoder) in runners.items():
            t0 = time.perf_counter()
            acoustic.run([x])
            t1 = time.perf_counter()
            decoder.run([out[key][0]])
            t2 = time.perf_counter()
            times[key][0].append(t1 - t0)
            times[key][1].append(t2 - t1)
    for (name, threads), (ta_list, tb_list) in times.items():
        ta, tb = statistics.median(ta_list), statistics.median(tb_list)
        seconds = len(out[name, threads][2]) / SAMPLE_RATE
        print(
            f"speed  {name:7s} {threads} thread(s): stage A {ta * 1000:6.0f} ms, stage B {tb * 1000:6.0f} ms "
            f"for {seconds:.2f} s of audio: RTF {(ta + tb) / seconds:.3f} ({seconds / (ta + tb):.2f}x real time)"
        )
    q_in, q_dur, q_pcm = out["int8", 1]
    f_dur = out["float32", 1][1]
    same_input = runners["float32", 1][1].run([q_in])[0]
    print(
        f"output float32 vs int8: durations equal {np.array_equal(q_dur, f_dur)} "
        f"(sum {q_dur.sum()} vs {f_dur.sum()}, {int(np.sum(q_dur != f_dur))} of {len(q_dur)} tokens differ); "
        f"stage B alone on int8's features: SNR {snr_db(q_pcm, same_input):.1f} dB, "
        f"mel distance {mel_distance_db(q_pcm, same_input):.2f} dB"
    )
    # Scale for the mel distance: the same int8 pipeline with another voice's style.
    other = KokoroInput(x.ids, style_row(load_voice("af_bella"), len(x.ids)), 1.0)
    acoustic, decoder = runners["int8", 1]
    o = acoustic.run([other])[0]
    distance = mel_distance_db(q_pcm, decoder.run([o.decoder_input])[0])
    print(f"scale  mel distance af_heart vs af_bella (int8, same phonemes): {distance:.2f} dB")


def _chunked(
    decoder: KokoroDecoderRunner, frames: DecoderInput, size: int, context: int, carry_phase: bool
) -> np.ndarray:
    parts = []
    for start in range(0, frames.frames, size):
        stop = min(start + size, frames.frames)
        if carry_phase:
            parts.append(decode_span(decoder, frames, start, stop, context, context))
        else:  # as a plain window would: the harmonic source starts at phase 0
            lo, hi = max(0, start - context), min(frames.frames, stop + context)
            window = replace(frames.window(lo, hi), phase=np.zeros(9, np.float32))
            parts.append(decoder.run([window])[0][(start - lo) * HOP : (stop - lo) * HOP])
    return np.concatenate(parts)


def chunks(precision: Precision) -> None:
    """Chunked stage B with context against the whole decode."""
    a, b = split_model(model_file(), precision)
    acoustic, decoder = KokoroAcousticRunner(a, 2), KokoroDecoderRunner(b, 2)
    frames = acoustic.run([item(MID)])[0].decoder_input
    whole = decoder.run([frames])[0]
    print(f"chunks {precision}: {frames.frames} frames, whole decode {len(whole) / SAMPLE_RATE:.2f} s")
    plan = [(32, c) for c in (0, 8, 16, 32, 64, 128)] + [(64, c) for c in (16, 64)]
    for carry_phase in (False, True):
        for size, context in plan:
            pcm = _chunked(decoder, frames, size, context, carry_phase)
            joins = [  # 50 ms either side of each join
                snr_db(whole[(k - 2) * HOP : (k + 2) * HOP], pcm[(k - 2) * HOP : (k + 2) * HOP])
                for k in range(size, frames.frames, size)
            ]
            print(
                f"chunks {precision} phase {'carried' if carry_phase else 'reset  '} C={size:3d} "
                f"L=R={context:3d}: SNR {snr_db(whole, pcm):6.1f} dB, worst join {min(joins):6.1f} dB, "
                f"mel distance {mel_distance_db(whole, pcm):.2f} dB"
            )


def latency(repeat: int, precision: Precision) -> None:
    """First audio for a short phrase (stage A, then stage B over the whole phrase: the
    decoder cannot stream within a clause) and the real-time factor on LONG, on one and two
    threads taking turns."""
    a, b = split_model(model_file(), precision)
    runners = {threads: (KokoroAcousticRunner(a, threads), KokoroDecoderRunner(b, threads)) for threads in (1, 2)}
    for name, text in (("short", SHORT), ("long", LONG)):
        x = item(text)
        samples = 0
        times: dict[int, list[float]] = {1: [], 2: []}
        for round_ in range(repeat + 1):
            for threads, (acoustic, decoder) in runners.items():
                t0 = time.perf_counter()
                frames = acoustic.run([x])[0]
                samples = len(decoder.run([frames.decoder_input])[0])
                if round_:  # the first round warms up
                    times[threads].append(time.perf_counter() - t0)
        seconds = samples / SAMPLE_RATE
        for threads, values in times.items():
            t = statistics.median(values)
            print(
                f"latency {precision} {threads} thread(s) {name}: {seconds:.2f} s of audio in {t * 1000:.0f} ms "
                f"(median of {repeat}), RTF {t / seconds:.3f} ({seconds / t:.2f}x real time)"
            )


def windows(specs: list[str]) -> None:
    """Each window plan rendered as the engine streams it, against the whole-sentence decode."""
    plans = []
    for spec in specs:
        parts = spec.split(",")
        plans.append((int(parts[0]), int(parts[1]), float(parts[2]), int(parts[3]),
                      int(parts[4]) if len(parts) > 4 else HOP))
    model = KokoroVoice(KokoroModel())
    clips = [kp._whole(model, text, voice) for voice, text in itertools.product(("af_heart", "af_nova"), kp.PROSODY_TEXTS)]
    print("| first, later, growth, context, crossfade | log-mel, median (max) | level | joins in sound / all | worst dip there | worst click |")
    print("|---|---|---|---|---|---|")
    for plan in plans:
        mel, level, dips, clicks, sounding, total = [], [], [], [], 0, 0
        first, later, growth, context, fade = plan
        chunking = replace(CHUNKING, first_chunk_frames=first, chunk_frames=later,
                           left_context=context, right_context=context)
        for whole, latents in clips:
            rendered = [kp.render_windows(model, latent, chunking, growth, fade) for latent in latents]
            pcm = np.concatenate([part for part, _ in rendered])
            offset, joins = 0, list[int]()
            for part, at in rendered:
                joins.extend(offset + j for j in at)
                offset += len(part)
            dip, click, n = kp.join_quality(whole, pcm, joins)
            mel.append(kp.mel_distance_db(whole, pcm))
            level.append(kp._db(pcm) - kp._db(whole))
            dips.append(dip)
            clicks.append(click)
            sounding += n
            total += len(joins)
        print(f"| {', '.join(map(str, plan))} | {np.median(mel):.2f} dB ({max(mel):.2f}) | {np.median(level):+.2f} dB | "
              f"{sounding} / {total} | {max(dips):.1f} dB | {max(clicks):+.1f} dB |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="split,speed,chunks,latency")
    parser.add_argument("--precision", default="int8", choices=["int8", "float32"], help="for chunks and latency")
    parser.add_argument("--plans", nargs="+", default=["48,48,1.25,12"],
                        help="for windows: FIRST,LATER,GROWTH,CONTEXT[,CROSSFADE] ...")
    args = parser.parse_args()
    steps = args.only.split(",")
    print(f"onnxruntime {ort.__version__}")
    if "split" in steps:
        check_split()
    if "speed" in steps:
        speed(args.repeat)
    if "chunks" in steps:
        chunks(cast(Precision, args.precision))
    if "latency" in steps:
        latency(args.repeat, cast(Precision, args.precision))
    if "windows" in steps:
        windows(args.plans)


if __name__ == "__main__":
    main()

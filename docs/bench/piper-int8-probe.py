"""Piper's decoder (stage B) in int8: ONNX Runtime static quantization, measured against
float32 for speed and quality. Issue 15's optional item; the result is in BENCHMARKS.md.

Calibration: 64 windows of 52 latent frames (a second chunk's decode) from stage A of
built-in prompts that are not among the 24 bench prompts. Variants:

- `qop`: QOperator format (QLinearConv), uint8 activations, int8 per-channel weights,
  MinMax calibration;
- `qop_edge_pct`: the same without the first and last convolutions, Percentile
  calibration;
- `qdq_conv`: QDQ format, Conv only (the transposed convolutions stay float).

Speed: CPU time of one thread (`time.thread_time`, so other processes on the machine
matter less), the least of 12 runs, per decoded frame, windows of 52 and 148 frames.
Quality, over the 24 bench prompts (each sentence's stage A once, then decoded by every
variant): waveform SNR against float32; the mean absolute difference of 80-band log-mel
spectra in dB over the frames within 50 dB of the loudest (speech, not silence); and the
Whisper round trip (the server's own tiny.en, greedy, 16 kHz), WER against the prompt
text. Stage A draws its noise afresh per run, so float32's own WER moves by about 0.3
points from run to run.

    python docs/bench/piper-int8-probe.py --out /tmp/int8
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

VARIANTS = ("qop", "qop_edge_pct", "qdq_conv")


def _session(path: Path | str) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _quantize(vocoder: Path, latents: list[np.ndarray], variant: str, out: Path) -> Path:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from voxserve.runners.piper import LATENT_TENSOR

    windows = [z[np.newaxis, :, lo : lo + 52] for z in latents for lo in range(0, z.shape[1] - 52, 40)][:64]

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._feeds = iter([{LATENT_TENSOR: w} for w in windows])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._feeds, None)

    pre = out / "vocoder-pre.onnx"
    if not pre.exists():
        quant_pre_process(str(vocoder), str(pre), skip_symbolic_shape=True)
    target = out / f"vocoder-int8-{variant}.onnx"
    options: dict[str, Any] = {
        "weight_type": QuantType.QInt8,
        "per_channel": True,
        "calibrate_method": CalibrationMethod.MinMax,
    }
    if variant.startswith("qop"):
        options |= {"quant_format": QuantFormat.QOperator, "activation_type": QuantType.QUInt8}
    else:
        options |= {"quant_format": QuantFormat.QDQ, "activation_type": QuantType.QInt8,
                    "op_types_to_quantize": ["Conv"]}
    if "edge" in variant:
        options["nodes_to_exclude"] = ["/dec/conv_pre/Conv", "/dec/conv_post/Conv"]
    if "pct" in variant:
        options["calibrate_method"] = CalibrationMethod.Percentile
    quantize_static(str(pre), str(target), Reader(), **options)
    return target


def _log_mel_db(x: np.ndarray, rate: int = 22050) -> np.ndarray:
    n, hop = 1024, 256
    frames = np.lib.stride_tricks.sliding_window_view(np.pad(x, (n // 2, n // 2)), n)[::hop] * np.hanning(n)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    freqs = np.fft.rfftfreq(n, 1 / rate)
    edges = 700 * (10 ** (np.linspace(0, 2595 * np.log10(1 + 8000 / 700), 82) / 2595) - 1)
    bank = np.zeros((80, len(freqs)))
    for i in range(80):
        lo, mid, hi = edges[i : i + 3]
        bank[i] = np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0, None)
    return np.asarray(10 * np.log10(np.maximum(power @ bank.T, 1e-8)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("piper-int8"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import soxr
    from faster_whisper import WhisperModel

    from voxserve.bench.metrics import word_error_rate
    from voxserve.bench.prompts import BUILTIN_PROMPTS, pick
    from voxserve.config import VocoderChunking
    from voxserve.engine.piper_voice import PiperVoice
    from voxserve.runners.piper import LATENT_TENSOR, PiperModel, bundled_voice
    from voxserve.runners.whisper import bundled_model

    model = PiperModel(bundled_voice())
    voice = PiperVoice(model, VocoderChunking(), 1.0)
    speaker = voice.voices[0]
    prompts = pick(list(BUILTIN_PROMPTS), 24, 0)
    calibration = [t for t in BUILTIN_PROMPTS if t not in prompts][:16]
    latents = [model.acoustic.run([item])[0] for t in calibration for item in voice.inputs(t, speaker, 1.0)]
    sessions = {"f32": _session(model.graphs.vocoder)}
    for variant in VARIANTS:
        sessions[variant] = _session(_quantize(model.graphs.vocoder, latents, variant, args.out))

    longest = max(latents, key=lambda z: z.shape[1])
    for frames in (52, 148):
        feed = {LATENT_TENSOR: np.ascontiguousarray(longest[np.newaxis, :, :frames])}
        best = {}
        for name, session in sessions.items():
            times = []
            for _ in range(12):
                t0 = time.thread_time()
                session.run(None, feed)
                times.append(time.thread_time() - t0)
            best[name] = min(times)
        print(f"{frames} frames, 1 thread: " + ", ".join(
            f"{name} {t / frames * 1e3:.3f} ms/frame ({best['f32'] / t:.2f}x)" for name, t in best.items()))

    whisper = WhisperModel(str(bundled_model()[0]), device="cpu", compute_type="int8", cpu_threads=2)
    pairs: dict[str, list[tuple[str, str]]] = {name: [] for name in sessions}
    snr: dict[str, list[float]] = {name: [] for name in sessions}
    mel: dict[str, list[float]] = {name: [] for name in sessions}
    for text in prompts:
        zs = [model.acoustic.run([item])[0] for item in voice.inputs(text, speaker, 1.0)]
        reference = None
        for name, session in sessions.items():
            audio = np.concatenate([session.run(None, {LATENT_TENSOR: z[np.newaxis]})[0].reshape(-1) for z in zs])
            if reference is None:
                reference = audio
            else:
                noise = max(float(np.sum((reference - audio) ** 2)), 1e-20)
                snr[name].append(10 * np.log10(float(np.sum(reference**2)) / noise))
                a, b = _log_mel_db(reference), _log_mel_db(audio)
                speech = a.max(axis=1) > a.max() - 50
                mel[name].append(float(np.mean(np.abs(a[speech] - b[speech]))))
            heard, _ = whisper.transcribe(soxr.resample(audio.astype(np.float32), 22050, 16000),
                                          language="en", beam_size=1)
            pairs[name].append((text, " ".join(s.text for s in heard)))
    for name in sessions:
        line = f"{name}: WER {word_error_rate(pairs[name]) * 100:.2f} %"
        if snr[name]:
            line += (f", SNR median {statistics.median(snr[name]):.1f} dB (min {min(snr[name]):.1f}),"
                     f" log-mel distance median {statistics.median(mel[name]):.2f} dB (max {max(mel[name]):.2f})")
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

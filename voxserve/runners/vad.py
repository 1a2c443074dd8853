"""Silero VAD v6: speech probability per 32 ms frame of 16 kHz audio, one stream at a time.

The model ships in the faster-whisper wheel (`faster_whisper/assets/silero_vad_v6.onnx`);
it is never downloaded. Its graph takes `input` [seq_len, 576] (each row: the 64 samples
before a frame, then the frame's 512), and the LSTM state `h`, `c` [1, 1, 128]; it returns
`speech_probs` [seq_len] and the state after the last row. The state runs along the rows,
so a stream can be scored in any number of calls and gives the same probabilities as one
call over all of it (bit for bit), as long as its state and its last 64 samples
are carried: that is `VADStream`. The first frame's context is zeros, as in
faster-whisper's `SileroVADModel`, which this matches except on the last frame of a call
(that one zeroes the last frame's final 64 samples in place when it builds the contexts).

The graph's batch is fixed at 1 (h [1, 4, 128] is refused), so streams cannot share a
call. A call has a fixed cost besides its frames, so what pays is scoring all of a
stream's new frames in one call. This module is one of the places that import
onnxruntime; it knows nothing of sessions, threads or HTTP (`engine/vad.py` runs it).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import onnxruntime as ort

__all__ = [
    "CONTEXT_SAMPLES",
    "FRAME_SAMPLES",
    "SAMPLE_RATE",
    "SileroVAD",
    "VADStream",
    "bundled_vad",
]

SAMPLE_RATE = 16000
FRAME_SAMPLES = 512
"""32 ms at 16 kHz: the samples each probability covers."""
CONTEXT_SAMPLES = 64
"""Samples before a frame that its row of `input` also holds."""
_STATE_SHAPE = (1, 1, 128)
_MAX_ROWS = 4096
"""Frames per model call at most (131 s of audio), so one huge piece cannot make one
huge input tensor."""


def bundled_vad() -> Path:
    """The Silero VAD v6 graph inside the installed faster-whisper package."""
    path = resources.files("faster_whisper") / "assets" / "silero_vad_v6.onnx"
    return Path(str(path))


class VADStream:
    """One session's VAD state: h, c, the 64-sample context, and samples not yet making
    a whole frame. Not thread-safe by itself; the engine serializes calls per stream."""

    def __init__(self) -> None:
        self.frames_done = 0
        """Frames scored so far; frame k covers samples [512k, 512(k+1)) of the stream."""
        self._pending = np.zeros(0, dtype=np.float32)
        self.reset()

    def reset(self) -> None:
        """Fresh model state (LSTM and context), as at the start of a stream. The frame
        count and the samples waiting to make a whole frame are kept, so frame numbers
        still count from the stream's first sample."""
        self.h = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self.c = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self.context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)

    @property
    def samples_seen(self) -> int:
        """Samples given to this stream so far, scored or waiting."""
        return self.frames_done * FRAME_SAMPLES + len(self._pending)

    def frames_ready(self, more: int) -> int:
        """Whole frames that `more` further samples would complete."""
        return (len(self._pending) + more) // FRAME_SAMPLES

    def take_frames(self, samples: np.ndarray) -> np.ndarray:
        """Append `samples` and return the whole frames now available as model rows
        [n, 576], advancing the context (not the LSTM state, nor `frames_done`)."""
        if samples.ndim != 1:
            raise ValueError(f"expected mono samples (one dimension), got shape {samples.shape}")
        buffered = np.concatenate([self._pending, samples.astype(np.float32, copy=False)])
        count = len(buffered) // FRAME_SAMPLES
        frames = buffered[: count * FRAME_SAMPLES].reshape(count, FRAME_SAMPLES)
        self._pending = buffered[count * FRAME_SAMPLES :].copy()
        if not count:
            return np.zeros((0, CONTEXT_SAMPLES + FRAME_SAMPLES), dtype=np.float32)
        contexts = np.empty((count, CONTEXT_SAMPLES), dtype=np.float32)
        contexts[0] = self.context
        contexts[1:] = frames[:-1, -CONTEXT_SAMPLES:]
        self.context = frames[-1, -CONTEXT_SAMPLES:].copy()
        return np.concatenate([contexts, frames], axis=1)


class SileroVAD:
    """The ONNX session (1 intra-op thread, 1 inter-op thread, no memory arena).
    `score(stream, samples)` appends samples to the stream, scores every whole frame now
    available, returns their probabilities (float32, possibly empty) and advances
    frames_done. Pure compute; call it from a worker thread."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or bundled_vad()
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3
        self._session = ort.InferenceSession(
            str(self.path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def score(self, stream: VADStream, samples: np.ndarray) -> np.ndarray:
        rows = stream.take_frames(samples)
        if not len(rows):
            return np.zeros(0, dtype=np.float32)
        probs = []
        for start in range(0, len(rows), _MAX_ROWS):
            out, stream.h, stream.c = self._session.run(
                None, {"input": rows[start : start + _MAX_ROWS], "h": stream.h, "c": stream.c}
            )
            probs.append(np.asarray(out, dtype=np.float32).reshape(-1))
        stream.frames_done += len(rows)
        return probs[0] if len(probs) == 1 else np.concatenate(probs)

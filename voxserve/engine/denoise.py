"""Noise reduction for live sessions and files, run off the event loop.

`DenoiseEngine` runs `runners/denoise.py: Denoiser` (GTCRN) on a small pool of its own
threads, never on the VAD thread (whose short frames must not wait behind a filter hop)
nor on the ASR workers. A live session filters each append as it arrives and awaits the
result before its next one, so at most one call per session is queued; the stream's lock
keeps its state consistent even if a waiter is cancelled and its call still runs. An
upload's filter (`for_file`) runs on the thread that decodes and cuts it, for the VAD that
plans the cuts. What the filter hands on goes to the VAD only: given the filtered audio,
the recognizer lost words on clean speech and in babble (docs/BENCHMARKS.md).

The two types OpenAI names map to a strength (`runners/denoise.py: DenoiseStream.strength`):
`near_field` (a headset: the voice far above the noise) keeps a floor of the input under
the filtered signal, `far_field` (a laptop or a room: the voice nearer the noise) takes the
model's full output. `STRENGTHS` holds the figures and `docs/REALTIME.md` what each does.

The filter's cost is live work on the machine's cores. The engine times every call and
keeps the CPU-seconds per second of audio (`cost`), estimated at start-up from a warm
call and then measured; the live admission weighs a session with the filter on by it
(`engine/live.py: session_weight`).

This module knows nothing of sessions, turns or HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from voxserve.engine.threads import prestart
from voxserve.errors import InvalidRequest, Unavailable
from voxserve.runners.denoise import SAMPLE_RATE, Denoiser, DenoiseStream, default_model_path

log = logging.getLogger(__name__)

__all__ = ["NOISE_REDUCTION_TYPES", "STRENGTHS", "DenoiseEngine", "DenoiseStream", "FileFilter"]

STRENGTHS = {"near_field": 0.7, "far_field": 1.0}
"""The share of the model's output in what the filter hands on (the rest is the input).
A headset's voice stands far above the noise, so `near_field` keeps 30 % of the input,
which spares the voice the filter's artefacts; `far_field` takes the model's output whole."""
NOISE_REDUCTION_TYPES = tuple(STRENGTHS)
THREADS = 2
"""Filter threads. One keeps up with many sessions (a session costs a small share of a
core); a second keeps one slow call from delaying every other session's audio."""


class DenoiseEngine:
    """Runs the noise filter on `THREADS` threads of its own. Without the model file,
    `available` is False and every request for the filter is refused (400)."""

    def __init__(self, model: Path | None = None, threads: int = THREADS) -> None:
        self._path = model or default_model_path()
        self._threads = threads
        self._model: Denoiser | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._busy_s = 0.0
        self._audio_s = 0.0
        self.estimate = 0.0
        """CPU-seconds per second of audio, timed at start-up on one warm call."""

    def start(self, required: bool = False) -> None:
        """Load the model and start the threads. Without the model file, log it and refuse
        every type later, or raise `FileNotFoundError` if the filter is `required` (an
        operator's default)."""
        with self._lock:
            if self._executor is not None or self._stopped:
                return
            if not self._path.is_file():
                if required:
                    raise FileNotFoundError(
                        f"--realtime-noise-reduction needs the noise filter {self._path}, which "
                        "is missing: `make install` fetches it")
                log.warning("no noise filter at %s: noise_reduction is refused (make install "
                            "fetches it)", self._path)
                return
            self._model = Denoiser(self._path)
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="denoise")
            prestart(self._executor, self._threads)
            probe = np.random.default_rng(0).standard_normal(SAMPLE_RATE).astype(np.float32) * 0.1
            self._executor.submit(self._model.feed, DenoiseStream(), probe).result()
            started = time.process_time()
            self._executor.submit(self._model.feed, DenoiseStream(), probe).result()
            self.estimate = max(time.process_time() - started, 1e-4)

    @property
    def available(self) -> bool:
        return self._model is not None

    def check(self, kind: str | None, param: str) -> None:
        """Refuse a type this server cannot apply (400, naming `param`)."""
        if kind is None:
            return
        if kind not in STRENGTHS:
            raise InvalidRequest(
                f"unknown noise reduction type {kind!r}: use one of "
                f"{', '.join(NOISE_REDUCTION_TYPES)}, or null for none",
                param=param,
                code="invalid_value",
            )
        if self._model is None:
            raise InvalidRequest(
                "noise reduction needs the noise filter, which is not installed on this server; "
                "send null",
                param=param,
                code="unsupported_noise_reduction",
            )

    def stream(self, kind: str) -> DenoiseStream:
        """A new stream for `kind` (checked by `check`)."""
        return DenoiseStream(STRENGTHS[kind])

    @property
    def cost(self) -> float:
        """CPU-seconds the filter takes per second of audio: measured once it has filtered
        a minute, the start-up estimate before."""
        if self._audio_s >= 60.0:
            return self._busy_s / self._audio_s
        return self.estimate

    async def feed(self, stream: DenoiseStream, samples: np.ndarray) -> np.ndarray:
        """Filter `samples` on a filter thread: the output now final, which continues the
        stream's earlier output (sample `stream.samples_out - len(output)` on)."""
        executor = self._executor
        if executor is None:
            raise Unavailable("noise reduction is not running")
        try:
            work = executor.submit(self._feed, stream, samples)
        except RuntimeError:  # shut down between the check and the submit
            raise Unavailable("noise reduction is not running") from None
        # The shield keeps a cancelled waiter from cancelling work not yet started.
        return await asyncio.shield(asyncio.wrap_future(work))

    def for_file(self, kind: str) -> FileFilter:
        """A filter for one upload's VAD, run on the caller's thread (the audio pool
        that decodes and cuts it); `kind` checked by `check`."""
        assert self._model is not None
        return FileFilter(self, self._model, self.stream(kind))

    def _feed(self, stream: DenoiseStream, samples: np.ndarray) -> np.ndarray:
        assert self._model is not None
        started = time.process_time()
        out = self._model.feed(stream, samples)
        self.count(time.process_time() - started, len(samples))
        return out

    def count(self, busy_s: float, samples: int) -> None:
        """Add a call's CPU time and the audio it took to the filter's cost."""
        with self._lock:
            self._busy_s += busy_s
            self._audio_s += samples / SAMPLE_RATE

    def stop(self) -> None:
        """Refuse new calls, finish the queued ones and join the threads. Idempotent."""
        with self._lock:
            self._stopped = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)



class FileFilter:
    """One upload's filter for the VAD that cuts it (`engine/chunking.py: Hearing`): the
    model runs on the calling thread, and its time counts in the filter's cost."""

    def __init__(self, engine: DenoiseEngine, model: Denoiser, stream: DenoiseStream) -> None:
        self._engine = engine
        self._model = model
        self._stream = stream

    def feed(self, samples: np.ndarray) -> np.ndarray:
        started = time.process_time()
        out = self._model.feed(self._stream, np.asarray(samples, dtype=np.float32))
        self._engine.count(time.process_time() - started, len(samples))
        return out

    def flush(self) -> np.ndarray:
        started = time.process_time()
        out = self._model.flush(self._stream)
        self._engine.count(time.process_time() - started, 0)
        return out

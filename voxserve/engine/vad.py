"""Voice activity detection for live sessions, scored off the event loop.

`VADEngine` runs `SileroVAD.score` (`runners/vad.py`) on ONE dedicated worker thread at
normal priority: VAD is cheap and on the latency path of every live turn, so it must not
queue behind batch work, and one thread keeps each stream's calls in the order they were
made. The event loop only awaits. Callers bound the queue: each session awaits its own
previous call before making the next, so at most one call per session is pending.

A waiter that is cancelled does not cancel its work: the samples still go into the stream
and its frames are still scored, in order, so the stream stays consistent with the audio
given to it. Only that call's probabilities are lost (`frames_done` counts them).
Samples that complete no frame skip the thread when the stream has nothing in flight:
they are only buffered, on the loop (a 20 ms piece completes no frame 3 times in 8).

Every awaited call pays two thread wake-ups besides the scoring, so scoring in bigger
pieces costs less CPU per frame, but a turn's end is then seen up to a piece later.
`python -m voxserve.engine.vad` prints one stream's CPU per frame, called directly and
through the engine, for pieces of 20 ms, 100 ms and 1 s.

`semantic_vad` also asks the end-of-turn model (`runners/turn.py: SmartTurn`, whose call
costs far more than a VAD frame's) whether a turn's speech is a finished thought. Those calls
run on a second dedicated thread, never on the VAD thread, whose frames must not wait
behind them.
Each session makes at most one such call at a time. Their wall time goes to the
`turn_cost` the engine is built with, which the live admission counts as live work (`LivePolicy.ran_other`).

This module knows nothing of sessions, turns or HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from voxserve.engine.threads import prestart
from voxserve.errors import InvalidRequest, Unavailable
from voxserve.runners.turn import SmartTurn, default_model_path
from voxserve.runners.vad import FRAME_SAMPLES, SAMPLE_RATE, SileroVAD, VADStream

log = logging.getLogger(__name__)

__all__ = ["FRAME_SAMPLES", "SAMPLE_RATE", "SileroVAD", "VADEngine", "VADStream"]


class VADEngine:
    """Scores sessions' audio on ONE dedicated worker thread (normal priority: VAD is cheap
    and on the latency path), so the event loop never runs the model."""

    def __init__(
        self,
        vad: SileroVAD | None = None,
        turn_model: Path | None = None,
        turn_cost: Callable[[float], None] | None = None,
    ) -> None:
        self.vad = vad or SileroVAD()
        self._turn_path = turn_model or default_model_path()
        self._turn: SmartTurn | None = None
        self._turn_executor: ThreadPoolExecutor | None = None
        self._turn_cost = turn_cost
        """Called with each end-of-turn call's wall time, on the model's thread (the live
        admission's `LivePolicy.ran_other`)."""
        self._turn_calls = 0
        self._turn_busy_s = 0.0
        self.turn_call_s = 0.0
        """One end-of-turn call's time, warm, as measured at start (0 without the model)."""
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # start and stop may come from different threads
        self._stopped = False
        self._frames = 0
        self._calls = 0
        self._busy_s = 0.0
        self._in_flight: dict[VADStream, int] = {}
        """Calls submitted and not yet landed, per stream; touched on the loop only."""

    def start(self) -> None:
        with self._lock:
            if self._executor is not None or self._stopped:
                return
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="vad-worker")
            prestart(self._executor, 1)
            # The first run of a graph pays its set-up; not a client's turn.
            silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
            self._executor.submit(self.vad.score, VADStream(), silence).result()
            if self._turn_path.is_file():
                self._turn = SmartTurn(self._turn_path)
                self._turn_executor = ThreadPoolExecutor(1, thread_name_prefix="turn-model")
                prestart(self._turn_executor, 1)
                self._turn_executor.submit(self._turn.complete, silence).result()
                started = time.perf_counter()
                self._turn_executor.submit(self._turn.complete, silence).result()
                self.turn_call_s = time.perf_counter() - started
            else:
                log.warning("no end-of-turn model at %s: semantic_vad is refused (make install "
                            "fetches it)", self._turn_path)

    @property
    def semantic(self) -> bool:
        """Whether the end-of-turn model is loaded (semantic_vad can run)."""
        return self._turn is not None

    def check_semantic(self) -> None:
        """Refuse semantic_vad (400) when the model is not installed."""
        if self._turn is None:
            raise InvalidRequest(
                "semantic_vad needs the end-of-turn model, which is not installed on this server; "
                "use server_vad",
                param="session.audio.input.turn_detection.type",
                code="unsupported_turn_detection",
            )

    async def complete(self, samples: np.ndarray) -> float:
        """The end-of-turn model's probability that the speech in these 16 kHz samples is a
        finished thought, computed on the model's thread. A cancelled waiter leaves the
        call to finish; the caller makes one call at a time per session, so the queue holds
        at most one per session."""
        executor, model = self._turn_executor, self._turn
        if executor is None or model is None:
            raise Unavailable("the end-of-turn model is not running")
        try:
            work = executor.submit(self._complete, model, samples)
        except RuntimeError:
            raise Unavailable("the end-of-turn model is not running") from None
        return await asyncio.shield(asyncio.wrap_future(work))

    def _complete(self, model: SmartTurn, samples: np.ndarray) -> float:
        start = time.perf_counter()
        p = model.complete(samples)
        took = time.perf_counter() - start
        self._turn_calls += 1
        self._turn_busy_s += took
        if self._turn_cost is not None:
            self._turn_cost(took)
        return p

    def stop(self) -> None:
        """Refuse new calls, finish the queued ones (each takes milliseconds) and join the
        thread. Idempotent."""
        with self._lock:
            self._stopped = True
            executor, self._executor = self._executor, None
            turn, self._turn_executor = self._turn_executor, None
        for pool in (executor, turn):
            if pool is not None:
                pool.shutdown(wait=True)

    async def score(self, stream: VADStream, samples: np.ndarray) -> np.ndarray:
        """`SileroVAD.score(stream, samples)` on the worker thread: the probabilities of
        the whole frames the samples complete. Samples that complete no frame are only
        buffered, on the loop, when the stream has no call in flight. Raises `Unavailable`
        once stopped (or before start)."""
        executor = self._executor
        if executor is None:
            raise Unavailable("voice activity detection is not running")
        if stream not in self._in_flight and stream.frames_ready(len(samples)) == 0:
            return self.vad.score(stream, samples)  # no model call: microseconds
        try:
            work = executor.submit(self._score, stream, samples)
        except RuntimeError:  # shut down between the check and the submit
            raise Unavailable("voice activity detection is not running") from None
        done = asyncio.wrap_future(work)
        self._in_flight[stream] = self._in_flight.get(stream, 0) + 1
        done.add_done_callback(lambda _: self._landed(stream))
        # The shield keeps a cancelled waiter from cancelling work not yet started.
        return await asyncio.shield(done)

    def _landed(self, stream: VADStream) -> None:
        left = self._in_flight.pop(stream) - 1
        if left:
            self._in_flight[stream] = left

    def _score(self, stream: VADStream, samples: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        probs = self.vad.score(stream, samples)
        self._busy_s += time.perf_counter() - start
        self._calls += 1
        self._frames += len(probs)
        return probs

    def snapshot(self) -> dict[str, float]:
        """Counters since start: frames scored, model calls run, seconds the thread was
        busy, and calls queued or running now."""
        return {
            "frames": float(self._frames),
            "calls": float(self._calls),
            "busy_s": self._busy_s,
            "pending": float(sum(self._in_flight.values())),
            "turn_calls": float(self._turn_calls),
            "turn_busy_s": self._turn_busy_s,
        }


def _measure(seconds: float = 60.0) -> None:
    """Print the CPU time per frame of one stream fed in 20 ms, 100 ms and 1 s pieces,
    called directly and through the engine (event loop and thread hand-off included),
    and the wall time of one awaited call."""
    rng = np.random.default_rng(0)
    audio = (0.1 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32)
    vad = SileroVAD()
    engine = VADEngine(vad)
    engine.start()
    frames = len(audio) // FRAME_SAMPLES
    frame_s = FRAME_SAMPLES / SAMPLE_RATE

    async def through_engine(stream: VADStream, step: int) -> None:
        for at in range(0, len(audio), step):
            await engine.score(stream, audio[at : at + step])

    try:
        for piece_ms in (20, 100, 1000):
            step = piece_ms * SAMPLE_RATE // 1000
            cpu = time.process_time()
            stream = VADStream()
            for at in range(0, len(audio), step):
                vad.score(stream, audio[at : at + step])
            direct = (time.process_time() - cpu) / frames
            cpu, wall = time.process_time(), time.perf_counter()
            asyncio.run(through_engine(VADStream(), step))
            queued = (time.process_time() - cpu) / frames
            calls = len(audio) / step
            latency = (time.perf_counter() - wall) / calls
            print(
                f"{piece_ms:5d} ms pieces: CPU per frame {direct * 1e3:.3f} ms called directly "
                f"({direct / frame_s:.2%} of a core), {queued * 1e3:.3f} ms through the engine "
                f"({queued / frame_s:.2%}); {latency * 1e3:.2f} ms per awaited call"
            )
    finally:
        engine.stop()


if __name__ == "__main__":
    _measure()

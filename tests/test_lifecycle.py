"""`WorkerEngine`, the life cycle both engines share: threads start named after the
engine, a worker that dies is recorded and fails what it held, and stop drains and joins."""

from __future__ import annotations

import threading

from voxserve.engine.asr import ASREngine
from voxserve.engine.lifecycle import WorkerEngine
from voxserve.engine.tts import TTSEngine


class Crash(BaseException):
    """Escapes a worker's own error handling, as a bug in the loop would."""


class Toy(WorkerEngine):
    kind = "toy"
    stop_timeout_s = 5.0

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.cond = threading.Condition()
        self.stopping = False
        self.crash: set[int] = set()
        self.died: list[tuple[int, str]] = []
        self.warmed = 0

    def _worker(self, index: int) -> None:
        with self.cond:
            while not self.stopping:
                if index in self.crash:
                    raise Crash(f"worker {index}")
                self.cond.wait()

    def drain(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    def _warm(self) -> None:
        self.warmed += 1

    def _worker_died(self, index: int, exc: BaseException) -> None:
        self.died.append((index, str(exc)))


def test_start_warm_and_stop() -> None:
    engine = Toy(3)
    engine.start()
    assert sorted(t.name for t in engine._threads) == ["toy-worker-0", "toy-worker-1", "toy-worker-2"]
    assert all(t.daemon for t in engine._threads)
    assert engine.healthy and engine.any_worker_alive()
    engine.warmup()
    assert engine.warmed == 1
    engine.stop()
    assert not engine.any_worker_alive()
    assert not engine.healthy  # stopped workers are not a healthy engine
    assert engine.dead_workers == []


def test_a_dead_worker_is_recorded_and_fails_what_it_held() -> None:
    engine = Toy(2)
    engine.start()
    with engine.cond:
        engine.crash.add(1)
        engine.cond.notify_all()
    engine._threads[1].join(5)
    assert engine.dead_workers == ["toy-worker-1"]
    assert engine.died == [(1, "worker 1")]
    assert not engine.healthy and engine.any_worker_alive()
    engine.stop(timeout=5)
    assert not engine.any_worker_alive()


def test_both_engines_share_it() -> None:
    for engine in (TTSEngine, ASREngine):
        assert issubclass(engine, WorkerEngine)
        own = vars(engine)
        assert not {"start", "stop", "healthy", "warmup"} & set(own), engine
    assert (TTSEngine.kind, TTSEngine.stop_timeout_s) == ("tts", 2.0)
    assert (ASREngine.kind, ASREngine.stop_timeout_s) == ("asr", 5.0)

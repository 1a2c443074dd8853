"""A level's clients spread over several processes (`bench speech --processes N`).

One Python process with hundreds of streaming clients spends its one core parsing
chunks, and then the bench, not the server, bounds what is measured. Here each of N
processes runs a closed loop (or its share of the arrivals) over its share of the
prompts and of the concurrency: prompt i goes to process i mod N, and the C workers are
dealt as evenly as they go. All start at one instant of the shared monotonic clock
(`time.perf_counter` is CLOCK_MONOTONIC on Linux), so their records merge into one
level whose times count from that instant. Each process measures its own event loop's
lag; the merged level reports all of it.

The parent keeps its own loop for the `/health` prober and waits on the children with
a bound: a child that dies fails the level. What a request is stays with the caller
(`bench.speech` passes the function that runs a share); this module only deals the
shares, starts them together and merges what comes back.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from voxserve.bench.levels import BenchError
from voxserve.bench.load import LevelRun

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

__all__ = ["MAX_PROCESSES", "Share", "ShareRunner", "run_spread_level", "share"]

MAX_PROCESSES = 64
"""Most client processes one bench may start."""
START_DELAY_S = 0.2
"""How far ahead of now the common start is set once every child is ready."""
READY_TIMEOUT_S = 60.0
"""Longest wait for a child to import and report ready (a loaded 2-core machine)."""


def share(total: int, parts: int, index: int) -> int:
    """Part `index` of `total` dealt over `parts` as evenly as it goes."""
    return total // parts + (1 if index < total % parts else 0)


@dataclass(frozen=True)
class Share:
    """One process's part of a level."""

    target: Any
    """Where and how to ask: the run's targets (`bench.speech.SpeechApi`s), request i
    going to target i mod their number."""
    texts: list[str]
    indices: list[int]
    """Each text's index in the whole level."""
    concurrency: int
    request_rate: float | None
    seed: int


class _Indexed(Protocol):
    @property
    def index(self) -> int: ...


R = TypeVar("R", bound=_Indexed)

ShareRunner = Callable[[Share, float], Coroutine[Any, Any, tuple[list[R], float, list[float]]]]
"""Runs a share from the common start (a perf_counter time) in a child process: its
records, when it ended, and its loop's lag samples. A module-level function, so that it
pickles by name (`bench.speech` passes its own)."""


def _child(conn: Connection, runner: ShareRunner[Any], job: Share) -> None:
    """A client process: report ready, wait for the common start, run, send the records."""
    try:
        conn.send("ready")
        start_at = conn.recv()
        conn.send(asyncio.run(runner(job, start_at)))
    except Exception as exc:  # noqa: BLE001 - the parent reports it: a child has no one else to tell
        conn.send(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def _receive(conn: Connection, process: BaseProcess, timeout_s: float | None) -> object:
    """The child's next message; BenchError if it dies or passes `timeout_s` first."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not conn.poll(0.2):
        if not process.is_alive() and not conn.poll(0):
            raise BenchError(f"client process {process.pid} ended without its results (exit {process.exitcode})")
        if deadline is not None and time.monotonic() > deadline:
            raise BenchError(f"client process {process.pid} did not answer in {timeout_s:.0f} s")
    return conn.recv()


async def run_spread_level(
    runner: ShareRunner[R], target: Any, prompts: list[str], concurrency: int, request_rate: float | None,
    seed: int, processes: int,
) -> tuple[LevelRun[R], list[float]]:
    """One level of `concurrency` clients over `prompts`, run by `processes` child
    processes (at most one per client): the merged run, and every child's loop lag."""
    if not 1 <= processes <= MAX_PROCESSES:
        raise BenchError(f"--processes takes 1 to {MAX_PROCESSES}, not {processes}")
    parts = min(processes, concurrency, len(prompts))
    context = multiprocessing.get_context("spawn")
    children: list[tuple[Connection, BaseProcess]] = []
    loop = asyncio.get_running_loop()
    try:
        for i in range(parts):
            mine, theirs = context.Pipe()
            indices = list(range(i, len(prompts), parts))
            job = Share(target, [prompts[j] for j in indices], indices, share(concurrency, parts, i),
                         None if request_rate is None else request_rate / parts, seed + i)
            process = context.Process(target=_child, args=(theirs, runner, job), name=f"bench-client-{i}", daemon=True)
            process.start()
            theirs.close()
            children.append((mine, process))
        for conn, child in children:
            if await loop.run_in_executor(None, _receive, conn, child, READY_TIMEOUT_S) != "ready":
                raise BenchError("a client process failed to start")
        start_at = time.perf_counter() + START_DELAY_S
        for conn, _ in children:
            conn.send(start_at)
        answers = await asyncio.gather(*(loop.run_in_executor(None, _receive, conn, child, None)
                                         for conn, child in children))
    finally:
        for conn, child in children:
            conn.close()
            child.join(5)
            if child.is_alive():
                child.kill()
                child.join(5)
    records: list[R] = []
    lag: list[float] = []
    ended = start_at
    for answer in answers:
        if isinstance(answer, str):
            raise BenchError(f"a client process failed: {answer}")
        part, end, samples = cast("tuple[list[R], float, list[float]]", answer)
        records += part
        lag += samples
        ended = max(ended, end)
    records.sort(key=lambda r: r.index)
    return LevelRun(records, start_at, ended - start_at), lag

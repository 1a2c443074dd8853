"""Runs a list of concurrency levels with liveness probes around them.

The caller supplies one coroutine per level (what a request is, and how a level is
summarized); this module adds the `/health` prober, the bench's own loop-lag monitor, and
cuts both into per-level windows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from voxserve.bench.health import HealthProber, LoopLag, summarize_probes
from voxserve.bench.load import LevelRun
from voxserve.bench.metrics import summarize

__all__ = ["BenchError", "LevelFn", "measure_levels"]


class BenchError(RuntimeError):
    """The run cannot go on (server unreachable, warm-up failed, bad input set...)."""


LevelFn = Callable[[int], Awaitable[tuple[LevelRun[Any], dict[str, Any]]]]
"""Called with a concurrency; returns the level's run (of dataclass records) and its summary."""


async def measure_levels(levels: list[int], level_fn: LevelFn, base_url: str,
                         probe_health: bool = True,
                         health_interval_s: float = 0.05,
                         health_path: str = "/health") -> dict[str, Any]:
    """Run every level in order; returns {"levels": [...], "health": whole-run probes}."""
    prober = HealthProber(base_url, health_interval_s, path=health_path) if probe_health else None
    lag = LoopLag()
    lag.start()
    if prober is not None:
        prober.start()
    out: list[dict[str, Any]] = []
    try:
        for concurrency in levels:
            run, summary = await level_fn(concurrency)
            start, end = run.started_at, run.started_at + run.wall_s
            level: dict[str, Any] = {
                "concurrency": concurrency,
                "summary": summary,
                "client_lag_s": summarize(lag.between(start, end) if run.client_lag_s is None else run.client_lag_s),
            }
            if prober is not None:
                level["health"] = summarize_probes(prober.between(start, end))
            level["records"] = [asdict(r) for r in run.results]
            out.append(level)
    finally:
        probes = prober.stop() if prober is not None else []
        await lag.stop()
    result: dict[str, Any] = {"levels": out}
    if prober is not None:
        result["health"] = summarize_probes(probes)
    return result

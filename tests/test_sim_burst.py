"""Speech bursts on a batched device (the simulated H200): admission knows the device's
capacity from its warm-up, holds a burst the device carries in its line instead of
refusing it, and refuses a true overload with the `Retry-After` the device's batch curve
gives. Real servers on loopback, driven by concurrent HTTP clients."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import run_server
from voxserve.cli import build_parser, main, server_config
from voxserve.config import ServerConfig

TEXT = "A small yellow bird sang from the branch outside the kitchen window."


def sim_config(*flags: str) -> ServerConfig:
    """A Piper server on the sim device with steps of 8 and a line of 2."""
    argv = ["serve", "--device", "sim", "--no-asr", "--tts-gpu-batch", "8", "--tts-max-queue", "2", *flags]
    return server_config(build_parser().parse_args(argv))


async def burst(base_url: str, count: int) -> list[tuple[int, int, str | None]]:
    """`count` streaming speech requests sent at once: each one's status, PCM bytes and
    `Retry-After`."""

    async def one(client: httpx.AsyncClient) -> tuple[int, int, str | None]:
        body = {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "pcm"}
        async with client.stream("POST", f"{base_url}/v1/audio/speech", json=body) as resp:
            data = await resp.aread()
            return resp.status_code, len(data), resp.headers.get("retry-after")

    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        return await asyncio.gather(*(one(client) for _ in range(count)))


def metric(base_url: str, name: str) -> float:
    for line in httpx.get(f"{base_url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def test_warm_up_gives_the_capacity_and_a_burst_it_carries_is_let_in_whole(tmp_path: Path) -> None:
    with run_server(sim_config()) as srv:
        engine = srv.state.engine
        meter = engine.stats.costs[engine.default_model.name]
        # Before any request: the warm-up's batch curve, at every batch bucket, and a
        # capacity read off it far above what a step of one would give.
        assert all(meter.curve_cost(size) is not None for size in (1, 2, 4, 8))
        assert meter.curve_cost(8) < meter.curve_cost(1)  # type: ignore[operator]
        capacity = metric(srv.base_url, "voxserve_tts_capacity_streams")
        assert capacity > 0.85 / meter.cost(1)  # type: ignore[operator]
        # Forty at once against a line of two: a step's worth start, the rest wait in line
        # (the device carries them all), and every one is served.
        results = asyncio.run(burst(srv.base_url, 40))
        assert [status for status, _, _ in results] == [200] * 40
        assert all(size > 24000 for _, size, _ in results)  # over half a second of audio each
        assert srv.state.admission.rejected == 0
        assert engine.admission_held()["starting"] > 0  # the line held some past its two
        # The same as a benchmark: two bursts of 12, every other request to each model
        # name, with what the steps held read from /metrics around them.
        out = tmp_path / "burst.json"
        argv = ["bench", "speech", "--base-url", srv.base_url, "--concurrency", "12", "--bursts", "2",
                "--model", "tts-1,gpt-4o-mini-tts", "--warmup", "0", "--no-progress", "-o", str(out)]
        assert main(argv) == 0
    level = json.loads(out.read_text())["levels"][0]
    summary = level["summary"]
    assert summary["requests"] == 24 and summary["completed"] == 24
    assert [t["completed"] for t in summary["targets"].values()] == [12, 12]
    steps = summary["steps"]
    assert steps["engine_units_per_step"]["vocoder"] >= 1
    assert steps["device_items_per_call"]["piper.vocoder"] >= 1
    assert steps["capacity_streams"] > 0


def test_a_true_overload_is_refused_with_the_wait_the_curve_gives() -> None:
    # A device a hundred times slower than the H200 carries a few dozen Piper streams.
    with run_server(sim_config("--tts-sim-speed", "0.01")) as srv:
        engine = srv.state.engine
        carried = engine.capacity_streams()
        assert carried is not None and 4 < carried < 64
        results = asyncio.run(burst(srv.base_url, 96))
        refused = [retry for status, _, retry in results if status == 429]
        served = [size for status, size, _ in results if status == 200]
        assert len(refused) + len(served) == 96
        assert refused and len(served) > 8  # more than the line's two past a step's worth
        assert all(retry is not None and int(retry) >= 1 for retry in refused)
        # The wait is the device's time for the work ahead (about 20 streams of ~4 s at
        # ~0.04 device-s a second here), not the line's length, which gives 1 + queued /
        # limit: 1.
        assert max(int(r) for r in refused if r is not None) >= 2


def test_on_the_cpu_the_line_is_what_it_was() -> None:
    config = server_config(build_parser().parse_args(["serve", "--device", "cpu", "--no-asr", "--tts-max-queue", "2"]))
    with run_server(config) as srv:
        admission: Any = srv.state.admission
        assert admission.carry is None and admission.drain is None
        assert not srv.state.engine.batched


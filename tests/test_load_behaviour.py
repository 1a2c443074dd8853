"""Engine mechanisms under load, through a real server: idle CPU, aborts on disconnect,
admission (queue and 429), per-stream credits, and /health latency while streams run."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import aiohttp
import httpx
import pytest

from tests.conftest import RunningServer, run_server, silent_speech_reader, tts_config, wait_for
from voxserve.config import ASRConfig
from voxserve.engine.scheduler import CREDITS

# It measures this process's CPU time, first packets against a stream alone and /health's
# latency: run alone.
pytestmark = pytest.mark.serial

LONG = " ".join(
    f"This is sentence number {i} of a long story that keeps the engine busy for a while."
    for i in range(40)
)


def _post(text: str, fmt: str = "pcm") -> dict[str, str]:
    return {"model": "tts-1", "voice": "alloy", "input": text, "response_format": fmt}


def test_idle_server_uses_no_cpu(server: RunningServer) -> None:
    # A server started just before (this one, or one of the module before, whose thread
    # outlives it) may still be making its fixed-length priors' sessions: start-up work.
    wait_for(lambda: not any(t.name == "fixed-prior" for t in threading.enumerate()), timeout=60)
    httpx.get(f"{server.base_url}/health")
    time.sleep(0.3)
    before = time.process_time()
    time.sleep(2.0)
    used = time.process_time() - before
    assert used < 0.1, f"idle process used {used:.3f} s of CPU in 2 s"


def test_the_process_is_idle_again_right_after_a_lone_stream(server: RunningServer) -> None:
    """A lone stream runs on two intra-op threads whose pool spins between the graph's
    nodes. Whatever the pool does after a call (it is told to park at once:
    tests/test_runner_options.py), the process must be idle again right after the
    response, not keep a core busy."""
    engine = server.state.engine
    before_units = engine.idle_core_units()["threads"]
    r = httpx.post(f"{server.base_url}/v1/audio/speech", json=_post("One voice alone on the machine."), timeout=30)
    assert r.status_code == 200
    assert engine.idle_core_units()["threads"] > before_units  # it did run on two threads
    before = time.process_time()
    time.sleep(0.5)
    used = time.process_time() - before
    assert used < 0.1, f"the process used {used:.3f} s of CPU in the 0.5 s after a lone stream"


def test_disconnect_drops_the_stream_within_100ms(server: RunningServer) -> None:
    engine = server.state.engine
    before = set(engine.stream_ids())
    with (
        httpx.Client(timeout=30) as c,
        c.stream("POST", f"{server.base_url}/v1/audio/speech", json=_post(LONG)) as r,
    ):
        assert r.status_code == 200
        chunks = r.iter_raw()  # keep a reference: a collected iterator closes the stream
        next(chunks)
        new = set(engine.stream_ids()) - before
        assert len(new) == 1
        stream_id = new.pop()
        assert engine.has_work(stream_id)
        closed_at = time.monotonic()
    # Leaving the block closes the connection mid-stream.
    wait_for(lambda: not engine.has_work(stream_id), timeout=2.0)
    assert time.monotonic() - closed_at < 0.1


@pytest.fixture(scope="module")
def one_stream() -> Iterator[RunningServer]:
    """One stream at a time and one place in the queue, for the admission tests; no ASR,
    which they do not use."""
    config = replace(tts_config(max_streams=1, max_queue=1, queue_timeout_s=20.0), asr=ASRConfig(enabled=False))
    with run_server(config) as srv:
        yield srv


def test_admission_queue_then_429(one_stream: RunningServer) -> None:
    """The first stream holds the one slot, the second waits in the one place of the
    queue, and the third is told to come back. The first client reads nothing past its
    headers until the third is answered, through a 4 KB receive buffer: a stream of a few
    seconds is decoded in well under a second here, and loopback buffers would take all
    of its audio, ending it, if the client merely stopped reading."""

    async def run(base: str) -> list[tuple[int, str | None, int]]:
        third_answered = asyncio.Event()

        async def holder() -> tuple[int, str | None, int]:
            sock = silent_speech_reader(one_stream, LONG[:600])
            sock.setblocking(False)
            reader, writer = await asyncio.open_connection(sock=sock)
            status_line = await asyncio.wait_for(reader.readline(), 10)
            await asyncio.wait_for(third_answered.wait(), 10)
            writer.close()  # gone: its stream is dropped and its slot passes on
            return int(status_line.split()[1]), None, 0

        async with aiohttp.ClientSession() as s:

            async def one(delay: float) -> tuple[int, str | None, int]:
                await asyncio.sleep(delay)
                async with s.post(f"{base}/v1/audio/speech", json=_post(LONG[:250])) as r:
                    if delay >= 0.6:
                        third_answered.set()
                    body = await r.read()
                    return r.status, r.headers.get("retry-after"), len(body)

            return list(await asyncio.gather(holder(), one(0.3), one(0.6)))

    results = asyncio.run(run(one_stream.base_url))
    statuses = [r[0] for r in results]
    assert statuses[:2] == [200, 200]  # the second waited in the queue, then streamed
    assert statuses[2] == 429
    assert results[2][1] is not None and int(results[2][1]) >= 1
    assert results[1][2] > 48000  # real audio after queueing


def test_client_leaving_the_queue_frees_its_place(one_stream: RunningServer) -> None:
    srv = one_stream
    with (
        httpx.Client(timeout=30) as c,
        c.stream("POST", f"{srv.base_url}/v1/audio/speech", json=_post(LONG)) as r,
    ):
        chunks = r.iter_raw()
        next(chunks)
        sock = socket.create_connection(("127.0.0.1", int(srv.base_url.rsplit(":", 1)[1])))
        body = httpx.Request("POST", "http://x/", json=_post("Queued request.")).content
        sock.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        wait_for(lambda: srv.state.admission.queued == 1, timeout=5)
        sock.close()
        wait_for(lambda: srv.state.admission.queued == 0, timeout=1)


def _first_packet_s(server: RunningServer, text: str) -> float:
    started = time.perf_counter()
    with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=_post(text), timeout=30) as r:
        assert next(b for b in r.iter_raw() if b)
        return time.perf_counter() - started


def test_slow_reader_holds_at_most_its_credits(server: RunningServer) -> None:
    engine = server.state.engine
    credits = CREDITS
    alone = min(_first_packet_s(server, "Still fast?") for _ in range(3))  # this machine's speed
    before = set(engine.stream_ids())
    sock = silent_speech_reader(server, LONG)
    try:
        wait_for(lambda: len(set(engine.stream_ids()) - before) == 1, timeout=5)
        (stream_id,) = set(engine.stream_ids()) - before
        # The client reads nothing: decoding stops once socket buffers and credits are full.
        last, stalled_since = -1, time.monotonic()
        while time.monotonic() - stalled_since < 1.0:
            produced = engine.stream_debug(stream_id)["produced"]
            if produced != last:
                last, stalled_since = produced, time.monotonic()
            time.sleep(0.05)
        info = engine.stream_debug(stream_id)
        assert info["untaken"] <= credits and info["buffered"] <= credits
        assert engine.has_work(stream_id)  # stalled well before the end of the text

        # Meanwhile another client is served promptly: the stalled stream takes no worker.
        ttfp = _first_packet_s(server, "Still fast?")
        assert ttfp < 5 * alone + 0.5, (ttfp, alone)
    finally:
        sock.close()


def test_a_burst_within_the_measured_capacity_is_let_in_at_once(server: RunningServer) -> None:
    """Piper's cost is measured by the time the server is up (its warm-up runs streams
    side by side), so eight streams sent at the same instant, well within capacity, are
    all admitted at once: the scheduler starts them in arrival order. Before, at most one
    per worker was let in while starting, and a burst of 16 waited up to ~1.5 s in
    admission for nothing."""
    engine = server.state.engine
    assert engine.costs()["en_US-joe-medium"] is not None
    before = engine.admission_held()["starting"]

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            async def one(i: int) -> int:
                r = await client.post("/v1/audio/speech", json=_post(f"Burst stream number {i} is here."))
                return r.status_code
            return await asyncio.gather(*(one(i) for i in range(8)))

    assert asyncio.run(burst()) == [200] * 8
    assert engine.admission_held()["starting"] == before


_STREAMS_CLIENT = """
import asyncio, json, sys
import aiohttp

async def main(base, body):
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def stream():
            async with s.post(base + "/v1/audio/speech", json=body) as r:
                async for _ in r.content.iter_any():
                    pass
                return r.status
        print(json.dumps(await asyncio.gather(*(stream() for _ in range(32)))))

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
"""


def test_health_stays_fast_while_32_streams_run(server: RunningServer) -> None:
    """The 32 streams come from another process, as real clients do: an aiohttp client
    reading 32 streams in this process would hold the GIL that the server's loop needs,
    and /health would time the test's own client."""
    text = "This sentence keeps one of thirty two streams busy, while health is probed."
    client = subprocess.Popen(
        [sys.executable, "-c", _STREAMS_CLIENT, server.base_url, json.dumps(_post(text))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )

    async def probe(base: str) -> list[float]:
        probes: list[float] = []
        async with aiohttp.ClientSession() as s:
            while client.poll() is None:
                t = time.perf_counter()
                async with s.get(f"{base}/health") as r:
                    await r.read()
                    assert r.status == 200
                probes.append(time.perf_counter() - t)
                await asyncio.sleep(0.02)
        return probes

    try:
        probes = asyncio.run(asyncio.wait_for(probe(server.base_url), 60))
        out, err = client.communicate(timeout=10)
    finally:
        client.kill()
    assert client.returncode == 0, err
    assert json.loads(out) == [200] * 32, out
    assert len(probes) >= 20
    p99 = statistics.quantiles(probes, n=100)[98]
    assert p99 < 0.1, f"/health p99 {p99 * 1e3:.1f} ms under 32 streams"

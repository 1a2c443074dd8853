"""`bench speech`: streaming `POST /v1/audio/speech` load, timed chunk by chunk.

Speaks HTTP only, so it measures any OpenAI-compatible server. Every request is sent with
`response_format=pcm` and `stream_format=audio`; the arrival time and size of every body
chunk are kept, and the metrics of `bench/metrics.py` are computed from them.

A server with another wire format plugs in as a `SpeechApi` adapter (see `piper_http.py`):
the adapter says where to post, what to send and how the audio arrives; the timing, the
records and the metrics stay here, shared.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from voxserve.bench.burst import scrape, step_figures
from voxserve.bench.health import LoopLag
from voxserve.bench.levels import BenchError, measure_levels
from voxserve.bench.load import LevelRun, run_level
from voxserve.bench.metrics import continuity_ok_rate, max_underrun, parse_server_timing, summarize
from voxserve.bench.spread import Share, run_spread_level

__all__ = [
    "SpeechApi",
    "SpeechRecord",
    "SpeechTarget",
    "bench_speech",
    "chunk_samples",
    "first_packet_summary",
    "first_packet_tail",
    "summarize_speech",
    "summarize_targets",
]

_ERROR_CHARS = 300


class SpeechApi(Protocol):
    """One server's speech API: where a request goes, what it says, how its audio arrives."""

    @property
    def base_url(self) -> str: ...

    @property
    def timeout_s(self) -> float: ...

    @property
    def url(self) -> str: ...

    @property
    def health_path(self) -> str | None:
        """The liveness endpoint to probe during the run; None when the server has none."""
        ...

    def body(self, text: str) -> bytes: ...

    async def receive(self, resp: aiohttp.ClientResponse, sent: float,
                      record: SpeechRecord) -> None:
        """Read a 200 response into `record`: its sample rate and its timed PCM chunks.

        `sent` is the perf_counter time just before the request went out. Raises ValueError
        for a response it cannot read as audio.
        """
        ...


@dataclass(frozen=True)
class SpeechTarget:
    """Where and how to ask for speech."""

    base_url: str
    model: str = "tts-1"
    voice: str = "alloy"
    sample_rate: int | None = None
    """Rate of the PCM when the response carries no `x-sample-rate` header."""
    request_sample_rate: int | None = None
    """Sent as `sample_rate` in the request body when set (a voxserve extension)."""
    timeout_s: float = 600.0

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/v1/audio/speech"

    @property
    def health_path(self) -> str | None:
        return "/health"

    def body(self, text: str) -> bytes:
        payload: dict[str, Any] = {
            "model": self.model,
            "voice": self.voice,
            "input": text,
            "response_format": "pcm",
            "stream_format": "audio",
        }
        if self.request_sample_rate is not None:
            payload["sample_rate"] = self.request_sample_rate
        return json.dumps(payload).encode()

    async def receive(self, resp: aiohttp.ClientResponse, sent: float,
                      record: SpeechRecord) -> None:
        """Raw s16 PCM, streamed: every body chunk is timed as it arrives."""
        header = resp.headers.get("x-sample-rate")
        record.sample_rate = int(header) if header else self.sample_rate
        if record.sample_rate is None:
            record.error = "the response has no x-sample-rate header; pass --sample-rate"
        async for data in resp.content.iter_any():
            record.chunk_times_s.append(time.perf_counter() - sent)
            record.chunk_bytes.append(len(data))


@dataclass
class SpeechRecord:
    """One request. Times are seconds; `*_at_s` are from the start of the level."""

    index: int
    chars: int
    scheduled_at_s: float
    sent_at_s: float
    status: int = 0
    """HTTP status; 0 when no response came (connection error, timeout)."""
    error: str | None = None
    retry_after: str | None = None
    sample_rate: int | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    """Arrival of each non-empty body chunk, from just before the request was sent."""
    chunk_bytes: list[int] = field(default_factory=list)
    ttfp_s: float | None = None
    e2el_s: float | None = None
    audio_s: float | None = None
    rtf: float | None = None
    max_underrun_s: float | None = None
    server_timing_s: dict[str, float] = field(default_factory=dict)
    """The server's own time to first audio by part, from its `Server-Timing` header
    (voxserve sends one; other servers none)."""

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


def chunk_samples(chunk_bytes: list[int]) -> list[int]:
    """Whole s16 samples per chunk; a sample split across two chunks counts in the second."""
    out, total = [], 0
    for size in chunk_bytes:
        out.append((total + size) // 2 - total // 2)
        total += size
    return out


def finish_record(record: SpeechRecord) -> SpeechRecord:
    """Fill TTFP, audio length, RTF and max underrun from the chunk trace."""
    if not record.ok:
        return record
    if not record.chunk_times_s or record.sample_rate is None:
        record.error = record.error or "the response carried no audio"
        return record
    rate = record.sample_rate
    samples = chunk_samples(record.chunk_bytes)
    record.ttfp_s = record.chunk_times_s[0]
    record.audio_s = sum(samples) / rate
    assert record.e2el_s is not None
    record.rtf = record.e2el_s / record.audio_s if record.audio_s > 0 else None
    record.max_underrun_s = max_underrun(record.chunk_times_s, samples, rate)
    return record


async def speak(session: aiohttp.ClientSession, target: SpeechApi, text: str,
                record: SpeechRecord) -> SpeechRecord:
    body = target.body(text)
    headers = {"content-type": "application/json"}
    sent = time.perf_counter()
    try:
        async with session.post(target.url, data=body, headers=headers) as resp:
            record.status = resp.status
            if resp.status != 200:
                record.retry_after = resp.headers.get("retry-after")
                record.error = (await resp.text(errors="replace"))[:_ERROR_CHARS]
                record.e2el_s = time.perf_counter() - sent
                return record
            timing = resp.headers.get("server-timing")
            if timing:
                record.server_timing_s = parse_server_timing(timing)
            await target.receive(resp, sent, record)
        record.e2el_s = time.perf_counter() - sent
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        record.e2el_s = time.perf_counter() - sent
        record.error = f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
    return finish_record(record)


def summarize_speech(records: list[SpeechRecord], wall_s: float,
                     threshold_s: float) -> dict[str, Any]:
    """The level's figures: latency stats, throughput, continuity, failures by status."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    by_status: dict[str, int] = {}
    for r in failed:
        by_status[str(r.status)] = by_status.get(str(r.status), 0) + 1
    underruns = [r.max_underrun_s for r in ok if r.max_underrun_s is not None]
    audio = sum(r.audio_s or 0.0 for r in ok)
    return {
        "requests": len(records),
        "completed": len(ok),
        "failed": len(failed),
        "failures_by_status": by_status,
        "wall_s": wall_s,
        "request_throughput": len(ok) / wall_s if wall_s > 0 else 0.0,
        "audio_s": audio,
        "audio_throughput": audio / wall_s if wall_s > 0 else 0.0,
        "ttfp_s": summarize([r.ttfp_s for r in ok if r.ttfp_s is not None]),
        "e2el_s": summarize([r.e2el_s for r in ok if r.e2el_s is not None]),
        "rtf": summarize([r.rtf for r in ok if r.rtf is not None]),
        "underrun_s": summarize(underruns),
        "continuity_ok_rate": continuity_ok_rate(underruns, threshold_s),
        "sample_rates": sorted({r.sample_rate for r in ok if r.sample_rate}),
        "first_packet_s": first_packet_summary(ok),
        "first_packet_tail_s": first_packet_tail(ok),
    }


def summarize_targets(records: list[SpeechRecord], names: Sequence[str], wall_s: float,
                      threshold_s: float) -> dict[str, Any]:
    """Each target's share of a level (request i went to target i mod n), summarized as
    the level is, with the `Retry-After` values its refusals carried."""
    out: dict[str, Any] = {}
    for i, name in enumerate(names):
        mine = [r for r in records if r.index % len(names) == i]
        summary = summarize_speech(mine, wall_s, threshold_s)
        summary["retry_after_s"] = sorted({float(r.retry_after) for r in mine if r.retry_after})
        out[name] = summary
    return out


def first_packet_summary(records: list[SpeechRecord]) -> dict[str, dict[str, float]]:
    """The server's parts of time to first audio, as each request's `Server-Timing`
    reported them, summarized per part; `http` is the rest of the client's TTFP (the
    request and the first bytes on the wire, the client's own loop). Empty when the
    server sent no timings."""
    timed = [r for r in records if r.server_timing_s and r.ttfp_s is not None]
    names: list[str] = []
    for r in timed:
        names += [n for n in r.server_timing_s if n not in names]
    out = {name: summarize([r.server_timing_s[name] for r in timed if name in r.server_timing_s])
           for name in names}
    if timed and "total" in names:
        out["http"] = summarize([
            max(0.0, r.ttfp_s - r.server_timing_s["total"])  # type: ignore[operator]
            for r in timed if "total" in r.server_timing_s
        ])
    return out


def first_packet_tail(records: list[SpeechRecord], share: float = 0.05) -> dict[str, float]:
    """Where the slowest first packets spent their time: the mean of each `Server-Timing`
    part (and `http`, the client's rest) over the slowest `share` of the timed requests
    by TTFP (at least one), with `ttfp` (their mean TTFP, in seconds) and `n`. Unlike
    each part's own p99, these add up: they say whether the tail is queueing (admission,
    queue) or work. Empty when the server sent no timings."""
    timed = sorted((r for r in records if r.server_timing_s and r.ttfp_s is not None),
                   key=lambda r: r.ttfp_s or 0.0)
    if not timed:
        return {}
    tail = timed[-max(1, round(share * len(timed))):]
    names: list[str] = []
    for r in tail:
        names += [n for n in r.server_timing_s if n not in names]
    out = {name: sum(r.server_timing_s.get(name, 0.0) for r in tail) / len(tail) for name in names}
    if "total" in out:
        out["http"] = sum(max(0.0, (r.ttfp_s or 0.0) - r.server_timing_s.get("total", 0.0))
                          for r in tail) / len(tail)
    out["ttfp"] = sum(r.ttfp_s or 0.0 for r in tail) / len(tail)
    out["n"] = float(len(tail))
    return out


async def bench_speech(targets: Sequence[SpeechApi], prompts: list[str], levels: list[int],
                       request_rate: float | None = None, warmup: int = 2,
                       threshold_s: float = 0.1, probe_health: bool = True,
                       health_interval_s: float = 0.05, progress: bool = True,
                       seed: int = 0, processes: int = 1, names: Sequence[str] = (),
                       bursts: int = 0) -> dict[str, Any]:
    """Warm up, then run every level: {"levels": [...], "health": {...}}. Request i of a
    level goes to `targets[i % len(targets)]`; with several, each level also has a summary
    per target under `names`. With `processes` > 1 each level's clients run in that many
    child processes (`bench/spread.py`), so that the client is not the bound. With
    `bursts`, a level of C sends the first C prompts all at once, that many times, each
    burst after the one before has ended, and adds what the server's steps held over
    them (`bench/burst.py: step_figures`)."""
    target = targets[0]
    if probe_health and any(t.health_path is None for t in targets):
        raise BenchError(f"{target.url} has no health endpoint to probe; turn probing off")
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)  # 0: no pool limit
    timeout = aiohttp.ClientTimeout(total=target.timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for i in range(warmup):
            text = prompts[i % len(prompts)]
            aim = targets[i % len(targets)]
            rec = await speak(session, aim, text, SpeechRecord(-1 - i, len(text), 0.0, 0.0))
            if not rec.ok:
                raise BenchError(f"warm-up request to {aim.url} failed "
                                 f"(status {rec.status}): {rec.error}")

        def summary(run: LevelRun[SpeechRecord]) -> dict[str, Any]:
            out = summarize_speech(run.results, run.wall_s, threshold_s)
            if len(targets) > 1:
                out["targets"] = summarize_targets(run.results, names, run.wall_s, threshold_s)
            return out

        async def run(concurrency: int, texts: list[str]) -> LevelRun[SpeechRecord]:
            if processes > 1:
                spread, lag = await run_spread_level(_run_share, tuple(targets), texts, concurrency,
                                                     request_rate, seed, processes)
                spread.client_lag_s = lag
                return spread
            start = time.perf_counter()

            async def request(index: int, scheduled: float) -> SpeechRecord:
                text = texts[index]
                record = SpeechRecord(index, len(text), scheduled - start,
                                      time.perf_counter() - start)
                return await speak(session, targets[index % len(targets)], text, record)

            return await run_level(request, len(texts), concurrency, request_rate, seed,
                                   progress, desc=f"speech c={concurrency}")

        async def level(concurrency: int) -> tuple[LevelRun[SpeechRecord], dict[str, Any]]:
            if not bursts:
                done = await run(concurrency, prompts)
                return done, summary(done)
            before = await scrape(session, target.base_url)
            runs = [await run(concurrency, prompts[:concurrency]) for _ in range(bursts)]
            lags = [lag for r in runs for lag in r.client_lag_s or []]
            done = LevelRun([rec for r in runs for rec in r.results], runs[0].started_at,
                            sum(r.wall_s for r in runs), lags if processes > 1 else None)
            out = summary(done)
            out["steps"] = step_figures(before, await scrape(session, target.base_url))
            return done, out

        return await measure_levels(levels, level, target.base_url, probe_health,
                                    health_interval_s, target.health_path or "/health")


async def _run_share(job: Share, start_at: float) -> tuple[list[SpeechRecord], float, list[float]]:
    """One client process's share of a level (`bench/spread.py`), from the common start:
    its records, when it ended, and its own loop's lag."""
    lag = LoopLag()
    lag.start()
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=job.target[0].timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        delay = start_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)

        async def request(local: int, scheduled: float) -> SpeechRecord:
            text = job.texts[local]
            record = SpeechRecord(job.indices[local], len(text), scheduled - start_at, time.perf_counter() - start_at)
            targets = job.target
            return await speak(session, targets[record.index % len(targets)], text, record)

        run = await run_level(request, len(job.texts), job.concurrency, job.request_rate, job.seed, progress=False)
    ended = time.perf_counter()
    samples = lag.between(start_at, ended)
    await lag.stop()
    return run.results, ended, samples

"""`bench soak` and `bench overload`: TTS streams and transcriptions at once, for a fixed time,
while the server's memory, threads and open files are watched.

Both run closed loops of clients until the time is up: C_tts clients streaming speech and
C_asr clients uploading short clips (spoken by the server's own TTS at the start). A client
that gets 429 waits its `Retry-After` (at most 5 s), as a well-behaved client does, then
tries again. `/health` is probed all along from its own thread, and `/metrics` is read every
few seconds for the process figures (`process_resident_memory_bytes`, `process_open_fds`,
`voxserve_process_threads`) and the queue.

- `soak` is run at a load the machine sustains. It passes when no request failed (429
  included), the median RSS grew less than 5% from the first minute after warm-up to the
  last minute, and threads and open files did not grow between the same two windows.
- `overload` is run far past capacity. It passes when every refused request got 429 with
  `Retry-After`, nothing else failed, and RSS stayed under `--rss-limit-mb`; it also
  reports the continuity of the streams that were admitted and `/health` latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from voxserve.bench.asrset import make_asr_set
from voxserve.bench.health import HealthProber, summarize_probes
from voxserve.bench.hostile import HostileRecord, judge_hostile, run_hostile, summarize_hostile
from voxserve.bench.levels import BenchError
from voxserve.bench.speech import SpeechRecord, SpeechTarget, speak, summarize_speech
from voxserve.bench.transcribe import (
    Clip,
    TranscribeRecord,
    TranscribeTarget,
    load_manifest,
    summarize_transcribe,
    transcribe,
)

__all__ = ["MixedSettings", "ResourceSample", "judge_overload", "judge_soak", "parse_metrics", "run_mixed"]

MAX_BACKOFF_S = 5.0
ASR_PROMPTS = (
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch.",
    "Please hold the line.",
    ("Thank you for calling. All of our agents are busy at the moment. Please stay on the "
    "line and your call will be answered in the order it was received."),
    "Turn left at the next corner, then take the second road on the right.",
)
_WATCHED = {
    "process_resident_memory_bytes": "rss_bytes",
    "process_open_fds": "open_fds",
    "voxserve_process_threads": "threads",
    "voxserve_tts_active_streams": "tts_active",
    "voxserve_tts_queued_streams": "tts_queued",
    "voxserve_asr_active_requests": "asr_active",
    "voxserve_asr_buffered_audio_seconds": "asr_buffered_s",
    "voxserve_ws_sessions": "ws_sessions",
}


@dataclass(frozen=True)
class MixedSettings:
    base_url: str
    duration_s: float
    tts_concurrency: int
    asr_concurrency: int
    prompts: list[str]
    warmup_s: float = 60.0
    """Resource samples before this are warm-up: caches fill, pools start their threads."""
    window_s: float = 60.0
    """Length of the first and last windows that `soak` compares."""
    sample_interval_s: float = 5.0
    underrun_threshold_s: float = 0.1
    timeout_s: float = 600.0
    seed: int = 0
    progress: bool = True
    hostile: int = 0
    """Hostile clients of each kind (`voxserve.bench.hostile`) beside the load; 0 for none."""
    hostile_hold_s: float = 60.0
    """How long a hostile client waits for the server to end its attempt before it counts
    the defence as missing."""
    settle_s: float = 30.0
    """With hostile clients: how long the server may take, once the load has stopped, to
    end every session and request they left behind."""


@dataclass(frozen=True)
class ResourceSample:
    at_s: float
    """Seconds from the start of the load."""
    values: dict[str, float] = field(default_factory=dict)


def parse_metrics(text: str) -> dict[str, float]:
    """The watched gauges from a Prometheus text page (unlabelled samples only)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        key = _WATCHED.get(name)
        if key is not None:
            with contextlib.suppress(ValueError):
                out[key] = float(rest.split()[0])
    return out


async def _sample_resources(session: aiohttp.ClientSession, url: str, start: float,
                            interval_s: float, samples: list[ResourceSample],
                            stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(url) as resp:
                if resp.status == 200:
                    values = parse_metrics(await resp.text())
                    samples.append(ResourceSample(time.perf_counter() - start, values))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


async def _settle(session: aiohttp.ClientSession, url: str, timeout_s: float) -> dict[str, Any]:
    """Once the load has stopped: poll `/metrics` until no session, stream or request is
    left open, or `timeout_s` passes. Returns the last figures and how long it took."""
    started = time.perf_counter()
    values: dict[str, float] = {}
    while True:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(url) as resp:
                if resp.status == 200:
                    values = parse_metrics(await resp.text())
        busy = sum(values.get(k, 1.0) for k in ("ws_sessions", "tts_active", "tts_queued", "asr_active"))
        waited = time.perf_counter() - started
        if busy == 0 or waited > timeout_s:
            return {"after_s": waited, "idle": busy == 0, "values": values}
        await asyncio.sleep(0.5)


def _backoff(retry_after: str | None, rng: random.Random) -> float:
    try:
        wait = float(retry_after) if retry_after else 1.0
    except ValueError:
        wait = 1.0
    return min(MAX_BACKOFF_S, max(0.1, wait)) * rng.uniform(0.8, 1.2)


async def run_mixed(s: MixedSettings) -> dict[str, Any]:
    """Run the mixed load; returns summaries, every record, probes and resource samples."""
    if s.tts_concurrency < 0 or s.asr_concurrency < 0 or s.tts_concurrency + s.asr_concurrency == 0:
        raise ValueError("give at least one TTS or ASR client")
    if not s.prompts:
        raise ValueError("no prompts")
    speech_target = SpeechTarget(s.base_url, timeout_s=s.timeout_s)
    asr_target = TranscribeTarget(s.base_url, timeout_s=s.timeout_s)
    clips: list[Clip] = []
    data: dict[Path, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="voxserve-mixed-") as tmp:
        if s.asr_concurrency:
            await make_asr_set(speech_target, list(ASR_PROMPTS), Path(tmp))
            clips = load_manifest(Path(tmp) / "manifest.jsonl")
            data = {c.path: c.path.read_bytes() for c in clips}

        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
        timeout = aiohttp.ClientTimeout(total=s.timeout_s)
        tts_records: list[SpeechRecord] = []
        asr_records: list[TranscribeRecord] = []
        hostile_records: list[HostileRecord] = []
        samples: list[ResourceSample] = []
        prober = HealthProber(s.base_url)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            start = time.perf_counter()
            end = start + s.duration_s
            stop = asyncio.Event()
            counter = iter(range(1 << 62))

            async def tts_client(n: int) -> None:
                rng = random.Random(s.seed * 7919 + n)
                await asyncio.sleep(rng.uniform(0, min(2.0, s.duration_s / 10)))  # spread the start
                while time.perf_counter() < end:
                    text = s.prompts[rng.randrange(len(s.prompts))]
                    now = time.perf_counter() - start
                    record = SpeechRecord(next(counter), len(text), now, now)
                    await speak(session, speech_target, text, record)
                    tts_records.append(record)
                    if record.status == 429:
                        await asyncio.sleep(_backoff(record.retry_after, rng))

            async def asr_client(n: int) -> None:
                rng = random.Random(s.seed * 104729 + n)
                await asyncio.sleep(rng.uniform(0, min(2.0, s.duration_s / 10)))
                while time.perf_counter() < end:
                    clip = clips[rng.randrange(len(clips))]
                    now = time.perf_counter() - start
                    record = TranscribeRecord(next(counter), clip.path.name, clip.audio_s, now, now,
                                              clip.reference)
                    await transcribe(session, asr_target, clip, data[clip.path], record)
                    asr_records.append(record)
                    if record.status == 429:
                        await asyncio.sleep(_backoff(record.retry_after, rng))

            async def progress() -> None:
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 10)
                    last = samples[-1].values if samples else {}
                    print(f"  {time.perf_counter() - start:6.0f} s: {len(tts_records)} speech, "
                          f"{len(asr_records)} transcriptions done; rss "
                          f"{last.get('rss_bytes', 0) / 2**20:.0f} MB, threads "
                          f"{last.get('threads', 0):.0f}, fds {last.get('open_fds', 0):.0f}",
                          flush=True)

            metrics_url = s.base_url.rstrip("/") + "/metrics"
            async with session.get(metrics_url) as resp:
                if resp.status != 200:
                    raise BenchError(f"{metrics_url} answered {resp.status}; the soak needs it")
            prober.start()
            sampler = asyncio.create_task(
                _sample_resources(session, metrics_url, start, s.sample_interval_s, samples, stop))
            reporter = asyncio.create_task(progress()) if s.progress else None
            # A hostile attempt begun before the end may run up to `hostile_hold_s` past
            # it; the load's figures (wall time, throughput, probes) stop with the load.
            hostile = asyncio.ensure_future(run_hostile(
                s.base_url, s.hostile, end, start, hostile_records, s.hostile_hold_s)) if s.hostile else None
            try:
                await asyncio.gather(*(tts_client(i) for i in range(s.tts_concurrency)),
                                     *(asr_client(i) for i in range(s.asr_concurrency)))
            except BaseException:
                if hostile is not None:
                    hostile.cancel()
                raise
            finally:
                wall = time.perf_counter() - start
                stop.set()
                await sampler
                if reporter is not None:
                    await reporter
                probes = prober.stop()
                if hostile is not None:
                    with contextlib.suppress(asyncio.CancelledError):
                        await hostile
            settled = await _settle(session, metrics_url, s.settle_s) if s.hostile else None
    speech = summarize_speech(tts_records, wall, s.underrun_threshold_s)
    asr = summarize_transcribe(asr_records, wall)
    return {
        "wall_s": wall,
        "speech": speech,
        "transcribe": asr,
        "retry_after_missing": sum(1 for r in tts_records if r.status == 429 and not r.retry_after)
        + sum(1 for r in asr_records if r.status == 429 and not r.retry_after),
        "health": summarize_probes(probes),
        "hostile": summarize_hostile(hostile_records) if s.hostile else None,
        "resources": _resource_summary(samples, s),
        "settled": settled,
        "samples": [asdict(x) for x in samples],
        "speech_records": [asdict(r) for r in tts_records],
        "transcribe_records": [asdict(r) for r in asr_records],
    }


def _window(samples: list[ResourceSample], key: str, lo: float, hi: float) -> list[float]:
    return [x.values[key] for x in samples if lo <= x.at_s < hi and key in x.values]


def _resource_summary(samples: list[ResourceSample], s: MixedSettings) -> dict[str, Any]:
    """Per figure: the max over the whole run; the median and max of the first window
    after warm-up and of the last window; and the growth of the median between the two.

    RSS swings by tens of MB from one sample to the next as requests start and end, so
    growth compares medians: a leak moves the median, a burst only moves the peak."""
    last_at = samples[-1].at_s if samples else 0.0
    first = (s.warmup_s, s.warmup_s + s.window_s)
    last = (max(first[1], last_at - s.window_s), last_at + 1)
    out: dict[str, Any] = {"warmup_s": s.warmup_s, "window_s": s.window_s, "samples": len(samples)}
    for key in ("rss_bytes", "threads", "open_fds", "ws_sessions"):
        all_values = [x.values[key] for x in samples if key in x.values]
        a, b = _window(samples, key, *first), _window(samples, key, *last)
        base = statistics.median(a) if a else None
        final = statistics.median(b) if b else None
        out[key] = {
            "max": max(all_values) if all_values else None,
            "first_window_median": base,
            "last_window_median": final,
            "first_window_max": max(a) if a else None,
            "last_window_max": max(b) if b else None,
            "growth": (final / base - 1) if base and final is not None else None,
        }
    return out


def _failures(summary: dict[str, Any]) -> dict[str, int]:
    return dict(summary["failures_by_status"])


def judge_soak(result: dict[str, Any], max_rss_growth: float = 0.05,
               min_continuity: float = 0.98) -> list[str]:
    """Why the soak failed; an empty list is a pass."""
    problems = []
    continuity = result["speech"].get("continuity_ok_rate")
    if result["speech"]["completed"] and continuity is not None and continuity < min_continuity:
        problems.append(f"speech: {continuity:.1%} of streams played without a gap "
                        f"(at least {min_continuity:.0%} expected)")
    if result.get("hostile"):
        problems += judge_hostile(result["hostile"])
    for kind in ("speech", "transcribe"):
        failed = _failures(result[kind])
        if failed:
            problems.append(f"{kind}: failed requests by status {failed}")
    res = result["resources"]
    rss = res["rss_bytes"]
    if rss["growth"] is None:
        problems.append("too few resource samples after warm-up to judge growth; run longer")
    elif rss["growth"] >= max_rss_growth:
        problems.append(f"RSS (window median) grew {rss['growth']:.1%} after warm-up "
                        f"(limit {max_rss_growth:.0%})")
    settled = result.get("settled")
    for key in ("threads", "open_fds"):
        base, final = res[key]["first_window_max"], res[key]["last_window_max"]
        if settled is not None:
            # Hostile clients come and go with their sockets: judge what is left once
            # the load has stopped and the server has ended what they left open.
            final = settled["values"].get(key)
        if base is not None and final is not None and final > base:
            problems.append(f"{key} grew from {base:.0f} to {final:.0f}")
    if settled is not None and not settled["idle"]:
        left = {k: v for k, v in settled["values"].items()
                if k in ("ws_sessions", "tts_active", "tts_queued", "asr_active") and v}
        problems.append(f"{settled['after_s']:.0f} s after the load stopped the server still held {left}")
    if result["health"]["failures"]:
        problems.append(f"{result['health']['failures']:.0f} /health probes failed")
    return problems


def judge_overload(result: dict[str, Any], rss_limit_bytes: float) -> list[str]:
    """Why the overload run failed; an empty list is a pass."""
    problems = []
    for kind in ("speech", "transcribe"):
        other = {k: v for k, v in _failures(result[kind]).items() if k != "429"}
        if other:
            problems.append(f"{kind}: failures other than 429: {other}")
    if result["retry_after_missing"]:
        problems.append(f"{result['retry_after_missing']} responses with 429 lacked Retry-After")
    rss = result["resources"]["rss_bytes"]["max"]
    if rss is None:
        problems.append("no RSS samples")
    elif rss > rss_limit_bytes:
        problems.append(f"RSS reached {rss / 2**20:.0f} MB, over the {rss_limit_bytes / 2**20:.0f} MB bound")
    if result["health"]["failures"]:
        problems.append(f"{result['health']['failures']:.0f} /health probes failed")
    return problems


def format_mixed(result: dict[str, Any]) -> str:
    sp, asr, health, res = result["speech"], result["transcribe"], result["health"], result["resources"]
    ttfp = sp["ttfp_s"]
    lines = [
        f"wall {result['wall_s']:.0f} s",
        (f"speech: {sp['requests']} requests, {sp['completed']} ok, failed {sp['failures_by_status']}; "
        f"TTFP p50 {ttfp.get('p50', float('nan')) * 1e3:.0f} ms p99 {ttfp.get('p99', float('nan')) * 1e3:.0f} ms; "
        f"{sp['audio_throughput']:.1f} audio-s/s; continuity ok {sp.get('continuity_ok_rate', 0):.0%}"),
        (f"transcribe: {asr['requests']} requests, {asr['completed']} ok, failed {asr['failures_by_status']}; "
        f"RTFx {asr['rtfx']:.1f}; WER {asr['wer'] if asr['wer'] is None else format(asr['wer'], '.1%')}"),
        (f"/health: p50 {health.get('p50', 0) * 1e3:.1f} ms p99 {health.get('p99', 0) * 1e3:.1f} ms "
        f"max {health.get('max', 0) * 1e3:.1f} ms, {health['failures']:.0f} failed"),
    ]
    if result.get("settled"):
        st = result["settled"]
        lines.append(f"after the load: {'idle' if st['idle'] else 'NOT idle'} after {st['after_s']:.1f} s; "
                     f"open fds {st['values'].get('open_fds', float('nan')):.0f}, threads "
                     f"{st['values'].get('threads', float('nan')):.0f}")
    for kind, h in (result.get("hostile") or {}).items():
        secs = h["seconds"]
        lines.append(f"hostile {kind}: {h['attempts']} attempts, {h['ended_by_server']} ended by the "
                     f"server (p50 {secs.get('p50', float('nan')):.1f} s, max "
                     f"{secs.get('max', float('nan')):.1f} s); statuses {h['statuses']}")
    for key, unit, scale in (("rss_bytes", "MB", 2**-20), ("threads", "", 1), ("open_fds", "", 1),
                             ("ws_sessions", "", 1)):
        r = res[key]
        if r["max"] is None:
            continue
        growth = "n/a" if r["growth"] is None else f"{r['growth']:+.1%}"
        lines.append(
            f"{key}: max {r['max'] * scale:.0f}{unit}; median (max) in the first window "
            f"{_num(r['first_window_median'], scale)} ({_num(r['first_window_max'], scale)}){unit}, "
            f"in the last window {_num(r['last_window_median'], scale)} "
            f"({_num(r['last_window_max'], scale)}){unit}; growth {growth}"
        )
    return "\n".join(lines)


def _num(value: float | None, scale: float) -> str:
    return "n/a" if value is None else f"{value * scale:.0f}"

"""Prometheus metrics of a server or replica: its registry, the request-level histograms
and counters every channel records, and collectors that read the engines at scrape time.

Each app gets its own registry, so several servers can live in one test process. The
engines never import prometheus_client; nothing here speaks HTTP (the request counter
middleware is `voxserve.api.metrics`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from voxserve.serving.engine_metrics import ASRCollector, EngineCollector, Rows

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10)
_PART_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 5)
_RTF_BUCKETS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5)
_LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
_RTFX_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 50, 75, 100, 200)
_ASR_LATENCY_BUCKETS = (0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 120)
_REALTIME_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0)


class _AgeCollector(Collector):
    def __init__(self, read: Callable[[], Sequence[tuple[str, str, float]]]):
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "voxserve_replica_stats_age_seconds",
            "How old each replica's engine figures on this front end are",
            labels=["deployment", "replica"],
        )
        for deployment, replica, age in self._read():
            family.add_metric([deployment, replica], age)
        yield family


class _ThreadsCollector(Collector):
    """OS threads of this process (native ones included), beside the standard process_*
    metrics (RSS, open files, CPU); a soak test watches all three for leaks."""

    def collect(self) -> Iterator[Metric]:
        threads = _os_threads()
        if threads is not None:
            yield GaugeMetricFamily("voxserve_process_threads", "OS threads in this process", threads)


def _os_threads() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:  # pragma: no cover - not Linux
        return None
    return None


class _SimDeviceCollector(Collector):
    """The simulated GPU's use since start: device seconds, and calls and the items they
    held by stage (items / calls is the mean batch of a step)."""

    def __init__(self, read: Callable[[], tuple[float, dict[str, tuple[int, int]]]]):
        self._read = read

    def collect(self) -> Iterator[Metric]:
        busy, by_stage = self._read()
        yield CounterMetricFamily("voxserve_sim_device_busy_seconds", "Device seconds the simulated H200 ran", busy)
        calls = CounterMetricFamily("voxserve_sim_device_calls", "Calls the simulated H200 ran, by stage", labels=["stage"])
        items = CounterMetricFamily("voxserve_sim_device_items", "Items those calls held, by stage", labels=["stage"])
        for stage, (n, held) in sorted(by_stage.items()):
            calls.add_metric([stage], n)
            items.add_metric([stage], held)
        yield calls
        yield items


class Metrics:
    def __init__(self, read_engine: Callable[[], dict[str, Any]] | None):
        """`read_engine` snapshots the TTS engine at scrape time; None where this process runs
        no TTS engine (a Ray front end or ASR replica, `voxserve.ray`)."""
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        ProcessCollector(registry=r)
        r.register(_ThreadsCollector())
        self.requests = Counter(
            "voxserve_http_requests", "HTTP requests by route and status", ["route", "status"], registry=r
        )
        self._speech(r)
        self.loop_lag = Histogram(
            "voxserve_event_loop_lag_seconds", "Event loop scheduling delay", buckets=_LAG_BUCKETS, registry=r
        )
        if read_engine is not None:
            r.register(EngineCollector(lambda: [((), read_engine())]))
        self._transcription(r)
        self._realtime(r)

    def _speech(self, r: CollectorRegistry) -> None:
        """What the speech channels record per stream."""
        self.ttfp = Histogram(
            "voxserve_tts_ttfp_seconds", "Time from request to first audio", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.first_packet = Histogram(
            "voxserve_tts_first_packet_seconds",
            "The server's time to first audio by part (parse, text, admission, queue, acoustic, "
            "wait, decode, deliver, encode) and in all (total)",
            ["part"], buckets=_PART_BUCKETS, registry=r,
        )
        self.rtf = Histogram(
            "voxserve_tts_rtf", "Stream wall time / audio duration", buckets=_RTF_BUCKETS, registry=r
        )
        self.audio_seconds = Counter("voxserve_tts_audio_seconds", "Audio seconds streamed", registry=r)
        self.ws_sessions = Gauge("voxserve_ws_sessions", "Open WebSocket speech sessions", registry=r)
        self.streams_started = Counter("voxserve_tts_streams_started", "Streams admitted", registry=r)
        self.streams_aborted = Counter(
            "voxserve_tts_streams_aborted", "Streams ended early by the client", registry=r
        )
        self.stream_errors = Counter(
            "voxserve_tts_stream_errors", "Streams that failed after audio started", registry=r
        )

    def _transcription(self, r: CollectorRegistry) -> None:
        """What the transcription routes record per request."""
        self.asr_requests = Counter(
            "voxserve_asr_requests", "Transcriptions and translations answered", ["task", "format"], registry=r
        )
        self.asr_audio_seconds = Counter(
            "voxserve_asr_audio_seconds", "Input audio seconds transcribed", registry=r
        )
        self.asr_diarized_seconds = Counter(
            "voxserve_asr_diarized_audio_seconds", "Input audio seconds transcribed with speaker labels", registry=r
        )
        self.asr_rtfx = Histogram(
            "voxserve_asr_rtfx", "Audio seconds / request wall time", buckets=_RTFX_BUCKETS, registry=r
        )
        self.asr_latency = Histogram(
            "voxserve_asr_latency_seconds", "Time from request to full transcript",
            buckets=_ASR_LATENCY_BUCKETS, registry=r,
        )

    def _realtime(self, r: CollectorRegistry) -> None:
        """What live transcription sessions record."""
        self.realtime_sessions = Gauge(
            "voxserve_realtime_sessions", "Open live transcription sessions (/v1/realtime)", registry=r
        )
        self.realtime_capacity = Gauge(
            "voxserve_realtime_capacity_sessions",
            "Live transcription sessions admitted now: the ASR workers' measured capacity, "
            "within --realtime-max-sessions",
            registry=r,
        )
        self.realtime_turns = Counter(
            "voxserve_realtime_turns", "Committed live turns by outcome", ["outcome"], registry=r
        )
        self.realtime_final_latency = Histogram(
            "voxserve_realtime_final_seconds",
            "Live turns: time from the end of speech (or the commit) to the completed transcript",
            buckets=_REALTIME_BUCKETS, registry=r,
        )
        self.realtime_deltas = Counter(
            "voxserve_realtime_deltas", "Partial transcripts sent to live sessions", registry=r
        )

    def attach_devices(
        self, devices: dict[str, str], sim_use: Callable[[], tuple[float, dict[str, tuple[int, int]]]] | None
    ) -> None:
        """Export where each engine runs (`voxserve_device_info`), and on the sim device
        its simulated GPU's busy seconds and calls."""
        info = Gauge("voxserve_device_info", "1 for the device each engine runs on (sim: simulated, no speech)",
                     ["engine", "device"], registry=self.registry)
        for engine, device in devices.items():
            info.labels(engine, device).set(1)
        if sim_use is not None:
            self.registry.register(_SimDeviceCollector(sim_use))

    def attach_asr(self, read_asr: Callable[[], dict[str, Any]]) -> None:
        """Export the ASR engine's counters (only when the server runs one)."""
        self.registry.register(ASRCollector(lambda: [((), read_asr())]))

    def attach_replicas(self, tts: Rows, asr: Rows | None, ages: Callable[[], Sequence[tuple[str, str, float]]]) -> None:
        """Export the engines of a Ray deployment's replicas, labelled `replica`: each a row
        of `tts` (and `asr`), as the front end last heard from it; `ages` gives, for each
        (deployment, replica), how old that report is."""
        self.registry.register(EngineCollector(tts, ("replica",)))
        if asr is not None:
            self.registry.register(ASRCollector(asr, ("replica",)))
        self.registry.register(_AgeCollector(ages))

    async def watch_loop_lag(self, interval: float = 0.25) -> None:
        """Measure how late the loop wakes a sleeping task; runs until cancelled."""
        while True:
            before = time.perf_counter()
            await asyncio.sleep(interval)
            self.loop_lag.observe(max(0.0, time.perf_counter() - before - interval))

"""Prometheus metrics of a server or replica: its registry, the request-level histograms
and counters every channel records, and collectors that read the engines at scrape time.

Each app gets its own registry, so several servers can live in one test process. The
engines never import prometheus_client; nothing here speaks HTTP (the request counter
middleware is `voxserve.api.metrics`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10)
_PART_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 5)
_RTF_BUCKETS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5)
_LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
_RTFX_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 50, 75, 100, 200)
_ASR_LATENCY_BUCKETS = (0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 120)
_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32)


class _EngineCollector(Collector):
    def __init__(self, read: Callable[[], dict[str, Any]]):
        self._read = read

    def collect(self) -> Iterator[Metric]:
        s = self._read()
        yield GaugeMetricFamily("voxserve_tts_active_streams", "Streams being decoded", s["active"])
        yield GaugeMetricFamily("voxserve_tts_queued_streams", "Streams waiting for admission", s["queued"])
        yield CounterMetricFamily("voxserve_tts_rejected", "Streams refused with 429", s["rejected"])
        yield CounterMetricFamily("voxserve_tts_chunks_decoded", "Vocoder chunks decoded", s["chunks"])
        yield CounterMetricFamily("voxserve_tts_acoustic_runs", "Stage A runs", s["acoustic_runs"])
        spread = CounterMetricFamily(
            "voxserve_tts_idle_core_units",
            "Units that used an idle core: run on several threads (way=threads), or a chunk "
            "decoded beside another of its stream (way=chunks)",
            labels=["way"],
        )
        for way, count in sorted(s.get("idle_core_units", {}).items()):
            spread.add_metric([way], count)
        yield spread
        held = CounterMetricFamily(
            "voxserve_tts_admission_held",
            "Times the engine held a newcomer in admission, by the reason that held it: too "
            "many streams starting, a live stream about to run dry (lagging), or no room in "
            "the load budget",
            labels=["reason"],
        )
        for reason, count in sorted(s.get("admission_held", {}).items()):
            held.add_metric([reason], count)
        yield held
        yield CounterMetricFamily("voxserve_tts_inference_failures", "Failed inference calls", s["failures"])
        busy = CounterMetricFamily(
            "voxserve_tts_worker_busy_seconds", "Time each worker spent in inference", labels=["worker"]
        )
        for worker, seconds in sorted(s["busy"].items()):
            busy.add_metric([str(worker)], seconds)
        yield busy
        yield GaugeMetricFamily("voxserve_healthy", "1 while every worker is alive", 1 if s["healthy"] else 0)
        capacity = s.get("capacity")
        yield GaugeMetricFamily(
            "voxserve_tts_capacity_streams",
            "Real-time streams the workers sustain at the measured cost (-1 until known)",
            -1.0 if capacity is None else capacity,
        )
        cost = GaugeMetricFamily(
            "voxserve_tts_model_cost",
            "Worker-seconds per audio-second of each voice model, recently measured (-1 until known)",
            labels=["model"],
        )
        for model, value in sorted(s.get("costs", {}).items()):
            cost.add_metric([model], -1.0 if value is None else value)
        yield cost
        yield CounterMetricFamily(
            "voxserve_tts_admission_gated", "Times admission held a stream for capacity", s.get("gated", 0)
        )


class _ASRCollector(Collector):
    """Reads the ASR engine's counters at scrape time; batch sizes become a histogram."""

    def __init__(self, read: Callable[[], dict[str, Any]]):
        self._read = read

    def collect(self) -> Iterator[Metric]:
        s = self._read()
        yield GaugeMetricFamily("voxserve_asr_active_requests", "Requests being transcribed", s["requests"])
        yield GaugeMetricFamily("voxserve_asr_queue_depth", "Pieces waiting for a batch", s["queued"])
        yield GaugeMetricFamily("voxserve_asr_segments_in_flight", "Pieces being decoded", s["in_flight"])
        yield CounterMetricFamily("voxserve_asr_batches", "Decoder batches run", s["batches"])
        yield CounterMetricFamily(
            "voxserve_asr_solo_batches", "Batches run alone on --asr-solo-threads threads", s["solo_batches"]
        )
        yield CounterMetricFamily("voxserve_asr_segments_decoded", "30 s pieces decoded", s["pieces"])
        yield CounterMetricFamily(
            "voxserve_asr_fallbacks", "Pieces decoded again at a higher temperature", s["fallbacks"]
        )
        yield CounterMetricFamily(
            "voxserve_asr_widened", "Pieces decoded again in 30 s after looping in a fitted window", s["widened"]
        )
        yield CounterMetricFamily("voxserve_asr_inference_failures", "Failed decoder calls", s["failures"])
        yield CounterMetricFamily(
            "voxserve_asr_decoded_audio_seconds", "Audio seconds decoded by the engine", s["audio_seconds"]
        )
        if "upload_bytes" in s:  # where uploads are read (not on a Ray ASR replica)
            yield GaugeMetricFamily(
                "voxserve_asr_buffered_upload_bytes", "Upload bytes read but not yet decoded", s["upload_bytes"]
            )
            yield CounterMetricFamily(
                "voxserve_asr_upload_refused", "Uploads refused with 429 for the upload budget", s["upload_refused"]
            )
        sizes: dict[int, int] = s["batch_sizes"]
        buckets: list[tuple[str, float]] = []
        for bound in _BATCH_BUCKETS:
            buckets.append((str(bound), sum(n for size, n in sizes.items() if size <= bound)))
        total = sum(sizes.values())
        buckets.append(("+Inf", total))
        yield HistogramMetricFamily(
            "voxserve_asr_batch_size",
            "Pieces per decoder batch",
            buckets=buckets,
            sum_value=sum(size * n for size, n in sizes.items()),
        )
        busy = CounterMetricFamily(
            "voxserve_asr_worker_busy_seconds", "Time each ASR worker spent decoding", labels=["worker"]
        )
        for worker, seconds in sorted(s["busy"].items()):
            busy.add_metric([str(worker)], seconds)
        yield busy
        yield GaugeMetricFamily("voxserve_asr_healthy", "1 while every ASR worker is alive", 1 if s["healthy"] else 0)
        yield GaugeMetricFamily(
            "voxserve_asr_buffered_audio_seconds",
            "Decoded audio held by transcriptions, against --asr-max-buffered-audio",
            s["buffered_audio_s"],
        )
        yield CounterMetricFamily(
            "voxserve_asr_budget_refused", "Uploads refused with 429 for the audio budget", s["budget_refused"]
        )


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

_REALTIME_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0)


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
        self.loop_lag = Histogram(
            "voxserve_event_loop_lag_seconds", "Event loop scheduling delay", buckets=_LAG_BUCKETS, registry=r
        )
        if read_engine is not None:
            r.register(_EngineCollector(read_engine))
        self.asr_requests = Counter(
            "voxserve_asr_requests", "Transcriptions and translations answered", ["task", "format"], registry=r
        )
        self.asr_audio_seconds = Counter(
            "voxserve_asr_audio_seconds", "Input audio seconds transcribed", registry=r
        )
        self.asr_rtfx = Histogram(
            "voxserve_asr_rtfx", "Audio seconds / request wall time", buckets=_RTFX_BUCKETS, registry=r
        )
        self.asr_latency = Histogram(
            "voxserve_asr_latency_seconds", "Time from request to full transcript",
            buckets=_ASR_LATENCY_BUCKETS, registry=r,
        )

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

    def attach_asr(self, read_asr: Callable[[], dict[str, Any]]) -> None:
        """Export the ASR engine's counters (only when the server runs one)."""
        self.registry.register(_ASRCollector(read_asr))

    async def watch_loop_lag(self, interval: float = 0.25) -> None:
        """Measure how late the loop wakes a sleeping task; runs until cancelled."""
        while True:
            before = time.perf_counter()
            await asyncio.sleep(interval)
            self.loop_lag.observe(max(0.0, time.perf_counter() - before - interval))

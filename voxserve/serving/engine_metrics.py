"""The engines' gauges and counters on `/metrics`, read from engine snapshots at scrape time.

One collector per engine (`EngineCollector` for TTS, `ASRCollector`), each over rows: a
row is one engine's snapshot (`AppState.engine_snapshot`, `ASREngine.snapshot`) with its
label values. A single process has one row and no labels; a Ray front end has a row per
replica, labelled `replica`, read from the replicas' routing stats
(`voxserve.ray.replicas`), so a scrape never waits on a replica. The engines never import
prometheus_client; nothing here speaks HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

__all__ = ["ASRCollector", "EngineCollector", "Row", "Rows"]

Row = tuple[tuple[str, ...], Mapping[str, Any]]
"""Label values, and an engine's snapshot."""
Rows = Callable[[], Sequence[Row]]

_Family = GaugeMetricFamily | CounterMetricFamily

_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 48, 64, 96, 128)
"""Pieces per ASR batch: a CPU call takes at most 8, a batched device up to `--asr-gpu-batch`."""

_UNIT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _histogram(family: HistogramMetricFamily, labels: list[str], counts: Mapping[Any, int], bounds: Sequence[int]) -> None:
    """One histogram sample from counts by observed value (an int, or its string)."""
    seen = [(int(value), n) for value, n in counts.items()]
    buckets = [(str(bound), float(sum(n for value, n in seen if value <= bound))) for bound in bounds]
    buckets.append(("+Inf", float(sum(n for _, n in seen))))
    family.add_metric(labels, buckets, float(sum(value * n for value, n in seen)))


class _Families:
    """Metric families with the collector's labels, one sample per row."""

    def __init__(self, labels: Sequence[str], rows: Sequence[Row]):
        self.labels = list(labels)
        self.rows = rows

    def gauge(self, name: str, doc: str, value: Callable[[Mapping[str, Any]], float]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=self.labels)
        self._one(family, value)
        return family

    def counter(self, name: str, doc: str, value: Callable[[Mapping[str, Any]], float]) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=self.labels)
        self._one(family, value)
        return family

    def gauge_by(
        self, name: str, doc: str, label: str, items: Callable[[Mapping[str, Any]], Iterable[tuple[Any, Any]]]
    ) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=[*self.labels, label])
        self._by(family, items, lambda value: -1.0 if value is None else value)
        return family

    def counter_by(
        self, name: str, doc: str, label: str, items: Callable[[Mapping[str, Any]], Iterable[tuple[Any, Any]]]
    ) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=[*self.labels, label])
        self._by(family, items, lambda value: value)
        return family

    def _one(self, family: _Family, value: Callable[[Mapping[str, Any]], float]) -> None:
        for values, s in self.rows:
            family.add_metric(list(values), value(s))

    def _by(
        self,
        family: _Family,
        items: Callable[[Mapping[str, Any]], Iterable[tuple[Any, Any]]],
        shown: Callable[[Any], float],
    ) -> None:
        for values, s in self.rows:
            for key, value in sorted(items(s), key=lambda kv: str(kv[0])):
                family.add_metric([*values, str(key)], shown(value))


def _items(key: str) -> Callable[[Mapping[str, Any]], Iterable[tuple[Any, Any]]]:
    """A snapshot's `key`, a dict by label value, as the samples of a labelled family
    (none where the engine does not report it)."""
    return lambda s: s.get(key, {}).items()


def _capacity(s: Mapping[str, Any]) -> float:
    capacity = s.get("capacity")
    return -1.0 if capacity is None else float(capacity)


def _workers(f: _Families, busy: tuple[str, str], healthy: tuple[str, str]) -> Iterator[Metric]:
    """An engine's workers: each one's busy seconds (`busy`: name and help), and whether
    all are alive (`healthy`)."""
    yield f.counter_by(*busy, "worker", lambda s: s["busy"].items())
    yield f.gauge(*healthy, lambda s: 1 if s["healthy"] else 0)


class EngineCollector(Collector):
    """The TTS engine's gauges and counters, one sample per row."""

    def __init__(self, read: Rows, labels: Sequence[str] = ()):
        self._read = read
        self._labels = labels

    def collect(self) -> Iterator[Metric]:
        f = _Families(self._labels, self._read())
        yield from _tts_streams(f)
        yield from _workers(
            f,
            ("voxserve_tts_worker_busy_seconds", "Time each worker spent in inference"),
            ("voxserve_healthy", "1 while every worker is alive"),
        )
        yield from _tts_capacity(f)
        yield from _tts_steps(f)


def _tts_streams(f: _Families) -> Iterator[Metric]:
    """Streams and the work they made, admission's holds, failures."""
    yield f.gauge("voxserve_tts_active_streams", "Streams being decoded", lambda s: s["active"])
    yield f.gauge("voxserve_tts_queued_streams", "Streams waiting for admission", lambda s: s["queued"])
    yield f.counter("voxserve_tts_rejected", "Streams refused with 429", lambda s: s["rejected"])
    yield f.counter("voxserve_tts_chunks_decoded", "Vocoder chunks decoded", lambda s: s["chunks"])
    yield f.counter("voxserve_tts_acoustic_runs", "Stage A runs", lambda s: s["acoustic_runs"])
    yield f.counter_by(
        "voxserve_tts_idle_core_units",
        "Units that used an idle core: run on several threads (way=threads), or a chunk "
        "decoded beside another of its stream (way=chunks)",
        "way", _items("idle_core_units"),
    )
    yield f.counter_by(
        "voxserve_tts_admission_held",
        "Times the engine held a newcomer in admission, by the reason that held it: too "
        "many streams starting, a live stream about to run dry (lagging), or no room in "
        "the load budget",
        "reason", _items("admission_held"),
    )
    yield f.counter("voxserve_tts_inference_failures", "Failed inference calls", lambda s: s["failures"])


def _tts_capacity(f: _Families) -> Iterator[Metric]:
    """The measured capacity and costs, and how often admission held a stream for them."""
    yield f.gauge(
        "voxserve_tts_capacity_streams",
        "Real-time streams the workers sustain at the measured cost (-1 until known)",
        _capacity,
    )
    yield f.gauge_by(
        "voxserve_tts_model_cost",
        "Worker-seconds per audio-second of each voice model, recently measured (-1 until known)",
        "model", _items("costs"),
    )
    yield f.counter(
        "voxserve_tts_admission_gated", "Times admission held a stream for capacity", lambda s: s.get("gated", 0)
    )


def _tts_steps(f: _Families) -> Iterator[Metric]:
    """What the steps held: units per step, frames by part, padding's share."""
    units = HistogramMetricFamily(
        "voxserve_tts_step_units",
        "Units (one stream's stage A or chunk) per device step, by stage; a CPU step holds one",
        labels=[*f.labels, "stage"],
    )
    for values, s in f.rows:
        for stage, counts in sorted(s.get("step_units", {}).items()):
            _histogram(units, [*values, stage], counts, _UNIT_BUCKETS)
    yield units
    yield f.counter_by(
        "voxserve_tts_step_frames",
        "Frames decoded by vocoder steps: the chunks' own (part=kept), the plan's context "
        "decoded around them and cropped (part=context), the further context a window "
        "bucket adds (part=bucket), and padding to the longest span of a batched step "
        "(part=padding)",
        "part", _items("step_frames"),
    )
    yield f.gauge(
        "voxserve_tts_padded_frame_share",
        "Padding's share of the frames vocoder steps decoded, all four parts of "
        "voxserve_tts_step_frames_total (-1 before any step)",
        lambda s: -1.0 if s.get("padded_share") is None else s["padded_share"],
    )


class ASRCollector(Collector):
    """The ASR engine's gauges and counters, one sample per row; batch sizes become a histogram."""

    def __init__(self, read: Rows, labels: Sequence[str] = ()):
        self._read = read
        self._labels = labels

    def collect(self) -> Iterator[Metric]:
        rows = self._read()
        f = _Families(self._labels, rows)
        yield from _asr_decoding(f)
        uploads = _Families(self._labels, [row for row in rows if "upload_bytes" in row[1]])
        if uploads.rows:  # where uploads are read (not on a Ray ASR replica)
            yield uploads.gauge(
                "voxserve_asr_buffered_upload_bytes", "Upload bytes read but not yet decoded",
                lambda s: s["upload_bytes"],
            )
            yield uploads.counter(
                "voxserve_asr_upload_refused", "Uploads refused with 429 for the upload budget",
                lambda s: s["upload_refused"],
            )
        sizes = HistogramMetricFamily("voxserve_asr_batch_size", "Pieces per decoder batch", labels=list(self._labels))
        for values, s in rows:
            _histogram(sizes, list(values), s["batch_sizes"], _BATCH_BUCKETS)
        yield sizes
        yield from _workers(
            f,
            ("voxserve_asr_worker_busy_seconds", "Time each ASR worker spent decoding"),
            ("voxserve_asr_healthy", "1 while every ASR worker is alive"),
        )
        yield f.gauge(
            "voxserve_asr_buffered_audio_seconds",
            "Decoded audio held by transcriptions, against --asr-max-buffered-audio-s",
            lambda s: s["buffered_audio_s"],
        )
        yield f.counter(
            "voxserve_asr_budget_refused", "Uploads refused with 429 for the audio budget",
            lambda s: s["budget_refused"],
        )


def _asr_decoding(f: _Families) -> Iterator[Metric]:
    """Requests, pieces and batches, and the pieces decoded again."""
    yield f.gauge("voxserve_asr_active_requests", "Requests being transcribed", lambda s: s["requests"])
    yield f.gauge("voxserve_asr_queue_depth", "Pieces waiting for a batch", lambda s: s["queued"])
    yield f.gauge("voxserve_asr_segments_in_flight", "Pieces being decoded", lambda s: s["in_flight"])
    yield f.counter("voxserve_asr_batches", "Decoder batches run", lambda s: s["batches"])
    yield f.counter(
        "voxserve_asr_solo_batches", "Batches run alone on --asr-solo-threads threads", lambda s: s["solo_batches"]
    )
    yield f.counter("voxserve_asr_segments_decoded", "30 s pieces decoded", lambda s: s["pieces"])
    yield f.counter(
        "voxserve_asr_fallbacks", "Pieces decoded again at a higher temperature", lambda s: s["fallbacks"]
    )
    yield f.counter(
        "voxserve_asr_widened", "Pieces decoded again in 30 s after looping in a fitted window",
        lambda s: s["widened"],
    )
    yield f.counter("voxserve_asr_inference_failures", "Failed decoder calls", lambda s: s["failures"])
    yield f.counter(
        "voxserve_asr_decoded_audio_seconds", "Audio seconds decoded by the engine", lambda s: s["audio_seconds"]
    )

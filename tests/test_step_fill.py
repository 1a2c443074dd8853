"""A batched device's steps fill: chunks are grouped by window bucket, so streams at
different points of their plans share a step; each chunk still yields exactly its own
frames; and the units per step reach `/metrics`."""

from __future__ import annotations

import dataclasses
import itertools
import random
import statistics
from dataclasses import dataclass

import httpx
import numpy as np
import pytest

from tests.conftest import RunningServer
from voxserve.engine.adapters import kokoro, piper
from voxserve.engine.batched_scheduler import BatchedScheduler
from voxserve.engine.scheduler import Budget
from voxserve.engine.tts_stats import step_frames_of
from voxserve.engine.work import (
    AcousticWork,
    BatchedWindows,
    Latent,
    ModelProfile,
    VocoderWork,
    Work,
    bucket_window,
    plan_chunk,
)
from voxserve.runners.kokoro.onnx_runner import HOP, SAMPLE_RATE

KOKORO = ModelProfile(
    "kokoro", HOP, SAMPLE_RATE, kokoro.CHUNKING, chunk_growth=kokoro.GROWTH, window_buckets=kokoro.WINDOW_BUCKETS
)
PIPER = ModelProfile("piper", 256, 22050, piper.CHUNKING, window_buckets=piper.WINDOW_BUCKETS)


@dataclass(frozen=True)
class Sentence:
    ids: np.ndarray
    frames: int


class Device:
    """The real `Scheduler` on `Budget.batched(128)` with `streams` live streams in a
    closed loop (one that ends is replaced), half Kokoro-like, half Piper-like, of 1-4
    sentences of random length each. Two steps are in flight; the older one completes
    before the next is gathered. Clients take each chunk as it is released, so the
    device, not the clients, is the bound: every step is gathered from a full queue."""

    def __init__(self, streams: int, bucketed: bool = True, kokoro_step_frames: int | None = None):
        self.rng = random.Random(7)
        self.sched = BatchedScheduler(credits=4, budget=Budget.batched(128))
        self.profiles = [p if bucketed else dataclasses.replace(p, window_buckets=()) for p in (KOKORO, PIPER)]
        self.profiles[0] = dataclasses.replace(self.profiles[0], step_frames=kokoro_step_frames)
        self.sentences: dict[int, list[Sentence]] = {}
        self.next_id = 0
        self.now = 0.0
        self.vocoder_steps: list[list[VocoderWork]] = []
        for _ in range(streams):
            self.add()

    def add(self) -> None:
        self.next_id += 1
        profile = self.profiles[self.next_id % 2]
        sentences = [
            Sentence(np.zeros(self.rng.randint(20, 120), np.int64), self.rng.randint(60, 260))
            for _ in range(self.rng.randint(1, 4))
        ]
        self.sentences[self.next_id] = sentences
        self.sched.add(self.next_id, sentences, self.now, profile)

    def run(self, steps: int) -> None:
        in_flight: list[list[Work]] = []
        for _ in range(steps):
            while len(in_flight) < 2 and (step := self.sched.next_step(self.now)):
                in_flight.append(step)
                if isinstance(step[0], VocoderWork):
                    self.vocoder_steps.append([w for w in step if isinstance(w, VocoderWork)])
            assert in_flight, "the device idles with streams waiting"
            self.now += 0.01
            for work in in_flight.pop(0):
                if isinstance(work, AcousticWork):
                    frames = self.sentences[work.stream_id][work.segment].frames
                    self.sched.complete_acoustic(work, Latent(None, frames), 0.01)
                    continue
                assert isinstance(work, VocoderWork)
                chunk = self.sched.complete_vocoder(work, (work.end - work.start) * 256, self.now, 0.01)
                assert chunk is not None
                for _ in range(chunk.released):
                    self.sched.taken(work.stream_id)
                if chunk.last:
                    del self.sentences[work.stream_id]
                    self.add()


@pytest.fixture(scope="module")
def bucketed() -> Device:
    device = Device(256)
    device.run(1500)
    return device


def test_at_256_streams_a_bucketed_step_holds_many_units(bucketed: Device) -> None:
    exact = Device(256, bucketed=False)
    exact.run(1500)
    steady = bucketed.vocoder_steps[len(bucketed.vocoder_steps) // 3 :]
    mean = statistics.fmean(len(step) for step in steady)
    mean_exact = statistics.fmean(len(step) for step in exact.vocoder_steps[len(exact.vocoder_steps) // 3 :])
    assert mean >= 32, f"{mean:.1f} units per vocoder step"
    assert mean >= 4 * mean_exact, f"{mean:.1f} bucketed against {mean_exact:.1f} at exact sizes"


def _kokoro_steps(steps: list[list[VocoderWork]]) -> list[list[VocoderWork]]:
    """The Kokoro steps (`Device.add` gives Kokoro's streams even ids)."""
    return [step for step in steps if step[0].stream_id % 2 == 0]


def _kokoro_frames(steps: list[list[VocoderWork]]) -> list[int]:
    """Each Kokoro step's frames, windows times their bucket."""
    return [len(step) * step[0].bucket for step in _kokoro_steps(steps)]


def test_a_kokoro_step_holds_at_most_its_step_frames(bucketed: Device) -> None:
    assert max(_kokoro_frames(bucketed.vocoder_steps)) > kokoro.STEP_FRAMES  # unbounded, steps pass it
    bounded = Device(256, kokoro_step_frames=kokoro.STEP_FRAMES)
    bounded.run(1500)
    frames = _kokoro_frames(bounded.vocoder_steps)
    assert max(frames) <= kokoro.STEP_FRAMES
    steady = bounded.vocoder_steps[len(bounded.vocoder_steps) // 3 :]
    mean = statistics.fmean(len(step) for step in steady)
    assert mean >= 32, f"{mean:.1f} units per vocoder step"
    one = Device(16, kokoro_step_frames=1)  # under any window: one window a step, never none
    one.run(200)
    kokoro_steps = _kokoro_steps(one.vocoder_steps)
    assert kokoro_steps and all(len(step) == 1 for step in kokoro_steps)
    with pytest.raises(ValueError, match="step_frames"):
        dataclasses.replace(KOKORO, step_frames=0)


def test_a_steps_spans_are_its_bucket_where_the_latent_has_the_frames(bucketed: Device) -> None:
    full = short = 0
    for step in bucketed.vocoder_steps:
        bucket = step[0].bucket
        assert all(w.bucket == bucket for w in step)  # one bucket a step
        for w in step:
            assert w.lo <= w.start <= w.end <= w.hi <= w.latent.frames  # the kept frames inside
            assert w.crop == (w.start - w.lo, w.end - w.lo)
            if w.latent.frames >= w.bucket:
                assert w.hi - w.lo == w.bucket
                full += 1
            else:  # a short latent: the whole of it, shorter than the bucket
                assert (w.lo, w.hi) == (0, w.latent.frames)
                short += 1
    assert full > short > 0


def test_the_kept_frames_of_a_latent_tile_it_exactly() -> None:
    """Bucketing moves only the context: the chunks of a stream keep every frame of each
    latent once, in order, so the crops yield the stream's samples exactly."""
    s = BatchedScheduler(credits=100, budget=Budget.batched(8))
    frames = [230, 61, 140]
    s.add(1, [Sentence(np.zeros(30, np.int64), f) for f in frames], 0.0, KOKORO)
    kept: dict[int, list[tuple[int, int]]] = {}
    now = 0.0
    while s.has(1):
        step = s.next_step(now)
        assert step
        now += 0.01
        for work in step:
            if isinstance(work, AcousticWork):
                s.complete_acoustic(work, Latent(None, frames[work.segment]))
            else:
                assert isinstance(work, VocoderWork)
                assert work.bucket in KOKORO.window_buckets
                kept.setdefault(work.segment, []).append((work.start, work.end))
                s.complete_vocoder(work, (work.end - work.start) * HOP, now)
    for segment, spans in kept.items():
        assert spans[0][0] == 0 and spans[-1][1] == frames[segment]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))


def test_a_window_grows_to_its_bucket_with_real_context() -> None:
    buckets = (60, 72, 104)
    assert bucket_window(300, 100, 160, buckets) == (100, 160, 60)  # already a bucket
    assert bucket_window(300, 100, 170, buckets) == (100, 172, 72)  # right context first
    assert bucket_window(171, 100, 170, buckets) == (99, 171, 72)  # then left, at the end
    assert bucket_window(50, 0, 40, buckets) == (0, 50, 60)  # too few frames: all of them
    assert bucket_window(400, 0, 120, buckets) == (0, 120, 120)  # past the last: its own
    with pytest.raises(ValueError, match="ascending"):
        dataclasses.replace(KOKORO, window_buckets=(72, 60))


@pytest.mark.parametrize(
    "profile",
    [KOKORO, PIPER, dataclasses.replace(PIPER, window_buckets=()), dataclasses.replace(KOKORO, chunking=None)],
    ids=["kokoro", "piper", "no-buckets", "whole-segment"],
)
def test_the_window_tables_give_the_plan_and_its_bucket(profile: ModelProfile) -> None:
    """`BatchedWindows`, which a batched step plans further chunks with, gives what
    `plan_chunk` (without a level) and `bucket_window` give, at every point of a plan."""
    windows = BatchedWindows(profile)
    for frames, pos, index, alone, skip in itertools.product(
        (0, 1, 17, 60, 149, 300, 2000), (0, 5, 16, 48, 140, 299), range(16), (False, True), (0, 1)
    ):
        if pos > frames:
            continue
        lo, hi, start, end = plan_chunk(frames, pos, index, profile.chunking, alone, skip, None, profile.chunk_growth)
        bucket = 0
        if profile.window_buckets:
            lo, hi, bucket = bucket_window(frames, lo, hi, profile.window_buckets)
        assert windows.window(frames, pos, index, alone, skip) == (lo, hi, start, end, bucket)


def test_padding_counts_what_a_call_adds_to_its_shorter_spans() -> None:
    latent = Latent(None, 300)
    step = [
        VocoderWork(1, 0, latent, 100, 204, 112, 160, False, bucket=104),  # 12 + 12 context, 32 more
        VocoderWork(2, 0, Latent(None, 40), 0, 40, 0, 40, True, bucket=60),  # a whole short latent
    ]
    frames = step_frames_of(step, kokoro.CHUNKING)
    assert frames == {"kept": 88, "context": 24, "bucket": 32, "padding": 64}


def test_units_per_step_and_padding_are_on_metrics(server: RunningServer, client: httpx.Client) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": "One step at a time.", "response_format": "pcm"}
    assert client.post("/v1/audio/speech", json=body).status_code == 200
    metrics = client.get("/metrics").text
    lines = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if line.startswith("voxserve_tts_step_"))
    for stage in ("acoustic", "vocoder"):
        count = float(lines[f'voxserve_tts_step_units_count{{stage="{stage}"}}'])
        assert count > 0
        # a CPU step holds one unit
        assert float(lines[f'voxserve_tts_step_units_bucket{{le="1",stage="{stage}"}}']) == count
        assert float(lines[f'voxserve_tts_step_units_sum{{stage="{stage}"}}']) == count
    assert float(lines['voxserve_tts_step_frames_total{part="kept"}']) > 0
    assert float(lines['voxserve_tts_step_frames_total{part="context"}']) > 0
    assert float(lines['voxserve_tts_step_frames_total{part="bucket"}']) == 0  # a CPU keeps the plan's windows
    assert float(lines['voxserve_tts_step_frames_total{part="padding"}']) == 0  # one span a call
    assert "voxserve_tts_padded_frame_share 0.0" in metrics

"""The batched scheduler's host cost and step fill, on the real `Scheduler`, no models.

    python scripts/bench/scheduler_step.py --streams 1000 --model both --calls 4000

Builds a `Scheduler` with `Budget.batched(128)` and keeps `--streams` streams live in a
closed loop (a stream that ends is replaced at once). Each stream is Kokoro-like or
Piper-like (the adapters' own chunk plans and window buckets), with 1-4 sentences of
random length. A simulated device runs two steps in flight, each taking
`STEP_BASE_S + STEP_PER_FRAME_S` per frame it decodes; clients play in real time and take
a chunk once their player is within `LEAD_S` of needing it, so a stream runs ahead until
its credits are spent, as behind a real-time listener. After `--warm` steps it times
`next_step` over `--calls` calls, and prints the p50/p99 of a call by the wall clock
(`perf_counter_ns`) and by the thread's CPU time (`thread_time_ns`: on a shared machine the
wall clock also counts the time the thread waited for a core), and the mean units per
step.

The garbage collector runs with the server's policy, set as the server sets it at
start-up (`voxserve.serving.collector.collector_policy`: a young collection once 10,000
objects are made and not freed, not CPython's 700), and its collections land in
whichever call allocates past the threshold; a `gc.callbacks` hook times each one, and
the line also gives the p99 of a call's CPU time less the collections inside it, and how
many calls held one. `--gc-default` keeps CPython's thresholds instead, to compare.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import heapq
import random
import statistics
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from voxserve.engine.adapters import kokoro, piper
from voxserve.engine.batched_scheduler import BatchedScheduler
from voxserve.engine.scheduler import Budget
from voxserve.engine.work import AcousticWork, Latent, ModelProfile, VocoderWork, Work
from voxserve.runners.kokoro.onnx_runner import HOP, SAMPLE_RATE
from voxserve.serving.collector import collector_policy

STEP_BASE_S = 0.004
"""A step's fixed device time (launches, one graph replay)."""
STEP_PER_FRAME_S = 2e-6
"""Device time per decoded frame in a step."""
LEAD_S = 1.0
"""A client takes a chunk once its player is this close to needing it."""


def profile(name: str) -> ModelProfile:
    """A profile like the adapter's (its chunk plan, growth, buckets and step bound, where
    it has them)."""
    if name == "kokoro":
        base = ModelProfile(
            "kokoro", HOP, SAMPLE_RATE, kokoro.CHUNKING, acoustic_s_per_id=2e-3,
            chunk_growth=kokoro.GROWTH, crossfade=kokoro.CROSSFADE,
        )
    else:
        base = ModelProfile("piper", 256, 22050, piper.CHUNKING)
    buckets = getattr(globals()[name], "WINDOW_BUCKETS", None)
    fields = {f.name for f in dataclasses.fields(ModelProfile)}
    if buckets is not None and "window_buckets" in fields:
        base = dataclasses.replace(base, window_buckets=buckets)
    step_frames = getattr(globals()[name], "STEP_FRAMES", None)
    if step_frames is not None and "step_frames" in fields:
        base = dataclasses.replace(base, step_frames=step_frames)
    return base


@dataclass(frozen=True)
class Sentence:
    ids: np.ndarray
    frames: int


class Sim:
    def __init__(self, streams: int, models: list[str], seed: int = 1):
        self.rng = random.Random(seed)
        self.sched = BatchedScheduler(credits=4, budget=Budget.batched(128))
        self.profiles = {name: profile(name) for name in models}
        self.models = models
        self.now = 0.0
        self.ids = 0
        self.sentences: dict[int, list[Sentence]] = {}
        self.first: dict[int, float] = {}
        self.takes: list[tuple[float, int]] = []
        self.in_flight: deque[tuple[float, list[Work]]] = deque()
        self.units: dict[str, list[int]] = {"acoustic": [], "vocoder": []}
        for _ in range(streams):
            self.add()

    def add(self) -> None:
        self.ids += 1
        name = self.models[self.ids % len(self.models)]
        low, high = (100, 250) if name == "kokoro" else (60, 260)
        sentences = [
            Sentence(np.zeros(self.rng.randint(20, 120), np.int64), self.rng.randint(low, high))
            for _ in range(self.rng.randint(1, 4))
        ]
        self.sentences[self.ids] = sentences
        self.sched.add(self.ids, sentences, self.now, self.profiles[name])

    def step_time(self, step: list[Work]) -> float:
        frames = sum(w.hi - w.lo if isinstance(w, VocoderWork) else 0 for w in step)
        return STEP_BASE_S + STEP_PER_FRAME_S * frames

    def finish(self, step: list[Work], elapsed: float) -> None:
        sched = self.sched
        for work in step:
            if isinstance(work, AcousticWork):
                frames = self.sentences[work.stream_id][work.segment].frames
                sched.complete_acoustic(work, Latent(None, frames), elapsed)
                continue
            assert isinstance(work, VocoderWork)
            produced = sched.produced(work.stream_id)
            rate = self.profiles_of(work.stream_id)
            chunk = sched.complete_vocoder(work, (work.end - work.start) * rate[0], self.now, elapsed)
            if chunk is None:
                continue
            if chunk.first:
                self.first[work.stream_id] = self.now
            started = self.first.get(work.stream_id, self.now)
            for _ in range(chunk.released):
                # taken once the player is within LEAD_S of this chunk's audio
                due = started + produced / rate[1] - LEAD_S
                heapq.heappush(self.takes, (max(self.now, due), work.stream_id))
            if chunk.last:
                self.sentences.pop(work.stream_id, None)
                self.first.pop(work.stream_id, None)
                self.add()

    def profiles_of(self, stream_id: int) -> tuple[int, int]:
        name = self.models[stream_id % len(self.models)]
        p = self.profiles[name]
        return p.hop, p.sample_rate

    def run(
        self, steps: int, timed: list[float] | None = None, claimed: list[int] | None = None,
        cpu: list[float] | None = None, collecting: list[float] | None = None,
    ) -> None:
        done = 0
        while done < steps:
            while len(self.in_flight) < 2:
                g0 = GC.spent_ns
                c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                step = self.sched.next_step(self.now)
                t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
                if timed is not None and claimed is not None and cpu is not None:
                    timed.append((t1 - t0) / 1e3)
                    cpu.append((c1 - c0) / 1e3)
                    claimed.append(len(step))
                    if collecting is not None:
                        collecting.append((GC.spent_ns - g0) / 1e3)
                if not step:
                    break
                stage = "acoustic" if isinstance(step[0], AcousticWork) else "vocoder"
                self.units[stage].append(len(step))
                start = self.in_flight[-1][0] if self.in_flight else self.now
                self.in_flight.append((start + self.step_time(step), step))
            next_take = self.takes[0][0] if self.takes else float("inf")
            next_done = self.in_flight[0][0] if self.in_flight else float("inf")
            if next_take <= next_done:
                self.now = max(self.now, next_take)
                while self.takes and self.takes[0][0] <= self.now:
                    _, sid = heapq.heappop(self.takes)
                    self.sched.taken(sid)
                continue
            ends, step = self.in_flight.popleft()
            self.now = max(self.now, ends)
            self.finish(step, self.step_time(step))
            done += 1


class GCTimer:
    """Wall time spent in the garbage collector so far (a `gc.callbacks` hook)."""

    def __init__(self) -> None:
        self.spent_ns = 0
        self._start = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter_ns()
        else:
            self.spent_ns += time.perf_counter_ns() - self._start


GC = GCTimer()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--model", choices=["kokoro", "piper", "both"], default="both")
    parser.add_argument("--warm", type=int, default=3000, help="steps before timing")
    parser.add_argument("--calls", type=int, default=4000, help="next_step calls timed (at least)")
    parser.add_argument("--gc-default", action="store_true", help="CPython's collector thresholds, not the server's")
    args = parser.parse_args()
    if not args.gc_default:
        collector_policy()
    models = ["kokoro", "piper"] if args.model == "both" else [args.model]
    sim = Sim(args.streams, models)
    sim.run(args.warm)
    sim.units = {"acoustic": [], "vocoder": []}
    timed: list[float] = []
    claimed: list[int] = []
    cpu: list[float] = []
    collecting: list[float] = []
    gc.callbacks.append(GC)
    while len(timed) < args.calls:
        sim.run(50, timed, claimed, cpu, collecting)
    gc.callbacks.remove(GC)
    q = statistics.quantiles(timed, n=100)
    qc = statistics.quantiles(cpu, n=100)
    qn = statistics.quantiles([max(0.0, c - g) for c, g in zip(cpu, collecting, strict=True)], n=100)
    collected = [g for g in collecting if g > 0]
    vocoder = sim.units["vocoder"]
    print(
        f"streams={args.streams} model={args.model} calls={len(timed)} "
        f"next_step p50={q[49]:.1f} us p99={q[98]:.1f} us (CPU p50={qc[49]:.1f} us p99={qc[98]:.1f} us) "
        f"mean units/vocoder step={statistics.fmean(vocoder):.1f} "
        f"mean units/stage A step={statistics.fmean(sim.units['acoustic'] or [0]):.1f} "
        f"us per unit claimed={sum(timed) / max(1, sum(claimed)):.2f} (CPU {sum(cpu) / max(1, sum(claimed)):.2f}) "
        f"CPU p99 less GC={qn[98]:.1f} us, calls with a collection={len(collected)} "
        f"(median {statistics.median(collected or [0.0]):.0f} us in GC), gc threshold={gc.get_threshold()[0]}"
    )


if __name__ == "__main__":
    main()

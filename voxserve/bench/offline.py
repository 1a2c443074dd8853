"""`bench offline`: the TTS runners at full load with no HTTP, the physical limit.

The only bench module that imports the engine's pieces (runners, text). N threads share
one `PiperModel` (each ONNX call runs single-threaded on its caller's thread, as in the
server) and together they synthesize the built-in prompts, segment by segment in one
shared seeded order, for a fixed time, in two modes:
- `full`: stage A on a segment, then stage B on its whole latent;
- `chunked`: stage A, then stage B chunk by chunk with the engine's default chunking
  (first chunk of a prompt 16 frames, then doubling from 32 to 64, 10 frames of context
  each side, no tiny tail), the windows the engine's `plan_chunk` cuts.
Text goes through the engine's own normalize/segment/phonemize before timing starts.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from voxserve.engine.tts import FIRST_SEGMENT_CHARS
from voxserve.engine.work import VocoderChunking, plan_chunk
from voxserve.runners.piper.onnx_runner import AcousticInput, PiperModel, bundled_voice
from voxserve.text.phonemize import Phonemizer
from voxserve.text.split import normalize, segment

__all__ = [
    "OfflinePoint",
    "Unit",
    "chunk_windows",
    "load_workload",
    "measure",
    "run_offline",
    "run_threads",
]

MODES = ("full", "chunked")


def chunk_windows(frames: int, chunking: VocoderChunking,
                  first: bool) -> list[tuple[int, int, int, int]]:
    """(lo, hi, start, end) per chunk of a latent, from the engine's own `plan_chunk`.

    A prompt's first segment starts at chunk 0; a later segment continues a stream that
    already sent chunks, so its chunks are full size at once.
    """
    out: list[tuple[int, int, int, int]] = []
    start, index = 0, 0 if first else 8
    while start < frames:
        window = plan_chunk(frames, start, index, chunking)
        out.append(window)
        start, index = window[3], index + 1
    return out


@dataclass(frozen=True)
class Unit:
    """One segment of a prompt: stage A input, and whether it opens its prompt (stream)."""

    item: AcousticInput
    first: bool


@dataclass(frozen=True)
class OfflinePoint:
    mode: str
    threads: int
    audio_s: float
    wall_s: float
    segments: int

    @property
    def audio_per_s(self) -> float:
        return self.audio_s / self.wall_s


def load_workload(model: PiperModel, prompts: list[str], seed: int = 0) -> list[Unit]:
    """The prompts in a seeded shuffled order, cut into segments the way the engine does.

    Segments are short units of work, so that every thread stops soon after the deadline,
    and the shuffle gives any stretch of the list the same mix of short and long prompts.
    """
    phonemizer = Phonemizer(model.config)
    first_chars = FIRST_SEGMENT_CHARS
    order = list(prompts)
    random.Random(seed).shuffle(order)
    out = []
    for text in order:
        pieces = [ids for piece in segment(normalize(text), first_max_chars=first_chars)
                  for ids in phonemizer.ids(piece)]
        for i, ids in enumerate(pieces):
            item = AcousticInput(ids, model.noise_scale, model.length_scale, model.noise_w)
            out.append(Unit(item, i == 0))
    return out


def synthesize(model: PiperModel, unit: Unit, mode: str, chunking: VocoderChunking) -> int:
    """Samples produced for one segment."""
    hop = model.hop
    z = model.acoustic.run([unit.item])[0]
    frames = z.shape[-1]
    if frames == 0:
        return 0
    if mode == "full":
        return len(model.vocoder.run([z])[0])
    samples = 0
    for lo, hi, start, end in chunk_windows(frames, chunking, unit.first):
        pcm = model.vocoder.run([np.ascontiguousarray(z[:, lo:hi])])[0]
        samples += len(pcm[(start - lo) * hop : (end - lo) * hop])
    return samples


def run_threads(job: Callable[[int], int], threads: int, seconds: float) -> tuple[int, float, int]:
    """`threads` threads call job(0), job(1), ... (one shared count) until `seconds` pass.

    Returns the sum of what the calls returned, the wall time (to the end of the last call
    started) and the number of calls. Shared by every model's offline measure.
    """
    totals = [0] * threads
    counts = [0] * threads
    shared = itertools.count()  # next() is atomic under the GIL
    barrier = threading.Barrier(threads + 1)
    deadline = [0.0]

    def work(index: int) -> None:
        barrier.wait()
        while time.perf_counter() < deadline[0]:
            totals[index] += job(next(shared))
            counts[index] += 1

    pool = [threading.Thread(target=work, args=(i,), name=f"offline-{i}") for i in range(threads)]
    for t in pool:
        t.start()
    started = time.perf_counter()
    deadline[0] = started + seconds
    barrier.wait()
    for t in pool:
        t.join()
    return sum(totals), time.perf_counter() - started, sum(counts)


def measure(model: PiperModel, workload: list[Unit], threads: int, mode: str,
            seconds: float, chunking: VocoderChunking) -> OfflinePoint:
    """`threads` threads take segments in workload order (cycling) until `seconds` pass;
    the wall time runs to the end of the last segment started."""
    samples, wall, count = run_threads(
        lambda n: synthesize(model, workload[n % len(workload)], mode, chunking), threads, seconds)
    return OfflinePoint(mode, threads, samples / model.sample_rate, wall, count)


def run_offline(prompts: list[str], thread_counts: list[int], seconds: float,
                modes: tuple[str, ...] = MODES,
                report: Any = print) -> list[OfflinePoint]:
    """Load the bundled voice, warm it up, and measure every (mode, threads) point."""
    model = PiperModel(bundled_voice())
    chunking = VocoderChunking()
    workload = load_workload(model, prompts)
    for mode in modes:
        for unit in workload[:2]:
            synthesize(model, unit, mode, chunking)  # first-run costs out of the timing
    points = []
    for mode in modes:
        for threads in thread_counts:
            point = measure(model, workload, threads, mode, seconds, chunking)
            report(f"{mode:>8} threads={threads}: {point.audio_per_s:6.1f} audio-s/s "
                   f"({point.audio_s:.1f} s of audio in {point.wall_s:.2f} s, "
                   f"{point.segments} segments)")
            points.append(point)
    return points

"""The TTS engine's warm-up: what it speaks before the first client, and the batch curve
it measures on a batched device.

The engine calls `WarmUp.run` for each loaded model at start; everything here goes through
the engine's own `synthesize` and the model's own calls, and gives what it times to the
model's cost meter, so that admission has a cost to read from the first request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from voxserve.engine.cost import CostMeter
from voxserve.engine.voices import Span, Voice, VoiceModel

__all__ = ["WARM_BATCH", "WARM_LONG_COST", "WARM_TEXTS", "WarmUp", "longest_segment"]

WARM_SHORT = "Warming up the voice: one, two, three, four, five, six, seven."
"""The short utterance every model speaks first: about 4 s of audio, enough to seed the
cost meter that admission reads."""

WARM_BATCH = 16
"""On a batched device, warm-up also runs this many streams at once, then a full step."""

WARM_TEXTS = (
    WARM_SHORT,
    "A short one.",
    (
        "The quick brown fox jumps over a lazy dog near the quiet river bank, and then it "
        "rests. It sleeps until the sun comes up again."
    ),
    (
        "Numbers help too: twelve, forty, a hundred and six. Then a pause. Then a much longer "
        "sentence follows, so that this stream is still speaking when the short ones are done."
    ),
    "Hello there. How are you today? I am fine, thank you.",
)
"""What the streams of a batched device's warm-up say, in turn: texts of different
lengths and sentence counts, so that at any moment the streams stand at different points
of their chunk plans and the steps hold what steps under real traffic hold."""

WARM_LONG_COST = 0.25
"""Start-up warms every worker with a longest segment only for a model cheaper than this
(worker-seconds per second of audio): Piper costs ~0.08, Kokoro ~0.55, for which it would
hold start-up for seconds; a costly model's arenas grow under its first streams instead."""


def longest_segment(max_chars: int) -> str:
    """A sentence as long as a segment may be (`max_chars`, the engine's cut), for the
    warm-up's longest runs."""
    words = ("the quick brown fox jumps over a lazy dog near the quiet river bank " * 8).split()
    longest = ""
    for word in words:
        if len(longest) + len(word) + 1 >= max_chars:
            break
        longest = f"{longest} {word}".strip()
    return longest + "."


@dataclass(frozen=True)
class WarmUp:
    """Synthesize before the first client, so that ONNX Runtime's first-run costs are not
    a client's. For each model: one short utterance (`WARM_SHORT`), then one segment of
    the longest length (`longest`) per worker, all at once, so that every worker's
    sessions size their memory arenas now rather than while clients are served (RSS then
    stays flat from the start). On a batched device, the model first captures its step
    graphs for every window bucket (`VoiceModel.capture_graphs`), then its batch curve is
    timed (`curve`), then a step's worth of mixed streams runs."""

    synthesize: Callable[[str, Voice], np.ndarray]
    """The engine's: a whole utterance through its scheduler and workers."""
    costs: Callable[[], Mapping[str, float | None]]
    """The engine's measured cost of each model, by name."""
    workers: int
    batch: int | None
    """A batched device's most units a step; None on a CPU."""
    longest: str

    def run(self, model: VoiceModel[Any], meter: CostMeter) -> None:
        """Warm `model`, whose cost meter is `meter`."""
        voice = model.voices[0]
        self.synthesize(WARM_SHORT, voice)
        if self.batch is not None:
            # Graphs for every window bucket and batch bucket before any client, so
            # that no capture runs during traffic (a no-op but on CUDA).
            model.capture_graphs(model.profile.window_buckets, self.batch)
            self.curve(model, voice, meter)
            # A batched device: a step's worth of streams of different texts at
            # once, so that steps hold units at different points of their plans, as
            # under traffic: it measures the cost and the units per step that
            # admission reads, and makes the runners' per-size work (graphs,
            # kernels) before any client.
            for size in sorted({min(self.batch, WARM_BATCH), self.batch}):
                self._together([WARM_TEXTS[i % len(WARM_TEXTS)] for i in range(size)], voice)
            return
        cost = self.costs().get(model.name)
        if cost is not None and cost <= WARM_LONG_COST:
            self._together([self.longest] * self.workers, voice)

    def _together(self, texts: list[str], voice: Voice) -> None:
        """Speak `texts` at once, one thread each."""
        with ThreadPoolExecutor(len(texts), thread_name_prefix="warmup") as pool:
            list(pool.map(self.synthesize, texts, [voice] * len(texts)))

    def curve(self, model: VoiceModel[Any], voice: Voice, meter: CostMeter) -> None:
        """Time real steps of each stage of `model` at every batch bucket up to the
        device's batch (`cost.batch_bucket`, the sizes graphs are captured at), and give
        them to the model's cost meter: the batch curve admission reads from the first
        request (`TTSEngine._admission_costs`), which traffic's own steps then refine. A
        stage A step runs the longest segment's biggest item `batch` times; a decoder
        step holds `batch` windows of each of the model's window buckets in turn (one
        step per bucket, about what one stream's plan decodes over a sentence), each
        counted for the frames a chunk of that window keeps."""
        assert self.batch is not None
        profile = model.profile
        item = max(model.inputs(self.longest, voice, 1.0), key=lambda x: len(x.ids))
        latent = model.acoustic([item])[0]
        chunking = profile.chunking
        windows = [w for w in profile.window_buckets if w <= latent.frames] or [latent.frames]
        frame_s = profile.hop / profile.sample_rate
        size = 1
        while size <= self.batch:
            started = time.perf_counter()
            latents = model.acoustic([item] * size)
            made = sum(x.frames for x in latents) * frame_s
            meter.add("acoustic", time.perf_counter() - started, made, batch=size, curve=True)
            busy = audio = 0.0
            for window in windows:
                kept = window
                if chunking is not None:
                    kept = max(window - chunking.left_context - chunking.right_context, chunking.first_chunk_frames)
                started = time.perf_counter()
                model.decode([Span(latent, 0, window)] * size)
                busy += time.perf_counter() - started
                audio += size * min(kept, window) * frame_s
            meter.add("vocoder", busy, audio, batch=size, curve=True)
            size *= 2

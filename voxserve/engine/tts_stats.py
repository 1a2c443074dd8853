"""What the TTS engine counts as it runs: chunks, failures, each model's cost meter, why
admission held newcomers, and the units and frames of the device's steps.

`EngineStats` is written under the engine's lock and read by the metrics endpoint;
`step_frames_of` and `stream_batch` are the pure arithmetic of a batched step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from voxserve.engine.cost import CostMeter
from voxserve.engine.work import ModelProfile, VocoderChunking, VocoderWork, Work

__all__ = ["UNITS_WEIGHT", "EngineStats", "step_frames_of", "stream_batch"]

UNITS_WEIGHT = 0.05
"""Weight of each vocoder step in a model's mean units per step (`EngineStats.units`):
the mean follows the last few dozen steps, the batch that steps hold under the load of
now."""


@dataclass
class EngineStats:
    """Counters read by the metrics endpoint; written under the engine lock."""

    chunks: int = 0
    acoustic_runs: int = 0
    audio_seconds: float = 0.0
    failures: int = 0
    busy_s: dict[int, float] = field(default_factory=dict)
    costs: dict[str, CostMeter] = field(default_factory=dict)
    """Each model's cost, by model name."""
    held: dict[str, int] = field(default_factory=lambda: {"starting": 0, "lagging": 0, "load": 0})
    """Times `keeping_up` said no, by the first reason that held: too many streams
    starting, a live stream about to run dry, or no room in the load budget."""
    step_units: dict[str, dict[int, int]] = field(default_factory=lambda: {"acoustic": {}, "vocoder": {}})
    """Device steps by stage and by the units they held (a CPU step holds one)."""
    step_frames: dict[str, int] = field(
        default_factory=lambda: {"kept": 0, "context": 0, "bucket": 0, "padding": 0}
    )
    """Frames the vocoder steps decoded, by part (`step_frames_of`)."""
    units: dict[str, float] = field(default_factory=dict)
    """Each model's mean units per vocoder step, recent steps weighing most
    (`UNITS_WEIGHT`); absent before its first step."""
    lengths: dict[str, float] = field(default_factory=dict)
    """Each model's mean audio seconds per stream, recent streams weighing most
    (`UNITS_WEIGHT`); absent before its first stream ends (the warm-up's give the first)."""

    def ended(self, model: str, seconds: float) -> None:
        """A stream of `model` ended whole, with `seconds` of audio."""
        mean = self.lengths.get(model)
        self.lengths[model] = seconds if mean is None else mean + UNITS_WEIGHT * (seconds - mean)

    def stream_seconds(self) -> dict[str, float]:
        """`lengths`, as a copy."""
        return dict(self.lengths)

    def step(self, model: str, stage: str, step: Sequence[Work], chunking: VocoderChunking | None = None) -> None:
        """Count one device step of `stage` on `model` (whose chunk plan is `chunking`)."""
        counts = self.step_units[stage]
        counts[len(step)] = counts.get(len(step), 0) + 1
        if stage != "vocoder":
            return
        for part, frames in step_frames_of([w for w in step if isinstance(w, VocoderWork)], chunking).items():
            self.step_frames[part] += frames
        mean = self.units.get(model)
        self.units[model] = len(step) if mean is None else mean + UNITS_WEIGHT * (len(step) - mean)

    def padded_share(self) -> float | None:
        """Padding's share of the frames the vocoder steps decoded (None before any)."""
        total = sum(self.step_frames.values())
        return self.step_frames["padding"] / total if total else None


def step_frames_of(step: Sequence[VocoderWork], chunking: VocoderChunking | None = None) -> dict[str, int]:
    """A vocoder step's frames by part:
    - `kept`: the chunks' own frames, the audio they send;
    - `context`: the plan's context frames around them (`chunking`), decoded and
      cropped away so that joins are seamless;
    - `bucket`: the further context a window bucket adds (`bucket_window`), decoded and
      cropped away too, so that windows of different plan points share one call;
    - `padding`: what a batched call adds to each span to make it as long as the
      step's longest span: computed and thrown away, never a frame of the latent.
    Padding's share of all four is what a batched step wastes to run spans of
    different lengths together."""
    spans = [work.hi - work.lo for work in step if work.hi > work.lo]
    kept = sum(work.end - work.start for work in step)
    context = 0
    if chunking is not None:
        context = sum(
            min(chunking.left_context, work.start) + min(chunking.right_context, work.latent.frames - work.end)
            for work in step
        )
    context = min(context, sum(spans) - kept)
    return {
        "kept": kept,
        "context": context,
        "bucket": sum(spans) - kept - context,
        "padding": len(spans) * max(spans, default=0) - sum(spans),
    }


def stream_batch(streams: int, profile: ModelProfile, batch: int) -> int:
    """The units a batched step holds with `streams` streams of a model live: a step
    runs one kind of unit (stage A, or the chunks of one window bucket), and a model's
    streams stand spread over its kinds, so about `streams` over their number, within
    one and the device's `batch`. (Measured on the sim device: 512 Piper streams, 73
    units a vocoder step against 73 by this rule; 256, 45 against 36; 256 Kokoro
    streams, 33-46 against 36: docs/BENCHMARKS.md.)"""
    kinds = len(profile.window_buckets) + 1
    return max(1, min(batch, streams // kinds))

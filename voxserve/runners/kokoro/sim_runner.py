"""Kokoro's stand-in on the simulated device: a `KokoroRuntime` for
`engine.adapters.kokoro.KokoroVoice`, whose text front end, voices, style rows, windows
and joins stay real.

Stage A gives each phoneme id its fitted mean frames (`runners/sim/durations.py`) and energy, at the
item's speed, as `KokoroFrames` of the real shape (its aligned features empty: nothing
reads them). Stage B gives each window a quiet tone of its frames' length. Both take the
H200's time for their batch (`runners/sim/costs.py: KOKORO_ACOUSTIC`, `KOKORO_DECODER`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from voxserve.runners.kokoro.onnx_runner import (
    HOP,
    SAMPLE_RATE,
    DecoderInput,
    KokoroFrames,
    KokoroInput,
    VoiceInfo,
    default_voices_dir,
    list_voices,
    load_voice,
)
from voxserve.runners.sim.costs import KOKORO_ACOUSTIC, KOKORO_DECODER
from voxserve.runners.sim.durations import DurationTable, load_table
from voxserve.runners.sim.steps import SimStage, tone
from voxserve.text.kokoro_vocab import MAX_PHONEMES

__all__ = ["SimKokoroAcoustic", "SimKokoroDecoder", "SimKokoroModel"]


class SimKokoroAcoustic:
    """Stage A: ids -> fitted durations and energy, timed as one batched call."""

    def __init__(self, table: DurationTable, stage: SimStage):
        self._table = table
        self._stage = stage

    def frames(self, item: KokoroInput) -> KokoroFrames:
        n = len(item.ids)
        if not 1 <= n <= MAX_PHONEMES:
            raise ValueError(f"Kokoro takes 1 to {MAX_PHONEMES} phoneme ids, not {n}")
        durations = self._table.durations(item.ids, 1 / item.speed, pads=True)
        index = np.clip(item.ids, 0, len(self._table.level) - 1)
        pad = np.float32(self._table.pad_level)
        levels = np.concatenate(([pad], self._table.level[index], [pad]))
        frames = int(durations.sum())
        noise = np.repeat(levels, 2 * durations).astype(np.float32)
        return KokoroFrames(
            durations, DecoderInput(np.zeros((0, frames), np.float32), np.zeros(2 * frames, np.float32), noise, item.style)
        )

    def run(self, batch: Sequence[KokoroInput]) -> list[KokoroFrames]:
        out = [self.frames(item) for item in batch]
        if out:
            self._stage.step(len(batch), max(len(item.ids) for item in batch) + 2)
        return out


class SimKokoroDecoder:
    """Stage B: each window -> a quiet tone of its frames; windows of different lengths
    share one call, timed padded to the longest."""

    hop = HOP

    def __init__(self, stage: SimStage):
        self._stage = stage

    def run(self, batch: Sequence[DecoderInput]) -> list[np.ndarray]:
        if not batch:
            return []
        self._stage.step(len(batch), max(item.frames for item in batch))
        return [tone(item.frames, HOP, periods_per_frame=10) for item in batch]


class SimKokoroModel:
    """Kokoro on the simulated device, with its real voices."""

    def __init__(self, graphed: bool = True, voices_dir: Path | None = None, speed: float = 1.0):
        """`graphed`: time steps as replayed CUDA graphs, else as eager calls; `speed`: the
        device's as a multiple of the H200's (`SimStage.speed`)."""
        self.sample_rate = SAMPLE_RATE
        self.hop = HOP
        self.graphed = graphed
        self.voices_dir = voices_dir or default_voices_dir()
        self.voices: dict[str, VoiceInfo] = {v.name: v for v in list_voices()}
        self._pair = (
            SimKokoroAcoustic(load_table("kokoro"), SimStage(KOKORO_ACOUSTIC, graphed, speed=speed)),
            SimKokoroDecoder(SimStage(KOKORO_DECODER, graphed, speed=speed)),
        )

    def runners(self, threads: int = 1) -> tuple[SimKokoroAcoustic, SimKokoroDecoder]:
        """The one pair: a GPU call has no intra-op threads to choose."""
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        return self._pair

    def voice(self, name: str) -> np.ndarray:
        return load_voice(name, self.voices_dir)

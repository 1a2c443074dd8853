"""Piper's stand-in on the simulated device: a loaded voice for
`engine.adapters.piper.PiperVoice`, whose config, speakers, phonemizer and chunk plan
stay real.

Stage A gives each phoneme id its fitted mean frames (`runners/sim/durations.py`) at the item's length
scale, and an empty latent of that many frames (nothing reads its values). Stage B gives
each window a quiet tone of its frames' length. Both take the H200's time for their
batch (`runners/sim/costs.py: PIPER_ACOUSTIC`, `PIPER_VOCODER`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from voxserve.runners.piper.onnx_runner import AcousticInput, PiperConfig, Prior, VoiceFiles
from voxserve.runners.sim.costs import PIPER_ACOUSTIC, PIPER_VOCODER
from voxserve.runners.sim.durations import DurationTable, load_table
from voxserve.runners.sim.steps import SimStage, tone

__all__ = ["SimPiperAcoustic", "SimPiperModel", "SimPiperVocoder"]


class SimPiperAcoustic:
    """Stage A: ids -> fitted durations and an empty latent, timed as one batched call."""

    def __init__(self, table: DurationTable, length_scale: float, stage: SimStage):
        self._table = table
        self._length_scale = length_scale
        """The voice's own length scale, the one the table was fitted at."""
        self._stage = stage

    def _durations(self, batch: Sequence[AcousticInput]) -> list[np.ndarray]:
        out = [self._table.durations(item.ids, item.length_scale / self._length_scale) for item in batch]
        if batch:
            self._stage.step(len(batch), max(len(item.ids) for item in batch))
        return out

    def run_timed(self, batch: Sequence[AcousticInput], threads: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each item's latent z [0, T] and its durations (summing to T)."""
        return [(np.zeros((0, int(d.sum())), np.float32), d) for d in self._durations(batch)]

    def run_prior(self, batch: Sequence[AcousticInput], threads: int = 1) -> list[tuple[Prior, np.ndarray]]:
        """As `run_timed`, its latent a prior whose flow (`flow`) costs nothing more."""
        return [
            (Prior(np.zeros((0, int(d.sum())), np.float32), item.speaker_id), d)
            for item, d in zip(batch, self._durations(batch), strict=True)
        ]

    def flow(self, prior: Prior, lo: int, hi: int, threads: int = 1) -> np.ndarray:
        return np.zeros((0, hi - lo), np.float32)


class SimPiperVocoder:
    """Stage B: each latent window -> a quiet tone of its frames; windows of different
    lengths share one call, timed padded to the longest."""

    def __init__(self, hop: int, stage: SimStage):
        self.hop = hop
        self._stage = stage

    def run(self, batch: Sequence[np.ndarray], threads: int = 1) -> list[np.ndarray]:
        if not batch:
            return []
        self._stage.step(len(batch), max(int(z.shape[-1]) for z in batch))
        return [tone(int(z.shape[-1]), self.hop) for z in batch]


class SimPiperModel(PiperConfig):
    """A Piper voice's real config on the simulated device."""

    def __init__(self, files: VoiceFiles, graphed: bool = True, speed: float = 1.0):
        """`graphed`: time steps as replayed CUDA graphs, else as eager calls; `speed`: the
        device's as a multiple of the H200's (`SimStage.speed`)."""
        super().__init__(files)
        self.graphed = graphed
        self.acoustic = SimPiperAcoustic(
            load_table("piper"), self.length_scale, SimStage(PIPER_ACOUSTIC, graphed, speed=speed)
        )
        self.vocoder = SimPiperVocoder(self.hop, SimStage(PIPER_VOCODER, graphed, speed=speed))

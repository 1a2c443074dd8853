"""The stand-ins' duration model: frames per phoneme id, fitted once to the real models.

Stage A of a real voice model gives each phoneme id a number of frames. The simulated
stage A gives each id its mean over a fitted set of sentences (`durations.json`, made by
`scripts/fit_sim_durations.py` from the real ONNX models on the bench's English
prompts), so a sentence's length, its words' frames and its chunk plan are about what the
real model would make of it. Ids never seen in the fit get the mean of all ids. Kokoro's
table also holds each id's mean energy, where stage B's windows are joined.

Nothing is cached per text: every call works the sentence's ids out again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

__all__ = ["TABLE_FILE", "DurationTable", "load_table"]

TABLE_FILE = Path(__file__).with_name("durations.json")


@dataclass(frozen=True)
class DurationTable:
    """One model's fitted frames (and energy) per phoneme id, at the voice's own speed."""

    frames: np.ndarray
    """float64 [vocabulary]: mean frames per id (the mean of all ids where unseen)."""
    level: np.ndarray
    """float32 [vocabulary]: mean stage A energy per id (0 where the model has none)."""
    lead: float
    """Kokoro: mean frames of the leading pad token (0 for Piper, whose pads are ids)."""
    tail: float
    """Kokoro: mean frames of the trailing pad token."""
    pad_level: float
    """Kokoro: the pads' mean energy."""

    def durations(self, ids: np.ndarray, scale: float = 1.0, pads: bool = False) -> np.ndarray:
        """int64 frames per id (with the lead and tail pads around them when `pads`), the
        fitted means times `scale`, rounded so that the total is the rounded sum (at
        least one frame each)."""
        index = np.clip(np.asarray(ids, dtype=np.int64), 0, len(self.frames) - 1)
        means = self.frames[index]
        if pads:
            means = np.concatenate(([self.lead], means, [self.tail]))
        ends = np.rint(np.cumsum(means * scale)).astype(np.int64)
        return np.maximum(np.diff(ends, prepend=0), 1)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> DurationTable:
        size = int(data["vocabulary"])  # type: ignore[call-overload]
        seen: dict[str, list[float]] = data["ids"]  # type: ignore[assignment]
        default = float(np.mean([v[0] for v in seen.values()]))
        frames = np.full(size, default, dtype=np.float64)
        level = np.zeros(size, dtype=np.float32)
        for key, (mean, energy, _count) in seen.items():
            frames[int(key)] = mean
            level[int(key)] = energy
        return cls(frames, level, float(data.get("lead", 0.0)), float(data.get("tail", 0.0)),  # type: ignore[arg-type]
                   float(data.get("pad_level", 0.0)))  # type: ignore[arg-type]


@cache
def load_table(model: str) -> DurationTable:
    """The fitted table of "piper" or "kokoro" (read once per process)."""
    with TABLE_FILE.open(encoding="utf-8") as f:
        tables = json.load(f)
    if model not in tables:
        raise ValueError(f"no fitted durations for {model!r} in {TABLE_FILE.name}")
    return DurationTable.from_json(tables[model])

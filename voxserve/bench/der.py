"""Diarization error rate: missed speech, false alarm and speaker confusion over the
reference speech, with a forgiveness collar around each reference boundary and the best
one-to-one mapping of hypothesis speakers to reference speakers.

NIST's rule, on a 10 ms grid: frames within `collar` seconds of any reference turn's
start or end are not scored; every other frame counts missed speech when the reference
has a speaker and the hypothesis none, false alarm for the reverse, and confusion when
both have one and the mapped hypothesis speaker is not the reference's. The mapping
maximises the frames they agree on (scipy's `linear_sum_assignment`). Overlap is not
modelled: a frame has at most one speaker on each side (a later turn wins). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

__all__ = ["COLLAR_S", "Score", "der", "mapping", "named_share"]

COLLAR_S = 0.25
STEP_S = 0.01

Turns = Sequence[tuple[float, float, str]]


@dataclass(frozen=True)
class Score:
    der: float
    missed: float
    false_alarm: float
    confusion: float
    scored_s: float
    """Reference speech scored (outside the collars), in seconds."""


def _grid(turns: Turns, n: int, names: dict[str, int]) -> np.ndarray:
    grid = np.full(n, -1, dtype=np.int64)
    for start, end, speaker in turns:
        grid[round(start / STEP_S) : round(end / STEP_S)] = names.setdefault(speaker, len(names))
    return grid


def _frames(reference: Turns, hypothesis: Turns) -> tuple[np.ndarray, np.ndarray, dict[str, int], dict[str, int]]:
    end = max([e for _, e, _ in [*reference, *hypothesis]], default=0.0)
    n = round(end / STEP_S) + 1
    ref_names: dict[str, int] = {}
    hyp_names: dict[str, int] = {}
    return _grid(reference, n, ref_names), _grid(hypothesis, n, hyp_names), ref_names, hyp_names


def mapping(reference: Turns, hypothesis: Turns) -> dict[str, str]:
    """Hypothesis speaker -> reference speaker, one to one, by the most time in common."""
    ref, hyp, ref_names, hyp_names = _frames(reference, hypothesis)
    if not ref_names or not hyp_names:
        return {}
    both = (ref >= 0) & (hyp >= 0)
    common = np.zeros((len(hyp_names), len(ref_names)))
    np.add.at(common, (hyp[both], ref[both]), 1)
    rows, cols = linear_sum_assignment(-common)
    hyp_of = {v: k for k, v in hyp_names.items()}
    ref_of = {v: k for k, v in ref_names.items()}
    return {hyp_of[r]: ref_of[c] for r, c in zip(rows, cols, strict=True)}


def _scored(reference: Turns, n: int, collar: float) -> np.ndarray:
    """Which of `n` frames are scored: all but those within `collar` of a reference turn's
    start or end."""
    scored = np.ones(n, dtype=bool)
    c = round(collar / STEP_S)
    for start, end, _ in reference:
        for edge in (round(start / STEP_S), round(end / STEP_S)):
            scored[max(0, edge - c) : edge + c] = False
    return scored


def named_share(reference: Turns, hypothesis: Turns, who: str, names: set[str], collar: float = 0.0) -> float:
    """Share of `who`'s reference speech that the hypothesis labels with one of `names`;
    with a `collar`, only the frames `der` scores count."""
    ref, hyp, ref_names, hyp_names = _frames(reference, hypothesis)
    mine = (ref == ref_names.get(who, -2)) & _scored(reference, len(ref), collar)
    named = np.isin(hyp, [hyp_names[name] for name in names if name in hyp_names])
    total = int(mine.sum())
    return int((mine & named).sum()) / total if total else 0.0


def der(reference: Turns, hypothesis: Turns, collar: float = COLLAR_S) -> Score:
    """The error rates of `hypothesis` against `reference`, each a fraction of the scored
    reference speech."""
    ref, hyp, ref_names, hyp_names = _frames(reference, hypothesis)
    scored = _scored(reference, len(ref), collar)
    mapped = mapping(reference, hypothesis)
    hyp_to_ref = np.full(len(hyp_names) + 1, -2, dtype=np.int64)
    for h, r in mapped.items():
        hyp_to_ref[hyp_names[h]] = ref_names[r]
    speech = (ref >= 0) & scored
    total = int(speech.sum())
    if total == 0:
        return Score(0.0, 0.0, 0.0, 0.0, 0.0)
    has_hyp = hyp >= 0
    missed = int((speech & ~has_hyp).sum())
    false_alarm = int((scored & (ref < 0) & has_hyp).sum())
    confusion = int((speech & has_hyp & (hyp_to_ref[np.where(has_hyp, hyp, -1)] != ref)).sum())
    return Score((missed + false_alarm + confusion) / total, missed / total, false_alarm / total,
                 confusion / total, total * STEP_S)

"""Word alignment from cross-attention: which audio frame each text token belongs to.

The published recipe (OpenAI's word timestamps, as CTranslate2 runs it): take the
alignment heads' cross-attention over the piece's real frames, softmax over frames,
standardize each frame's column over the tokens, smooth along time with a median filter
of width 7 (reflecting at the edges), average the heads, and find the monotonic path
through the tokens and frames with the most attention (dynamic time warping on the
negated matrix). Pure numpy: scores in, index pairs out.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["MEDIAN_WIDTH", "alignment_matrix", "negative_dtw"]

MEDIAN_WIDTH = 7


def alignment_matrix(scores: np.ndarray, frames: int, width: int = MEDIAN_WIDTH) -> np.ndarray:
    """[tokens, frames'] from the heads' pre-softmax scores [heads, tokens, frames], kept
    to the first `frames` encoder frames (those that hold audio)."""
    x = scores[:, :, : max(1, frames)].astype(np.float64)
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    x /= x.sum(axis=-1, keepdims=True)
    mean = x.mean(axis=-2, keepdims=True)
    std = x.std(axis=-2, keepdims=True)
    x = (x - mean) / np.where(std > 0, std, 1.0)
    x = _median_filter(x, width)
    matrix: np.ndarray = x.mean(axis=0).astype(np.float32)
    return matrix


def _median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over `width` frames around each frame, the edges reflected (not repeated);
    an axis too short to reflect is left as it is."""
    half = width // 2
    if x.shape[-1] <= half:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(half, half)], mode="reflect")
    smoothed: np.ndarray = np.median(sliding_window_view(padded, width, axis=-1), axis=-1)
    return smoothed


def negative_dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The path of least cost through -x [n, m] from (0, 0) to (n-1, m-1), moving down,
    right or diagonally; ties prefer the move right. Returns (rows, columns)."""
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    cost[0, 0] = 0.0
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    neg = -x.astype(np.float32)
    # Cells on one anti-diagonal depend only on the two before it: fill a diagonal at once.
    for d in range(2, n + m + 1):
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0 = cost[i - 1, j - 1]
        c1 = cost[i - 1, j]
        c2 = cost[i, j - 1]
        diag = (c0 < c1) & (c0 < c2)
        up = ~diag & (c1 < c0) & (c1 < c2)
        t = np.where(diag, 0, np.where(up, 1, 2))
        c = np.where(diag, c0, np.where(up, c1, c2))
        cost[i, j] = neg[i - 1, j - 1] + c
        trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    rows: list[int] = []
    cols: list[int] = []
    while i > 0 or j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        t = trace[i, j]
        if t == 0:
            i, j = i - 1, j - 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    return np.array(rows[::-1], dtype=np.int64), np.array(cols[::-1], dtype=np.int64)

"""Kaldi-style log-mel filter bank features (80 bands, 25 ms frames every 10 ms at
16 kHz), the input CAM++ speaker embeddings were trained on.

Kaldi's `compute-fbank` defaults as 3D-Speaker uses them: frames only where a whole
400-sample frame fits (snip edges), each frame's mean removed, pre-emphasis 0.97 (the
first sample against itself), Povey's window (a Hann window to the power 0.85), a
512-point FFT's power spectrum, 80 triangular filters evenly spaced on Kaldi's mel
scale from 20 Hz to 8 kHz, and the natural log floored at float32's epsilon. No dither:
the same audio always gives the same features. Pure numpy.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["FRAME_SAMPLES", "HOP_SAMPLES", "MEL_BANDS", "fbank", "frame_count"]

SAMPLE_RATE = 16000
FRAME_SAMPLES = 400
HOP_SAMPLES = 160
FFT_SIZE = 512
MEL_BANDS = 80
LOW_HZ = 20.0
PREEMPHASIS = 0.97
_EPS = float(np.finfo(np.float32).eps)


def frame_count(samples: int) -> int:
    """Frames of `samples` samples of audio (0 when shorter than one frame)."""
    return 0 if samples < FRAME_SAMPLES else 1 + (samples - FRAME_SAMPLES) // HOP_SAMPLES


def _mel(hz: np.ndarray) -> np.ndarray:
    return np.asarray(1127.0 * np.log(1.0 + hz / 700.0))


@lru_cache(maxsize=1)
def _filters() -> np.ndarray:
    """[FFT_SIZE // 2, MEL_BANDS]: Kaldi's triangles, zero on the Nyquist bin it drops."""
    bins = FFT_SIZE // 2
    low, high = _mel(np.array(LOW_HZ)), _mel(np.array(SAMPLE_RATE / 2))
    delta = (high - low) / (MEL_BANDS + 1)
    left = low + delta * np.arange(MEL_BANDS)
    centre, right = left + delta, left + 2 * delta
    freqs = _mel(np.arange(bins) * SAMPLE_RATE / FFT_SIZE)[:, None]
    up = (freqs - left) / (centre - left)
    down = (right - freqs) / (right - centre)
    filters: np.ndarray = np.maximum(0.0, np.minimum(up, down)).astype(np.float32)
    return filters


@lru_cache(maxsize=1)
def _window() -> np.ndarray:
    n = np.arange(FRAME_SAMPLES)
    window: np.ndarray = (0.5 - 0.5 * np.cos(2 * np.pi * n / (FRAME_SAMPLES - 1))) ** 0.85
    return window


def fbank(audio: np.ndarray) -> np.ndarray:
    """[frames, 80] float32 log-mel energies of 16 kHz mono `audio`."""
    n = frame_count(len(audio))
    if n == 0:
        return np.zeros((0, MEL_BANDS), dtype=np.float32)
    x = np.asarray(audio, dtype=np.float64)
    index = np.arange(FRAME_SAMPLES)[None, :] + HOP_SAMPLES * np.arange(n)[:, None]
    frames = x[index]
    frames -= frames.mean(axis=1, keepdims=True)
    previous = np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    frames = (frames - PREEMPHASIS * previous) * _window()
    power = np.abs(np.fft.rfft(frames, FFT_SIZE, axis=1)[:, : FFT_SIZE // 2]) ** 2
    energies = power.astype(np.float32) @ _filters()
    logs: np.ndarray = np.log(np.maximum(energies, _EPS)).astype(np.float32)
    return logs

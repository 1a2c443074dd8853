"""How close two renderings of the same speech are, for the parity tests of the TTS runners."""

from __future__ import annotations

import numpy as np


def mel_distance_db(
    a: np.ndarray, b: np.ndarray, sample_rate: int, n_fft: int = 1024, hop: int = 256, bands: int = 80
) -> float:
    """Mean absolute log-mel difference (dB) over the frames louder than -60 dB of a's peak,
    both at `sample_rate`."""

    def log_mel(pcm: np.ndarray) -> np.ndarray:
        frames = 1 + max(0, len(pcm) - n_fft) // hop
        window = np.hanning(n_fft)
        spec = np.abs(np.fft.rfft(np.stack([pcm[i * hop : i * hop + n_fft] * window for i in range(frames)]))) ** 2
        mel = 2595 * np.log10(1 + np.linspace(0, sample_rate / 2, spec.shape[1]) / 700)
        edges = np.linspace(0, mel[-1], bands + 2)
        fb = np.stack(
            [np.clip(np.minimum((mel - lo) / (mid - lo), (hi - mel) / (hi - mid)), 0, None)
             for lo, mid, hi in zip(edges, edges[1:], edges[2:], strict=False)]
        )
        return np.asarray(10 * np.log10(spec @ fb.T + 1e-10))

    ma, mb = log_mel(a), log_mel(b)
    loud = ma.max(axis=1) > ma.max() - 60
    return float(np.mean(np.abs(ma[loud] - mb[loud])))

"""Whisper log-mel features for one piece of at most 30 s.

faster-whisper's numpy `FeatureExtractor` does the STFT and mel filterbank; this module
fixes the shape the encoder wants: the piece's own frames, padded to 3000 (30 s), exactly
as faster-whisper's batched pipeline does. The object holds only the filterbank, so one
instance may serve several threads.
"""

from __future__ import annotations

import numpy as np

__all__ = ["HOP", "N_FRAMES", "SAMPLE_RATE", "LogMel"]

SAMPLE_RATE = 16000
"""Whisper's input rate: every upload is decoded and resampled to it (`audio/decode.py`)."""
HOP = 160
"""Samples per feature frame at 16 kHz (10 ms)."""
N_FRAMES = 3000
"""Frames in one 30 s encoder window."""


class LogMel:
    def __init__(self, n_mels: int = 80, rate: int = SAMPLE_RATE):
        # Imported here: faster-whisper's package imports ctranslate2, which only the
        # CTranslate2 runtime needs.
        from faster_whisper.feature_extractor import FeatureExtractor

        self._extractor = FeatureExtractor(feature_size=n_mels, sampling_rate=rate, hop_length=HOP)
        self.n_mels = n_mels

    def __call__(self, samples: np.ndarray) -> tuple[np.ndarray, int]:
        """Features [n_mels, 3000] (float32) and how many frames hold real audio."""
        frames = min(N_FRAMES, len(samples) // HOP)
        if len(samples) < HOP:  # the STFT needs one window of input
            samples = np.pad(samples, (0, HOP - len(samples)))
        features = self._extractor(samples.astype(np.float32, copy=False))[..., :-1]
        out = np.zeros((self.n_mels, N_FRAMES), dtype=np.float32)
        width = min(N_FRAMES, features.shape[-1])
        out[:, :width] = features[:, :width]
        return out, max(1, frames)

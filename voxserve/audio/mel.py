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


TURN_SECONDS = 8
"""Audio the end-of-turn model hears: the newest 8 s, zeros before a shorter turn."""
TURN_SAMPLES = TURN_SECONDS * SAMPLE_RATE
TURN_FRAMES = TURN_SAMPLES // HOP
"""800 feature frames: the STFT's last frame (past the end) is dropped, as Whisper does."""
_N_FFT = 400
_NORM_EPS = 1e-7


class TurnFeatures:
    """The end-of-turn model's input: Whisper's log-mel (400-point periodic Hann window,
    10 ms hop, 80 Slaney mel bands up to 8 kHz, log10 floored at 1e-10, clamped to 8 below
    the peak, then (x + 4) / 4) of exactly the last `TURN_SECONDS` of audio, left-padded
    with zeros, after the waveform is scaled to zero mean and unit variance. The padding
    comes before the scaling, so a short turn's zeros move with it, as they did when the
    model was trained. Holds only constants: one instance serves several threads."""

    def __init__(self, n_mels: int = 80) -> None:
        from faster_whisper.feature_extractor import FeatureExtractor

        self._filters = FeatureExtractor.get_mel_filters(SAMPLE_RATE, _N_FFT, n_mels=n_mels)
        self._window = np.hanning(_N_FFT + 1)[:-1]

    def __call__(self, samples: np.ndarray) -> np.ndarray:
        """Features [80, 800] (float32) of the newest 8 s of 16 kHz `samples`."""
        x = np.zeros(TURN_SAMPLES, dtype=np.float32)
        tail = np.asarray(samples, dtype=np.float32)[-TURN_SAMPLES:]
        if len(tail):
            x[TURN_SAMPLES - len(tail) :] = tail
        x = (x - x.mean()) / np.sqrt(x.var() + _NORM_EPS)
        half = _N_FFT // 2
        padded = np.pad(x.astype(np.float64), (half, half), mode="reflect")
        frames = np.lib.stride_tricks.sliding_window_view(padded, _N_FFT)[::HOP][:TURN_FRAMES]
        spectrum = np.fft.rfft(frames * self._window, axis=-1)
        power = spectrum.real**2 + spectrum.imag**2
        mel = np.log10(np.maximum(self._filters @ power.T, 1e-10))
        mel = np.maximum(mel, mel.max() - 8.0)
        out: np.ndarray = ((mel + 4.0) / 4.0).astype(np.float32)
        return out

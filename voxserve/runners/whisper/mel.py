"""Whisper's log-mel features in torch, on the runner's device.

The same features as `audio/mel.py` (faster-whisper's numpy extractor), so the two
runtimes see the same input: the audio gets 160 zeros appended, a centred STFT (400-point
periodic Hann window, hop 160, reflected edges) whose last frame is dropped, power
through the Slaney-style mel filterbank, log10 floored at 1e-10 and at 8 below the
piece's loudest value, scaled as (x + 4) / 4; the piece's last frame is dropped too, and
the result is zero-padded to 3000 frames (30 s). On a GPU the STFT of a whole batch of
30 s windows is one call (`batch`), and so are a batch of pieces of different lengths
(`pieces`), each equal to its own features.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["HOP", "N_FFT", "N_FRAMES", "TorchLogMel", "mel_filters"]

HOP = 160
N_FFT = 400
N_FRAMES = 3000
RATE = 16000


def mel_filters(n_mels: int, rate: int = RATE, n_fft: int = N_FFT) -> np.ndarray:
    """The Slaney-style mel filterbank [n_mels, n_fft / 2 + 1]: triangles between mel
    points spaced evenly on the Slaney scale (linear below 1 kHz, logarithmic above),
    each scaled to unit area."""
    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        linear = f / (200.0 / 3)
        log_part = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
        return np.where(f >= 1000.0, log_part, linear)

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        linear = m * (200.0 / 3)
        log_part = 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0))
        return np.where(m >= 15.0, log_part, linear)

    bins = np.fft.rfftfreq(n_fft, 1.0 / rate)
    top = hz_to_mel(np.array(rate / 2.0))
    points = mel_to_hz(np.linspace(0.0, float(top), n_mels + 2))
    widths = np.diff(points)
    ramps = points.reshape(-1, 1) - bins.reshape(1, -1)
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (points[2 : n_mels + 2] - points[:n_mels]))[:, None]
    filters: np.ndarray = weights.astype(np.float32)
    return filters


class TorchLogMel:
    """Log-mel features computed on `device`; thread-safe (it holds only constants)."""

    def __init__(self, n_mels: int, device: torch.device):
        self.n_mels = n_mels
        self.device = device
        self.window = torch.hann_window(N_FFT, periodic=True, device=device)
        self.filters = torch.from_numpy(mel_filters(n_mels)).to(device)

    def _log_mel(self, audio: Tensor) -> Tensor:
        """[batch, samples] float32 on the device -> [batch, n_mels, frames], each row
        floored against its own loudest value."""
        audio = torch.nn.functional.pad(audio, (0, HOP))
        spectrum = torch.stft(audio, N_FFT, HOP, window=self.window, center=True, pad_mode="reflect", return_complex=True)
        power = spectrum[..., :-1].abs() ** 2
        mel = self.filters @ power
        log = torch.clamp(mel, min=1e-10).log10()
        floor = log.amax(dim=(-2, -1), keepdim=True) - 8.0
        return (torch.maximum(log, floor) + 4.0) / 4.0

    def __call__(self, samples: np.ndarray) -> tuple[np.ndarray, int]:
        """As `audio/mel.py: LogMel`: features [n_mels, 3000] (float32, on the host) and
        how many frames hold real audio."""
        frames = min(N_FRAMES, len(samples) // HOP)
        if len(samples) < HOP:
            samples = np.pad(samples, (0, HOP - len(samples)))
        audio = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32)).to(self.device)
        features = self._log_mel(audio[None])[0, :, :-1]
        out = torch.zeros(self.n_mels, N_FRAMES, device=self.device)
        width = min(N_FRAMES, features.shape[-1])
        out[:, :width] = features[:, :width]
        return out.cpu().numpy(), max(1, frames)

    def batch(self, audio: Tensor) -> Tensor:
        """Features [batch, n_mels, 3000] of full 30 s windows [batch, 480000] already on
        the device (the offline path: no host round trip)."""
        return self._log_mel(audio)[:, :, :N_FRAMES]

    def pieces(self, audio: Tensor, lengths: Tensor, width: int) -> Tensor:
        """Features [batch, n_mels, width] of pieces zero-padded into `audio` [batch,
        samples] on the device, `lengths` [batch] their own sample counts (on the device):
        each row equal to `__call__` on its piece alone, cropped or zero-padded to `width`.

        Why the padding changes nothing: a kept frame's STFT window ends at most 40
        samples past its piece, inside the 160 zeros `__call__` appends, so it sees the
        same zeros here; the loudest value is taken over the piece's own frames only (the
        frame after the last kept one included, as alone), and frames past the piece are
        zeroed."""
        if audio.shape[-1] < HOP:
            audio = torch.nn.functional.pad(audio, (0, HOP - audio.shape[-1]))
        audio = torch.nn.functional.pad(audio, (0, HOP))
        spectrum = torch.stft(audio, N_FFT, HOP, window=self.window, center=True, pad_mode="reflect", return_complex=True)
        power = spectrum[..., :-1].abs() ** 2
        log = torch.clamp(self.filters @ power, min=1e-10).log10()
        kept = torch.clamp(lengths // HOP, min=1, max=N_FRAMES)[:, None, None]
        index = torch.arange(log.shape[-1], device=log.device)[None, None, :]
        floor = torch.where(index <= kept, log, torch.full_like(log, -torch.inf)).amax(dim=(-2, -1), keepdim=True) - 8.0
        features = torch.where(index < kept, (torch.maximum(log, floor) + 4.0) / 4.0, torch.zeros_like(log))
        if features.shape[-1] >= width:
            return features[..., :width]
        return torch.nn.functional.pad(features, (0, width - features.shape[-1]))

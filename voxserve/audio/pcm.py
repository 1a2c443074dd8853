"""The Realtime API's input audio formats, decoded as they stream in.

A live session sends raw audio in base64 pieces of any size: 16-bit little-endian PCM at
24 kHz (`audio/pcm`), or 8 kHz G.711 mu-law (`audio/pcmu`) or A-law (`audio/pcma`).
`InputDecoder` turns those bytes into float32 mono samples at 16 kHz, the rate of the VAD
and of Whisper. It is stateful so that a piece may end anywhere: half a PCM sample is
carried to the next piece, and one `soxr.ResampleStream` runs across all of them, so the
output is the same samples however the input was cut (bit for bit, measured). Each
`feed` costs time linear in its own bytes; nothing is buffered beyond the resampler's
window. Message sizes are the caller's to bound.

G.711 decodes through 256-entry tables built here from the segment structure of ITU-T
G.711 (mu-law: 8 segments with bias 33 on a 14-bit scale; A-law: 8 segments, the first
linear, on a 13-bit scale), both scaled to 16 bits as `audioop` does.

The resampler is soxr's "HQ" (flat to 7 kHz and aliasing below -130 dB from 24 kHz; flat
to the 3.4 kHz telephone band edge from 8 kHz; "LQ" cuts 3.4 kHz by 8 dB and "QQ" aliases
at -2 dB). Its price is latency: it works in blocks and holds back samples, on average
~21 ms (at most ~37 ms) of 24 kHz input and ~63 ms (at most ~115 ms) of 8 kHz input,
whatever the piece size (measured with 10, 20 and 100 ms pieces). `flush()` gives out what
it holds, for a turn that must end now.

Pure computation: no I/O, no asyncio. It must not know about sessions or events.
"""

from __future__ import annotations

import numpy as np
import soxr

__all__ = ["FORMATS", "LEGACY_FORMATS", "InputDecoder", "alaw_table", "ulaw_table"]

FORMATS: dict[str, int] = {"audio/pcm": 24000, "audio/pcmu": 8000, "audio/pcma": 8000}
"""Each input format's canonical name and the sample rate its bytes are at."""

LEGACY_FORMATS: dict[str, str] = {
    "pcm16": "audio/pcm",
    "g711_ulaw": "audio/pcmu",
    "g711_alaw": "audio/pcma",
}
"""The older session shape's `input_audio_format` names, mapped to the canonical ones."""

_RESAMPLE_QUALITY = "HQ"


def ulaw_table() -> np.ndarray:
    """The 16-bit linear value (int16) of each G.711 mu-law byte."""
    code = ~np.arange(256, dtype=np.int32) & 0xFF  # mu-law bytes are sent inverted
    exponent = (code >> 4) & 0x07
    mantissa = code & 0x0F
    # 14-bit value ((2m + 33) << e) - 33, times 4 to fill 16 bits.
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(code & 0x80, -magnitude, magnitude).astype(np.int16)


def alaw_table() -> np.ndarray:
    """The 16-bit linear value (int16) of each G.711 A-law byte."""
    code = np.arange(256, dtype=np.int32) ^ 0x55  # even bits are sent inverted
    exponent = (code >> 4) & 0x07
    mantissa = code & 0x0F
    # 13-bit value: 2m + 1 in the first two segments, (2m + 33) << (e - 1) above; times 8.
    linear = (mantissa << 4) + 8
    magnitude = np.where(exponent == 0, linear, (linear + 0x100) << np.maximum(exponent - 1, 0))
    return np.where(code & 0x80, magnitude, -magnitude).astype(np.int16)


_SCALE = np.float32(1 / 32768)
_G711 = {
    "audio/pcmu": ulaw_table().astype(np.float32) * _SCALE,
    "audio/pcma": alaw_table().astype(np.float32) * _SCALE,
}
_EMPTY = np.zeros(0, dtype=np.float32)


class InputDecoder:
    """Stateful: bytes of one format in, float32 mono samples at `rate` (16 kHz) out.

    `fmt` is a canonical name from `FORMATS`; anything else is the caller's bug and
    raises ValueError (map the older names through `LEGACY_FORMATS` first).
    """

    def __init__(self, fmt: str, rate: int = 16000) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown input format {fmt!r}; expected one of {sorted(FORMATS)}")
        self.format = fmt
        self.rate = rate
        self.source_rate = FORMATS[fmt]
        self._table = _G711.get(fmt)
        self._odd = b""  # the first byte of a PCM sample whose second byte has not come
        self._resampler = self._new_resampler()

    def _new_resampler(self) -> soxr.ResampleStream | None:
        if self.source_rate == self.rate:
            return None
        return soxr.ResampleStream(
            self.source_rate, self.rate, 1, dtype="float32", quality=_RESAMPLE_QUALITY
        )

    def feed(self, data: bytes) -> np.ndarray:
        """The samples that `data` completes (possibly none): float32 in [-1, 1)."""
        return self._resample(self._decode(data), last=False)

    def flush(self) -> np.ndarray:
        """What the resampler still holds, as if the input ended here. Decoding goes on
        afterwards with a fresh resampler, so the samples before and after a flush meet
        with a small edge (the filter sees silence on each side). An odd PCM byte still
        waiting for its pair is kept."""
        out = self._resample(_EMPTY, last=True)
        self._resampler = self._new_resampler()
        return out

    def _decode(self, data: bytes) -> np.ndarray:
        if self._table is not None:
            return self._table[np.frombuffer(data, dtype=np.uint8)]
        if self._odd:
            data = self._odd + data
        whole = len(data) & ~1
        self._odd = data[whole:]
        pcm = np.frombuffer(data, dtype="<i2", count=whole // 2)
        return pcm.astype(np.float32) * _SCALE

    def _resample(self, samples: np.ndarray, last: bool) -> np.ndarray:
        if self._resampler is None:
            return samples
        out: np.ndarray = self._resampler.resample_chunk(samples, last=last)
        return out

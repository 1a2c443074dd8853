"""Read the samples of a plain WAV file (one channel of 16-bit PCM) without FFmpeg. Pure:
bytes in, a view of them out.

Most uploads from programs are such files, and FFmpeg hands them over in frames of 1,024
samples, each converted and copied on its way through Python: most of a short upload's
cost on the server. Here the header is read and
the data chunk is viewed as int16 at once. Any other layout (more channels, other sample
formats) returns None and goes through FFmpeg, which downmixes and converts it.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["PlainWav", "plain_wav"]

_PCM = 1
_EXTENSIBLE = 0xFFFE
_PCM_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
_UNKNOWN_SIZE = 0xFFFFFFFF


class PlainWav:
    """One channel of 16-bit samples and their rate."""

    __slots__ = ("rate", "samples")

    def __init__(self, rate: int, samples: np.ndarray):
        self.rate = rate
        self.samples = samples
        """int16, little-endian, a view of the file's bytes."""


def plain_wav(data: bytes) -> PlainWav | None:
    """The samples of `data` when it is a RIFF WAVE file of one channel of 16-bit PCM,
    else None. A data chunk cut short (a truncated upload) gives the whole samples it
    holds, and one of unknown size (a streamed file's header) runs to the end of the
    file, as FFmpeg reads them."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    at = 12
    rate = 0
    while at + 8 <= len(data):
        chunk, size = data[at : at + 4], struct.unpack_from("<I", data, at + 4)[0]
        body = at + 8
        if chunk == b"fmt ":
            if size < 16 or body + size > len(data):
                return None
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", data, body)
            if tag == _EXTENSIBLE and size >= 40 and data[body + 26 : body + 40] == _PCM_GUID_TAIL:
                tag = struct.unpack_from("<H", data, body + 24)[0]
            if tag != _PCM or channels != 1 or bits != 16 or rate <= 0:
                return None
        elif chunk == b"data":
            if not rate or not size:  # FFmpeg reads an empty data chunk's size as unknown
                return None
            end = len(data) if size == _UNKNOWN_SIZE else min(len(data), body + size)
            count = (end - body) // 2
            return PlainWav(rate, np.frombuffer(data, dtype="<i2", count=count, offset=body))
        at = body + size + (size & 1)  # chunks are padded to an even size
    return None

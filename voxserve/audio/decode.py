"""Decode an uploaded file into 16 kHz mono float32 samples. Pure: bytes in, samples out.

Only audio formats are opened. FFmpeg can also open playlists, concat scripts, image
sequences and formats that synthesize sound from a text script, and some of those open
further files or URLs named inside the upload: a concat script naming a file beside the
server was decoded and its words transcribed. So every file is opened with FFmpeg's
`format_whitelist` (the demuxers in `ACCEPTED_FORMATS`: containers users send speech in),
an empty `protocol_whitelist` (no demuxer may open another file or URL, whatever it is
told) and a `codec_whitelist` of audio decoders (video streams in an upload are never
decoded, not even to probe them). The container's format is checked against the list
again before decoding.

Channels are downmixed by FFmpeg's resampler at the source rate, then soxr resamples to the
target rate. Samples go into `SampleBlocks`, each block reserved before it is allocated,
so memory is the decoded audio plus one block and a budget can refuse a file while it
decodes. Peak and finiteness are checked per decoded chunk; nothing here copies the whole
file. It never calls `gc.collect()` (faster-whisper's `decode_audio` does, on every call).

Anything PyAV cannot read becomes `InvalidRequest("could not decode audio: ...")` (code
`invalid_audio`), never a server error. Audio past `max_seconds` is refused (code
`audio_too_long`) as soon as decoding passes the limit, so a small, highly compressed
upload cannot expand without bound.
"""

from __future__ import annotations

import io
import logging

import av
import numpy as np
import soxr

from voxserve.audio.blocks import BLOCK_SAMPLES, Reserve, SampleBlocks
from voxserve.audio.mel import SAMPLE_RATE
from voxserve.audio.wav import PlainWav, plain_wav
from voxserve.errors import InvalidRequest, VoxError

__all__ = [
    "ACCEPTED_FORMATS",
    "MAX_PEAK",
    "MIN_SOURCE_RATE",
    "SAMPLE_RATE",
    "accepted",
    "decode_audio",
    "decode_blocks",
]

log = logging.getLogger(__name__)

MIN_SOURCE_RATE = 1000
"""Lowest sample rate accepted. A few bytes of WAV that claim 1 Hz would otherwise
expand to hours of audio to transcribe."""

MAX_PEAK = 1000.0
"""Largest sample magnitude accepted (full scale is 1.0). Far larger values overflow the
log-mel features, and the decoder then runs to its length limit on noise."""

ACCEPTED_FORMATS = frozenset(
    {
        "wav", "w64", "aiff", "caf", "au", "nistsphere",  # PCM and friends
        "flac", "mp3", "aac", "ac3", "eac3", "dts", "amr", "amrnb", "amrwb", "wv", "ape", "tta",
        "ogg",  # ogg/opus, ogg/vorbis, oga
        "matroska", "webm",  # webm and mkv (FFmpeg's "matroska,webm")
        "mov", "mp4", "m4a", "3gp",  # FFmpeg's "mov,mp4,m4a,3gp,3g2,mj2"
        "asf", "avi", "flv", "mpeg", "mpegts",  # wma/wmv, video files people send for their sound
    }
)
"""FFmpeg demuxers an upload may be opened with (a name matches if any of the comma-
separated parts of FFmpeg's format name does). Playlists (hls, dash), concat, image
sequences, subtitle and script formats are not among them."""


def _audio_decoders() -> str:
    names = []
    for name in sorted(av.codecs_available):
        try:
            codec = av.Codec(name, "r")
        except ValueError:  # UnknownCodecError: an encoder only
            continue
        if codec.type == "audio":
            names.append(name)
    return ",".join(names)


_OPEN_OPTIONS = {
    "format_whitelist": ",".join(sorted(ACCEPTED_FORMATS)),
    "protocol_whitelist": "none",  # no protocol is named "none": nothing nested may open
    "codec_whitelist": _audio_decoders(),
    # FFmpeg probes up to 5 MB of the stream (decoding it) to fill in codec parameters;
    # the decoder here reads rate and layout from each decoded frame, so 4 KiB is enough.
    # Opening a file then costs a small header read, not a decode of its first megabytes,
    # with the same samples from every accepted container (tests/test_asr_batched.py).
    "probesize": "4096",
}


def _undecodable(reason: str) -> InvalidRequest:
    return InvalidRequest(
        f"could not decode audio: {reason}; send a file in a format such as wav, mp3, flac, "
        "ogg/opus, m4a or webm",
        param="file",
        code="invalid_audio",
    )


def _too_long(max_seconds: float) -> InvalidRequest:
    return InvalidRequest(
        f"audio is longer than the {max_seconds:g} s limit; send a shorter file",
        param="file",
        code="audio_too_long",
    )


def _no_reserve(n: int) -> None:
    pass


def accepted(format_name: str) -> bool:
    """True when FFmpeg's format name (e.g. "matroska,webm") is on the allow-list."""
    return any(part in ACCEPTED_FORMATS for part in format_name.split(","))


def decode_blocks(
    data: bytes,
    max_seconds: float,
    rate: int = SAMPLE_RATE,
    reserve: Reserve = _no_reserve,
    block: int = BLOCK_SAMPLES,
) -> SampleBlocks:
    """Samples of the first audio stream, downmixed and resampled to `rate`, in blocks.

    `reserve(n)` is called before every block of `n` samples is allocated, so a memory
    budget can refuse the file while it decodes (its exception passes through)."""
    if not data:
        raise _undecodable("the file is empty")
    plain = plain_wav(data)
    if plain is not None:
        out = SampleBlocks(block, reserve)
        _keep_plain(plain, max_seconds, rate, out)
        return out
    try:
        container = av.open(io.BytesIO(data), mode="r", metadata_errors="ignore", options=_OPEN_OPTIONS)
    except Exception as exc:  # PyAV raises many types for garbage input
        raise _undecodable("the file is not a known audio or video format") from exc
    with container:
        if not accepted(container.format.name):
            raise _undecodable(f"the {container.format.name} format is not accepted")
        if not container.streams.audio:
            raise _undecodable("the file has no audio stream")
        out = SampleBlocks(block, reserve)
        _decode_stream(container, container.streams.audio[0], max_seconds, rate, out)
        return out


def decode_audio(
    data: bytes, max_seconds: float, rate: int = SAMPLE_RATE, reserve: Reserve = _no_reserve
) -> np.ndarray:
    """`decode_blocks` as one contiguous array: a copy of the whole audio at the end, so
    for short clips, tools and tests; the server keeps the blocks."""
    return decode_blocks(data, max_seconds, rate, reserve).to_array()


class _Sink:
    """Keeps decoded chunks up to the limit and checks their range a block at a time."""

    def __init__(self, out: SampleBlocks, limit: int, max_seconds: float):
        self.out = out
        self.limit = limit
        self.max_seconds = max_seconds
        self.checked = 0

    def keep(self, samples: np.ndarray, clip: bool = False) -> None:
        if not len(samples):
            return
        room = self.limit - len(self.out)
        if len(samples) > room:
            if not clip:
                raise _too_long(self.max_seconds)
            samples = samples[:room]
        self.out.extend(samples)
        if len(self.out) - self.checked >= self.out.block:
            self.check()

    def check(self) -> None:
        """Refuse non-finite or far out-of-range samples among those kept since the last check."""
        fresh = self.out[self.checked : len(self.out)]
        self.checked = len(self.out)
        if not len(fresh):
            return
        # Two reductions instead of np.abs: no temporary copy. NaN propagates to both.
        peak = max(-float(fresh.min()), float(fresh.max()))
        if not np.isfinite(peak):
            raise _undecodable("the audio holds invalid samples")
        if peak > MAX_PEAK:
            raise _undecodable(f"the samples are out of range (over {MAX_PEAK:g} times full scale)")


def _decode_stream(
    container: av.container.InputContainer,
    stream: av.audio.stream.AudioStream,
    max_seconds: float,
    rate: int,
    out: SampleBlocks,
) -> None:
    sink = _Sink(out, int(max_seconds * rate), max_seconds)
    mixer: av.AudioResampler | None = None
    resampler: soxr.ResampleStream | None = None
    try:
        for frame in container.decode(stream):
            if mixer is None:
                source_rate = frame.sample_rate or stream.rate or rate
                if source_rate < MIN_SOURCE_RATE:
                    raise _undecodable(f"the sample rate of {source_rate} Hz is too low for sound")
                # FFmpeg's mixer downmixes with the channel layout's proper weights.
                mixer = av.AudioResampler(format="flt", layout="mono", rate=source_rate)
                if source_rate != rate:
                    resampler = soxr.ResampleStream(source_rate, rate, 1, dtype="float32", quality="HQ")
            for mono in mixer.resample(frame):
                sink.keep(_resample(mono.to_ndarray().reshape(-1), resampler, False))
        if mixer is not None:
            for mono in mixer.resample(None):
                sink.keep(_resample(mono.to_ndarray().reshape(-1), resampler, False), clip=True)
    except VoxError:
        raise
    except Exception as exc:
        if not len(out):
            raise _undecodable("the audio data is corrupt") from exc
        # Keep what decoded before a damaged tail, as players do.
        log.warning("audio decoding stopped after %.1f s: %s", len(out) / rate, exc)
    if resampler is not None:
        sink.keep(_resample(np.zeros(0, dtype=np.float32), resampler, True), clip=True)
    sink.check()
    if not len(out):
        raise _undecodable("the file holds no audio samples")


def _keep_plain(wav: PlainWav, max_seconds: float, rate: int, out: SampleBlocks) -> None:
    """A plain WAV's samples (`audio/wav.py`), converted as FFmpeg converts 16-bit PCM
    (times 2^-15) and resampled as `_decode_stream` does, a block at a time."""
    if wav.rate < MIN_SOURCE_RATE:
        raise _undecodable(f"the sample rate of {wav.rate} Hz is too low for sound")
    if not len(wav.samples):
        raise _undecodable("the file holds no audio samples")
    sink = _Sink(out, int(max_seconds * rate), max_seconds)
    resampler = soxr.ResampleStream(wav.rate, rate, 1, dtype="float32", quality="HQ") if wav.rate != rate else None
    step = out.block
    for start in range(0, len(wav.samples), step):
        chunk = wav.samples[start : start + step].astype(np.float32) * np.float32(1 / 32768)
        sink.keep(_resample(chunk, resampler, False))
    if resampler is not None:
        sink.keep(_resample(np.zeros(0, dtype=np.float32), resampler, True), clip=True)
    sink.check()


def _resample(samples: np.ndarray, resampler: soxr.ResampleStream | None, last: bool) -> np.ndarray:
    out = samples.astype(np.float32, copy=False)
    if resampler is not None:
        out = resampler.resample_chunk(out, last=last)
    return out

"""Each TTS stream's output: its chunks, decoded in any order, handed on in sequence.

A step's chunks are decoded with their context frames (`decode_chunks`), cropped to their
own frames plus the crossfade they share with their neighbours (`fades`), and given to
their stream's `StreamOutput`, which joins them (`crossfade`), inserts markup's silences,
attaches the words' times, applies the gain and resamples, then puts the int16 audio on
the stream's `ChunkStream`. Nothing here schedules work or touches the engine's lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soxr

from voxserve.engine.script import silences_of
from voxserve.engine.stream import ChunkStream, FirstPacket, StreamItem
from voxserve.engine.voices import Span, VoiceModel
from voxserve.engine.words import WordTime, word_times
from voxserve.engine.work import StageInput, VocoderWork

__all__ = ["StreamHandle", "StreamOutput", "crossfade", "decode_chunk", "decode_chunks", "fades"]


@dataclass
class StreamHandle:
    id: int
    stream: ChunkStream
    sample_rate: int
    request_id: str


@dataclass
class StreamOutput:
    """Per-stream post-processing state. Chunks of one stream may be decoded at once and
    finish in any order; `deliver` passes them on in sequence under the output's lock, so
    the word offsets, the resampler and the writer see them in order."""

    handle: StreamHandle
    model: VoiceModel[Any]
    resampler: soxr.ResampleStream | None
    gain: float
    submitted: float = 0.0
    """`time.perf_counter` at submit, for the first packet's timing."""
    segment: int = -1
    """The segment of the last chunk finished."""
    model_samples: int = 0
    """Samples finished so far at the model's own rate: where the next segment starts."""
    acoustic_span: tuple[float, float, int] | None = None
    """The first segment's stage A: start, end (perf_counter) and threads."""
    decode_span: tuple[float, float, int] | None = None
    """The first chunk's decode: start, end (perf_counter) and threads."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: dict[int, tuple[VocoderWork, np.ndarray]] = field(default_factory=dict)
    """Decoded chunks waiting for an earlier one, by sequence number."""
    held: np.ndarray | None = None
    """The last chunk's tail, held back to crossfade with the next chunk's head."""
    next_seq: int = 0
    silences: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Samples of silence (model rate) before and after a segment's audio, by segment,
    where markup asked for a pause (`engine/script.py`)."""
    segments: int = 0
    """Segments handed to the stream so far."""

    def take_segments(self, items: Sequence[StageInput]) -> list[StageInput]:
        """Note the silence of the stream's next segments; returns the model's own items."""
        inputs, silences = silences_of(items)
        for at, pair in enumerate(silences, self.segments):
            if pair != (0, 0):
                self.silences[at] = pair
        self.segments += len(inputs)
        return inputs

    def silence(self, work: VocoderWork) -> tuple[int, int]:
        """Samples of silence that go before and after this chunk: its segment's, at the
        segment's first and last chunk."""
        pair = self.silences.get(work.segment)
        if pair is None:
            return 0, 0
        return (pair[0] if work.start == 0 else 0), (pair[1] if work.end >= work.latent.frames else 0)

    def deliver(self, work: VocoderWork, pcm: np.ndarray) -> None:
        """Hand a decoded chunk on once every earlier chunk of the stream has gone. A
        chunk that overlaps the next one (`fades`) keeps its tail back until that one
        comes, to crossfade the two; so each chunk sends as many samples as its frames
        hold, shifted by half the overlap."""
        with self.lock:
            self.pending[work.seq] = (work, pcm)
            while self.next_seq in self.pending:
                ready, samples = self.pending.pop(self.next_seq)
                self.next_seq += 1
                head, tail = fades(self.model, ready)
                if head and self.held is not None and len(samples) >= len(self.held):
                    lead = crossfade(self.held, samples[: len(self.held)])
                    samples = np.concatenate([lead, samples[len(self.held) :]])
                elif head:  # nothing held to meet: start at the join itself
                    samples = samples[head:]
                self.held = None
                if tail:
                    cut = max(0, len(samples) - 2 * tail)
                    self.held, samples = samples[cut:], samples[:cut]
                before, after = self.silence(ready)
                if before or after:
                    samples = np.concatenate([np.zeros(before, np.float32), samples, np.zeros(after, np.float32)])
                words = self.words(ready, len(samples), before)
                audio = self.finish(samples, ready.last)
                first = self.first_packet() if ready.seq == 0 else None
                self.handle.stream.put(StreamItem(audio, ready.last, words, first))

    def first_packet(self) -> FirstPacket | None:
        if self.acoustic_span is None or self.decode_span is None:
            return None
        a0, a1, a_threads = self.acoustic_span
        d0, d1, d_threads = self.decode_span
        return FirstPacket(self.submitted, a0, a1, d0, d1, time.perf_counter(), a_threads, d_threads)

    def words(self, work: VocoderWork, samples: int, lead: int = 0) -> tuple[WordTime, ...]:
        """The word timings a chunk of `samples` (model rate; the first `lead` of them
        silence) carries: its segment's words if it is the segment's first chunk, else
        none. Call once per chunk, in order."""
        profile = self.model.profile
        words: tuple[WordTime, ...] = ()
        if work.segment != self.segment:
            self.segment = work.segment
            offset = (self.model_samples + lead) / profile.sample_rate
            words = word_times(work.latent.words, offset, profile.hop / profile.sample_rate)
        self.model_samples += samples
        return words

    def finish(self, pcm: np.ndarray, last: bool) -> np.ndarray:
        audio = pcm * self.gain
        if self.resampler is not None:
            audio = self.resampler.resample_chunk(audio.astype(np.float32), last=last)
        np.clip(audio, -1.0, 1.0, out=audio)
        return (audio * 32767.0).astype(np.int16)


def fades(model: VoiceModel[Any], work: VocoderWork) -> tuple[int, int]:
    """Samples a chunk keeps before and after its own frames, to crossfade with the chunk
    before and after it in the same segment: half the model's `crossfade` at each inner
    join, none at a segment's ends."""
    half = model.profile.crossfade // 2
    return (half if work.start > 0 else 0), (half if work.end < work.latent.frames else 0)


def decode_chunk(model: VoiceModel[Any], work: VocoderWork) -> np.ndarray:
    """One chunk as `decode_chunks` decodes it."""
    return decode_chunks(model, [work])[0]


def decode_chunks(model: VoiceModel[Any], works: Sequence[VocoderWork]) -> list[np.ndarray]:
    """Decode chunks of one model in one call (on the first one's intra-op threads) with
    their context frames, then crop the context samples away, all but the `fades` that
    overlap their neighbours. An empty chunk (a stream's end) decodes to nothing."""
    real = [work for work in works if work.hi > work.lo]
    spans = [Span(work.latent, work.lo, work.hi) for work in real]
    decoded = iter(model.decode(spans, threads=real[0].threads) if real else [])
    hop = model.profile.hop
    out: list[np.ndarray] = []
    for work in works:
        if work.hi <= work.lo:
            out.append(np.zeros(0, dtype=np.float32))
            continue
        a, b = work.crop
        head, tail = fades(model, work)
        out.append(next(decoded)[a * hop - head : b * hop + tail])
    return out


def crossfade(tail: np.ndarray, head: np.ndarray) -> np.ndarray:
    """The overlap of two chunks: the earlier one's `tail` fading out while the later
    one's `head` fades in, on complementary raised-cosine gains (they sum to 1, so a
    join of two equal signals is that signal)."""
    n = len(tail)
    fade_in = (0.5 - 0.5 * np.cos(np.pi * (np.arange(n) + 0.5) / n)).astype(np.float32)
    return np.asarray(tail * (1 - fade_in) + head * fade_in, dtype=np.float32)

"""The TTS engine: text preparation, inference worker threads and per-stream output.

It wires the pure scheduler to the runners. Workers block on one condition variable and
run whatever `Scheduler.next_work` hands them; ONNX Runtime releases the GIL, so N workers
decode N chunks at once. This module knows nothing of HTTP or asyncio beyond handing a
loop to the output streams.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import soxr

from voxserve.config import TTSConfig
from voxserve.engine.lifecycle import WorkerEngine
from voxserve.engine.scheduler import AcousticWork, Scheduler, SegmentInput, VocoderWork, Work
from voxserve.engine.stream import ChunkStream, StreamItem
from voxserve.errors import InvalidRequest, NotFound, ServerError, Unavailable
from voxserve.runners.piper import (
    AcousticInput,
    PiperModel,
    VocoderRunner,
    bundled_voice,
    find_voice,
)
from voxserve.text.phonemize import Phonemizer
from voxserve.text.split import normalize, segment

__all__ = ["OPENAI_VOICES", "PreparedText", "StreamHandle", "TTSEngine", "Voice", "decode_chunk"]

log = logging.getLogger(__name__)

OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
    "verse", "marin", "cedar",
)  # fmt: skip


@dataclass(frozen=True)
class Voice:
    name: str
    speaker_id: int | None


@dataclass(frozen=True)
class PreparedText:
    """Text after normalization, segmentation and phonemization."""

    texts: list[str]
    segments: list[SegmentInput]
    characters: int


@dataclass
class StreamHandle:
    id: int
    stream: ChunkStream
    sample_rate: int
    request_id: str


@dataclass
class _Output:
    """Per-stream post-processing state, touched only by the worker decoding its chunk."""

    handle: StreamHandle
    resampler: soxr.ResampleStream | None
    gain: float
    samples_out: int = 0

    def finish(self, pcm: np.ndarray, last: bool) -> np.ndarray:
        audio = pcm * self.gain
        if self.resampler is not None:
            audio = self.resampler.resample_chunk(audio.astype(np.float32), last=last)
        np.clip(audio, -1.0, 1.0, out=audio)
        out = (audio * 32767.0).astype(np.int16)
        self.samples_out += len(out)
        return out


class CostMeter:
    """Worker-seconds spent per audio-second produced, over recent work.

    Both sums are halved whenever the audio sum passes `window_s`, so the figure follows
    the machine as it is now (other processes, long or short sentences) rather than since
    start-up. Wall time is what counts: a core shared with another process costs more.
    """

    def __init__(self, window_s: float = 30.0):
        self.window_s = window_s
        self.busy = 0.0
        self.audio = 0.0

    def add(self, busy_s: float, audio_s: float) -> None:
        self.busy += busy_s
        self.audio += audio_s
        if self.audio > self.window_s:
            self.busy /= 2
            self.audio /= 2

    def cost(self) -> float | None:
        """Worker-seconds per audio-second, or None before enough audio was made."""
        return self.busy / self.audio if self.audio >= 2.0 else None


@dataclass
class EngineStats:
    """Counters read by the metrics endpoint; written under the engine lock."""

    chunks: int = 0
    acoustic_runs: int = 0
    audio_seconds: float = 0.0
    failures: int = 0
    busy_s: dict[int, float] = field(default_factory=dict)
    cost: CostMeter = field(default_factory=CostMeter)


def decode_chunk(vocoder: VocoderRunner, work: VocoderWork) -> np.ndarray:
    """Decode a chunk with its context frames, then crop the context samples away."""
    if work.hi <= work.lo:
        return np.zeros(0, dtype=np.float32)
    pcm = vocoder.run([work.latent[:, work.lo : work.hi]])[0]
    a, b = work.crop
    return pcm[a * vocoder.hop : b * vocoder.hop]


class TTSEngine(WorkerEngine):
    kind = "tts"
    stop_timeout_s = 2.0

    def __init__(
        self,
        config: TTSConfig,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__(config.workers)
        self.config = config
        files = find_voice(config.voice_dir) if config.voice_dir else bundled_voice()
        self.model = PiperModel(files, config.cache_dir)
        self.phonemizer = Phonemizer(self.model.config)
        self.voices = [Voice(s.name, s.speaker_id) for s in self.model.speakers]
        self._noise_scale = (
            self.model.noise_scale if config.noise_scale is None else config.noise_scale
        )
        self._noise_w = self.model.noise_w if config.noise_w is None else config.noise_w
        self._aliases = {
            name: self.voices[i % len(self.voices)] for i, name in enumerate(OPENAI_VOICES)
        }
        self._clock = clock
        self._cond = threading.Condition()
        self._sched = Scheduler(
            config.chunking,
            self.model.hop,
            self.model.sample_rate,
            credits=config.credits,
            urgent_slack=config.urgent_slack_s,
            acoustic_slots=config.workers - 1 if config.workers > 1 else None,
        )
        self._outputs: dict[int, _Output] = {}
        self._ids = itertools.count(1)
        self._stopping = False
        self._in_hand: dict[int, Work] = {}
        """What each worker is running, by worker index; failed if the worker dies."""
        self.stats = EngineStats()

    # -- lifecycle (start, healthy and stop come from WorkerEngine) ------------------
    def drain(self) -> None:
        """Refuse new streams and fail the live ones (their writers end now); workers exit
        after the item they are running. Does not block: `stop` waits for them."""
        with self._cond:
            self._stopping = True
            for out in self._outputs.values():
                out.handle.stream.fail(Unavailable("server is shutting down"))
            self._outputs.clear()
            self._cond.notify_all()

    def synthesize(self, text: str, voice: Voice, speed: float = 1.0, sample_rate: int | None = None,
                   timeout: float = 60.0) -> np.ndarray:
        """Whole utterance as int16 PCM, from a plain thread (CLI, warm-up, tests)."""
        handle = self.submit(self.prepare(text, voice, speed), sample_rate or self.sample_rate)
        parts: list[np.ndarray] = []
        try:
            while True:
                item = handle.stream.get_blocking(timeout)
                self.taken(handle.id)
                parts.append(item.pcm)
                if item.last:
                    return np.concatenate(parts)
        finally:
            self.abort(handle.id)

    def _warm(self) -> None:
        """Synthesize before the first client, so that ONNX Runtime's first-run costs are
        not a client's: one short utterance (about 4 s of audio, enough to seed the cost
        meter that admission uses), then one segment of the longest length per worker,
        all at once, so that every worker's sessions size their memory arenas now rather
        than while clients are served (RSS then stays flat from the start)."""
        voice = self.voices[0]
        self.synthesize("Warming up the voice: one, two, three, four, five, six, seven.", voice)
        words = ("the quick brown fox jumps over a lazy dog near the quiet river bank " * 8).split()
        longest = ""
        for word in words:
            if len(longest) + len(word) + 1 >= self.config.max_segment_chars:
                break
            longest = f"{longest} {word}".strip()
        with ThreadPoolExecutor(self.config.workers, thread_name_prefix="warmup") as pool:
            list(pool.map(lambda _: self.synthesize(longest + ".", voice), range(self.config.workers)))

    @property
    def sample_rate(self) -> int:
        return self.model.sample_rate

    @property
    def active_streams(self) -> int:
        with self._cond:
            return len(self._sched)

    # -- requests --------------------------------------------------------------------
    def resolve_voice(self, name: str) -> Voice:
        for voice in self.voices:
            if voice.name == name:
                return voice
        alias = self._aliases.get(name.lower())
        if alias is not None:
            return alias
        known = ", ".join([v.name for v in self.voices] + list(OPENAI_VOICES))
        raise NotFound(f"voice {name!r} does not exist; use one of: {known}", param="voice")

    def prepare(self, text: str, voice: Voice, speed: float = 1.0) -> PreparedText:
        """Normalize, segment and phonemize. CPU work: call it from the text pool."""
        clean = normalize(text)
        texts: list[str] = []
        segments: list[SegmentInput] = []
        pieces = segment(
            clean,
            first_max_chars=self.config.first_segment_chars,
            max_chars=self.config.max_segment_chars,
        )
        for piece in pieces:
            for ids in self.phonemizer.ids(piece):
                texts.append(piece)
                segments.append(
                    SegmentInput(
                        ids,
                        noise_scale=self._noise_scale,
                        length_scale=self.model.length_scale / speed,
                        noise_w=self._noise_w,
                        speaker_id=voice.speaker_id,
                    )
                )
        if not segments:
            raise InvalidRequest(
                "input has nothing that can be spoken; send words or numbers", param="input"
            )
        return PreparedText(texts, segments, len(text))

    def submit(
        self,
        prepared: PreparedText,
        sample_rate: int,
        loop: asyncio.AbstractEventLoop | None = None,
        request_id: str = "",
    ) -> StreamHandle:
        """Start decoding; audio arrives on the returned handle's stream."""
        stream_id = next(self._ids)
        handle = StreamHandle(stream_id, ChunkStream(loop), sample_rate, request_id)
        resampler = None
        if sample_rate != self.model.sample_rate:
            resampler = soxr.ResampleStream(
                self.model.sample_rate, sample_rate, 1, dtype="float32", quality="HQ"
            )
        with self._cond:
            if self._stopping:
                raise Unavailable("server is shutting down")
            if not self.any_worker_alive():
                raise Unavailable("no TTS worker is alive; see /health")
            self._outputs[stream_id] = _Output(handle, resampler, self.config.output_gain)
            self._sched.add(stream_id, prepared.segments, self._clock())
            self._cond.notify_all()
        return handle

    def taken(self, stream_id: int) -> None:
        """The writer consumed one chunk of this stream."""
        with self._cond:
            self._sched.taken(stream_id)
            self._cond.notify()

    def abort(self, stream_id: int) -> None:
        """Drop a stream and all its queued work; in-flight results are discarded."""
        with self._cond:
            self._sched.abort(stream_id)
            out = self._outputs.pop(stream_id, None)
        if out is not None:
            out.handle.stream.close()

    def keeping_up(self, admitted: int = 0) -> bool:
        """Whether one more stream fits now: no live stream is about to run dry, at most
        one stream per worker is still starting (so a burst of arrivals ramps up instead
        of being let in before anyone can tell it is too much), and the streams stay
        under the capacity measured from recent work.

        `admitted` is what admission has let in; those not yet submitted count as
        starting.
        """
        with self._cond:
            live = len(self._sched)
            unsubmitted = max(0, admitted - live)
            if self._sched.starting() + unsubmitted >= self.config.workers:
                return False
            if self._sched.lagging(self._clock(), self.config.admit_min_slack_s):
                return False
            capacity = self.capacity_streams()
            return capacity is None or max(live, admitted) < capacity

    def capacity_streams(self) -> float | None:
        """Real-time streams the workers sustain at the recently measured cost, at
        `target_utilization`; None until enough audio has been made to tell."""
        cost = self.stats.cost.cost()
        if cost is None or cost <= 0:
            return None
        return self.config.workers * self.config.target_utilization / cost

    def stream_ids(self) -> list[int]:
        with self._cond:
            return self._sched.ids()

    def stream_debug(self, stream_id: int) -> dict[str, int]:
        """Introspection for tests and debugging: what a stream holds right now."""
        with self._cond:
            out = self._outputs.get(stream_id)
            return {
                "untaken": self._sched.untaken(stream_id),
                "produced": self._sched.produced(stream_id),
                "buffered": len(out.handle.stream) if out else 0,
            }

    def has_work(self, stream_id: int) -> bool:
        with self._cond:
            return self._sched.pending_work(stream_id) or stream_id in self._outputs

    # -- workers ---------------------------------------------------------------------
    def _worker(self, index: int) -> None:
        while True:
            with self._cond:
                self._in_hand.pop(index, None)
                work = None
                while not self._stopping:
                    work = self._sched.next_work(self._clock())
                    if work is not None:
                        break
                    self._cond.wait()
                if work is None:
                    return
                self._in_hand[index] = work
            started = time.perf_counter()
            audio = self._run(work)
            with self._cond:
                spent = time.perf_counter() - started
                busy = self.stats.busy_s
                busy[index] = busy.get(index, 0.0) + spent
                self.stats.cost.add(spent, audio)

    def _worker_died(self, index: int, exc: BaseException) -> None:
        with self._cond:
            work = self._in_hand.pop(index, None)
        if work is not None:
            self._fail(work, RuntimeError(f"worker {threading.current_thread().name} died"))

    def _run(self, work: Work) -> float:
        """Run one unit of work; returns the seconds of audio it produced."""
        try:
            if isinstance(work, AcousticWork):
                self._run_acoustic(work)
                return 0.0
            return self._run_vocoder(work)
        except Exception as exc:  # noqa: BLE001 - any inference error fails only this stream
            self._fail(work, exc)
            return 0.0

    def _run_acoustic(self, work: AcousticWork) -> None:
        seg = work.input
        started = time.perf_counter()
        z = self.model.acoustic.run(
            [AcousticInput(seg.ids, seg.noise_scale, seg.length_scale, seg.noise_w, seg.speaker_id)]
        )[0]
        with self._cond:
            self._sched.complete_acoustic(work, z, time.perf_counter() - started)
            self.stats.acoustic_runs += 1
            self._cond.notify_all()

    def _run_vocoder(self, work: VocoderWork) -> float:
        pcm = decode_chunk(self.model.vocoder, work)
        with self._cond:
            out = self._outputs.get(work.stream_id)
        if out is not None:
            # Only one chunk per stream is in flight, so the resampler sees chunks in order.
            out.handle.stream.put(StreamItem(out.finish(pcm, work.last), work.last))
        with self._cond:
            chunk = self._sched.complete_vocoder(work, len(pcm), self._clock())
            self.stats.chunks += 1
            self.stats.audio_seconds += len(pcm) / self.model.sample_rate
            if chunk is not None and chunk.last:
                self._outputs.pop(work.stream_id, None)
            self._cond.notify_all()
        return len(pcm) / self.model.sample_rate

    def _fail(self, work: Work, exc: BaseException) -> None:
        stream_id = work.stream_id
        with self._cond:
            self._sched.fail(stream_id, work)
            out = self._outputs.pop(stream_id, None)
            self.stats.failures += 1
            self._cond.notify_all()
        rid = out.handle.request_id if out else "?"
        log.error("inference failed for request %s: %r", rid, exc, exc_info=exc)
        if out is not None:
            out.handle.stream.fail(ServerError(f"synthesis failed (request {rid})"))

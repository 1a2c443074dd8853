"""The ASR engine: decoding worker threads around the pure batcher and the Whisper runner.

Requests arrive as pieces of at most 30 s whose features are ready. Workers block on one
condition variable, take whatever `Batcher.next_batch` hands them (segments of any request
that share decoding options), run the runner on it, turn tokens into timed segments and
put them on each request's in-order result stream. A piece that fails Whisper's quality
checks goes back to the batcher with the next temperature. Aborting a request drops its
queued pieces at once; pieces already being decoded are discarded when they finish.

Live utterances (realtime sessions) come with a deadline: the batcher puts them before
file work, earliest deadline first, and while any live session is open file pieces may
hold at most `workers - 1` workers, so a live utterance never waits behind a 30 s piece.
When a session starts a decode, and how many sessions the workers sustain, is the live
policy's to say (`live_policy`, `engine/live.py`); the workers feed its meter the time
of each live batch.

Pieces shorter than 30 s are encoded in a window fitted to them (`fitted_window`); one
whose text ends in a loop is decoded again in the full 30 s window.

A batch that is all the work there is (no other batch decoding or waiting, no more pieces
to come from its requests, no speech stream open, and for a file batch no live session
open) runs on `solo_threads` intra-op threads, so a lone short clip, or the last piece of
a long file, uses the cores that would idle (`solo_threads`, pure). While it runs it
holds every core: file batches wait for it, live ones do not.

On a batched device (CUDA, or the simulated one) one worker feeds the device, and a
batch fills instead: pieces of every width share it, padded to the widest, and a file
group waits up to one batch's time for company (`engine/asr_sizing.py`); pieces arrive
as raw audio, whose log-mel the runner computes for the whole batch (`AudioInput`).

Callers run the audio work (decode, cut, log-mel on a CPU) in their audio pool
(`engine/asr_audio.py`); each model's cost is followed in `engine/asr_costs.py`. No HTTP.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from voxserve.audio.chunks import Chunking
from voxserve.audio.mel import SAMPLE_RATE
from voxserve.config import ASRConfig, default_cores
from voxserve.engine import devices
from voxserve.engine.adapters.whisper import FALLBACK_TEMPERATURES, fitted_window
from voxserve.engine.asr_audio import PreparedAudio, cut, live_audio, piece_samples
from voxserve.engine.asr_costs import (
    COST_PROBE_S,
    ModelCosts,
    live_decode_s,
    probe_sound,
    timed_cost,
)
from voxserve.engine.asr_models import load_recognizers
from voxserve.engine.asr_sizing import (
    BATCH_TIME_WEIGHT,
    BATCHED_FILE_WAIT_MAX_S,
    BATCHED_FILE_WAIT_S,
    CPU_MAX_REQUESTS,
    audio_budget,
    audio_pool_size,
    batcher_for,
    file_wait,
    requests_limit,
    resolve_device,
    sized,
    solo_threads,
)
from voxserve.engine.batcher import Batcher, Pending
from voxserve.engine.chunking import Hearing, speech_probabilities
from voxserve.engine.cores import SharedCores
from voxserve.engine.lifecycle import WorkerEngine
from voxserve.engine.live import LiveEstimate, LivePolicy, LiveView
from voxserve.engine.recognizer import Decoded, Piece, Recognizer, TranscribeOptions, choose_model
from voxserve.engine.results import ResultStream
from voxserve.engine.segments import TimedSegment
from voxserve.engine.threads import lower_priority, prestart
from voxserve.errors import NotFound, ServerError, Unavailable

__all__ = [
    "BATCHED_FILE_WAIT_MAX_S",
    "BATCHED_FILE_WAIT_S",
    "CPU_MAX_REQUESTS",
    "FALLBACK_TEMPERATURES",
    "SEGMENTS_AHEAD",
    "ASREngine",
    "ASRHandle",
    "PreparedAudio",
    "TranscribeOptions",
    "WindowResult",
    "audio_pool_size",
    "file_wait",
    "fitted_window",
    "requests_limit",
    "resolve_device",
    "solo_threads",
]

log = logging.getLogger(__name__)

CPU_MAX_BATCH = 8
"""Most pieces one CPU decoding call takes: past it a batch's pieces wait for its longest
one, and the workers already decode in parallel. (A GPU takes `--asr-gpu-batch`.)"""
SEGMENTS_AHEAD = 16
"""Pieces of one request whose features may wait in the engine: bounds a long file's
memory while keeping every worker fed."""
EVEN_PIECE_S = 14.0
"""A file of a few 30 s pieces is cut again into even pieces of at most this many seconds,
in one shorter window, so the workers finish together (docs/ASR.md). 0: 30 s pieces."""
FITTED_WINDOWS = True
"""Encode a file piece shorter than 30 s in a window fitted to it (below), not Whisper's
30 s, as the encoder's work grows with the window and the words stay the same. Live: always."""


@dataclass(frozen=True)
class WindowResult:
    """One decoded piece of a request."""

    index: int
    start: float
    end: float
    segments: list[TimedSegment]
    language: str | None


@dataclass
class ASRHandle:
    id: int
    request_id: str
    pieces: int
    duration: float
    results: ResultStream[WindowResult]
    model: str = ""
    """The loaded model that decodes it."""


@dataclass
class _Job:
    handle: ASRHandle
    model: Recognizer
    attempts: list[Hashable]
    """The batch keys of the model's attempts at a piece, in order."""
    options: TranscribeOptions
    left: int
    deadline: float | None = None
    unsent: int = 0
    """File pieces not yet submitted (`Batcher.coming` counts them)."""


@dataclass
class ASRStats:
    """Counters read by the metrics endpoint; written under the engine lock."""

    batches: int = 0
    solo_batches: int = 0
    """Batches that ran alone on `solo_threads` threads."""
    pieces: int = 0
    fallbacks: int = 0
    widened: int = 0
    """Pieces decoded in a fitted window that looped and were decoded again in 30 s."""
    failures: int = 0
    audio_seconds: float = 0.0
    batch_sizes: Counter[int] = field(default_factory=Counter)
    busy_s: dict[int, float] = field(default_factory=dict)


class ASREngine(WorkerEngine):
    kind = "asr"
    stop_timeout_s = 5.0

    def __init__(
        self, config: ASRConfig, clock: Callable[[], float] = time.monotonic, cores: SharedCores | None = None
    ):
        device, runtime = resolve_device(config)
        self.batched = device in devices.BATCHED_DEVICES
        """Whether batches fill (one device, one batch at a time) rather than spread over
        CPU workers."""
        config = sized(config, self.batched, default_cores())
        super().__init__(config.workers)
        self.config = config
        self.max_batch = config.gpu_batch if self.batched else CPU_MAX_BATCH
        """Most pieces one decoding call takes."""
        self.even_piece_s = EVEN_PIECE_S
        """`EVEN_PIECE_S`; a probe that compares cut limits sets its own."""
        self.device, self.runtime = device, runtime
        self.models: dict[str, Recognizer] = load_recognizers(config, device, runtime)
        """The loaded models by name, the default first (`ASRConfig.models`)."""
        self.default = next(iter(self.models.values()))
        """The model OpenAI's names mean (`choose_model`)."""
        self.budget = audio_budget(config)
        self._clock = clock
        self._cond = threading.Condition()
        self._batcher: Batcher[Piece] = batcher_for(config, self.batched, self.max_batch)
        self._batch_s: float | None = None
        """Running wall time of a file batch on a batched device (`file_wait`)."""
        self._jobs: dict[int, _Job] = {}
        self._ids = itertools.count(1)
        self._stopping = False
        self._in_flight = self._busy_workers = 0
        self._busy_cores = 0
        """Intra-op threads of the batches decoding now (a solo batch counts all of its)."""
        self._file_batches = 0
        """Workers decoding file pieces now (the rest are free or decoding live ones)."""
        self._live_sessions = 0
        self._live_decode_s = math.inf
        """The fastest live decode `estimate_live` has timed."""
        slots = self.max_batch if self.batched else config.workers
        self.live_policy = LivePolicy(self._live_view, clock, slots=slots, workers=config.workers)
        """When live sessions decode, and how many the workers sustain (`engine/live.py`)."""
        self.stats = ASRStats()
        self.costs = ModelCosts()
        """Each model's decoding cost, and the transcription slots held of it: what
        admission weighs (`engine/asr_costs.py`)."""
        self.cores = SharedCores() if cores is None else cores
        """What the speech engine does on the same cores (`cores`, the board it is built
        on). No batch runs solo while speech runs. Asked under this engine's lock
        (`engine/cores.py`)."""
        self.cores.join_transcription(self)

    # -- lifecycle (start, healthy and stop come from WorkerEngine) --------------------
    def drain(self) -> None:
        """Refuse new requests and fail the open ones, dropping their queued pieces. Does
        not block: a batch being decoded finishes (its results are discarded) and `stop`
        waits for that."""
        with self._cond:
            self._stopping = True
            for job_id, job in self._jobs.items():
                self._batcher.abort(job_id)
                self._batcher.coming -= job.unsent
                job.handle.results.fail(Unavailable("server is shutting down"))
            self._jobs.clear()
            self._cond.notify_all()

    def _warm(self) -> None:
        """Decode a second of silence on every model, so that first-call costs (replicas,
        buffers, the solo replica) are not a client's, and time each model on a piece of
        sound (`COST_PROBE_S`) as the first estimate of its cost; then time a live decode.
        The cut planner's VAD loads here too: an upload over 30 s would otherwise pay its
        session's creation (~0.25 s here)."""
        probe = probe_sound(COST_PROBE_S)
        speech_probabilities(probe)  # loads the cut planner's VAD before the first long upload
        for model in self.models.values():
            model.warm(self.config.solo_threads, self.config.nice)
            self.costs.first(model.name, timed_cost(model, probe, self.config.beam_size))
        self.estimate_live()

    def estimate_live(self) -> None:
        """Time a live decode on the default model, warm, on one thread as it runs beside
        others: the live capacity's estimate until sessions are measured
        (`engine/live.py`). The fastest of three. The warm-up calls it; the server calls
        it again once every engine has warmed up, when no other warm-up shares the cores."""
        took = min(self._live_decode_s, live_decode_s(self.default, self.config.beam_size))
        self._live_decode_s = took
        self.live_policy.estimate = LiveEstimate.from_warmup(took)
        log.info("ASR warm-up: a live decode takes ~%.0f ms; live capacity estimated from it", took * 1e3)

    @property
    def name(self) -> str:
        """The default model's name."""
        return self.default.name

    @property
    def multilingual(self) -> bool:
        """Whether the default model detects a piece's language itself."""
        return self.default.abilities.detects_language

    def model(self, name: str | None) -> Recognizer:
        """A loaded model by its own name; the default for None."""
        if name is None:
            return self.default
        try:
            return self.models[name]
        except KeyError:
            raise NotFound(
                f"model {name!r} is not loaded; the server loads {', '.join(self.models)}",
                param="model",
                code="model_not_found",
            ) from None

    def snapshot(self) -> dict[str, Any]:
        with self._cond:
            s = self.stats
            return {
                "requests": len(self._jobs),
                "queued": len(self._batcher),
                "in_flight": self._in_flight,
                "live_queued": self._batcher.live_queued(),
                "file_batches": self._file_batches,
                "live_sessions": self._live_sessions,
                "batches": s.batches,
                "solo_batches": s.solo_batches,
                "pieces": s.pieces,
                "fallbacks": s.fallbacks,
                "widened": s.widened,
                "failures": s.failures,
                "audio_seconds": s.audio_seconds,
                "batch_sizes": dict(s.batch_sizes),
                "busy": dict(s.busy_s),
                "healthy": self.healthy,
                "buffered_audio_s": self.budget.held / SAMPLE_RATE,
                "budget_refused": self.budget.refused,
            }

    # -- request side ------------------------------------------------------------------
    def choose(self, options: TranscribeOptions, requested: str | None = None) -> TranscribeOptions:
        """`options` with the loaded model that serves them (`choose_model`): `requested`
        is a model's own name, or None for the names that mean the default. 400 for what
        no loaded model can serve, 404 for a model that is not loaded."""
        if requested is not None:
            self.model(requested)
        abilities = {name: m.abilities for name, m in self.models.items()}
        return replace(options, model=choose_model(requested, abilities, self.default.name, options))

    def check(self, options: TranscribeOptions) -> None:
        """Reject what the request's model cannot do, saying what to send instead."""
        self.choose(options, options.model)

    def prepare(
        self,
        data: bytes,
        chunking: Chunking | None = None,
        model: str | None = None,
        timed: bool = False,
        through: Hearing | None = None,
    ) -> PreparedAudio:
        """Decode and cut for `model` (the request's), as `engine/asr_audio.py: cut` says.
        CPU work: run it in the audio pool.

        Every block of decoded samples is reserved against the buffered-audio budget
        before it is allocated (429 when the budget is spent) and held until the caller
        calls `release()` on the result. One request holds at most `max_audio_seconds`
        (plus one block): decoding stops with 400 past it."""
        # PyAV is imported only to decode uploads: an engine fed samples (a GPU machine
        # measuring the runner through the engine) runs without it.
        from voxserve.audio.decode import decode_blocks

        self._expect(1)
        lease = self.budget.lease()
        try:
            audio = decode_blocks(data, self.config.max_audio_seconds, reserve=lease.take)
            return cut(
                audio, lease, self.model(model), chunking=chunking, timed=timed, through=through,
                workers=self.config.workers, ahead=SEGMENTS_AHEAD, even_piece_s=self.even_piece_s,
            )
        except BaseException:
            lease.release()
            raise
        finally:
            self._expect(-1)

    def _expect(self, pieces: int) -> None:
        """Count file pieces on their way to the batcher (+) or arrived or dropped (-):
        an upload being decoded counts one, a registered request its pieces not yet
        submitted. A batched device's file groups wait for them (`Batcher.coming`)."""
        with self._cond:
            self._batcher.coming += pieces
            if self._batcher.coming <= 0:
                self._cond.notify_all()

    def prepare_samples(self, samples: np.ndarray) -> PreparedAudio:
        """Cut audio that is already 16 kHz float32 (a live utterance), holding its share
        of the buffered-audio budget like an upload. CPU work: run it in the audio pool."""
        return live_audio(samples, self.budget)

    # -- live sessions -----------------------------------------------------------------
    def live_session(self, opened: bool) -> None:
        """Count a realtime session in (True) or out (False). While any is open, file
        pieces leave one worker free for live utterances. (The live meter counts the
        active sessions, which the realtime use case tells it: `LivePolicy.sessions`.)"""
        with self._cond:
            self._live_sessions = max(0, self._live_sessions + (1 if opened else -1))
            self._cond.notify_all()

    def busy(self) -> bool:
        """Whether any transcription work is decoding or waiting: for other engines that
        would use the idle cores (speech on two threads) to ask first."""
        with self._cond:
            return bool(self._busy_workers or len(self._batcher))

    def _live_view(self) -> LiveView:
        """What the live policy decides from: the live queue and the idle workers (none
        while anything waits for a batch), now."""
        with self._cond:
            idle = 0 if len(self._batcher) else max(0, self.config.workers - self._busy_cores)
            return LiveView(self._clock(), self._batcher.live_queued(), idle)

    def clock(self) -> float:
        """The clock deadlines are given in."""
        return self._clock()

    def _files_allowed(self) -> bool:
        workers = self.config.workers
        if self._busy_cores > self._busy_workers:
            return False  # a solo batch is decoding: it holds every core
        return not (self._live_sessions and workers > 1 and self._file_batches >= workers - 1)

    def piece(self, prepared: PreparedAudio, index: int, model: str | None = None) -> Any:
        """What one piece is decoded from, for `model` (the request's, `ASRHandle.model`):
        its log-mel on a CPU Whisper, its raw samples on a batched device or a model that
        takes audio; None when it is silent. CPU work: run it in the audio pool."""
        found = piece_samples(prepared, index, FITTED_WINDOWS)
        return None if found is None else self.model(model).input(*found)

    def open(
        self,
        options: TranscribeOptions,
        prepared: PreparedAudio,
        loop: asyncio.AbstractEventLoop | None = None,
        request_id: str = "",
        deadline: float | None = None,
    ) -> ASRHandle:
        """Register a request; its pieces follow through `submit`. `options.model` names
        the model (None: `choose` picks it). A `deadline` (on `clock()`) makes it live
        work: it goes before every file piece."""
        options = self.choose(options, options.model)
        model = self.model(options.model)
        attempts = model.attempts(options, self.config.beam_size)
        job_id = next(self._ids)
        pieces = len(prepared.spans)
        handle = ASRHandle(job_id, request_id, pieces, prepared.duration, ResultStream(pieces, loop), model.name)
        with self._cond:
            if self._stopping:
                raise Unavailable("server is shutting down")
            self._jobs[job_id] = _Job(handle, model, attempts, options, pieces, deadline, unsent=0 if deadline else pieces)
            self._batcher.coming += 0 if deadline else pieces
        return handle

    def submit(self, handle: ASRHandle, prepared: PreparedAudio, index: int, decode_input: Any) -> bool:
        """Queue one piece whose features are ready (None: silent, no text); False if the
        request is gone."""
        return self.submit_all(handle, prepared, [(index, decode_input)])

    def submit_all(
        self,
        handle: ASRHandle,
        prepared: PreparedAudio,
        pieces: Sequence[tuple[int, Any]],
    ) -> bool:
        """Queue pieces whose features are ready, as `submit` does, all under one lock: a
        worker that wakes meanwhile sees them together, so a long file's first pieces fill
        batches instead of the first one starting alone. False if the request is gone."""
        silent: list[tuple[int, float, float]] = []
        with self._cond:
            job = self._jobs.get(handle.id)
            if job is None:
                return False
            now = self._clock()
            sent = min(job.unsent, len(pieces))
            job.unsent -= sent
            self._batcher.coming -= sent
            for index, decode_input in pieces:
                span = prepared.spans[index]
                offset, duration = span.start / SAMPLE_RATE, len(span) / SAMPLE_RATE
                if decode_input is None:
                    silent.append((index, offset, duration))
                    continue
                piece = Piece(handle.id, index, offset, duration, job.model.prepared(decode_input, job.options))
                key = self._key(job, piece)
                self._batcher.add(Pending(handle.id, index, key, piece, job.deadline), now)
            self._cond.notify(len(pieces))
        for index, offset, duration in silent:
            self._complete(job, WindowResult(index, offset, offset + duration, [], None), duration)
        return True

    def _key(self, job: _Job, piece: Piece) -> tuple[str, Hashable, int]:
        """What a batch shares: one model, its key for the piece's attempt, and what the
        model asks pieces to share besides (`Recognizer.width`)."""
        model = job.model
        return (model.name, job.attempts[piece.attempt], model.width(piece.input))

    def abort(self, handle: ASRHandle) -> None:
        """Drop a request and its queued pieces; pieces in flight are discarded later."""
        with self._cond:
            self._batcher.abort(handle.id)
            job = self._jobs.pop(handle.id, None)
            if job is not None:
                self._batcher.coming -= job.unsent
            self._cond.notify_all()
        handle.results.close()

    # -- workers -----------------------------------------------------------------------
    def audio_pool(self) -> ThreadPoolExecutor:
        """Threads that decode, cut and featurize uploads for this engine, at its priority,
        all started at once."""
        pool = ThreadPoolExecutor(
            self.config.audio_workers, "asr-audio", initializer=lower_priority, initargs=(self.config.nice,)
        )
        prestart(pool, self.config.audio_workers)
        return pool

    def _worker(self, index: int) -> None:
        lower_priority(self.config.nice)
        while True:
            taken = self._take()
            if taken is None:
                return
            batch, threads = taken
            started = time.perf_counter()
            self._run(batch, threads)
            self._ran(index, batch, threads, time.perf_counter() - started)

    def _take(self) -> tuple[list[Pending[Piece]], int] | None:
        """Wait for the next batch and count it in; None when the engine stops."""
        with self._cond:
            batch = None
            while not self._stopping:
                files = self._files_allowed()
                idle = self.config.workers - self._busy_workers
                batch = self._batcher.next_batch(self._clock(), files, idle)
                if batch is not None:
                    break
                deadline = self._batcher.deadline(files)
                self._cond.wait(None if deadline is None else max(0.0, deadline - self._clock()))
            if batch is None:
                return None
            live = batch[0].live
            threads = solo_threads(
                self.config.solo_threads,
                live=live,
                running=self._busy_workers,
                waiting=len(self._batcher) + self._still_to_come(batch),
                live_sessions=self._live_sessions,
                busy_elsewhere=self.cores.speech_running(),
            )
            self._busy_workers += 1
            self._busy_cores += threads
            self._file_batches += 0 if live else 1
            self._in_flight += len(batch)
            self.stats.batches += 1
            self.stats.solo_batches += threads > 1
            self.stats.batch_sizes[len(batch)] += 1
            return batch, threads

    def _ran(self, index: int, batch: list[Pending[Piece]], threads: int, took: float) -> None:
        """Count a decoded batch out, `took` seconds on worker `index`: the live meter
        times live batches, the model's cost and the batched wait follow file ones."""
        live = batch[0].live
        audio_s = sum(p.payload.duration for p in batch)
        with self._cond:
            self._busy_workers -= 1
            self._busy_cores -= threads
            self._file_batches -= 0 if live else 1
            self._in_flight -= len(batch)
            busy = self.stats.busy_s
            busy[index] = busy.get(index, 0.0) + took
            if live:
                self.live_policy.ran(took, threads)
            else:
                self.costs.meter(cast(tuple[str, Hashable, int], batch[0].key)[0], took * threads, audio_s)
            if not live and self.batched:
                self._batcher.free_at = self._clock()
                self._batch_s = took if self._batch_s is None else self._batch_s + BATCH_TIME_WEIGHT * (took - self._batch_s)
                self._batcher.wait_s = file_wait(self._batch_s, self.config.batch_wait_ms / 1000)
            self._cond.notify_all()

    def weights(self) -> dict[str, float]:
        """Each model's cost over the cheapest one's (1 for every model until measured):
        what one transcription slot of it weighs in admission."""
        return self.costs.weights(self.models)

    def hold(self, model: str, n: int = 1) -> None:
        """Count a transcription slot of `model` taken (n=1) or given back (n=-1)."""
        self.costs.hold(model, n)

    def admits(self, active: int, model: str | None) -> bool:
        """The transcription admission's gate: whether a request for `model` fits, with
        every slot weighed by its model's cost (`weights`), within the request limit:
        a request for a model three times as costly as the cheapest holds three of
        its `max_requests`."""
        return self.costs.admits(self.models, model or self.default.name, self.config.max_requests)

    def _still_to_come(self, batch: list[Pending[Piece]]) -> int:
        """Pieces of the batch's own requests other than the batch's: a long file's next
        pieces are coming, so its first piece does not run solo. Call under the lock."""
        mine = Counter(p.request for p in batch)
        return sum(max(0, job.left - n) for j, n in mine.items() if (job := self._jobs.get(j)) is not None)

    def _run(self, batch: list[Pending[Piece]], threads: int) -> None:
        name, key, _ = cast(tuple[str, Hashable, int], batch[0].key)  # (model, its key, width)
        model = self.models[name]
        try:
            outputs = model.decode([p.payload.input for p in batch], key, threads)
        except Exception as exc:  # noqa: BLE001 - an inference error fails only this batch
            self._fail({p.request for p in batch}, exc)
            return
        for pending, out in zip(batch, outputs, strict=True):
            try:
                self._finish(pending.payload, key, out)
            except Exception as exc:  # noqa: BLE001 - fails only this request
                self._fail({pending.request}, exc)

    def _finish(self, piece: Piece, key: Hashable, out: Any) -> None:
        with self._cond:
            job = self._jobs.get(piece.job)
        if job is None:
            return  # aborted while decoding
        verdict = job.model.judge(piece, key, out, len(job.attempts), job.options)
        if isinstance(verdict, Decoded):
            result = WindowResult(
                piece.index, piece.offset, piece.offset + piece.duration, verdict.segments, verdict.language
            )
            self._complete(job, result, piece.duration)
            return
        with self._cond:
            if self._jobs.get(piece.job) is not job:
                return
            piece.input = verdict.input
            if verdict.advance:
                piece.attempt += 1
                self.stats.fallbacks += 1
            else:
                self.stats.widened += 1
            self._batcher.add(Pending(piece.job, piece.index, self._key(job, piece), piece, job.deadline), self._clock())
            self._cond.notify()

    def _complete(self, job: _Job, result: WindowResult, duration: float) -> None:
        with self._cond:
            if self._jobs.get(job.handle.id) is not job:
                return
            self.stats.pieces += 1
            self.stats.audio_seconds += duration
            job.left -= 1
            if job.left == 0:
                del self._jobs[job.handle.id]
        job.handle.results.put(result.index, result)

    def _fail(self, job_ids: set[int], exc: Exception) -> None:
        with self._cond:
            jobs = [self._jobs.pop(j) for j in job_ids if j in self._jobs]
            for j in job_ids:
                self._batcher.abort(j)
            self._batcher.coming -= sum(job.unsent for job in jobs)
            self.stats.failures += 1
            self._cond.notify_all()
        for job in jobs:
            rid = job.handle.request_id or str(job.handle.id)
            log.error("transcription failed for request %s: %r", rid, exc, exc_info=exc)
            job.handle.results.fail(ServerError(f"transcription failed (request {rid})"))


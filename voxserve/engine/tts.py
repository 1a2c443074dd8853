"""The TTS engine: text preparation, the inference worker threads, and the load that
admission reads.

It wires the pure scheduler to the voice models it loaded (`--tts-models`, by the
families `engine/tts_models.py` names; each one a `voxserve.engine.voices.VoiceModel`).
Its other parts sit beside it: each stream's output (`engine/output.py`), the warm-up
(`engine/tts_warmup.py`), its counters (`engine/tts_stats.py`) and admission's grants
not yet submitted (`engine/tts_admitted.py`).

Workers block on one condition variable and run whatever `CpuScheduler.next_work` hands
them, on the model of the work's stream; ONNX Runtime releases the GIL, so N workers
decode N chunks at once. Each model's cost (worker-seconds per audio-second) is measured
apart, and admission weighs every live stream by its model's cost. This module knows
nothing of HTTP or asyncio beyond handing a loop to the output streams.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import soxr

from voxserve.config import TTSConfig
from voxserve.engine.admission import (
    TARGET_UTILIZATION,
    LoadView,
    hold_reason,
    room_for,
    stream_capacity,
)
from voxserve.engine.batched_scheduler import BatchedScheduler
from voxserve.engine.cores import SharedCores
from voxserve.engine.cost import CostMeter
from voxserve.engine.cpu_scheduler import CpuScheduler
from voxserve.engine.devices import BATCHED_DEVICES, resolve_device
from voxserve.engine.lifecycle import WorkerEngine
from voxserve.engine.output import StreamHandle, StreamOutput, decode_chunks, fades
from voxserve.engine.scheduler import CREDITS, Budget, Scheduler
from voxserve.engine.script import (
    Piece,
    piece_inputs,
    read_script,
    script_pieces,
    silences_of,
    tag_voice,
)
from voxserve.engine.stream import ChunkStream
from voxserve.engine.tts_admitted import Admitted
from voxserve.engine.tts_models import by_name, load_models
from voxserve.engine.tts_stats import EngineStats, stream_batch
from voxserve.engine.tts_warmup import WarmUp, longest_segment
from voxserve.engine.voices import Voice, VoiceModel
from voxserve.engine.work import (
    AcousticWork,
    StageInput,
    VocoderWork,
    Work,
)
from voxserve.errors import InvalidRequest, ServerError, Unavailable
from voxserve.text.split import normalize, segment

__all__ = ["FIRST_SEGMENT_CHARS", "MAX_SEGMENT_CHARS", "PreparedText", "TTSEngine"]

log = logging.getLogger(__name__)

FIRST_SEGMENT_CHARS = 60
"""A first sentence longer than this is cut at a clause so that its stage A, which cannot
stream, ends early (for a model without `sentence_chars`; one with it speaks whole
sentences)."""

MAX_SEGMENT_CHARS = 200
"""Longer sentences are cut at clauses (then spaces): a long stage A holds a core for
hundreds of milliseconds while other streams wait (a model with `sentence_chars` cuts
at its own length instead)."""

CAPACITY_ROUNDS = 4
"""Times a batched device's capacity is read again at the batch its streams would make
(`TTSEngine.capacity_streams`). A cold read, at the cost of a step of one, undercounts;
read again at the batch that many streams make, it overshoots, and the reads after
settle where the streams and their batch agree. Four leave room for a curve less even
than the simulated device's, whose figures are in docs/BENCHMARKS.md ("Tuning
constants")."""

STEPS_IN_FLIGHT = 2
"""Threads that drive a batched device: one step runs while the next is gathered and its
inputs are copied, so the device does not wait on Python between steps."""

@dataclass(frozen=True)
class PreparedText:
    """Text after normalization, segmentation and the model's own text front end."""

    segments: list[StageInput]
    characters: int
    """Characters of the input, or of the text it speaks where it has markup."""
    model: str
    """The voice model that made the segments, and that will speak them."""
    voice: Voice
    speed: float
    rest: tuple[Piece, ...] = ()
    """Pieces of the text not yet through the model's front end (`TTSEngine.prepare`
    with `head_only`): `prepare_rest` makes their segments, and `extend` hands them to
    the stream."""


def _device_budget(config: TTSConfig, device: str) -> Budget:
    """One unit per worker on a CPU, steps of up to `gpu_batch` units on a batched device."""
    return Budget.batched(config.gpu_batch) if device in BATCHED_DEVICES else Budget.cpu(config.workers)


class TTSEngine(WorkerEngine):
    kind = "tts"
    stop_timeout_s = 2.0

    def __init__(
        self,
        config: TTSConfig,
        clock: Callable[[], float] = time.monotonic,
        models: Sequence[VoiceModel[Any]] | None = None,
        budget: Budget | None = None,
    ):
        """`models`: already loaded voice models, instead of those `config.models` names.
        `budget`: how the device is scheduled; by default one unit per worker on a CPU
        and steps of up to `gpu_batch` units on a GPU (`Budget.batched`)."""
        self.device, self.runtime = resolve_device(config.device, config.runtime, "onnx")
        if budget is None:
            budget = _device_budget(config, self.device)
        super().__init__(STEPS_IN_FLIGHT if budget.stepped else config.workers)
        self.capacity = 1.0 if budget.stepped else float(config.workers)
        """Device-seconds per second that admission budgets: the CPU's workers, or one
        device that runs one step at a time."""
        self.config = config
        self.models = by_name(list(models) if models is not None else load_models(config))
        """The loaded voice models by name, the default first."""
        self.default_model = next(iter(self.models.values()))
        """The model OpenAI's model names mean when no loaded model claims them."""
        self._clock = clock
        self._cond = threading.Condition()
        policy = BatchedScheduler if budget.stepped else CpuScheduler  # one unit or a batch a step
        self._sched: Scheduler = policy(credits=CREDITS, budget=budget)
        self._outputs: dict[int, StreamOutput] = {}
        self._ids = itertools.count(1)
        self._stopping = False
        self._in_hand: dict[int, list[Work]] = {}
        """What each worker is running, by worker index; failed if the worker dies."""
        self._device_until = 0.0
        """When the last step to end ended (`_device_share`)."""
        self.cores = SharedCores()
        """The board it shares the cores on, which the transcription engine joins
        (`ASREngine(cores=...)`). While transcription runs, no unit spreads onto the idle
        core (`CpuScheduler.next_work`). Asked with this engine's lock let go (the other
        engine asks this one under its own)."""
        self.cores.join_speech(self, config.workers)
        self.stats = EngineStats(costs={name: CostMeter() for name in self.models})
        self.max_streams = config.stream_limit(budget.stepped)
        """Streams decoded at once (`--tts-max-streams`, or the device's default)."""
        self._admitted = Admitted(self.max_streams + config.max_queue)
        """Grants `keeping_up` made that `submit` has not yet seen, and slots sessions
        keep (`park`): each counts at its own model's cost (`_counted`)."""

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
        """Whole utterance as int16 PCM, from a plain thread (CLI, warm-up, tests); at the
        voice's model's own rate unless `sample_rate` is given."""
        rate = sample_rate or self.models[voice.model].profile.sample_rate
        return self.collect(self.submit(self.prepare(text, voice, speed), rate), timeout)

    def collect(self, handle: StreamHandle, timeout: float = 60.0) -> np.ndarray:
        """A submitted stream's whole audio, from a plain thread: every chunk taken in
        order (waiting at most `timeout` for each), then the stream dropped."""
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
        """Warm each model before the first client (`engine/tts_warmup.py: WarmUp`)."""
        budget = self._sched.budget
        batch = budget.batch if budget.stepped else None
        warm = WarmUp(self.synthesize, self.costs, self.config.workers, batch, longest_segment(MAX_SEGMENT_CHARS))
        for model in self.models.values():
            warm.run(model, self.stats.costs[model.name])

    @property
    def sample_rate(self) -> int:
        """The default model's sample rate."""
        return self.default_model.profile.sample_rate

    @property
    def active_streams(self) -> int:
        with self._cond:
            return len(self._sched)

    # -- requests --------------------------------------------------------------------
    def prepare(
        self, text: str, voice: Voice, speed: float = 1.0, head_only: bool = False,
        resolve: Callable[[str], Voice] | None = None,
    ) -> PreparedText:
        """Normalize and segment (as the model's profile plans it), then the voice's model
        makes its stage A inputs (phonemes). CPU work: call it from the text pool.

        Markup (SSML, or inline `[pause:]` and `[voice:]` tags: `engine/script.py`) makes
        pieces in the voices its tags name, found by `resolve` (by default among the
        voice's model's own, `tag_voice`), with exact silence where it asks for a pause.

        `head_only`: stop at the first piece of text that gives segments, and leave the
        other pieces in `rest`, so that a stream starts before the model's front end has
        read a long text (`prepare_rest` and `extend` finish it)."""
        model = self.models[voice.model]
        whole = model.profile.sentence_chars

        def cut(part: str, first: bool) -> list[str]:
            return segment(
                part,
                first_max_chars=FIRST_SEGMENT_CHARS if whole is None and first else None,
                max_chars=MAX_SEGMENT_CHARS if whole is None else whole,
            )

        script = read_script(text, self.config.max_input_chars)
        if script is None:
            pieces = [Piece(part, voice, speed) for part in cut(normalize(text), True)]
        else:
            by_name = resolve or (lambda name: tag_voice(self.models, model, name))
            pieces = script_pieces(script, voice, speed, model.profile.sample_rate, by_name, cut)
        segments: list[StageInput] = []
        rest: tuple[Piece, ...] = ()
        for at, piece in enumerate(pieces):
            segments.extend(piece_inputs(model, piece))
            if head_only and segments:
                rest = tuple(pieces[at + 1 :])
                break
        if not segments:
            raise InvalidRequest(
                "input has nothing that can be spoken; send words or numbers", param="input"
            )
        characters = len(text) if script is None else script.spoken_chars
        return PreparedText(segments, characters, model.name, voice, speed, rest)

    def prepare_rest(self, prepared: PreparedText) -> list[StageInput]:
        """The segments of `prepared.rest` (none if they say nothing). CPU work, as for
        `prepare`."""
        model = self.models[prepared.model]
        return [item for piece in prepared.rest for item in piece_inputs(model, piece)]

    def submit(
        self,
        prepared: PreparedText,
        sample_rate: int,
        loop: asyncio.AbstractEventLoop | None = None,
        request_id: str = "",
    ) -> StreamHandle:
        """Start decoding; audio arrives on the returned handle's stream."""
        model = self.models[prepared.model]
        profile = model.profile
        stream_id = next(self._ids)
        handle = StreamHandle(stream_id, ChunkStream(loop), sample_rate, request_id)
        resampler = None
        if sample_rate != profile.sample_rate:
            resampler = soxr.ResampleStream(
                profile.sample_rate, sample_rate, 1, dtype="float32", quality="HQ"
            )
        with self._cond:
            if self._stopping:
                raise Unavailable("server is shutting down")
            if not self.any_worker_alive():
                raise Unavailable("no TTS worker is alive; see /health")
            output = StreamOutput(handle, model, resampler, model.output_gain, time.perf_counter())
            self._outputs[stream_id] = output
            complete = not prepared.rest
            segments = output.take_segments(prepared.segments)
            self._sched.add(stream_id, segments, self._clock(), profile, complete)
            self._admitted.submitted(prepared.model)
            self._cond.notify_all()
        return handle

    def extend(self, stream_id: int, segments: Sequence[StageInput]) -> None:
        """The rest of a stream submitted with `PreparedText.rest` (`prepare_rest`); the
        stream ends after them. A stream already gone is left alone."""
        with self._cond:
            out = self._outputs.get(stream_id)
            inputs = out.take_segments(segments) if out is not None else silences_of(segments)[0]
            self._sched.extend(stream_id, inputs)
            self._cond.notify_all()

    def fail_stream(self, stream_id: int, exc: BaseException) -> None:
        """End a live stream with a server error (its text could not be finished)."""
        self._fail_stream(stream_id, None, "preparing the rest of the text", exc)

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

    def keeping_up(self, admitted: int = 0, model: str | None = None) -> bool:
        """Whether one more stream of voice model `model` fits now: admission's rule
        (`engine/admission.py: hold_reason`) on what this engine sees (`_load_view`).
        `admitted` is what admission has let in; those not yet submitted count as
        starting, and at their model's cost (`_counted`). A newcomer of no named model
        counts at the costliest model's cost."""
        with self._cond:
            reason = hold_reason(self._load_view(admitted), model, self.default_model.name)
            if reason is not None:
                self.stats.held[reason] += 1
                return False
            self._admitted.let_in(model)  # admission grants a slot on a yes
        return True

    def _load_view(self, admitted: int) -> LoadView:
        """The engine as admission weighs it. Call under the lock."""
        live, unsubmitted = self._counted(admitted)
        budget = self._sched.budget
        return LoadView(
            capacity=self.capacity,
            slots=budget.batch if budget.stepped else self.config.workers,
            costs=self._admission_costs(live),
            live=live,
            unsubmitted=unsubmitted,
            starting=self._sched.starting() + max(0, admitted - len(self._sched)),
            playback=self._sched.playback(),
            now=self._clock(),
            batched=budget.stepped,
        )

    def park(self, model: str | None) -> None:
        """A session keeps its admitted slot, taken for `model`, with no stream in it
        until its next segment (`serving/speech_session.py: HeldSlot`)."""
        with self._cond:
            self._admitted.park(model)

    def unpark(self, model: str | None) -> None:
        """That slot is in use again, or given back."""
        with self._cond:
            self._admitted.unpark(model)

    def _counted(self, admitted: int) -> tuple[dict[str, int], int]:
        """The streams admission counts (`Admitted.counted`). Call under the lock."""
        return self._admitted.counted(self._sched.streams_by_model(), admitted, self.models)

    def costs(self) -> dict[str, float | None]:
        """Each model's recently measured cost in worker-seconds per audio-second (None
        until it has made enough audio)."""
        with self._cond:
            return {name: meter.cost() for name, meter in self.stats.costs.items()}

    def _admission_costs(self, live: Mapping[str, int], curve: bool = False) -> dict[str, float | None]:
        """Each model's cost as admission counts it, times its profile's `ramp`: on a
        CPU, at one unit a step; on a batched device, read off its batch curve at the
        batch its `live` streams and the newcomer make (`stream_batch`): the warm-up's
        steps at every batch bucket, refined by traffic's (`CostMeter.cost`), or with
        `curve` the warm-up's alone (`CostMeter.curve_cost`). Call under the lock."""
        budget = self._sched.budget
        costs: dict[str, float | None] = {}
        for name, meter in self.stats.costs.items():
            profile = self.models[name].profile
            batch = stream_batch(live.get(name, 0) + 1, profile, budget.batch) if budget.stepped else 1
            cost = meter.curve_cost(batch) if curve else meter.cost(batch)
            costs[name] = None if cost is None else cost * profile.ramp
        return costs

    @property
    def batched(self) -> bool:
        """Whether the engine drives a batched device (a GPU, the sim), whose steps hold
        many units and whose cost falls with the batch, rather than CPU workers."""
        return self._sched.budget.stepped

    def carries(self, admitted: int, queued: Mapping[str | None, int], model: str | None) -> bool:
        """Whether the device carries, at the batch curve its warm-up measured, the
        streams admitted, those waiting in admission's line (`queued`, by the model each
        named) and one more of `model`: their load within `TARGET_UTILIZATION` of the
        device, each model's cost read at the batch all its streams make
        (`_admission_costs`). Admission's line holds a burst the device carries instead
        of refusing it, and the gate (`keeping_up`), at the costs traffic measures, lets
        it in as fast as the streams keep up. True while no cost is known."""
        with self._cond:
            live, unsubmitted = self._crowd(admitted, queued)
            costs = self._admission_costs(live, curve=True)
            return room_for(self.capacity * TARGET_UTILIZATION, costs, live, unsubmitted, model)

    def drain_s(self, admitted: int, queued: Mapping[str | None, int]) -> float | None:
        """Seconds the device needs, at the costs admission reads (the batch curve as
        traffic refined it), to make the audio of the streams admitted and queued
        (`queued` as for `carries`), each as long as its model's streams have been on
        average: what a refused client is told to wait (`Retry-After`). None while no
        cost or length is known."""
        with self._cond:
            live, unsubmitted = self._crowd(admitted, queued)
            costs = self._admission_costs(live)
            lengths = self.stats.stream_seconds()
        known = {name: c for name, c in costs.items() if c is not None and name in lengths}
        if not known:
            return None
        worst = max(known, key=lambda name: known[name] * lengths[name])
        total = sum(n * known.get(name, known[worst]) * lengths.get(name, lengths[worst]) for name, n in live.items())
        total += unsubmitted * known[worst] * lengths[worst]
        return total / self.capacity

    def _crowd(self, admitted: int, queued: Mapping[str | None, int]) -> tuple[dict[str, int], int]:
        """The streams counted as `_counted` counts them, with those `queued` under the
        model each named (those of none, or of a model not loaded, unsubmitted). Call
        under the lock."""
        live, unsubmitted = self._counted(admitted)
        for name, n in queued.items():
            if name is not None and name in self.models:
                live[name] = live.get(name, 0) + n
            else:
                unsubmitted += n
        return live, unsubmitted

    def capacity_streams(self, admitted: int = 0) -> float | None:
        """Real-time streams the device sustains at admission's target utilization for
        the mix of models live now, each stream weighed by its model's measured cost
        (`engine/admission.py: stream_capacity`); None until some model's cost is known.
        `admitted` as for `keeping_up`.

        On a batched device a model's cost falls as its streams make larger steps, so
        the figure is read where the two agree: the mix of now (the default model alone
        with none live) scaled to the capacity found, its costs read again at that
        many streams, a few times over (`CAPACITY_ROUNDS`)."""
        default = self.default_model.name
        budget = self.capacity * TARGET_UTILIZATION
        with self._cond:
            live, unsubmitted = self._counted(admitted)
            capacity = stream_capacity(budget, self._admission_costs(live), live, unsubmitted, default)
            if not self.batched or capacity is None:
                return capacity
            total = sum(live.values()) + unsubmitted
            mix = {name: n / total for name, n in live.items()} if total else {default: 1.0}
            other = unsubmitted / total if total else 0.0
            for _ in range(CAPACITY_ROUNDS):
                crowd = {name: round(share * capacity) for name, share in mix.items()}
                found = stream_capacity(
                    budget, self._admission_costs(crowd), crowd, round(other * capacity), default
                )
                if found is None:
                    break
                capacity = found
        return capacity

    def admission_held(self) -> dict[str, int]:
        """How often `keeping_up` held a newcomer, by reason (`EngineStats.held`)."""
        with self._cond:
            return dict(self.stats.held)

    def step_stats(self) -> dict[str, Any]:
        """Units per device step by stage (`{stage: {units: steps}}`), the vocoder steps'
        frames by part (`EngineStats.step_frames`), padding's share of them, and each
        model's recent mean units per vocoder step."""
        with self._cond:
            stats = self.stats
            return {
                "step_units": {stage: dict(counts) for stage, counts in stats.step_units.items()},
                "step_frames": dict(stats.step_frames),
                "padded_share": stats.padded_share(),
                "units": dict(stats.units),
            }

    def idle_core_units(self) -> dict[str, int]:
        """How often a lone stream used the idle core: units run on several threads
        ("threads"), chunks decoded beside another of their stream ("chunks")."""
        with self._cond:
            return dict(self._sched.spread)

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
            elsewhere = self.cores.transcription_running()
            with self._cond:
                self._in_hand.pop(index, None)
                step: list[Work] = []
                while not self._stopping:
                    step = self._sched.next_step(self._clock(), elsewhere)
                    if step:
                        break
                    self._cond.wait()
                    # Ask again after the wait, with this engine's lock let go.
                    self._cond.release()
                    try:
                        elsewhere = self.cores.transcription_running()
                    finally:
                        self._cond.acquire()
                if not step:
                    return
                gone = [work for work in step if work.stream_id not in self._outputs]
                for work in gone:  # not expected: every live stream has its output
                    self._sched.fail(work.stream_id, work)
                step = [work for work in step if work.stream_id in self._outputs]
                if not step:
                    continue
                self._in_hand[index] = step
                model = self._outputs[step[0].stream_id].model
            started = time.perf_counter()
            audio, call = self._run(step, model)
            with self._cond:
                ended = time.perf_counter()
                busy = self.stats.busy_s
                busy[index] = busy.get(index, 0.0) + ended - started
                stage = "acoustic" if isinstance(step[0], AcousticWork) else "vocoder"
                share = self._device_share(*call) if self._sched.budget.stepped else ended - started
                self.stats.costs[model.name].add(stage, share, audio, step[0].threads, len(step))
                self.stats.step(model.name, stage, step, model.profile.chunking)

    def _device_share(self, started: float, ended: float) -> float:
        """The time a batched device's step, whose model call ran from `started` to
        `ended`, costs the device, as the cost meter counts it. Call under the lock.

        A CPU worker's step costs its wall time (`_worker`), the engine's work on its
        chunks included: the worker does it. On a batched device a step costs its model
        call (the launches and the kernels) and not the engine's work on the results
        (handing each chunk to its stream), which runs while the next step is on the
        device; counted, it would make a device whose host is busy with other threads
        look small, and admission would refuse a burst the device carries. And the
        device runs one step at a time while the next is gathered and launched
        (`STEPS_IN_FLIGHT`), so a call's wall time holds the tail of the one before it:
        counted whole, two calls in flight read up to twice the device's time. So a
        step costs what its call adds to the device's busy timeline: from the end of
        the call before (or its own start, if later) to its end."""
        share = max(0.0, ended - max(started, self._device_until))
        self._device_until = max(self._device_until, ended)
        return share

    def _worker_died(self, index: int, exc: BaseException) -> None:
        with self._cond:
            step = self._in_hand.pop(index, [])
        for work in step:
            self._fail(work, RuntimeError(f"worker {threading.current_thread().name} died"))

    def _run(self, step: list[Work], model: VoiceModel[Any]) -> tuple[float, tuple[float, float]]:
        """Run one step (units of one stage of one model) on that model; returns the
        seconds of audio it produced (stage A: the seconds its latents hold) and when its
        model call started and ended (`time.perf_counter`). An error fails the streams
        of that step only."""
        started = time.perf_counter()
        try:
            acoustic = [work for work in step if isinstance(work, AcousticWork)]
            if acoustic:
                return self._run_acoustic(acoustic, model)
            return self._run_vocoder([work for work in step if isinstance(work, VocoderWork)], model)
        except Exception as exc:  # noqa: BLE001 - any inference error fails only these streams
            for work in step:
                self._fail(work, exc)
            return 0.0, (started, time.perf_counter())

    def _run_acoustic(self, step: list[AcousticWork], model: VoiceModel[Any]) -> tuple[float, tuple[float, float]]:
        started = time.perf_counter()
        latents = model.acoustic([work.input for work in step], threads=step[0].threads)
        ended = time.perf_counter()
        with self._cond:
            for work, latent in zip(step, latents, strict=True):
                out = self._outputs.get(work.stream_id)
                if out is not None and work.segment == 0:
                    out.acoustic_span = (started, ended, work.threads)
                self._sched.complete_acoustic(work, latent, (ended - started) * work.threads)
            self.stats.acoustic_runs += len(step)
            self._cond.notify_all()
        profile = model.profile
        return sum(latent.frames for latent in latents) * profile.hop / profile.sample_rate, (started, ended)

    def _run_vocoder(self, step: list[VocoderWork], model: VoiceModel[Any]) -> tuple[float, tuple[float, float]]:
        started = time.perf_counter()
        decoded = decode_chunks(model, step)
        ended = time.perf_counter()
        rate = model.profile.sample_rate
        made = [len(pcm) - sum(fades(model, work)) if len(pcm) else 0 for work, pcm in zip(step, decoded, strict=True)]
        with self._cond:
            outs = [self._outputs.get(work.stream_id) for work in step]
        # A pause's silence is audio the player holds (the deadline moves by it), but
        # costs the device nothing: the cost meter sees only what was decoded.
        sizes = [size + (sum(out.silence(work)) if out is not None else 0) for size, work, out in zip(made, step, outs, strict=True)]
        for work, pcm, out in zip(step, decoded, outs, strict=True):
            if out is not None:
                if work.seq == 0:
                    out.decode_span = (started, ended, work.threads)
                out.deliver(work, pcm)
        with self._cond:
            for work, samples in zip(step, sizes, strict=True):
                chunk = self._sched.complete_vocoder(work, samples, self._clock(), ended - started)
                self.stats.chunks += 1
                self.stats.audio_seconds += samples / rate
                if chunk is not None and chunk.last:
                    out = self._outputs.pop(work.stream_id, None)
                    if out is not None:
                        self.stats.ended(model.name, out.model_samples / rate)
            self._cond.notify_all()
        return sum(made) / rate, (started, ended)

    def _fail(self, work: Work, exc: BaseException) -> None:
        self._fail_stream(work.stream_id, work, "inference", exc)

    def _fail_stream(self, stream_id: int, work: Work | None, what: str, exc: BaseException) -> None:
        with self._cond:
            self._sched.fail(stream_id, work)
            out = self._outputs.pop(stream_id, None)
            self.stats.failures += 1
            self._cond.notify_all()
        rid = out.handle.request_id if out else "?"
        log.error("%s failed for request %s: %r", what, rid, exc, exc_info=exc)
        if out is not None:
            out.handle.stream.fail(ServerError(f"synthesis failed (request {rid})"))

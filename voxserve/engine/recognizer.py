"""The seam between the ASR engine and a speech recognizer family: what a request asks
for, what a model can do, one piece of audio on its way through the model, and the
verdict on a decoded piece.

The engine cuts audio into pieces, batches pieces that share a key, and hands back timed
segments in order. It knows nothing of any model's tokens: a `Recognizer` (one per
loaded model, `engine/adapters/`) turns a request into the keys of its attempts, a
piece's samples into the model's input, a batch into outputs, and an output into either
timed segments or another attempt. Whisper's temperature ladder, its compression and
loop checks and its alignment live behind its adapter; a family without them has none.

`choose_model` is the one rule that picks the model a request is served by.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from voxserve.audio.chunks import Chunking
from voxserve.engine.segments import TimedSegment
from voxserve.errors import InvalidRequest

__all__ = [
    "Abilities",
    "Decoded",
    "Piece",
    "Recognizer",
    "Retry",
    "TranscribeOptions",
    "choose_model",
]


@dataclass(frozen=True)
class TranscribeOptions:
    """What one request asks for, before a model turns it into decoding options."""

    task: str = "transcribe"
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    """0 decodes greedily/beam first and raises the temperature when a piece fails the
    checks (as OpenAI documents); a value > 0 samples at exactly that temperature."""
    timings: bool = False
    """Align words to the audio: sentence-sized segments with real times, and word
    timestamps. Without it a piece is one segment spanning its audio."""
    words: bool = False
    """Word timestamps are wanted (`timestamp_granularities[]=word`)."""
    model: str | None = None
    """The loaded model that serves the request (`choose_model`); None: the default."""
    logprobs: bool = False
    """Give each text token's log-probability (`include: ["logprobs"]`)."""
    chunking: Chunking | None = None
    """Where long audio may be cut (`chunking_strategy`); None: the default rule
    (`engine/chunking.py`)."""


@dataclass(frozen=True)
class Abilities:
    """What a loaded model can do; `/v1/models` shows it and `choose_model` reads it."""

    languages: tuple[str, ...]
    """ISO-639-1 codes of the languages it transcribes."""
    detects_language: bool
    """It finds a piece's language itself when the request names none."""
    translates: bool
    """It translates into English (`/v1/audio/translations`)."""
    word_timings: bool
    """It aligns words to the audio: word timestamps and sentence-sized segments."""
    prompt: bool
    """It takes a text prompt that primes the decoder."""
    logprobs: bool
    """It gives each text token's log-probability."""

    def lacks(self, options: TranscribeOptions) -> str | None:
        """What of `options` this model cannot do, in words; None when it can do all."""
        if options.task == "translate" and not self.translates:
            return "translation into English"
        if options.language is not None and options.language not in self.languages:
            return f"language {options.language!r}"
        if options.words and not self.word_timings:
            return "word timings"
        if options.prompt and not self.prompt:
            return "a prompt"
        if options.logprobs and not self.logprobs:
            return "log-probabilities"
        return None

    def describe(self) -> dict[str, Any]:
        """The abilities as `/v1/models` lists them."""
        return {
            "languages": list(self.languages),
            "language_detection": self.detects_language,
            "translation": self.translates,
            "word_timestamps": self.word_timings,
            "prompt": self.prompt,
            "logprobs": self.logprobs,
        }


@dataclass
class Piece:
    """One cut piece of a request on its way through a model. The engine owns the
    request's bookkeeping; `attempt` and `tried` are the recognizer's, across its
    attempts at the piece."""

    job: int
    index: int
    offset: float
    """Where the piece starts in the request's audio, in seconds."""
    duration: float
    input: Any
    """The model's input for this piece (`Recognizer.input`)."""
    attempt: int = 0
    """Index into the request's attempt keys (`Recognizer.attempts`)."""
    tried: list[Any] = field(default_factory=list)
    """What the recognizer kept of earlier attempts, to choose among them."""


@dataclass(frozen=True)
class Retry:
    """Decode the piece again: with `input` (the same, or in a wider window), at the
    next attempt's key when `advance`."""

    input: Any
    advance: bool


@dataclass(frozen=True)
class Decoded:
    """A piece's final result: its timed segments (none for silence) and the language
    found in it, when the model detects one."""

    segments: list[TimedSegment]
    language: str | None


class Recognizer(Protocol):
    """One loaded speech recognizer, as the ASR engine drives it. Its calls come from
    several worker threads at once (`decode`), and from the audio pool (`input`)."""

    name: str
    abilities: Abilities
    memory_mb: float
    """Resident memory the model takes with the engine's workers, measured at load."""
    timed_piece_s: float | None
    """None: the model times its words itself, and its segments from them. Otherwise
    its segments are timed from the cuts: a request that shows times gets pieces cut at
    pauses into at most this many seconds, each one segment."""
    trims_silence: bool
    """Cut leading and trailing silence off every upload, whatever its length."""

    def attempts(self, options: TranscribeOptions, beam_size: int) -> list[Hashable]:
        """The batch keys of a request's attempts at each piece, in order: pieces with
        equal keys (and equal `width`) share a batch."""
        ...

    def input(self, samples: np.ndarray, window: int) -> Any:
        """The model's input for a piece of 16 kHz float32 samples. `window` is the
        encoder window the engine planned for it, in 10 ms frames; a model that takes
        audio of any length may ignore it. CPU work: the audio pool runs it."""
        ...

    def prepared(self, piece: Any, options: TranscribeOptions) -> Any:
        """A piece's input with what its request adds (Whisper: alignment, when times or
        log-probabilities are asked for)."""
        ...

    def width(self, piece: Any) -> int:
        """What pieces must share besides their key to share a batch on a CPU."""
        ...

    def decode(self, inputs: Sequence[Any], key: Hashable, threads: int) -> list[Any]:
        """Run the model on one batch; one output per input, in order."""
        ...

    def judge(self, piece: Piece, key: Hashable, out: Any, attempts: int, options: TranscribeOptions) -> Retry | Decoded:
        """What becomes of a decoded piece: its segments, or another attempt (`attempts`
        keys in all). Runs on a worker thread, outside the engine's lock."""
        ...

    def warm(self, solo_threads: int, nice: int) -> None:
        """Make every first-call cost (its replicas, its buffers) now, not a client's."""
        ...


def choose_model(
    requested: str | None,
    models: Mapping[str, Abilities],
    default: str,
    options: TranscribeOptions,
) -> str:
    """The loaded model that serves a request.

    A request that names a loaded model by its own name gets that model, or a 400 that
    says what it lacks and which loaded model has it. Any other name the server accepts
    (`requested` None: OpenAI's names) means the default model, unless the request asks
    for what the default lacks (a language, translation, word timings, a prompt,
    log-probabilities): then the first loaded model that has all of it serves it, so
    nothing that one loaded model can serve is refused. A request no loaded model can
    serve gets a 400 naming what is missing."""
    if requested is not None:
        missing = models[requested].lacks(options)
        if missing is None:
            return requested
        raise _lacking(requested, missing, models, options)
    if models[default].lacks(options) is None:
        return default
    for name, abilities in models.items():
        if abilities.lacks(options) is None:
            return name
    raise _unservable(models, default, options)


def _lacking(
    requested: str, missing: str, models: Mapping[str, Abilities], options: TranscribeOptions
) -> InvalidRequest:
    """The 400 for a model named by its own name that lacks what is `missing`: what it
    lacks, and which loaded model has all the request asks for."""
    able = [name for name, a in models.items() if a.lacks(options) is None]
    english = models[requested].languages == ("en",)
    only = " (it is English-only)" if english and _field(missing)["param"] in ("language", "model") else ""
    hint = f"; {able[0]} can: name it as the model, or send whisper-1" if able else ""
    return InvalidRequest(f"model {requested} cannot serve {missing}{only}{hint}", **_field(missing))


def _unservable(models: Mapping[str, Abilities], default: str, options: TranscribeOptions) -> InvalidRequest:
    """The 400 for a request no loaded model can serve, naming what is missing and what
    to send or load instead."""
    english = all(a.languages == ("en",) for a in models.values())
    if options.task == "translate" and not any(a.translates for a in models.values()):
        return InvalidRequest(
            f"the loaded models ({', '.join(models)}) are English-only, so there is nothing to "
            "translate: use /v1/audio/transcriptions, or start the server with a multilingual "
            "model in --asr-models (whisper-base)",
            **_field("translation"),
        )
    if options.language is not None and not any(options.language in a.languages for a in models.values()):
        if english:
            msg = (
                f"the loaded models ({', '.join(models)}) are English-only; send language 'en' "
                "or leave it out, or start the server with a multilingual model in --asr-models "
                "(whisper-base)"
            )
        else:
            msg = (
                f"unknown language {options.language!r}; send an ISO-639-1 code such as "
                f"{_languages_hint(models)}, or leave it out"
            )
        return InvalidRequest(msg, **_field("language"))
    missing = models[default].lacks(options) or ""
    return InvalidRequest(
        f"no loaded model can serve {missing} together with the rest of this request; the "
        f"server loads {', '.join(models)} (start it with --asr-models naming one that can)",
        **_field(missing),
    )


_FIELDS = (
    ("language", "language", "unsupported_language"),
    ("translation", "model", "unsupported_task"),
    ("word", "timestamp_granularities", "unsupported_timestamps"),
    ("a prompt", "prompt", "unsupported_prompt"),
    ("log-prob", "include", "unsupported_include"),
)


def _field(missing: str) -> dict[str, str]:
    """The request field and error code a missing ability answers to."""
    for start, param, code in _FIELDS:
        if missing.startswith(start):
            return {"param": param, "code": code}
    return {"param": "model", "code": "unsupported_model"}


def _languages_hint(models: Mapping[str, Abilities]) -> str:
    languages = sorted({code for a in models.values() for code in a.languages})
    shown = ", ".join(repr(c) for c in languages[:8])
    return shown + (f" (of {len(languages)})" if len(languages) > 8 else "")

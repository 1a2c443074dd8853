"""Marked-up speech as the engine speaks it: pieces of text, each in its own voice and at
its own speed, with exact silence between them.

`voxserve.text.markup` reads the input into a `Script`; here it becomes `Piece`s (text
cut as the model's profile plans it, each with its resolved `Voice`, its speed, and the
samples of silence before and after it), and a piece becomes stage A items, the first and
last of them wrapped in `Silenced` when the piece has silence. The engine takes the
wrappers off at `submit`/`extend` and inserts the silence into the stream, as samples of
the model's own rate, beside the chunks of those segments; the scheduler counts them as
audio released, so a pause moves the playback deadline. A stream is one model, as
admission weighs it: a tag that names a voice of another loaded model is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from voxserve.engine.voices import Voice, VoiceModel
from voxserve.engine.work import StageInput
from voxserve.errors import InvalidRequest, NotFound, VoxError
from voxserve.text.markup import Pause, Script, parse
from voxserve.text.split import normalize, speakable

__all__ = [
    "MARKUP_FACTOR",
    "Piece",
    "Silenced",
    "piece_inputs",
    "read_script",
    "script_pieces",
    "tag_voice",
    "unwrap",
]

MARKUP_FACTOR = 2
"""A marked-up input may be this many times the spoken-text limit in all: the limit
counts the text that is spoken, and markup may add at most as much again."""

Cut = Callable[[str, bool], list[str]]
"""The model's segmentation: text, and whether it starts the stream, to pieces."""


@dataclass(frozen=True)
class Piece:
    """One piece of a stream's text, as its model's front end reads it."""

    text: str
    voice: Voice
    speed: float
    before: int = 0
    """Samples of silence (the model's rate) before its audio."""
    after: int = 0
    """Samples of silence after it."""


@dataclass(frozen=True)
class Silenced:
    """A stage A item with exact silence before or after its segment's audio."""

    input: StageInput
    before: int
    after: int

    @property
    def ids(self) -> np.ndarray:
        return self.input.ids


def unwrap(item: StageInput) -> tuple[StageInput, int, int]:
    """The model's own item, and the samples of silence before and after it."""
    if isinstance(item, Silenced):
        return item.input, item.before, item.after
    return item, 0, 0


def piece_inputs(model: VoiceModel[Any], piece: Piece) -> list[StageInput]:
    """Stage A items of one piece, its silence on the first and last of them."""
    items: list[StageInput] = list(model.inputs(piece.text, piece.voice, piece.speed))
    if not items or not (piece.before or piece.after):
        return items
    if len(items) == 1:
        return [Silenced(items[0], piece.before, piece.after)]
    return [Silenced(items[0], piece.before, 0), *items[1:-1], Silenced(items[-1], 0, piece.after)]


def read_script(text: str, max_spoken: int) -> Script | None:
    """The markup of `text` (None for plain text), within the input limits: at most
    `max_spoken` characters spoken, and `MARKUP_FACTOR` times that in all."""
    if len(text) > MARKUP_FACTOR * max_spoken:
        raise InvalidRequest(
            f"input is {len(text)} characters; this server takes at most {max_spoken} spoken "
            f"characters, and {MARKUP_FACTOR * max_spoken} with markup, so split it into several requests",
            param="input",
            code="input_too_long",
        )
    script = parse(text)
    if script is None:
        return None
    if script.spoken_chars > max_spoken:
        raise InvalidRequest(
            f"input speaks {script.spoken_chars} characters; this server takes at most {max_spoken}, "
            "so split the text into several requests",
            param="input",
            code="input_too_long",
        )
    return script


def tag_voice(models: Mapping[str, VoiceModel[Any]], model: VoiceModel[Any], name: str) -> Voice:
    """The voice a tag names, within the request's `model`: 404 for a voice no model
    has, 400 for a voice of another loaded model (a stream speaks with one model)."""
    try:
        return model.resolve_voice(name)
    except NotFound:
        for other in models.values():
            if other is model:
                continue
            try:
                other.resolve_voice(name)
            except VoxError:
                continue
            raise InvalidRequest(
                f"voice {name[:100]!r} belongs to model {other.name}, and this request speaks with "
                f"{model.name}; one request speaks with one model, so use voices of {model.name} "
                f"or send model {other.name}",
                param="voice",
                code="voice_model_mismatch",
            ) from None
        raise


def script_pieces(
    script: Script,
    voice: Voice,
    speed: float,
    sample_rate: int,
    resolve: Callable[[str], Voice],
    cut: Cut,
) -> list[Piece]:
    """The pieces a script speaks: each span cut by `cut`, in the voice a tag named
    (`resolve`, once per name) or the request's `voice`, at `speed` times its rate; each
    pause added to the silence after the piece before it (before the first piece for a
    pause that leads)."""
    pieces: list[Piece] = []
    pending = 0
    voices: dict[str, Voice] = {}
    for item in script.items:
        if isinstance(item, Pause):
            samples = round(item.seconds * sample_rate)
            if pieces:
                pieces[-1] = replace(pieces[-1], after=pieces[-1].after + samples)
            else:
                pending += samples
            continue
        spoken = voice
        if item.voice is not None:
            if item.voice not in voices:
                voices[item.voice] = resolve(item.voice)
            spoken = voices[item.voice]
        if item.say_as and not (spoken.language or "en").lower().startswith("en"):
            raise InvalidRequest(
                f"<say-as> reads numbers, dates and characters in English, and voice {spoken.name!r} "
                f"speaks {spoken.language}; write the words out for that voice",
                param="input",
            )
        rate = speed * item.rate
        if not 0.25 <= rate <= 4.0:
            raise InvalidRequest(
                f"speed {speed:g} times the markup's rate {item.rate:g} is {rate:g}; keep it within 0.25 to 4",
                param="input",
            )
        for text in cut(normalize(item.text), not pieces):
            if speakable(text):
                pieces.append(Piece(text, spoken, rate, before=pending))
                pending = 0
    return pieces


def silences_of(items: Sequence[StageInput]) -> tuple[list[StageInput], list[tuple[int, int]]]:
    """The model's own items, and each one's silence before and after."""
    inputs: list[StageInput] = []
    silences: list[tuple[int, int]] = []
    for item in items:
        inner, before, after = unwrap(item)
        inputs.append(inner)
        silences.append((before, after))
    return inputs, silences

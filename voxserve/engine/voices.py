"""The seam between the TTS engine and its voice models: what a model provides.

A voice model is a text front end and two stages:

- `inputs(text, voice, speed)`: one text segment -> stage A items (phoneme ids with the
  voice's speaker or style and the speed folded in), one per sentence the model makes;
- `acoustic(batch)`: stage A, items -> `Latent`s (frames of the model's own features,
  with per-phoneme durations where the model predicts them);
- `decode(batch)`: stage B, `Span`s of frames -> float PCM, `profile.hop` samples per
  frame, at `profile.sample_rate`.

The engine, the scheduler, credits and admission see only this protocol and each model's
`ModelProfile`. A model whose decoder cannot stream chunks says so with
`profile.chunking = None`: it is then given whole segments. Everything particular to a
model (its files, phonemes, voices, scales) stays behind it; no code above it asks which
model it is. Implementations: `voxserve.engine.adapters.piper`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from voxserve.engine.work import Latent, ModelProfile, StageInput
from voxserve.errors import NotFound

__all__ = ["OPENAI_VOICES", "Span", "Voice", "VoiceModel", "find_voice"]

OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
    "verse", "marin", "cedar",
)  # fmt: skip
"""OpenAI's voice names; each model maps every one of them to a voice of its own."""

InputT = TypeVar("InputT", bound=StageInput)


@dataclass(frozen=True)
class Voice:
    """A voice of one model, as a request resolved it."""

    name: str
    model: str
    """The name of the `VoiceModel` it belongs to: the engine prepares its text there."""
    speaker_id: int | None = None
    """The model's own index of the voice, where it has one (Piper's speaker id)."""
    language: str | None = None
    """BCP 47 tag (en-US), where the model says."""
    gender: str | None = None


@dataclass(frozen=True)
class Span:
    """Stage B's input: frames [lo, hi) of a latent, context frames included."""

    latent: Latent
    lo: int
    hi: int


class VoiceModel(Protocol[InputT]):
    """A loaded voice model, shared by every worker thread (its calls must be thread-safe)."""

    @property
    def name(self) -> str:
        """The model's own id, as `/v1/models` lists it (`en_US-joe-medium`)."""
        ...

    @property
    def model_ids(self) -> tuple[str, ...]:
        """Further request `model` ids this model answers to (Piper: `tts-1`). OpenAI's
        names that no loaded model claims mean the first loaded model."""
        ...

    @property
    def profile(self) -> ModelProfile:
        """Samples per frame, sample rate, chunking and a first stage A cost estimate."""
        ...

    @property
    def output_gain(self) -> float:
        """Fixed gain on stage B's output, the same for every segment of every stream."""
        ...

    @property
    def voices(self) -> Sequence[Voice]:
        """The model's own voices; the first is the one warm-up uses."""
        ...

    def aliases(self) -> Mapping[str, Voice]:
        """OpenAI's voice names, each mapped to one of the model's voices."""
        ...

    def resolve_voice(self, name: str) -> Voice:
        """The voice a request names; raises `NotFound` (param "voice") with the choices."""
        ...

    def with_language(self, voice: Voice, language: str) -> Voice:
        """The voice speaking `language` (a request's `language`, an ISO 639-1 code or a
        BCP 47 tag); raises InvalidRequest (param "language") when the model cannot."""
        ...

    def inputs(self, text: str, voice: Voice, speed: float) -> Sequence[InputT]:
        """Stage A items for one text segment (none if nothing in it can be spoken).
        CPU work: the engine calls it from the text pool."""
        ...

    def acoustic(self, batch: Sequence[InputT], threads: int = 1) -> list[Latent]:
        """Stage A: one latent per item. `threads`: the intra-op threads the engine wants
        for this call (1: the single-threaded sessions; more only while cores would idle).
        A model keeps one set of sessions per thread count, made on first use."""
        ...

    def decode(self, batch: Sequence[Span], threads: int = 1) -> list[np.ndarray]:
        """Stage B: float32 PCM per span, (hi - lo) * hop samples, context included (the
        engine crops it). Spans of different lengths may share a call: each gets the
        audio it gets alone. `threads` as for `acoustic`; the output must not depend on
        it beyond float rounding."""
        ...

    def capture_graphs(self, window_frames: Sequence[int], max_batch: int) -> None:
        """Prepare stage B's steps for windows of `window_frames` frames, up to `max_batch`
        a step (warm-up calls it): the torch runners on CUDA capture their graphs; a
        no-op elsewhere."""
        ...


def find_voice(name: str, voices: Sequence[Voice], aliases: Mapping[str, Voice]) -> Voice:
    """A voice by its own name (exact), else by an alias (any case); `NotFound` lists both."""
    for voice in voices:
        if voice.name == name:
            return voice
    alias = aliases.get(name.lower())
    if alias is not None:
        return alias
    known = ", ".join([v.name for v in voices] + list(aliases))
    raise NotFound(f"voice {name!r} does not exist; use one of: {known}", param="voice")

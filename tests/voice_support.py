"""A test double at the voice model's boundary: a real model, wrapped so that a test sees
every stage call and can fail one. Production models carry no hook for this."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from voxserve.engine.voices import Span, Voice, VoiceModel
from voxserve.engine.work import Latent, ModelProfile

StageHook = Callable[[str, int], None]
"""Called as hook(stage, batch_size) before each call, stage "acoustic" or "vocoder";
raising fails that call as an inference error would."""


class HookedVoice:
    """`model` as it is, except that `hook`, while set, is called before each stage."""

    def __init__(self, model: VoiceModel[Any]) -> None:
        self.model = model
        self.hook: StageHook | None = None

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def model_ids(self) -> tuple[str, ...]:
        return self.model.model_ids

    @property
    def profile(self) -> ModelProfile:
        return self.model.profile

    @property
    def output_gain(self) -> float:
        return self.model.output_gain

    @property
    def voices(self) -> Sequence[Voice]:
        return self.model.voices

    def aliases(self) -> Mapping[str, Voice]:
        return self.model.aliases()

    def resolve_voice(self, name: str) -> Voice:
        return self.model.resolve_voice(name)

    def with_language(self, voice: Voice, language: str) -> Voice:
        return self.model.with_language(voice, language)

    def inputs(self, text: str, voice: Voice, speed: float) -> Sequence[Any]:
        return self.model.inputs(text, voice, speed)

    def acoustic(self, batch: Sequence[Any], threads: int = 1) -> list[Latent]:
        if self.hook is not None:
            self.hook("acoustic", len(batch))
        return self.model.acoustic(batch, threads)

    def decode(self, batch: Sequence[Span], threads: int = 1) -> list[np.ndarray]:
        if self.hook is not None:
            self.hook("vocoder", len(batch))
        return self.model.decode(batch, threads)

    def capture_graphs(self, window_frames: Sequence[int], max_batch: int) -> None:
        self.model.capture_graphs(window_frames, max_batch)

"""What every voice adapter shares: the runtime its runners are loaded on, and the parts
of `engine/voices.py: VoiceModel` every family answers the same way.

`VoiceAdapter.load` makes the one runtime choice for all families (`--tts-device`,
`--tts-runtime`, `--tts-precision`): the simulated device's stand-ins, the torch runners,
or ONNX Runtime, which runs its own graphs and so refuses a reduced precision. A family
says how to load each runtime (`onnx_model`, `torch_model`, `sim_model`), imports each
runner only there, so that a process loads only the runtime it runs (the ONNX path never
imports torch), and says how its adapter wraps the loaded model (`around`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, Self, TypeVar

import numpy as np

from voxserve.config import TTSConfig, precision_refusal
from voxserve.engine.devices import resolve_device
from voxserve.engine.voices import Span, Voice
from voxserve.engine.work import Latent, ModelProfile

__all__ = ["VoiceAdapter"]

ModelT = TypeVar("ModelT")


class VoiceAdapter(ABC, Generic[ModelT]):
    """A family's loaded model (`model`, of type `ModelT`: any of its runtimes) with its
    name, the request model ids it claims, its profile, gain, voices and OpenAI aliases."""

    MODEL_IDS: ClassVar[tuple[str, ...]]
    """The request `model` ids the family claims unless told otherwise: what an offline
    command reads to load only the family a request needs (`engine/tts_models.py`)."""

    def __init__(
        self,
        model: ModelT,
        name: str,
        profile: ModelProfile,
        output_gain: float,
        voices: Sequence[Voice],
        aliases: Mapping[str, Voice],
        model_ids: tuple[str, ...] | None = None,
    ):
        self.model = model
        self._name = name
        self._profile = profile
        self._gain = output_gain
        self._voices = list(voices)
        self._aliases = dict(aliases)
        self._model_ids = self.MODEL_IDS if model_ids is None else model_ids

    @classmethod
    def load(cls, config: TTSConfig) -> Self:
        """The family on the runtime `config` resolves to (`engine/devices.py:
        resolve_device`, whose CPU runtime for the voice models is ONNX Runtime)."""
        device, runtime = resolve_device(config.device, config.runtime, "onnx")
        if runtime == "sim":
            return cls.around(cls.sim_model(config), config)
        if runtime == "torch":
            return cls.around(cls.torch_model(config, device), config)
        if config.precision != "float32":
            raise ValueError(precision_refusal(config.precision))
        return cls.around(cls.onnx_model(config), config)

    @classmethod
    @abstractmethod
    def onnx_model(cls, config: TTSConfig) -> ModelT:
        """The family's runners on ONNX Runtime, the CPU default."""

    @classmethod
    @abstractmethod
    def torch_model(cls, config: TTSConfig, device: str) -> ModelT:
        """The family's torch runners on `device` (cpu or cuda), at `config.precision`."""

    @classmethod
    @abstractmethod
    def sim_model(cls, config: TTSConfig) -> ModelT:
        """The family's stand-in on the simulated device (`runners/<family>/sim_runner.py`)."""

    @classmethod
    @abstractmethod
    def around(cls, model: ModelT, config: TTSConfig) -> Self:
        """The adapter over a loaded `model`, with the settings of `config` it reads."""

    # -- VoiceModel: what every family answers alike, then what each writes itself -------
    @property
    def name(self) -> str:
        return self._name

    @property
    def model_ids(self) -> tuple[str, ...]:
        return self._model_ids

    @property
    def profile(self) -> ModelProfile:
        return self._profile

    @property
    def output_gain(self) -> float:
        return self._gain

    @property
    def voices(self) -> Sequence[Voice]:
        return self._voices

    def aliases(self) -> Mapping[str, Voice]:
        return self._aliases

    @abstractmethod
    def resolve_voice(self, name: str) -> Voice: ...

    @abstractmethod
    def with_language(self, voice: Voice, language: str) -> Voice: ...

    @abstractmethod
    def inputs(self, text: str, voice: Voice, speed: float) -> Sequence[Any]: ...

    @abstractmethod
    def acoustic(self, batch: Sequence[Any], threads: int = 1) -> list[Latent]: ...

    @abstractmethod
    def decode(self, batch: Sequence[Span], threads: int = 1) -> list[np.ndarray]: ...

    def capture_graphs(self, window_frames: Sequence[int], max_batch: int) -> None:
        """The torch runners capture their decoder graphs (on CUDA); the other runtimes
        have none."""
        capture = getattr(self.model, "capture_graphs", None)
        if capture is not None:
            capture(window_frames, max_batch)

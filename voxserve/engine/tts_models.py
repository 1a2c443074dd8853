"""The voice-model families a server can load, by the name `--tts-models` uses: the one
place that names the TTS families.

Each family is an adapter in `engine/adapters/` (a `VoiceAdapter`, which loads it on the
configured runtime and implements `engine/voices.py: VoiceModel`) over its runners in
`runners/<family>/`. A new family is one more line in `FAMILIES`.
"""

from __future__ import annotations

from typing import Any

from voxserve.config import TTSConfig
from voxserve.engine.adapters.base import VoiceAdapter
from voxserve.engine.adapters.kokoro import KokoroVoice
from voxserve.engine.adapters.piper import PiperVoice
from voxserve.engine.voices import VoiceModel

__all__ = ["FAMILIES", "by_name", "claiming", "load_models"]

FAMILIES: dict[str, type[VoiceAdapter[Any]]] = {
    "piper": PiperVoice,
    "kokoro": KokoroVoice,
}
"""The voice models `--tts-models` may name, each with its adapter."""


def load_models(config: TTSConfig) -> list[VoiceModel[Any]]:
    """Load the models `config.models` names, in order (the first is the default)."""
    unknown = [kind for kind in config.models if kind not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown TTS model {', '.join(unknown)}; --tts-models takes {', '.join(FAMILIES)}")
    return [FAMILIES[kind].load(config) for kind in dict.fromkeys(config.models)]


def by_name(loaded: list[VoiceModel[Any]]) -> dict[str, VoiceModel[Any]]:
    """The loaded models by name, in order (the first is the default); there must be one,
    and no two of one name."""
    if not loaded:
        raise ValueError("the TTS engine needs at least one voice model")
    models: dict[str, VoiceModel[Any]] = {}
    for model in loaded:
        if model.name in models:
            raise ValueError(f"two voice models are named {model.name!r}")
        models[model.name] = model
    return models


def claiming(model_id: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of the families `names` (as `--tts-models` names them) that claim the request
    model id `model_id` by default (`VoiceAdapter.MODEL_IDS`), read without loading any."""
    return tuple(name for name in names if name in FAMILIES and model_id in FAMILIES[name].MODEL_IDS)

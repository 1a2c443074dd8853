"""What a server offers and how it is: the model ids, the voices, health and metrics
snapshots, as plain data. Every channel and both apps (one machine, Ray front end) read
them from here; `voxserve.api` only turns them into responses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from voxserve.engine.asr import ASREngine
from voxserve.engine.tts import OPENAI_VOICES, TTSEngine
from voxserve.serving.metrics import Metrics

__all__ = [
    "ASR_MODELS",
    "METRICS_CONTENT_TYPE",
    "SPEECH_MODELS",
    "Health",
    "ServerInfo",
    "engines_health",
    "metrics_text",
    "model_ids",
    "model_list",
    "voice_list",
]

SPEECH_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
"""OpenAI's speech model names; each one means this server's voice model."""

ASR_MODELS = ("whisper-1",)
"""OpenAI's transcription model name; it means this server's Whisper model."""

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST


@dataclass(frozen=True)
class Health:
    ok: bool
    dead_workers: list[str]

    def body(self) -> dict[str, Any]:
        if self.ok:
            return {"status": "ok"}
        return {"status": "unhealthy", "dead_workers": self.dead_workers}


class ServerInfo(Protocol):
    """What the catalog routes read of a running server, on one machine
    (`voxserve.serving.state.AppState`) or as a Ray front end (`voxserve.api.remote`)."""

    started_at: float
    metrics: Metrics

    def health(self) -> Health: ...

    def model_ids(self) -> list[str]: ...

    def voices(self) -> list[dict[str, str | None]]: ...


def engines_health(tts: TTSEngine | None, asr: ASREngine | None) -> Health:
    """Healthy while every inference worker of the engines this process runs is alive."""
    engines: list[TTSEngine | ASREngine] = [e for e in (tts, asr) if e is not None]
    if all(e.healthy for e in engines):
        return Health(True, [])
    return Health(False, [w for e in engines for w in e.dead_workers])


def model_ids(tts_model: str, asr_model: str | None) -> list[str]:
    """The ids `GET /v1/models` lists: OpenAI's names, then each model's own."""
    ids = [*SPEECH_MODELS, tts_model]
    if asr_model is not None:
        ids += [*ASR_MODELS, asr_model]
    return ids


def model_list(ids: list[str], started_at: float) -> dict[str, Any]:
    """The body of `GET /v1/models`."""
    created = int(started_at)
    data = [{"id": i, "object": "model", "created": created, "owned_by": "voxserve"} for i in ids]
    return {"object": "list", "data": data}


def voice_list(engine: TTSEngine) -> list[dict[str, str | None]]:
    """The engine's own voices, then the OpenAI names and the voice each one maps to."""
    own: list[dict[str, str | None]] = [{"id": v.name, "name": v.name, "alias_of": None} for v in engine.voices]
    aliases: list[dict[str, str | None]] = [
        {"id": name, "name": name, "alias_of": engine.resolve_voice(name).name} for name in OPENAI_VOICES
    ]
    return own + aliases


def metrics_text(metrics: Metrics) -> bytes:
    """The Prometheus exposition of `metrics`."""
    return generate_latest(metrics.registry)

"""What a server offers and how it is: the model ids and which voice model each one
means, the voices, health and metrics snapshots, as plain data. Every channel and both
apps (one machine, Ray front end) read them from here; `voxserve.api` only turns them
into responses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from voxserve.engine.asr import ASREngine
from voxserve.engine.script import tag_voice
from voxserve.engine.tts import TTSEngine
from voxserve.engine.voices import Voice, VoiceModel
from voxserve.errors import InvalidRequest, NotFound
from voxserve.serving.metrics import Metrics
from voxserve.serving.saved_voices import SavedVoices

__all__ = [
    "ASR_MODELS",
    "DIARIZE_MODELS",
    "METRICS_CONTENT_TYPE",
    "SPEECH_MODELS",
    "Health",
    "ServerInfo",
    "asr_model",
    "asr_models",
    "builtin_voice_names",
    "diarizing_model",
    "engine_devices",
    "engines_health",
    "markup_voice",
    "metrics_text",
    "model_list",
    "saved_voice_model",
    "served_models",
    "speech_model",
    "speech_model_ids",
    "speech_models",
    "speech_voice",
    "voice_list",
]

SPEECH_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
"""OpenAI's speech model names. A loaded voice model may claim one (Piper claims tts-1;
Kokoro is to claim tts-1-hd); one no model claims means the default model."""

ASR_MODELS = (
    "whisper-1",
    "gpt-4o-transcribe",
    "gpt-4o-mini-transcribe",
    "gpt-4o-mini-transcribe-2025-12-15",
    "gpt-transcribe",
    "gpt-realtime-whisper",
    "gpt-live-transcribe",
)
"""OpenAI's transcription model names, for uploads and for live sessions alike; each one
means this server's default ASR model, or the loaded model that can serve what the
request asks (`engine/recognizer.py: choose_model`). Agent frameworks send these by
default (LiveKit's OpenAI STT `gpt-4o-mini-transcribe` and `gpt-live-transcribe`,
Pipecat's `gpt-transcribe` over HTTP and `gpt-realtime-whisper` live), so a client that
changes only its base URL works. OpenAI's dated snapshots of these names
(`gpt-4o-transcribe-2025-03-20`) mean the same (`_DATED`)."""

_DATED = re.compile(r"(gpt-4o-transcribe|gpt-4o-mini-transcribe)-\d{4}-\d{2}-\d{2}")

DIARIZE_MODELS = ("gpt-4o-transcribe-diarize", "voxserve-diarize")
"""Transcription with speaker labels (OpenAI's name, then voxserve's own): the default
ASR model's words given to speakers by CAM++ embeddings (`serving/diarization.py`)."""


def diarizing_model(model_id: str) -> bool:
    """Whether a request's `model` asks for speaker labels."""
    return model_id in DIARIZE_MODELS

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST


SIMULATED = {
    "speech": "speech runs on a simulated H200 (--device sim): a tone, never speech",
    "transcription": "transcription runs on a simulated H200 (--asr-device sim): text marked [sim], never a transcript",
}
"""What `/health` says of each engine that runs on the sim device."""


@dataclass(frozen=True)
class Health:
    ok: bool
    dead_workers: list[str]
    devices: dict[str, str] = field(default_factory=dict)
    """Where each engine runs ("speech", "transcription"); shown when one is simulated."""

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"status": "ok"} if self.ok else {"status": "unhealthy", "dead_workers": self.dead_workers}
        if "sim" in self.devices.values():
            simulated = [SIMULATED[name] for name, device in self.devices.items() if device == "sim"]
            body |= {"devices": self.devices, "simulated": "; ".join(simulated) + "; for capacity planning and CI"}
        return body


class ServerInfo(Protocol):
    """What the catalog routes read of a running server, on one machine
    (`voxserve.serving.state.AppState`) or as a Ray front end (`voxserve.api.remote`)."""

    started_at: float
    metrics: Metrics

    def health(self) -> Health: ...

    def models(self) -> dict[str, str]:
        """Each model id a request may name, with the model it means (`served_models`)."""
        ...

    def asr_catalog(self) -> dict[str, dict[str, Any]]:
        """Each loaded ASR model with what it can do (`asr_models`)."""
        ...

    def voices(self) -> list[dict[str, str | None]]: ...

    saved_voices: SavedVoices | None
    """The saved voices (`serving/saved_voices.py`); None until the server started."""

    def voice_model(self, voice: str) -> str:
        """The loaded voice model a voice or blend belongs to (404 for none): where a
        voice to be saved is checked."""
        ...


def engine_devices(tts: TTSEngine | None, asr: ASREngine | None) -> dict[str, str]:
    """Where each engine this process runs decodes: "speech" and "transcription"."""
    devices = {"speech": tts.device} if tts is not None else {}
    if asr is not None:
        devices["transcription"] = asr.device
    return devices


def engines_health(tts: TTSEngine | None, asr: ASREngine | None) -> Health:
    """Healthy while every inference worker of the engines this process runs is alive."""
    engines: list[TTSEngine | ASREngine] = [e for e in (tts, asr) if e is not None]
    devices = engine_devices(tts, asr)
    if all(e.healthy for e in engines):
        return Health(True, [], devices)
    return Health(False, [w for e in engines for w in e.dead_workers], devices)


def speech_model(engine: TTSEngine, model_id: str) -> VoiceModel[Any]:
    """The voice model a request's `model` means: the loaded model of that name or that
    claims it, else the default model for OpenAI's other names; 404 for anything else."""
    for model in engine.models.values():
        if model_id == model.name or model_id in model.model_ids:
            return model
    if model_id in SPEECH_MODELS:
        return engine.default_model
    raise NotFound(
        f"model {model_id!r} does not exist; use one of: {', '.join(speech_model_ids(engine))}",
        param="model",
        code="model_not_found",
    )


def speech_voice(
    engine: TTSEngine, model_id: str, voice: str, language: str | None = None, saved: SavedVoices | None = None
) -> Voice:
    """The voice a request names, among those of the model it names (404 for either)
    and the `saved` voices of that model, speaking `language` when the request names one
    (400 when it cannot)."""
    model = speech_model(engine, model_id)
    found = _saved_voice(model, voice, saved) or model.resolve_voice(voice)
    return model.with_language(found, language) if language else found


def markup_voice(
    engine: TTSEngine, model_id: str, language: str | None, saved: SavedVoices | None, name: str
) -> Voice:
    """The voice a markup tag names (`TTSEngine.prepare`'s `resolve`): as `speech_voice`,
    but a voice of another loaded model gets a 400 that says so (a stream is one model)."""
    model = speech_model(engine, model_id)
    found = _saved_voice(model, name, saved) or tag_voice(engine.models, model, name)
    return model.with_language(found, language) if language else found


def _saved_voice(model: VoiceModel[Any], name: str, saved: SavedVoices | None) -> Voice | None:
    """The saved voice of this name or id, if any, resolved in `model`; 400 when it was
    saved for another model."""
    entry = saved.find(name) if saved is not None else None
    if entry is None:
        return None
    if entry.model != model.name:
        raise InvalidRequest(
            f"saved voice {entry.name!r} is a voice of model {entry.model}, and this request speaks "
            f"with {model.name}; send model {entry.model}",
            param="voice",
            code="voice_model_mismatch",
        )
    return model.resolve_voice(entry.voice)


def saved_voice_model(engine: TTSEngine, voice: str) -> str:
    """The loaded model a voice to be saved belongs to: the first that resolves it. A
    blend must be one model's; 404 (listing the models) for a voice none has."""
    for model in engine.models.values():
        try:
            model.resolve_voice(voice)
        except NotFound:
            continue
        return model.name
    raise NotFound(
        f"voice {voice[:100]!r} is no voice or blend of the loaded models ({', '.join(engine.models)}); "
        "GET /v1/audio/voices lists them",
        param="voice",
    )


def listed_voice_model(voices: list[dict[str, str | None]], voice: str) -> str:
    """`saved_voice_model` where only the voice list is at hand (a Ray front end): the
    model that lists the voice, or every voice of a blend `a(2)+b(1)`. The replica that
    speaks it resolves it again, weights and all."""
    names = [part.split("(", 1)[0].strip() for part in voice.split("+")]
    for model in dict.fromkeys(str(v["model"]) for v in voices):
        listed = {v["id"] for v in voices if v["model"] == model}
        if all(name in listed for name in names):
            return model
    raise NotFound(
        f"voice {voice[:100]!r} is no voice or blend of one loaded model; GET /v1/audio/voices lists them",
        param="voice",
    )


def builtin_voice_names(voices: list[dict[str, str | None]]) -> set[str]:
    """Every name a built-in voice is listed under (`voice_list`), in lower case: a saved
    voice may not take one, in any case."""
    return {str(v["id"]).lower() for v in voices}


def speech_model_ids(engine: TTSEngine) -> list[str]:
    """Every speech `model` a request may name: OpenAI's, then each model's own ids."""
    ids = list(SPEECH_MODELS)
    for model in engine.models.values():
        ids += [i for i in (model.name, *model.model_ids) if i not in ids]
    return ids


def speech_models(engine: TTSEngine) -> dict[str, str]:
    """`speech_model_ids`, each with the name of the voice model it means."""
    return {i: speech_model(engine, i).name for i in speech_model_ids(engine)}


def asr_model(model_id: str, loaded: Iterable[str], param: str = "model") -> str | None:
    """The loaded ASR model a request's `model` names: its own name, or None for OpenAI's
    names (the default, or the loaded model that can serve the request). 404
    `model_not_found`, listing what is served, for anything else."""
    names = list(loaded)
    if model_id in names:
        return model_id
    if model_id in ASR_MODELS or model_id in DIARIZE_MODELS or _DATED.fullmatch(model_id):
        return None
    raise NotFound(
        f"model {model_id!r} does not exist; use one of: {', '.join((*ASR_MODELS, *names))}",
        param=param,
        code="model_not_found",
    )


def asr_models(engine: ASREngine) -> dict[str, dict[str, Any]]:
    """Each loaded ASR model's own name with what it can do and the memory it takes, the
    default first: what `/v1/models` shows of it."""
    return {
        name: {"default": model is engine.default, "memory_mb": round(model.memory_mb), **model.abilities.describe()}
        for name, model in engine.models.items()
    }


def served_models(speech: Mapping[str, str], asr: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """What `GET /v1/models` lists, each id with the model it means: the speech models
    (`speech_models`), then OpenAI's transcription names (each meaning the default ASR
    model) and each loaded ASR model's own name."""
    models = dict(speech)
    if asr:
        default = next((name for name, about in asr.items() if about.get("default")), next(iter(asr)))
        models.update(dict.fromkeys(ASR_MODELS, default))
        models.update(dict.fromkeys(DIARIZE_MODELS, default))
        models.update({name: name for name in asr})
    return models


def model_list(
    models: Mapping[str, str], started_at: float, asr: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The body of `GET /v1/models`: OpenAI's model objects, with `root`, the model each
    id means (an OpenAI name, or the model's own, which is its own root); an ASR model's
    own entry also says what it can do (`asr_models`) under `transcription`."""
    created = int(started_at)
    data = []
    for i, root in models.items():
        entry: dict[str, Any] = {"id": i, "object": "model", "created": created, "owned_by": "voxserve", "root": root}
        if asr and i in asr:
            entry["transcription"] = dict(asr[i])
        data.append(entry)
    return {"object": "list", "data": data}


def voice_list(engine: TTSEngine) -> list[dict[str, str | None]]:
    """Model by model, the default first: its own voices, then the OpenAI names and the
    voice each one maps to, each with its model, language and gender. An OpenAI name is
    listed once per model, since each model maps it to a voice of its own.
    `openai_model` is the OpenAI model name that model claims (`tts-1`, `tts-1-hd`), or
    null; a client names it, or `model`, to reach the voice."""
    listed: list[dict[str, str | None]] = []
    for model in engine.models.values():
        claimed = next((i for i in model.model_ids if i in SPEECH_MODELS), None)
        seen: set[str] = set()
        entries: list[tuple[str, Voice, str | None]] = [(v.name, v, None) for v in model.voices]
        entries += [(alias, voice, voice.name) for alias, voice in model.aliases().items()]
        for name, voice, alias_of in entries:
            if name not in seen:
                seen.add(name)
                listed.append({
                    "id": name,
                    "name": name,
                    "alias_of": alias_of,
                    "model": model.name,
                    "openai_model": claimed,
                    "language": voice.language,
                    "gender": voice.gender,
                })
    return listed


def metrics_text(metrics: Metrics) -> bytes:
    """The Prometheus exposition of `metrics`."""
    return generate_latest(metrics.registry)

"""The OpenAPI 3.1 document served at `GET /openapi.json`.

Request bodies are generated from the pydantic models the handlers validate with
(`SpeechRequest`, `TranscriptionForm`), so the document cannot drift from what the server
accepts. Response bodies are described by the small models below; they exist only for
this document, the handlers build their JSON themselves. Media types come from the
encoders' and formatters' own tables. This module builds a dict; it knows nothing of the
engine and is built once per process.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voxserve.api.batch import BatchRequest
from voxserve.api.formats import CONTENT_TYPES
from voxserve.api.schemas import ResponseFormat, SaveVoice, SpeechRequest, TranscriptionForm
from voxserve.audio.encode import content_type
from voxserve.config import TTSConfig

__all__ = ["openapi_document", "openapi_endpoint"]

_REF = "#/components/schemas/{model}"
_KEY_OPTIONAL: list[dict[str, list[str]]] = [{}, {"apiKey": []}]
"""No key, or `Authorization: Bearer KEY`: whether one is needed is the server's setting."""


class ErrorDetail(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, rate_limit_error, server_error...")
    param: str | None = Field(description="The request field at fault, if one is")
    code: str | None


class ErrorResponse(BaseModel):
    """Every error, in the OpenAI shape."""

    error: ErrorDetail


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class VoiceCard(BaseModel):
    id: str
    name: str
    alias_of: str | None = Field(description="The voice an OpenAI voice name plays, or null")
    model: str = Field(description="The voice model that speaks it, by its own id")
    openai_model: str | None = Field(
        description="The OpenAI model name that voice model claims (tts-1, tts-1-hd), or null"
    )
    language: str | None = Field(description="The language it speaks by default (en-US, es, ...)")
    gender: str | None = Field(description="female, male, or null when unknown")
    saved: bool = Field(description="A saved voice (POST /v1/audio/voices), which DELETE removes")
    voice: str | None = Field(None, description="A saved voice's voice or blend")
    created_at: int | None = Field(None, description="When a saved voice was saved (Unix seconds)")


class BatchItem(BaseModel):
    index: int
    audio: str | None = Field(None, description="The item's audio in its format, base64")
    audio_format: str | None = None
    sample_rate: int | None = None
    error: ErrorDetail | None = Field(None, description="Why the item has no audio")


class BatchSpeech(BaseModel):
    object: Literal["list"]
    data: list[BatchItem] = Field(description="One entry per item, in the items' order")


class DeletedVoice(BaseModel):
    id: str
    object: Literal["voice"]
    deleted: Literal[True]


class VoiceList(BaseModel):
    object: Literal["list"]
    voices: list[VoiceCard]


class Health(BaseModel):
    status: Literal["ok", "unhealthy"]
    dead_workers: list[str] = Field(default_factory=list, description="Only when unhealthy")
    devices: dict[str, str] | None = Field(
        None, description="Where each engine runs (speech, transcription); only when an engine runs on the sim device"
    )
    simulated: str | None = Field(None, description="Only on the sim device: says which engines are simulated: no speech, and transcripts marked [sim]")


class TranscriptionUsage(BaseModel):
    type: Literal["duration"]
    seconds: float


class Transcription(BaseModel):
    """`response_format=json`."""

    text: str
    usage: TranscriptionUsage


class VerboseTranscription(BaseModel):
    """`response_format=verbose_json`; `segments` and `words` follow the granularities."""

    task: Literal["transcribe", "translate"]
    language: str
    duration: float
    text: str
    segments: list[dict[str, Any]] = Field(default_factory=list)
    words: list[dict[str, Any]] = Field(default_factory=list)
    usage: TranscriptionUsage


class SpeechAudioDelta(BaseModel):
    type: Literal["speech.audio.delta"]
    audio: str = Field(description="Base64 of the next bytes in the asked `response_format`")


class WordTimestamp(BaseModel):
    word: str
    start_time: float = Field(description="Seconds from the start of the audio")
    end_time: float


class SpeechWords(BaseModel):
    type: Literal["speech.words"]
    words: list[WordTimestamp] = Field(description="The next segment's words, before its audio (with `timestamps`)")


class CaptionedSpeech(BaseModel):
    audio: str = Field(description="Base64 of the whole audio in the asked `response_format`")
    audio_format: str
    sample_rate: int
    timestamps: list[WordTimestamp]


class SpeechUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class SpeechAudioDone(BaseModel):
    type: Literal["speech.audio.done"]
    usage: SpeechUsage


class TranscriptTextDelta(BaseModel):
    type: Literal["transcript.text.delta"]
    delta: str


class TranscriptTextDone(BaseModel):
    type: Literal["transcript.text.done"]
    text: str


class StreamError(BaseModel):
    """The last event of a stream that failed after it began."""

    type: Literal["error"]
    error: ErrorDetail


_RESPONSE_MODELS: tuple[type[BaseModel], ...] = (
    ErrorResponse,
    ModelList,
    VoiceList,
    VoiceCard,
    DeletedVoice,
    BatchSpeech,
    Health,
    Transcription,
    VerboseTranscription,
    SpeechWords,
    CaptionedSpeech,
    SpeechAudioDelta,
    SpeechAudioDone,
    TranscriptTextDelta,
    TranscriptTextDone,
    StreamError,
)

_ERRORS = {
    "400": "The request is invalid; the message says what to send instead",
    "401": "The server has an API key, and the request lacks it or has a wrong one",
    "404": "Unknown model or voice, or the feature is off on this server",
    "408": "The request did not arrive in full within the request timeout",
    "413": "The request body is too large",
    "415": "The body is not sent as `Content-Type: application/json`",
    "429": "The server is at capacity; retry after `Retry-After` seconds",
    "500": "The server failed",
    "503": "The server is shutting down or has no live worker",
    "504": "The response could not start within the request timeout",
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _errors(*statuses: str) -> dict[str, Any]:
    responses = {s: _json(ErrorResponse, _ERRORS[s]) for s in statuses}
    if "429" in responses:
        retry = {"description": "Seconds to wait", "schema": {"type": "integer", "minimum": 0}}
        responses["429"]["headers"] = {"Retry-After": {**retry, "required": True}}
    return responses


def _keyed(operation: dict[str, Any]) -> dict[str, Any]:
    """An operation that needs the API key when the server has one (`--api-key`)."""
    operation["security"] = _KEY_OPTIONAL
    operation["responses"].update(_errors("401"))
    return operation


def _sse(*events: type[BaseModel]) -> dict[str, Any]:
    """An event stream: each event's `data` is one JSON object of the given models."""
    models: list[type[BaseModel]] = [*events, StreamError]
    data = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"anyOf": [_ref(m) for m in models]},
    }
    event = {"type": "object", "required": ["data"], "properties": {"data": data}}
    return {"text/event-stream": {"schema": event}}


def _media(kind: str) -> str:
    return kind.split(";")[0].strip()


def _form_schema(form: dict[str, Any], stream_fields: bool) -> dict[str, Any]:
    """A multipart body from the form model's schema: no nulls (an absent part is the
    default), the OpenAI name `timestamp_granularities[]`, and the `file` part."""
    props: dict[str, Any] = {
        "file": {"type": "string", "format": "binary", "description": "The audio"}
    }
    for name, prop in form["properties"].items():
        prop = copy.deepcopy(prop)
        options = [o for o in prop.pop("anyOf", []) if o.get("type") != "null"]
        if options:
            (only,) = options
            prop.update(only)
            prop.pop("default", None)
        if name == "timestamp_granularities":
            name = "timestamp_granularities[]"
        if not stream_fields and name in ("stream", "timestamp_granularities[]"):
            continue
        props[name] = prop
    return {
        "type": "object",
        "properties": props,
        "required": ["file", *form.get("required", [])],
        "description": form.get("description", ""),
    }


def _transcribe_op(task: str, form: dict[str, Any]) -> dict[str, Any]:
    streams = task == "transcribe"
    body = _form_schema(form, stream_fields=streams)
    content: dict[str, Any] = {
        "application/json": {"schema": {"anyOf": [_ref(Transcription), _ref(VerboseTranscription)]}}
    }
    for fmt in ("text", "srt", "vtt"):
        content[_media(CONTENT_TYPES[fmt])] = {"schema": {"type": "string"}}
    if streams:
        content.update(_sse(TranscriptTextDelta, TranscriptTextDone))
    encoding = {"file": {"contentType": "application/octet-stream"}}
    return {
        "summary": f"{task.capitalize()} an uploaded audio file",
        "operationId": f"create{'Transcription' if streams else 'Translation'}",
        "requestBody": {
            "required": True,
            "content": {"multipart/form-data": {"schema": body, "encoding": encoding}},
        },
        "responses": {
            "200": {
                "description": "The transcript in the asked `response_format`",
                "content": content,
            },
            **_errors("400", "404", "408", "413", "429", "500", "503", "504"),
        },
    }


def _diarize_op() -> dict[str, Any]:
    """`/v1/audio/diarization`: a multipart form, answered as turns without words (json) or
    RTTM lines; its fields are read by hand (`api/diarization.py`), so they are listed here."""
    text = {"type": "string"}
    body = {
        "type": "object",
        "properties": {
            "file": {"type": "string", "format": "binary", "description": "The audio"},
            "model": {**text, "description": "A model that labels speakers (gpt-4o-transcribe-diarize)"},
            "response_format": {"type": "string", "enum": ["json", "rttm"], "default": "json"},
            "known_speaker_names[]": {"type": "array", "items": text, "maxItems": 4,
                                      "description": "Names of up to 4 known speakers"},
            "known_speaker_references[]": {"type": "array", "items": text, "maxItems": 4,
                                           "description": "A data URL of 2-10 s of each known speaker's audio"},
        },
        "required": ["file"],
    }
    turn = {"type": "object", "properties": {"start": {"type": "number"}, "end": {"type": "number"},
                                             "speaker": text}}
    turns = {"type": "object", "properties": {"duration": {"type": "number"},
                                              "segments": {"type": "array", "items": turn},
                                              "speakers": {"type": "array", "items": text}}}
    return {
        "summary": "Who spoke when in an uploaded audio file",
        "operationId": "createDiarization",
        "requestBody": {
            "required": True,
            "content": {"multipart/form-data": {"schema": body,
                                                "encoding": {"file": {"contentType": "application/octet-stream"}}}},
        },
        "responses": {
            "200": {
                "description": "The speakers' turns in the asked `response_format`",
                "content": {"application/json": {"schema": turns}, "text/plain": {"schema": text}},
            },
            **_errors("400", "408", "413", "429", "500", "503", "504"),
        },
    }


def _speech_op() -> dict[str, Any]:
    audio = {
        content_type(fmt): {"schema": {"type": "string", "format": "binary"}}
        for fmt in get_args(ResponseFormat)
    }
    sse = _sse(SpeechWords, SpeechAudioDelta, SpeechAudioDone)
    captioned = {"application/json": {"schema": _ref(CaptionedSpeech)}}
    headers = {
        "x-request-id": {"description": "The request id", "schema": {"type": "string"}},
        "x-sample-rate": {"description": "Sample rate of the audio", "schema": {"type": "string"}},
    }
    return {
        "summary": "Speak text as streamed audio",
        "operationId": "createSpeech",
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _ref(SpeechRequest)}},
        },
        "responses": {
            "200": {
                "description": (
                    "Audio as it is made, SSE events with `stream_format=sse`, or JSON with "
                    "`timestamps` (and no SSE)"
                ),
                "headers": headers,
                "content": {**audio, **sse, **captioned},
            },
            **_errors("400", "404", "408", "413", "415", "429", "500", "503", "504"),
        },
    }


def _batch_op() -> dict[str, Any]:
    zipped = {"application/zip": {"schema": {"type": "string", "format": "binary"}}}
    return {
        "summary": "Speak 1 to 32 inputs, each with its own overrides, as JSON or a zip",
        "operationId": "createSpeechBatch",
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(BatchRequest)}}},
        "responses": {
            "200": {
                "description": "Every item's audio (or its error), in order",
                "content": {"application/json": {"schema": _ref(BatchSpeech)}, **zipped},
            },
            **_errors("400", "404", "413", "415", "429", "503"),
        },
    }


def _save_voice_op() -> dict[str, Any]:
    return {
        "summary": "Save a voice or blend under a name",
        "operationId": "createVoice",
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(SaveVoice)}}},
        "responses": {
            "201": _json(VoiceCard, "The saved voice"),
            **_errors("400", "404", "413", "415", "503"),
        },
    }


def _delete_voice_op() -> dict[str, Any]:
    return {
        "summary": "Delete a saved voice",
        "operationId": "deleteVoice",
        "parameters": [{"name": "voice_id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": _json(DeletedVoice, "The voice is gone"), **_errors("400", "404", "503")},
    }


def _get(op_id: str, summary: str, ok: dict[str, Any]) -> dict[str, Any]:
    return {"operationId": op_id, "summary": summary, "responses": {"200": ok}}


@functools.cache
def openapi_document(max_input_chars: int = TTSConfig.max_input_chars) -> dict[str, Any]:
    """The whole document, built once per setting of `--tts-max-input-chars`."""
    schemas, form = _schemas(max_input_chars)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "voxserve",
            "version": _version(),
            "description": "OpenAI-compatible speech API",
        },
        "paths": _paths(form),
        "components": {
            "schemas": schemas,
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        },
    }


def _schemas(max_input_chars: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shared schemas, and the transcription form's schema apart (it is inlined in
    the multipart operations, not shared)."""
    pairs: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (SpeechRequest, "validation"),
        (SaveVoice, "validation"),
        (BatchRequest, "validation"),
        (TranscriptionForm, "validation"),
    ]
    pairs += [(m, "serialization") for m in _RESPONSE_MODELS]
    _, defs = models_json_schema(pairs, ref_template=_REF)
    schemas = defs["$defs"]
    form = schemas.pop("TranscriptionForm")
    schemas["SpeechRequest"]["properties"]["input"]["maxLength"] = max_input_chars
    return schemas, form


def _paths(form: dict[str, Any]) -> dict[str, Any]:
    metrics = {
        "description": "Prometheus text",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
    document = {
        "description": "OpenAPI 3.1",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
    health = {"200": _json(Health, "Every worker is alive"), "503": _json(Health, "A worker died")}
    models, voices = _json(ModelList, "The models"), _json(VoiceList, "The voices")
    return {
        "/v1/audio/speech": {"post": _keyed(_speech_op())},
        "/v1/audio/speech/batch": {"post": _keyed(_batch_op())},
        "/v1/audio/transcriptions": {"post": _keyed(_transcribe_op("transcribe", form))},
        "/v1/audio/translations": {"post": _keyed(_transcribe_op("translate", form))},
        "/v1/audio/diarization": {"post": _keyed(_diarize_op())},
        "/v1/models": {"get": _keyed(_get("listModels", "Models it answers to", models))},
        "/v1/audio/voices": {
            "get": _keyed(_get("listVoices", "Voices and aliases, and the saved voices", voices)),
            "post": _keyed(_save_voice_op()),
        },
        "/v1/audio/voices/{voice_id}": {"delete": _keyed(_delete_voice_op())},
        "/health": {
            "get": {
                "operationId": "health",
                "summary": "Liveness of the workers",
                "responses": health,
            }
        },
        # `--metrics-require-key` puts /metrics behind the key too.
        "/metrics": {"get": _keyed(_get("metrics", "Prometheus metrics", metrics))},
        "/openapi.json": {"get": _get("openapi", "This document", document)},
    }


def _version() -> str:
    try:
        return importlib.metadata.version("voxserve")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "0+unknown"


async def openapi_endpoint(request: Request) -> Response:
    return JSONResponse(openapi_document(request.app.state.vox.config.tts.max_input_chars))

"""OpenAI wire models for the speech API, and the one place that turns a pydantic
validation failure into a client error that says what to send instead."""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from voxserve.audio.chunks import AUTO, Chunking
from voxserve.errors import InvalidRequest
from voxserve.serving.catalog import SPEECH_MODELS
from voxserve.text.split import speakable

__all__ = [
    "MAX_CHUNKING_CHARS",
    "REPLICA_HEADER",
    "SPEECH_MODELS",
    "SaveVoice",
    "ServerVAD",
    "SpeechRequest",
    "TranscriptionForm",
    "VoiceRef",
    "parse_chunking",
    "parse_include",
    "parse_json_body",
    "validate",
]

REPLICA_HEADER = "x-voxserve-replica"
"""Names the Ray replica that served a response."""

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]


class VoiceRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=200)


class SpeechRequest(BaseModel):
    """Body of `POST /v1/audio/speech`."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=False)

    model: str = Field(min_length=1, max_length=200, description="tts-1, tts-1-hd, gpt-4o-mini-tts or the voice model's own name")
    # The upper bound is the server's `--tts-max-input-chars` (default 4096), checked by the handler.
    input: str = Field(
        min_length=1,
        description=(
            "Text to speak, 1 to --tts-max-input-chars (4096) characters; SSML starting with <speak>, "
            "or plain text with [pause:0.5s] and [voice:name] tags (docs/MARKUP.md), whose markup may "
            "add as much again"
        ),
    )
    voice: str | VoiceRef = Field(description="A voice name, an OpenAI voice name, or {\"id\": name}")
    response_format: ResponseFormat = "mp3"
    # Strict: a JSON number only, not true or "1.5" (never auto-correct a wrong type).
    speed: float = Field(1.0, ge=0.25, le=4.0, allow_inf_nan=False, strict=True)
    stream_format: Literal["audio", "sse"] = "audio"
    instructions: str | None = Field(None, max_length=4096, description="Accepted and ignored")
    sample_rate: int | None = Field(
        None, ge=8000, le=48000, strict=True, description="Output rate in Hz; default 24000"
    )
    language: str | None = Field(
        None, min_length=1, max_length=16,
        description="voxserve extension: the language to speak (en-us, en-gb, es, fr, hi, it, pt-br); default: the voice's",
    )
    timestamps: bool = Field(
        False, strict=True,
        description=(
            "voxserve extension: word timings. The response becomes JSON "
            "{audio (base64), audio_format, sample_rate, timestamps: [{word, start_time, end_time}]}, "
            "or, with stream_format=sse, speech.words events come before each segment's audio"
        ),
    )

    @field_validator("input")
    @classmethod
    def _has_text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("input must contain text, not only whitespace")
        if not speakable(value):
            raise ValueError(
                "input has nothing that can be spoken, only punctuation or control "
                "characters; send words or numbers"
            )
        return value

    @property
    def voice_name(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.id


class SaveVoice(BaseModel):
    """Body of `POST /v1/audio/voices`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="A letter, then letters, digits, '_' or '-'")
    voice: str = Field(min_length=1, max_length=400, description="A voice or blend of one loaded model")


class TranscriptionForm(BaseModel):
    """The non-file fields of a transcription or translation request."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=200, description="whisper-1 or the model's own name")
    language: str | None = Field(None, max_length=16, description="ISO-639-1 code of the audio")
    prompt: str | None = Field(None, max_length=8192, description="Text that primes every piece")
    temperature: float = Field(0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    response_format: Literal["json", "text", "srt", "verbose_json", "vtt", "diarized_json"] = "json"
    timestamp_granularities: list[Literal["segment", "word"]] = Field(default_factory=list)
    stream: bool = False
    chunking_strategy: Chunking | None = None
    """Parsed by `parse_chunking`: None is no strategy (the default rule)."""
    logprobs: bool = False
    """`include[]=logprobs` was sent (`parse_include`)."""
    known_speakers: list[tuple[str, bytes]] = Field(default_factory=list)
    """Known speakers' names and reference audio (`api/speakers.py: parse_known_speakers`)."""
    noise_reduction: Literal["near_field", "far_field"] | None = Field(
        None,
        description=(
            "voxserve extension: the VAD that cuts long audio hears it through a noise filter "
            "(near_field or far_field, as in a realtime session); the recognizer hears the audio as sent"
        ),
    )


MAX_CHUNKING_CHARS = 1024
"""Longest `chunking_strategy` accepted: a whole server_vad object is under 150."""


class ServerVAD(BaseModel):
    """OpenAI's `{"type": "server_vad", ...}` chunking strategy. Strict: numbers only as
    numbers of the right kind (no "300" inside JSON, no true)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["server_vad"]
    prefix_padding_ms: int | None = Field(None, ge=0, le=2000, strict=True)
    silence_duration_ms: int | None = Field(None, ge=50, le=5000, strict=True)
    threshold: float | None = Field(None, ge=0.0, le=1.0, strict=True, allow_inf_nan=False)

    def chunking(self) -> Chunking:
        """The settings, the ones left out taken from `AUTO`."""
        return Chunking(
            AUTO.prefix_padding_ms if self.prefix_padding_ms is None else self.prefix_padding_ms,
            AUTO.silence_duration_ms if self.silence_duration_ms is None else self.silence_duration_ms,
            AUTO.threshold if self.threshold is None else self.threshold,
        )


_CHUNKING_HINT = (
    'send "auto" or a JSON object {"type": "server_vad", "prefix_padding_ms": 0-2000, '
    '"silence_duration_ms": 50-5000, "threshold": 0-1}'
)


def parse_chunking(raw: str | None, keys: dict[str, str]) -> Chunking | None:
    """`chunking_strategy` as a multipart form sends it: the string "auto", a JSON object
    in that field, or one field per key (`chunking_strategy[type]=server_vad` ..., as
    OpenAI's SDKs send an object; each value then a JSON number or a bare string).
    None when neither is sent. 400 `param: chunking_strategy` for anything else."""
    def bad(problem: str) -> InvalidRequest:
        return InvalidRequest(f"invalid 'chunking_strategy': {problem}; {_CHUNKING_HINT}", param="chunking_strategy")

    if raw is not None and keys:
        raise bad("it was sent both as one field and as chunking_strategy[...] fields")
    if raw is None and not keys:
        return None
    size = len(raw) if raw is not None else sum(len(k) + len(v) for k, v in keys.items())
    if size > MAX_CHUNKING_CHARS:
        raise bad(f"it is {size} characters long, more than {MAX_CHUNKING_CHARS}")
    data: Any
    if raw is not None:
        if raw.strip() == "auto":
            return AUTO
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise bad("it is neither \"auto\" nor valid JSON") from None
        if not isinstance(data, dict):
            raise bad(f"a JSON {type(data).__name__} is not a strategy")
    else:
        data = {key: _form_scalar(value) for key, value in keys.items()}
    try:
        return ServerVAD.model_validate(data).chunking()
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "value"
        raise bad(f"{where}: {first.get('msg', 'invalid value')}") from None


def _form_scalar(value: str) -> Any:
    """A form field's value as the JSON scalar it spells, else the string itself."""
    try:
        data = json.loads(value)
    except ValueError:
        return value
    return data if isinstance(data, int | float) and not isinstance(data, bool) else value


def parse_include(values: list[str]) -> bool:
    """`include[]`: whether logprobs were asked for. 400 `param: include` for any other
    value (it is the only one OpenAI defines for transcriptions)."""
    for value in values:
        if value != "logprobs":
            shown = value if len(value) <= 40 else value[:40] + "..."
            raise InvalidRequest(
                f"invalid 'include': {shown!r} is not something a transcription can include; "
                "send include[]=logprobs or leave it out",
                param="include",
            )
    return bool(values)


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = [str(p) for p in first.get("loc", ()) if not isinstance(p, int)]
        param = loc[0] if loc else None
        msg = first.get("msg", "invalid value")
        if first.get("type") == "value_error" and "error" in first.get("ctx", {}):
            msg = str(first["ctx"]["error"])  # our own validator's words, without "Value error, "
        if first.get("type") == "missing":
            msg = f"'{param}' is required"
        elif param:
            msg = f"invalid '{param}': {msg}"
        raise InvalidRequest(msg, param=param) from None


def parse_json_body(raw: bytes) -> Any:
    if not raw.strip():
        raise InvalidRequest("request body is empty; send a JSON object")
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise InvalidRequest("request body is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc.msg} at position {exc.pos}") from None
    except ValueError:  # an integer past Python's limit on digits (4300)
        raise InvalidRequest("request body has a number with too many digits") from None
    except RecursionError:
        raise InvalidRequest("request body is nested too deeply; send a flat JSON object") from None
    if not isinstance(data, dict):
        raise InvalidRequest("request body must be a JSON object")
    return data

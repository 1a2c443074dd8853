"""OpenAI wire models for the speech API, and the one place that turns a pydantic
validation failure into a client error that says what to send instead."""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from voxserve.errors import InvalidRequest
from voxserve.serving.catalog import SPEECH_MODELS
from voxserve.text.split import speakable

__all__ = [
    "REPLICA_HEADER",
    "SPEECH_MODELS",
    "SpeechRequest",
    "TranscriptionForm",
    "VoiceRef",
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
    input: str = Field(min_length=1, description="Text to speak, 1 to --tts-max-input-chars (4096) characters")
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


class TranscriptionForm(BaseModel):
    """The non-file fields of a transcription or translation request."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=200, description="whisper-1 or the model's own name")
    language: str | None = Field(None, max_length=16, description="ISO-639-1 code of the audio")
    prompt: str | None = Field(None, max_length=8192, description="Text that primes every piece")
    temperature: float = Field(0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    response_format: Literal["json", "text", "srt", "verbose_json", "vtt"] = "json"
    timestamp_granularities: list[Literal["segment", "word"]] = Field(default_factory=list)
    stream: bool = False


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

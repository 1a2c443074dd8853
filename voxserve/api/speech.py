"""`POST /v1/audio/speech`: validate, prepare text off the loop, admit, then stream audio.

The handler parses, then opens the stream through the serving layer
(`voxserve.serving.speech`) and frames its chunks: raw audio, or SSE events. With
`timestamps: true` (a voxserve extension, shaped as Kokoro-FastAPI's captioned speech) the
words' times come too: as `speech.words` events before each segment's audio in SSE, or
else in one JSON body `{"audio", "audio_format", "sample_rate", "timestamps"}` once the
whole audio is made. Errors
before the first byte are raised as typed errors; an error after streaming began ends
the body (or sends an SSE error event).

The body must come as `Content-Type: application/json` (parameters such as
`; charset=utf-8` are fine); anything else, or no content type, gets 415 before the body
is read. A web page can send `text/plain` or a form to any server without asking it
first (a CORS "simple request"), so without this check any site a user visits could make
a server on their machine speak. The `x-request-id` header has been checked by
`voxserve.api.request_id` before the handler runs.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Mapping, Sequence

from starlette.requests import Request

from voxserve.api.schemas import REPLICA_HEADER, SpeechRequest, parse_json_body, validate
from voxserve.api.sse import sse, sse_error
from voxserve.api.streaming import StreamResponse, until_disconnect
from voxserve.audio.encode import content_type
from voxserve.engine.script import read_script
from voxserve.engine.words import WordTime
from voxserve.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType, VoxError
from voxserve.serving.service import Service, Speech
from voxserve.serving.speech import AudioChunk, SpeechParams

__all__ = [
    "read_body",
    "read_speech_request",
    "require_json",
    "server_timing",
    "speech",
    "speech_body",
    "speech_head",
    "speech_params",
    "words_json",
]

MAX_JSON_BYTES = 256 * 1024


async def read_body(request: Request, limit: int) -> bytes:
    """Read the body, refusing with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def speech(request: Request) -> StreamResponse:
    state: Service = request.app.state.vox
    started = time.perf_counter()
    body = await read_speech_request(request, state.config.tts.max_input_chars)
    request_id = request.headers.get("x-request-id") or state.new_request_id()
    stream = await state.open_speech(speech_params(body), request_id, started, lambda: until_disconnect(request))
    media_type, headers = speech_head(body, state.config.default_sample_rate, request_id)
    if stream.replica is not None:
        headers[REPLICA_HEADER] = stream.replica
    late: dict[str, str] = {}
    if body.timestamps and body.stream_format == "audio":
        content = captioned_body(stream, body.response_format, late)
    else:
        content = speech_body(stream, body.stream_format, body.timestamps, late)
    return StreamResponse(content, media_type, headers, stream.close, late_headers=late)


def server_timing(parts: Mapping[str, float]) -> str:
    """A `Server-Timing` header value: each part of the time to first audio in ms (the
    W3C format browsers' developer tools show; `voxserve bench speech` reads it)."""
    return ", ".join(f"{name};dur={seconds * 1e3:.2f}" for name, seconds in parts.items())


def _note_first_packet(chunk: AudioChunk, late: dict[str, str] | None) -> None:
    if late is not None and chunk.first_packet is not None:
        late["server-timing"] = server_timing(chunk.first_packet)


def speech_params(body: SpeechRequest) -> SpeechParams:
    """What the serving layer needs of a validated request body."""
    return SpeechParams(
        model=body.model,
        text=body.input,
        voice=body.voice_name,
        response_format=body.response_format,
        speed=body.speed,
        sample_rate=body.sample_rate,
        language=body.language,
    )


def require_json(content_type: str | None) -> None:
    """Refuse with 415 unless the media type is `application/json`."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        sent = f"Content-Type {media!r}" if media else "no Content-Type"
        if len(sent) > 80:
            sent = "another Content-Type"
        raise UnsupportedMediaType(
            f"this endpoint reads JSON, and the request has {sent}; "
            "send the body as JSON with the header 'Content-Type: application/json'",
            param="content-type",
        )


async def read_speech_request(request: Request, max_chars: int) -> SpeechRequest:
    """Read and validate the JSON body: 415 unless it is sent as JSON, 413 past the size
    limit, 400 for bad fields."""
    require_json(request.headers.get("content-type"))
    raw = await read_body(request, max(MAX_JSON_BYTES, 8 * max_chars))
    body = validate(SpeechRequest, parse_json_body(raw))
    # Markup may add as much again as the text it speaks (`engine/script.py`).
    if len(body.input) > max_chars and read_script(body.input, max_chars) is None:
        raise InvalidRequest(
            f"input is {len(body.input)} characters; this server takes at most {max_chars}, "
            "so split the text into several requests",
            param="input",
            code="input_too_long",
        )
    return body


def speech_head(body: SpeechRequest, default_rate: int, request_id: str) -> tuple[str, dict[str, str]]:
    """The media type and headers of a speech response."""
    rate = body.sample_rate or default_rate
    if body.stream_format == "sse":
        media_type = "text/event-stream"
    elif body.timestamps:
        media_type = "application/json"
    else:
        media_type = content_type(body.response_format)
    return media_type, {"x-sample-rate": str(rate), "x-request-id": request_id}


def words_json(words: Sequence[WordTime]) -> list[dict[str, object]]:
    """Word timings as Kokoro-FastAPI's captioned speech writes them."""
    return [{"word": w.word, "start_time": w.start, "end_time": w.end} for w in words]


async def captioned_body(
    stream: Speech, response_format: str, late: dict[str, str] | None = None
) -> AsyncGenerator[bytes, None]:
    """The whole audio and its word timings as one JSON body, sent once all is made (so a
    failure before the end is still a JSON error with its status). `late` gets the
    first packet's Server-Timing header."""
    parts: list[bytes] = []
    words: list[WordTime] = []
    async with contextlib.aclosing(stream.chunks()) as chunks:
        async for chunk in chunks:
            _note_first_packet(chunk, late)
            parts.append(chunk.data)
            words.extend(chunk.words)
    body = {
        "audio": base64.b64encode(b"".join(parts)).decode(),
        "audio_format": response_format,
        "sample_rate": stream.sample_rate,
        "timestamps": words_json(words),
    }
    yield json.dumps(body).encode()


async def speech_body(
    stream: Speech, stream_format: str, timestamps: bool = False, late: dict[str, str] | None = None
) -> AsyncGenerator[bytes, None]:
    """The response body: the encoded audio, or SSE events (`speech.audio.delta`, then
    `speech.audio.done` with usage; a failure after the start is an `error` event); with
    `timestamps`, a `speech.words` event before each segment's audio. `late` gets the
    first packet's Server-Timing header before the first bytes."""
    if stream_format != "sse":
        async with contextlib.aclosing(stream.chunks()) as chunks:
            async for chunk in chunks:
                _note_first_packet(chunk, late)
                yield chunk.data
        return
    samples = 0
    try:
        async with contextlib.aclosing(stream.chunks()) as chunks:
            async for chunk in chunks:
                _note_first_packet(chunk, late)
                samples += chunk.samples
                if timestamps and chunk.words:
                    yield sse({"type": "speech.words", "words": words_json(chunk.words)})
                if chunk.data:
                    yield sse({"type": "speech.audio.delta", "audio": base64.b64encode(chunk.data).decode()})
    except VoxError as exc:
        yield sse_error(exc)
        return
    # Usage in the shape OpenAI reports: characters in, audio out (as 20 ms "tokens").
    characters = stream.characters
    out_tokens = int(samples / stream.sample_rate * 50)
    usage = {"input_tokens": characters, "output_tokens": out_tokens, "total_tokens": characters + out_tokens}
    yield sse({"type": "speech.audio.done", "usage": usage})

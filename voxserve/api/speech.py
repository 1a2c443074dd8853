"""`POST /v1/audio/speech`: validate, prepare text off the loop, admit, then stream audio.

The handler only awaits: text preparation runs in the text pool, compressed encoding in
the audio pool, and inference in the engine's threads. Errors before the first byte are
raised as typed errors; an error after streaming began ends the body (or sends an SSE
error event) and is logged.

The body must come as `Content-Type: application/json` (parameters such as
`; charset=utf-8` are fine); anything else, or no content type, gets 415 before the body
is read. A web page can send `text/plain` or a form to any server without asking it
first (a CORS "simple request"), so without this check any site a user visits could make
a server on their machine speak. The `x-request-id` header has been checked by
`voxserve.api.request_id` before the handler runs.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
from starlette.requests import Request

from voxserve.api.schemas import SPEECH_MODELS, SpeechRequest, parse_json_body, validate
from voxserve.api.streaming import StreamResponse, unless_gone, until_disconnect
from voxserve.audio.encode import StreamEncoder, content_type, make_encoder
from voxserve.engine.stream import StreamFailed
from voxserve.engine.tts import StreamHandle
from voxserve.errors import (
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ServerError,
    UnsupportedMediaType,
    VoxError,
)

if TYPE_CHECKING:
    from voxserve.serving.state import AppState

__all__ = ["open_speech", "read_body", "read_speech_request", "require_json", "speech", "speech_head"]

log = logging.getLogger(__name__)

MAX_JSON_BYTES = 256 * 1024
_CHEAP_FORMATS = ("pcm", "wav")


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
    state: AppState = request.app.state.vox
    started = time.perf_counter()
    body = await read_speech_request(request, state.config.tts.max_input_chars)
    request_id = request.headers.get("x-request-id") or state.new_request_id()
    source, on_close = await open_speech(
        state, body, request_id, started, gone=lambda: until_disconnect(request)
    )
    media_type, headers = speech_head(body, state.config.default_sample_rate, request_id)
    return StreamResponse(source, media_type, headers, on_close)


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
    if len(body.input) > max_chars:
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
    media_type = "text/event-stream" if body.stream_format == "sse" else content_type(body.response_format)
    return media_type, {"x-sample-rate": str(rate), "x-request-id": request_id}


async def open_speech(
    state: AppState,
    body: SpeechRequest,
    request_id: str,
    started: float,
    gone: Callable[[], Awaitable[None]] | None = None,
    admitted: bool = False,
) -> tuple[AsyncIterator[bytes], Callable[[bool], None]]:
    """Check the model and voice, prepare the text, wait for a stream slot and submit the
    stream: its encoded body (raw audio or SSE events), and the hook to call once when the
    body ends (`completed` False when it was cut short).

    `gone` resolves when the client leaves, which ends a wait in the admission queue with
    499. A Ray TTS replica (`voxserve.ray`) runs this same function with no `gone`: there,
    the caller cancels the call instead.

    `admitted`: the caller already holds a stream slot and keeps it (a WebSocket session
    between two segments of one reply), so the stream neither waits for one nor gives it
    back.
    """
    engine = state.engine
    if body.model not in SPEECH_MODELS and body.model != engine.model.name:
        raise NotFound(
            f"model {body.model!r} does not exist; use one of: "
            f"{', '.join((*SPEECH_MODELS, engine.model.name))}",
            param="model",
            code="model_not_found",
        )
    voice = engine.resolve_voice(body.voice_name)
    rate = body.sample_rate or state.config.default_sample_rate
    if not admitted:
        state.admission.refuse_if_full()  # before the phonemizer's work, not after

    loop = asyncio.get_running_loop()
    prepared = await state.text_pool.run(engine.prepare, body.input, voice, body.speed)
    if not admitted:
        await _admit(state, gone)
    try:
        handle = engine.submit(prepared, rate, loop, request_id)
        encoder = make_encoder(body.response_format, rate)
    except BaseException:
        if not admitted:
            state.admission.release()
        raise
    state.metrics.streams_started.inc()

    def on_close(completed: bool) -> None:
        engine.abort(handle.id)
        if not admitted:
            state.admission.release()
        if not completed:
            state.metrics.streams_aborted.inc()

    if body.stream_format == "sse":
        return _sse_events(state, handle, encoder, body.response_format, started, prepared.characters), on_close
    return _audio_bytes(state, handle, encoder, body.response_format, started), on_close


async def _admit(state: AppState, gone: Callable[[], Awaitable[None]] | None) -> None:
    """Wait for a stream slot; a client that leaves while queued drops out of the line."""
    await unless_gone(
        state.admission.acquire(),  # raises Overloaded (429)
        gone() if gone is not None else None,
        "client disconnected while queued",
    )


async def _encoded(
    state: AppState, handle: StreamHandle, encoder: StreamEncoder, fmt: str, started: float
) -> AsyncIterator[tuple[bytes, int]]:
    """Encoded bytes as chunks arrive, with the samples each one carried."""
    engine = state.engine
    inline = fmt in _CHEAP_FORMATS
    first = True
    total = 0
    while True:
        item = await handle.stream.get()
        engine.taken(handle.id)
        if inline:
            data = _encode_step(encoder, item.pcm, item.last)
        else:
            data = await state.audio_pool.run(_encode_step, encoder, item.pcm, item.last)
        total += len(item.pcm)
        if first and len(item.pcm):
            first = False
            state.metrics.ttfp.observe(time.perf_counter() - started)
        yield data, len(item.pcm)
        if item.last:
            elapsed = time.perf_counter() - started
            if total:
                state.metrics.rtf.observe(elapsed / (total / handle.sample_rate))
            state.metrics.audio_seconds.inc(total / handle.sample_rate)
            return


def _encode_step(encoder: StreamEncoder, pcm: np.ndarray, last: bool) -> bytes:
    data = encoder.feed(pcm) if len(pcm) else b""
    if last:
        data += encoder.flush()
    return data


async def _audio_bytes(
    state: AppState, handle: StreamHandle, encoder: StreamEncoder, fmt: str, started: float
) -> AsyncIterator[bytes]:
    try:
        async for data, _ in _encoded(state, handle, encoder, fmt, started):
            yield data
    except StreamFailed as exc:
        # Before the first byte this becomes a 500 in the OpenAI shape; after it, the
        # response ends without its final chunk, so the client sees a truncated body.
        log.error("stream %s failed: %s", handle.request_id, exc)
        state.metrics.stream_errors.inc()
        cause = exc.__cause__
        raise cause if isinstance(cause, VoxError) else ServerError(str(exc)) from exc


async def _sse_events(
    state: AppState,
    handle: StreamHandle,
    encoder: StreamEncoder,
    fmt: str,
    started: float,
    characters: int,
) -> AsyncIterator[bytes]:
    samples = 0
    try:
        async for data, n in _encoded(state, handle, encoder, fmt, started):
            samples += n
            if data:
                event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
                yield _sse(event)
    except StreamFailed as exc:
        log.error("stream %s failed after start: %s", handle.request_id, exc)
        state.metrics.stream_errors.inc()
        cause = exc.__cause__
        error = cause if isinstance(cause, VoxError) else ServerError(str(exc))
        body = error.body()["error"]
        yield _sse({"type": "error", "error": body})
        return
    # Usage in the shape OpenAI reports: characters in, audio out (as 20 ms "tokens").
    out_tokens = int(samples / handle.sample_rate * 50)
    usage = {"input_tokens": characters, "output_tokens": out_tokens, "total_tokens": characters + out_tokens}
    yield _sse({"type": "speech.audio.done", "usage": usage})


def _sse(event: Mapping[str, object]) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'))}\n\n".encode()

"""`POST /v1/audio/transcriptions` and `/v1/audio/translations` (OpenAI, multipart).

The handler reads the whole form first, with two limits enforced while reading: the
request's own size (413 without taking the rest) and the upload budget shared by every
upload not decoded yet (`--max-buffered-upload-mb`, 429 with Retry-After). Only then does
it wait for a transcription slot (`--asr-max-requests`), so a client that stalls
mid-upload costs a connection and its share of the budget until the body timeout
(`voxserve.api.deadline`), never a slot. With the slot, it hands the upload to the shared
transcription pipeline: decode and cut in the audio pool (the upload's bytes then go back
to the budget), batched decoding in the ASR engine. It only awaits. A client that goes
away drops the request's queued pieces. Streaming (`stream=true`) sends a
`transcript.text.delta` SSE event as each piece finishes, in order, then
`transcript.text.done`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from voxserve.api.formats import CONTENT_TYPES, as_json, as_srt, as_text, as_verbose_json, as_vtt
from voxserve.api.schemas import TranscriptionForm, validate
from voxserve.api.streaming import StreamResponse, unless_gone, until_disconnect
from voxserve.engine.admission import Admission
from voxserve.engine.asr import ASREngine, TranscribeOptions
from voxserve.engine.stream import StreamFailed
from voxserve.engine.transcribe import Transcript, Transcription, start_transcription
from voxserve.engine.uploads import UploadLease
from voxserve.errors import (
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ServerError,
    VoxError,
)
from voxserve.serving.catalog import ASR_MODELS
from voxserve.serving.metrics import Metrics

if TYPE_CHECKING:
    from voxserve.serving.state import AppState

__all__ = [
    "ASR_MODELS",
    "asr_disabled",
    "collect_transcript",
    "observe",
    "open_transcription",
    "read_upload",
    "render",
    "sse_events",
    "transcriptions",
    "translations",
]

log = logging.getLogger(__name__)

MAX_FIELD_BYTES = 64 * 1024
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off", "")


async def transcriptions(request: Request) -> Response | StreamResponse:
    return await _serve(request, "transcribe")


async def translations(request: Request) -> Response | StreamResponse:
    return await _serve(request, "translate")


def _engine(state: AppState) -> ASREngine:
    if state.asr is None:
        raise asr_disabled()
    return state.asr


def asr_disabled() -> NotFound:
    return NotFound("speech-to-text is off on this server; start it without --no-asr", code="asr_disabled")


async def _serve(request: Request, task: str) -> Response | StreamResponse:
    state: AppState = request.app.state.vox
    engine = _engine(state)
    admission = state.asr_admission
    assert admission is not None
    started = time.perf_counter()
    request_id = request.headers.get("x-request-id") or state.new_request_id()
    body, transcription = await _admit_and_open(request, state, engine, admission, task, request_id)
    try:
        response = await _respond(request, state, body, transcription, task, request_id, started)
    except BaseException:
        admission.release()
        raise
    if isinstance(response, StreamResponse):
        close = response.on_close

        def on_close(completed: bool) -> None:
            admission.release()
            if close is not None:
                close(completed)

        response.on_close = on_close
    else:
        admission.release()
    return response


async def _admit_and_open(
    request: Request, state: AppState, engine: ASREngine, admission: Admission, task: str, request_id: str
) -> tuple[TranscriptionForm, Transcription]:
    """Read the upload under the upload budget, then take a transcription slot and decode.

    The slot comes after the body: a client that stalls mid-upload holds its connection
    and its share of the budget until the body timeout, never a slot. The upload's bytes
    go back to the budget once decoded. Returns holding the slot."""
    assert state.uploads is not None
    admission.refuse_if_full()  # a request that would be refused now skips its upload
    lease = state.uploads.lease()
    try:
        body, data = await read_upload(request, state.config.asr.max_upload_mb, task, lease)
        await unless_gone(admission.acquire(), until_disconnect(request), "client disconnected while queued")
        try:
            pool = state.asr_pool
            assert pool is not None
            transcription = await open_transcription(engine, pool, body, data, task, request_id)
        except BaseException:
            admission.release()
            raise
    finally:
        lease.release()
    return body, transcription


async def _respond(
    request: Request,
    state: AppState,
    body: TranscriptionForm,
    transcription: Transcription,
    task: str,
    request_id: str,
    started: float,
) -> Response | StreamResponse:
    headers = {"x-request-id": request_id}
    if body.stream:
        events = sse_events(state.metrics, transcription, started)
        return StreamResponse(events, "text/event-stream", headers, lambda _: transcription.cancel())
    transcript = await collect_transcript(transcription, lambda: until_disconnect(request))
    observe(state.metrics, task, body.response_format, transcript.duration, started)
    return render(transcript, body, task, headers)


async def read_upload(
    request: Request, max_upload_mb: float, task: str, lease: UploadLease | None = None
) -> tuple[TranscriptionForm, bytes]:
    """Read and validate the multipart form: its fields and the uploaded file's bytes.
    With `lease`, every piece of the body is taken from the upload budget as it arrives
    (429 past it); the caller releases the lease."""
    form = await _read_form(request, int(max_upload_mb * 1024 * 1024), lease)
    try:
        body, upload = _parse(form, task)
        data = await upload.read()
    finally:
        await form.close()
    return body, data


async def open_transcription(
    engine: ASREngine, pool: Executor, body: TranscriptionForm, data: bytes, task: str, request_id: str
) -> Transcription:
    """Check the model, then decode and cut the audio and start feeding it to the engine.
    The HTTP handler calls this; so does a Ray ASR replica (`voxserve.ray`)."""
    if body.model not in ASR_MODELS and body.model != engine.name:
        raise NotFound(
            f"model {body.model!r} does not exist; use one of: {', '.join((*ASR_MODELS, engine.name))}",
            param="model",
            code="model_not_found",
        )
    options = TranscribeOptions(
        task=task,
        language=body.language or None,
        prompt=body.prompt or None,
        temperature=body.temperature,
        timings=body.response_format in ("srt", "vtt", "verbose_json"),
    )
    return await start_transcription(engine, data, options, pool, request_id)


async def _read_form(request: Request, limit: int, lease: UploadLease | None) -> FormData:
    """Parse the multipart body, answering 413 as soon as it passes `limit` bytes and 429
    as soon as `lease` cannot take the next piece."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is larger than {limit} bytes; send a smaller file")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "multipart/form-data":
        raise InvalidRequest(
            "send the audio as multipart/form-data with a 'file' field and a 'model' field"
        )
    received = 0

    async def receive() -> Any:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            size = len(message.get("body", b""))
            received += size
            if received > limit:
                raise PayloadTooLarge(f"request body is larger than {limit} bytes; send a smaller file")
            if lease is not None:
                lease.take(size)
        return message

    limited = Request(request.scope, receive)
    return await limited.form(max_files=1, max_fields=64, max_part_size=MAX_FIELD_BYTES)


def _parse(form: FormData, task: str) -> tuple[TranscriptionForm, UploadFile]:
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        if upload is None:
            raise InvalidRequest("'file' is required; send the audio as a multipart file", param="file")
        raise InvalidRequest("'file' must be a file part, not a text field", param="file")
    fields: dict[str, Any] = {}
    for name in ("model", "language", "prompt", "temperature", "response_format"):
        value = form.get(name)
        if isinstance(value, str):
            fields[name] = value
    grains = [v for k in ("timestamp_granularities[]", "timestamp_granularities") for v in form.getlist(k)]
    fields["timestamp_granularities"] = [g for g in grains if isinstance(g, str)]
    stream = form.get("stream")
    if isinstance(stream, str):
        if stream.strip().lower() not in _TRUE + _FALSE:
            raise InvalidRequest("invalid 'stream': send true or false", param="stream")
        fields["stream"] = stream.strip().lower() in _TRUE
    if fields.get("temperature") == "":
        del fields["temperature"]
    body = validate(TranscriptionForm, fields)
    if task == "translate" and (body.stream or body.timestamp_granularities):
        param = "stream" if body.stream else "timestamp_granularities"
        raise InvalidRequest(f"translations do not support '{param}'; leave it out", param=param)
    if body.stream and body.response_format not in ("json", "text"):
        raise InvalidRequest(
            "stream=true sends text events; use response_format json or text with it",
            param="response_format",
        )
    if "word" in body.timestamp_granularities and body.response_format != "verbose_json":
        raise InvalidRequest(
            "word timestamps need response_format verbose_json", param="timestamp_granularities"
        )
    return body, upload


async def collect_transcript(
    transcription: Transcription, gone: Callable[[], Awaitable[None]] | None = None
) -> Transcript:
    """The whole transcript. `gone` resolves when the client leaves, which cancels the
    request's work; without it (a Ray ASR replica), cancelling the caller does."""
    try:
        return await unless_gone(
            transcription.collect(),
            gone() if gone is not None else None,
            "client disconnected while its audio was transcribed",
        )
    except StreamFailed as exc:
        if isinstance(exc.__cause__, VoxError):  # e.g. 503 while the server shuts down
            raise exc.__cause__ from None
        raise ServerError(str(exc)) from exc
    finally:
        transcription.cancel()  # nothing left to drop after success; frees the stream


def observe(m: Metrics, task: str, fmt: str, duration: float, started: float) -> None:
    """Count one answered transcription in the ASR metrics."""
    elapsed = time.perf_counter() - started
    m.asr_requests.labels(task, fmt).inc()
    m.asr_audio_seconds.inc(duration)
    m.asr_latency.observe(elapsed)
    if elapsed > 0:
        m.asr_rtfx.observe(duration / elapsed)


def render(t: Transcript, body: TranscriptionForm, task: str, headers: dict[str, str]) -> Response:
    fmt = body.response_format
    if fmt == "json":
        return JSONResponse(as_json(t), headers=headers)
    if fmt == "verbose_json":
        grains = body.timestamp_granularities
        segments = not grains or "segment" in grains
        return JSONResponse(as_verbose_json(t, "word" in grains, segments, task), headers=headers)
    text = {"text": as_text, "srt": as_srt, "vtt": as_vtt}[fmt](t)
    return PlainTextResponse(text, headers=headers, media_type=CONTENT_TYPES[fmt])


async def sse_events(metrics: Metrics, transcription: Transcription, started: float) -> AsyncIterator[bytes]:
    """`transcript.text.delta` events as pieces finish, then `transcript.text.done`."""
    parts: list[str] = []
    try:
        async for window in transcription.windows():
            delta = "".join(s.text for s in window.segments)
            if not parts:
                delta = delta.lstrip()
            if delta:
                parts.append(delta)
                yield _sse({"type": "transcript.text.delta", "delta": delta})
    except StreamFailed as exc:
        log.error("transcription %s failed after start: %s", transcription.handle.request_id, exc)
        cause = exc.__cause__
        error = cause if isinstance(cause, VoxError) else ServerError(str(exc))
        body = error.body()["error"]
        yield _sse({"type": "error", "error": body})
        return
    observe(metrics, "transcribe", "stream", transcription.duration, started)
    yield _sse({"type": "transcript.text.done", "text": "".join(parts).strip()})


def _sse(event: dict[str, object]) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()

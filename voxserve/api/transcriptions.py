"""`POST /v1/audio/transcriptions` and `/v1/audio/translations` (OpenAI, multipart).

The handler reads the whole form first, with two limits enforced while reading: the
request's own size (413 without taking the rest) and the upload budget shared by every
upload not decoded yet (`--asr-max-buffered-upload-mb`, 429 with Retry-After). Only then does
it wait for a transcription slot (`--asr-max-requests`), so a client that stalls
mid-upload costs a connection and its share of the budget until the body timeout
(`voxserve.api.deadline`), never a slot. Then the serving layer takes over
(`voxserve.serving.service.Service.open_transcription`): here, decode and cut in the
audio pool (the upload's bytes then go back to the budget) and batched decoding in the
ASR engine; on a Ray front end, an ASR replica. The handler only parses and awaits. A
client that goes away drops the request's queued pieces. Streaming (`stream=true`) sends
a `transcript.text.delta` SSE event as each piece finishes, in order, then
`transcript.text.done`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Iterator
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from voxserve.api.diarized import render_diarized, segment_event
from voxserve.api.formats import (
    CONTENT_TYPES,
    as_json,
    as_srt,
    as_text,
    as_verbose_json,
    as_vtt,
    logprob_list,
    usage,
)
from voxserve.api.schemas import (
    REPLICA_HEADER,
    TranscriptionForm,
    parse_chunking,
    parse_include,
    validate,
)
from voxserve.api.speakers import (
    MAX_REFERENCE_CHARS,
    MAX_REFERENCES_CHARS,
    REFERENCES,
    is_reference,
    parse_known_speakers,
)
from voxserve.api.sse import sse, sse_error
from voxserve.api.streaming import StreamResponse, until_disconnect
from voxserve.audio.chunks import AUTO
from voxserve.engine.speakers import DiarizedTranscript, SegmentDone
from voxserve.engine.transcribe import TextDelta, Transcript
from voxserve.engine.uploads import UploadLease
from voxserve.errors import InvalidRequest, PayloadTooLarge, VoxError
from voxserve.serving.catalog import ASR_MODELS, diarizing_model
from voxserve.serving.service import Service, TranscriptionReply, Upload
from voxserve.serving.transcription import TranscriptionParams

__all__ = [
    "ASR_MODELS",
    "Arrival",
    "arrival",
    "read_form",
    "read_upload",
    "render",
    "transcript_events",
    "transcription_params",
    "transcriptions",
    "translations",
]

MAX_FIELD_BYTES = 64 * 1024
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off", "")


async def transcriptions(request: Request) -> Response | StreamResponse:
    return await _serve(request, "transcribe")


async def translations(request: Request) -> Response | StreamResponse:
    return await _serve(request, "translate")


@dataclass(frozen=True)
class Arrival:
    """An upload route's request before its body is read: the service, its id, when it
    arrived, and its lease on the upload budget."""

    state: Service
    request_id: str
    started: float
    lease: UploadLease


@contextlib.contextmanager
def arrival(request: Request) -> Iterator[Arrival]:
    """Refuse a request for transcription work before its upload is read (404 when
    speech-to-text is off, 429 when no slot is free), then hold a lease on the upload
    budget until the block ends."""
    state: Service = request.app.state.vox
    state.check_transcriptions()  # 404 when off; 429 now skips the upload
    started = time.perf_counter()
    request_id = request.headers.get("x-request-id") or state.new_request_id()
    assert state.uploads is not None
    lease = state.uploads.lease()
    try:
        yield Arrival(state, request_id, started, lease)
    finally:
        lease.release()


async def _serve(request: Request, task: str) -> Response | StreamResponse:
    with arrival(request) as came:
        headers = {"x-request-id": came.request_id}
        body, reply = await _read_and_open(request, came.state, task, came.request_id, came.started, came.lease)
        if body.stream:
            if reply.replica is not None:
                headers[REPLICA_HEADER] = reply.replica
            return StreamResponse(transcript_events(reply), "text/event-stream", headers, reply.close)
        try:
            transcript = await reply.transcript(lambda: until_disconnect(request))
        finally:
            reply.close()
    if reply.replica is not None:
        headers[REPLICA_HEADER] = reply.replica
    return render(transcript, body, task, headers)


async def _read_and_open(
    request: Request, state: Service, task: str, request_id: str, started: float, lease: UploadLease
) -> tuple[TranscriptionForm, TranscriptionReply]:
    """Read the upload under the upload budget, then take a transcription slot.

    The slot comes after the body: a client that stalls mid-upload holds its connection
    and its share of the budget until the body timeout, never a slot. The upload's
    bytes go back to the budget once decoded (or handed to a Ray replica)."""
    body, data = await read_upload(request, state.config.asr.max_upload_mb, task, lease)
    params = transcription_params(body, task)

    def gone() -> Awaitable[None]:
        return until_disconnect(request)

    reply = await state.open_transcription(Upload(params, data, request_id, started, gone, body.stream, lease))
    return body, reply


def transcription_params(body: TranscriptionForm, task: str) -> TranscriptionParams:
    """What the serving layer needs of a validated form."""
    return TranscriptionParams(
        model=body.model,
        task=task,
        response_format=body.response_format,
        language=body.language,
        prompt=body.prompt,
        temperature=body.temperature,
        timings=body.response_format in ("srt", "vtt", "verbose_json"),
        words="word" in body.timestamp_granularities,
        logprobs=body.logprobs,
        # "auto" is the diarizing model's default, as OpenAI's: pieces end in pauses,
        # where turns change hands
        chunking=body.chunking_strategy or (AUTO if diarizing_model(body.model) else None),
        noise_reduction=body.noise_reduction,
        diarize=diarizing_model(body.model),
        known_speakers=tuple(body.known_speakers),
    )


async def read_upload(
    request: Request, max_upload_mb: float, task: str, lease: UploadLease | None = None
) -> tuple[TranscriptionForm, bytes]:
    """Read and validate the multipart form: its fields and the uploaded file's bytes.
    With `lease`, every piece of the body is taken from the upload budget as it arrives
    (429 past it); the caller releases the lease."""
    form = await read_form(request, int(max_upload_mb * 1024 * 1024), lease)
    try:
        body, upload = _parse(form, task)
        data = await upload.read()
    finally:
        await form.close()
    return body, data


async def read_form(request: Request, limit: int, lease: UploadLease | None) -> FormData:
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
    async with contextlib.aclosing(limited.stream()) as stream:
        parser = _FormParser(limited.headers, stream, max_files=1, max_fields=64, max_part_size=MAX_FIELD_BYTES)
        try:
            return await parser.parse()
        except MultiPartException as exc:
            raise InvalidRequest(exc.message) from None


class _FormParser(MultiPartParser):
    """Starlette's multipart parser, whose refusal of an oversized field names the field
    (`param`), so a client learns which of its fields to shorten."""

    references = 0
    """Characters of known-speaker references read so far."""

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._current_part
        if part.file is None and is_reference(part.field_name):
            self.references += end - start
            if len(part.data) + end - start > MAX_REFERENCE_CHARS or self.references > MAX_REFERENCES_CHARS:
                raise InvalidRequest(
                    f"a known speaker reference is over {MAX_REFERENCE_CHARS // (1024 * 1024)} MB, or all of them "
                    f"over {MAX_REFERENCES_CHARS // (1024 * 1024)} MB; send 2-10 s of each voice",
                    param=REFERENCES,
                )
            part.data.extend(data[start:end])
            return
        if part.file is None and len(part.data) + end - start > self.max_part_size:
            name = part.field_name.split("[", 1)[0]
            raise InvalidRequest(
                f"field {part.field_name[:64]!r} is larger than {self.max_part_size // 1024} KB; "
                "send a shorter value",
                param=name[:64] or None,
            )
        super().on_part_data(data, start, end)


def _parse(form: FormData, task: str) -> tuple[TranscriptionForm, UploadFile]:
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        if upload is None:
            raise InvalidRequest("'file' is required; send the audio as a multipart file", param="file")
        raise InvalidRequest("'file' must be a file part, not a text field", param="file")
    fields = _form_fields(form)
    diarizes = isinstance(fields.get("model"), str) and diarizing_model(fields["model"])
    fields["known_speakers"] = parse_known_speakers(form, diarizes)
    body = validate(TranscriptionForm, fields)
    _check_combination(body, task, diarizes)
    return body, upload


def _form_fields(form: FormData) -> dict[str, Any]:
    """The form's fields as `TranscriptionForm` takes them, from OpenAI's multipart
    spellings (`name[]` lists, `chunking_strategy[key]`, `stream` as text)."""
    fields: dict[str, Any] = {}
    for name in ("model", "language", "prompt", "temperature", "response_format", "noise_reduction"):
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
    raw = form.get("chunking_strategy")
    keys = {
        k[len("chunking_strategy[") : -1]: v
        for k, v in form.multi_items()
        if k.startswith("chunking_strategy[") and k.endswith("]") and isinstance(v, str)
    }
    fields["chunking_strategy"] = parse_chunking(raw if isinstance(raw, str) else None, keys)
    includes = [v for k in ("include[]", "include") for v in form.getlist(k)]
    fields["logprobs"] = parse_include([v for v in includes if isinstance(v, str)])
    return fields


def _check_combination(body: TranscriptionForm, task: str, diarizes: bool) -> None:
    """Refuse fields that are valid alone but not together, or not for `task`."""
    if body.response_format == "diarized_json" and not diarizes:
        raise InvalidRequest(
            "response_format diarized_json needs a model that labels speakers: send "
            "model=gpt-4o-transcribe-diarize, or another response_format",
            param="response_format",
        )
    if diarizes and (task == "translate" or body.logprobs):
        param = "model" if task == "translate" else "include"
        raise InvalidRequest(f"{body.model} transcribes with speaker labels: it does not "
                             f"{'translate' if task == 'translate' else 'give logprobs'}", param=param)
    if task == "translate" and (body.stream or body.timestamp_granularities):
        param = "stream" if body.stream else "timestamp_granularities"
        raise InvalidRequest(f"translations do not support '{param}'; leave it out", param=param)
    if body.stream and body.response_format not in ("json", "text", "diarized_json"):
        raise InvalidRequest(
            "stream=true sends text events; use response_format json or text with it",
            param="response_format",
        )
    if body.logprobs and body.response_format not in ("json", "verbose_json"):
        raise InvalidRequest(
            "include[]=logprobs needs response_format json or verbose_json (or stream=true)",
            param="include",
        )
    if "word" in body.timestamp_granularities and body.response_format != "verbose_json":
        raise InvalidRequest(
            "word timestamps need response_format verbose_json", param="timestamp_granularities"
        )


def render(t: Transcript, body: TranscriptionForm, task: str, headers: dict[str, str]) -> Response:
    fmt = body.response_format
    if isinstance(t, DiarizedTranscript):
        return render_diarized(t, body, task, headers)
    if fmt == "json":
        return JSONResponse(as_json(t, body.logprobs), headers=headers)
    if fmt == "verbose_json":
        grains = body.timestamp_granularities
        segments = not grains or "segment" in grains
        return JSONResponse(as_verbose_json(t, "word" in grains, segments, task, body.logprobs), headers=headers)
    text = {"text": as_text, "srt": as_srt, "vtt": as_vtt}[fmt](t)
    return PlainTextResponse(text, headers=headers, media_type=CONTENT_TYPES[fmt])


async def transcript_events(stream: TranscriptionReply) -> AsyncGenerator[bytes, None]:
    """`transcript.text.delta` events as pieces finish, then `transcript.text.done`; a
    failure after the start is an `error` event."""
    try:
        async with contextlib.aclosing(stream.deltas()) as deltas:
            async for item in deltas:
                if isinstance(item, SegmentDone):
                    yield sse(segment_event(item))
                    continue
                if isinstance(item, TextDelta):
                    event: dict[str, Any] = {"type": "transcript.text.delta", "delta": item.text}
                else:
                    event = {
                        "type": "transcript.text.done",
                        "text": item.text,
                        "usage": usage(item.duration),
                        "languages": list(item.languages),
                    }
                if item.logprobs is not None:
                    event["logprobs"] = logprob_list(item.logprobs)
                yield sse(event)
    except VoxError as exc:
        yield sse_error(exc)

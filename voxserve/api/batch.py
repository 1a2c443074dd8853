"""`POST /v1/audio/speech/batch`: up to `MAX_ITEMS` inputs in one request, each with its own
overrides, answered once all are spoken, as JSON (base64 audio) or as a zip.

Body: `{"items": [{"input": ..., "voice"?, "model"?, "speed"?, "response_format"?,
"sample_rate"?, "language"?}, ...], "model"?, "voice"?, "response_format"?, "speed"?,
"sample_rate"?, "language"?, "output": "json" | "zip"}`. The top-level fields are every
item's defaults; an item's own fields win. Each item is checked as a `POST
/v1/audio/speech` body would be (markup included) before any is spoken, and the batch is
refused whole with a 400 naming the item (`param: items[3].voice`) when one is wrong, so
nothing is half-done. The inputs together may hold at most `MAX_TOTAL_INPUTS` times the
input limit. Items run as ordinary streams (`voxserve.serving.batch`).

JSON answer: `{"object": "list", "data": [{"index", "audio" (base64), "audio_format",
"sample_rate"} or {"index", "error"}, ...]}` in the items' order. Zip answer
(`application/zip`): `000.mp3`, `001.wav`, ... in order, and `000.error.json` in place of
an item that failed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import time
import zipfile
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voxserve.api.schemas import SpeechRequest, parse_json_body, validate
from voxserve.api.speech import read_body, require_json, speech_params
from voxserve.api.streaming import until_disconnect
from voxserve.engine.script import read_script
from voxserve.errors import InvalidRequest, VoxError
from voxserve.serving.batch import BatchResult, BatchSlots, speak_batch
from voxserve.serving.service import Service
from voxserve.serving.speech import SpeechParams
from voxserve.serving.waiting import unless_gone
from voxserve.text.markup import Say

__all__ = ["MAX_ITEMS", "MAX_TOTAL_INPUTS", "BatchRequest", "speech_batch"]

MAX_ITEMS = 32
"""Items one batch may hold (vLLM-Omni's bound)."""
MAX_TOTAL_INPUTS = 8
"""The inputs of one batch together: at most this many times `--tts-max-input-chars`."""

_ITEM_FIELDS = ("model", "voice", "response_format", "speed", "sample_rate", "language")


class BatchRequest(BaseModel):
    """Body of `POST /v1/audio/speech/batch`; items are checked one by one as speech bodies."""

    model_config = ConfigDict(extra="forbid")

    items: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_ITEMS, description="1 to 32 speech requests")
    model: str | None = Field(None, max_length=200)
    voice: str | dict[str, Any] | None = None
    response_format: str | None = Field(None, max_length=16)
    speed: float | None = None
    sample_rate: int | None = None
    language: str | None = Field(None, max_length=16)
    output: Literal["json", "zip"] = "json"


def _slots(request: Request, state: Service) -> BatchSlots:
    """The app's one `BatchSlots`, made on first use: half of the server's streams."""
    slots: BatchSlots | None = getattr(request.app.state, "batch_slots", None)
    if slots is None:
        slots = request.app.state.batch_slots = BatchSlots(state.config.tts.stream_limit(False))
    return slots


def _item(data: dict[str, Any], defaults: dict[str, Any], at: int, max_chars: int) -> SpeechParams:
    unknown = sorted(set(data) - {"input", *_ITEM_FIELDS})
    if unknown:
        raise InvalidRequest(
            f"items[{at}] has {unknown[0]!r}; an item takes input, {', '.join(_ITEM_FIELDS)}", param=f"items[{at}]"
        )
    merged = {"model": "tts-1", **defaults, **data}
    try:
        body = validate(SpeechRequest, merged)
        if read_script(body.input, max_chars) is None and len(body.input) > max_chars:
            raise InvalidRequest(f"input is {len(body.input)} characters; items take at most {max_chars}", param="input")
    except InvalidRequest as exc:
        where = f"items[{at}]" + (f".{exc.param}" if exc.param else "")
        raise InvalidRequest(f"{where}: {exc.message}", param=where, code=exc.code) from None
    return speech_params(body)


def _tag_voices(text: str, max_chars: int) -> list[str]:
    """The voices an input's markup names (read and bounded already by `_item`)."""
    script = read_script(text, max_chars)
    if script is None:
        return []
    return list(dict.fromkeys(item.voice for item in script.items if isinstance(item, Say) and item.voice))


async def _check_voices(state: Service, items: list[SpeechParams], max_chars: int) -> None:
    """Every item's model, voice and language, and the voices its markup names, before
    any item is spoken (404, 400)."""
    lane = state.speech_lane()
    try:
        for at, item in enumerate(items):
            for voice, param in [(item.voice, None), *((v, "input") for v in _tag_voices(item.text, max_chars))]:
                try:
                    await lane.check(item.model, voice, item.language)
                except VoxError as exc:
                    where = f"items[{at}]." + (param or exc.param or "voice")
                    exc.message = f"{where}: {exc.message}"
                    exc.param = where
                    raise
    finally:
        await lane.close()


def _json(results: list[BatchResult]) -> Response:
    data: list[dict[str, Any]] = []
    for r in results:
        if r.error is not None:
            data.append({"index": r.index, "error": r.error.body()["error"]})
        else:
            audio = base64.b64encode(r.audio).decode()
            data.append({"index": r.index, "audio": audio, "audio_format": r.params.response_format,
                         "sample_rate": r.sample_rate})  # fmt: skip
    return JSONResponse({"object": "list", "data": data})


def _zip(results: list[BatchResult]) -> Response:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for r in results:
            if r.error is not None:
                archive.writestr(f"{r.index:03d}.error.json", JSONResponse(r.error.body()).body)
            else:
                archive.writestr(f"{r.index:03d}.{r.params.response_format}", r.audio)
    return Response(out.getvalue(), media_type="application/zip",
                    headers={"content-disposition": 'attachment; filename="speech.zip"'})  # fmt: skip


async def speech_batch(request: Request) -> Response:
    state: Service = request.app.state.vox
    started = time.perf_counter()
    max_chars = state.config.tts.max_input_chars
    require_json(request.headers.get("content-type"))
    # A batch of 32 items at the markup limit, JSON-escaped: well within 16 bytes a character.
    raw = await read_body(request, 16 * MAX_TOTAL_INPUTS * max_chars)
    body = validate(BatchRequest, parse_json_body(raw))
    defaults = {k: getattr(body, k) for k in _ITEM_FIELDS if getattr(body, k) is not None}
    items = [_item(data, defaults, at, max_chars) for at, data in enumerate(body.items)]
    total = sum(len(item.text) for item in items)
    if total > MAX_TOTAL_INPUTS * max_chars:
        raise InvalidRequest(
            f"the items' inputs hold {total} characters together; a batch takes at most "
            f"{MAX_TOTAL_INPUTS * max_chars}, so send the rest in another batch",
            param="items",
            code="input_too_long",
        )
    await _check_voices(state, items, max_chars)
    request_id = request.headers.get("x-request-id") or state.new_request_id()
    left = asyncio.ensure_future(until_disconnect(request))
    try:
        results = await unless_gone(
            speak_batch(state, items, request_id, started, lambda: asyncio.shield(left), _slots(request, state)),
            asyncio.shield(left),
            "client disconnected during the batch",
        )
    finally:
        left.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await left
    response = _zip(results) if body.output == "zip" else _json(results)
    response.headers["x-request-id"] = request_id
    return response

"""`GET`, `POST /v1/audio/voices` and `DELETE /v1/audio/voices/{id}`: the voice list, with
the saved voices beside the built-in ones, and saving and deleting a voice.

A saved voice is `{"name", "voice"}`, `voice` a voice or blend of one loaded model
(`voxserve.serving.saved_voices`). Cloning a voice from an audio sample is not offered:
no model that can do it ships its weights in a package. A request in the shape OpenAI's
custom voices take (`audio_sample`, as a form or a JSON field) gets a 400 that says so.
With an API key configured, these routes need it as every `/v1` route does
(`voxserve.api.auth`).
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voxserve.api.schemas import SaveVoice, parse_json_body, validate
from voxserve.api.speech import read_body, require_json
from voxserve.errors import InvalidRequest, Unavailable
from voxserve.serving.catalog import ServerInfo, builtin_voice_names
from voxserve.serving.saved_voices import SavedVoices

__all__ = ["delete_voice", "list_voices", "save_voice"]

MAX_BODY_BYTES = 4096
"""A voice to save is a name and a blend of at most 8 voices: well under 1 kB."""

_CLONING = (
    "cloning a voice from an audio sample is not offered: no model that can do it ships its "
    "weights in a package. Save a voice or blend of the loaded models instead, as JSON "
    '{"name": "narrator", "voice": "af_bella(2)+am_adam(1)"}'
)


def _info(request: Request) -> tuple[ServerInfo, SavedVoices]:
    info: ServerInfo = request.app.state.vox
    if info.saved_voices is None:
        raise Unavailable("the server is starting; try again in a moment")
    return info, info.saved_voices


async def list_voices(request: Request) -> Response:
    """The built-in voices (`saved: false`), then the saved ones (`saved: true`)."""
    info: ServerInfo = request.app.state.vox
    builtin = info.voices()
    voices: list[dict[str, object]] = [{**v, "saved": False} for v in builtin]
    if info.saved_voices is not None:
        claimed = {v["model"]: v["openai_model"] for v in builtin}
        saved = await asyncio.to_thread(info.saved_voices.all)
        voices += [v.describe(claimed.get(v.model)) for v in saved]
    return JSONResponse({"object": "list", "voices": voices})


async def save_voice(request: Request) -> Response:
    info, store = _info(request)
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media in ("multipart/form-data", "application/x-www-form-urlencoded"):
        raise InvalidRequest(_CLONING, param="audio_sample", code="voice_cloning_unsupported")
    require_json(request.headers.get("content-type"))
    data = parse_json_body(await read_body(request, MAX_BODY_BYTES))
    if "audio_sample" in data or "audio" in data:
        raise InvalidRequest(_CLONING, param="audio_sample", code="voice_cloning_unsupported")
    body = validate(SaveVoice, data)
    model = info.voice_model(body.voice)
    taken = body.name.lower() in builtin_voice_names(info.voices())
    saved = await asyncio.to_thread(store.add, body.name, body.voice, model, taken)
    claimed = next((v["openai_model"] for v in info.voices() if v["model"] == model), None)
    return JSONResponse(saved.describe(claimed), status_code=201)


async def delete_voice(request: Request) -> Response:
    info, store = _info(request)
    key = request.path_params["voice_id"]
    if key.lower() in builtin_voice_names(info.voices()):
        raise InvalidRequest(
            f"{key[:80]!r} is a built-in voice, and built-in voices cannot be removed; "
            "only saved voices can (GET /v1/audio/voices marks them saved: true)",
            param="voice_id",
            code="builtin_voice",
        )
    removed = await asyncio.to_thread(store.remove, key)
    return JSONResponse({"id": removed.id, "object": "voice", "deleted": True})

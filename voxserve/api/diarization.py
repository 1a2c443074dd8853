"""`POST /v1/audio/diarization` (Speaches' shape): who spoke when, without the words.

A multipart form: `file`, `model` (optional; a model that labels speakers),
`response_format` (`json`: `{duration, segments: [{start, end, speaker}]}`, or `rttm`:
NIST's `SPEAKER <file> 1 <start> <duration> <NA> <NA> <speaker> <NA> <NA>` lines) and
the known-speaker fields (`api/speakers.py`). The upload is read under the same limits
and budget as a transcription's, and the work holds a transcription slot
(`serving/diarization.py: speakers_only`), here or on a Ray ASR replica. HTTP only.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from voxserve.api.speakers import parse_known_speakers
from voxserve.api.streaming import until_disconnect
from voxserve.api.transcriptions import arrival, read_form
from voxserve.engine.speakers import DiarizedTranscript
from voxserve.errors import InvalidRequest
from voxserve.serving.catalog import DIARIZE_MODELS, diarizing_model
from voxserve.serving.service import Upload
from voxserve.serving.transcription import TranscriptionParams

__all__ = ["as_rttm", "diarization"]

FORMATS = ("json", "rttm")


def as_rttm(t: DiarizedTranscript, name: str = "audio") -> str:
    """One `SPEAKER` line per turn; spaces in a speaker's name become underscores, as
    RTTM's fields are space-separated."""
    return "".join(
        f"SPEAKER {name} 1 {turn.start:.3f} {turn.end - turn.start:.3f} <NA> <NA> "
        f"{'_'.join(turn.speaker.split())} <NA> <NA>\n"
        for turn in t.turns
    )


def _json(t: DiarizedTranscript) -> dict[str, Any]:
    return {
        "duration": round(t.duration, 3),
        "segments": [{"start": turn.start, "end": turn.end, "speaker": turn.speaker} for turn in t.turns],
        "speakers": t.speakers,
    }


async def diarization(request: Request) -> Response:
    with arrival(request) as came:
        state, request_id, lease = came.state, came.request_id, came.lease
        form = await read_form(request, int(state.config.asr.max_upload_mb * 1024 * 1024), lease)
        try:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise InvalidRequest("'file' is required; send the audio as a multipart file", param="file")
            model = form.get("model") or DIARIZE_MODELS[0]
            if not isinstance(model, str) or len(model) > 200 or not diarizing_model(model):
                shown = str(model)[:64]
                raise InvalidRequest(f"model {shown!r} does not label speakers; send one of: {', '.join(DIARIZE_MODELS)}",
                                     param="model")
            fmt = form.get("response_format") or "json"
            if fmt not in FORMATS:
                raise InvalidRequest(f"invalid 'response_format': {str(fmt)[:40]!r}; send json or rttm",
                                     param="response_format")
            known = parse_known_speakers(form, True)
            data = await upload.read()
        finally:
            await form.close()
        params = TranscriptionParams(model=model, task="transcribe", response_format=str(fmt), diarize=True,
                                     known_speakers=known, speakers_only=True)
        reply = await state.open_transcription(
            Upload(params, data, request_id, came.started, lambda: until_disconnect(request), False, lease)
        )
        try:
            result = await reply.transcript(lambda: until_disconnect(request))
        finally:
            reply.close()
    assert isinstance(result, DiarizedTranscript)
    headers = {"x-request-id": request_id}
    if fmt == "rttm":
        return PlainTextResponse(as_rttm(result), headers=headers, media_type="text/plain; charset=utf-8")
    return JSONResponse(_json(result), headers=headers)

"""Render a diarized transcript (`engine/speakers.py: DiarizedTranscript`) in OpenAI's
response formats: `diarized_json` (segments of `{type: "transcript.text.segment", id,
start, end, text, speaker}`), `json` and `text` as without speakers, `verbose_json`
whose segments are the speaker segments with a `speaker` field, and srt and vtt cues
per speaker segment (srt: "A: text"; vtt: a `<v A>` voice span). Also the
`transcript.text.segment` event of a streamed one. Pure functions, plus the response.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, PlainTextResponse, Response

from voxserve.api.formats import CONTENT_TYPES, as_json, as_text, timestamp, usage
from voxserve.api.schemas import TranscriptionForm
from voxserve.engine.speakers import DiarizedTranscript, SegmentDone, SpeakerSegment
from voxserve.text.languages import language_name

__all__ = ["as_diarized_json", "render_diarized", "segment_event"]


def _segment(index: int, s: SpeakerSegment) -> dict[str, Any]:
    return {"type": "transcript.text.segment", "id": f"seg_{index + 1:03d}", "start": s.start, "end": s.end,
            "text": s.text, "speaker": s.speaker}


def segment_event(done: SegmentDone) -> dict[str, Any]:
    """The SSE event of one finished speaker segment."""
    return _segment(done.index, done.segment)


def as_diarized_json(t: DiarizedTranscript) -> dict[str, Any]:
    return {
        "task": "transcribe",
        "duration": round(t.duration, 3),
        "text": t.text,
        "segments": [_segment(i, s) for i, s in enumerate(t.speaker_segments)],
        "usage": usage(t.duration),
    }


def _verbose(t: DiarizedTranscript, words: bool, segments: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": "transcribe",
        "language": language_name(t.language),
        "duration": round(t.duration, 3),
        "text": t.text,
    }
    if segments:
        rows = []
        for i, s in enumerate(t.speaker_segments):
            source = t.segments[s.source]
            rows.append({
                "id": i, "seek": source.seek, "start": s.start, "end": s.end, "text": " " + s.text, "tokens": [],
                "temperature": source.temperature, "avg_logprob": round(source.avg_logprob, 6),
                "compression_ratio": round(source.compression_ratio, 6),
                "no_speech_prob": round(source.no_speech_prob, 6), "speaker": s.speaker,
            })
        body["segments"] = rows
    if words:
        body["words"] = [{"word": w.word.strip(), "start": w.start, "end": w.end}
                         for s in t.segments for w in s.words or ()]
    body["usage"] = usage(t.duration)
    return body


def _cue(text: str) -> str:
    return " ".join(text.split()).replace("-->", "->")


def _srt(t: DiarizedTranscript) -> str:
    return "\n".join(
        f"{i}\n{timestamp(s.start, ',', True)} --> {timestamp(s.end, ',', True)}\n{s.speaker}: {_cue(s.text)}\n"
        for i, s in enumerate(t.speaker_segments, start=1)
    )


def _vtt(t: DiarizedTranscript) -> str:
    cues = ["WEBVTT\n"]
    for s in t.speaker_segments:
        voice = _cue(s.speaker).replace(">", "")
        cues.append(f"{timestamp(s.start)} --> {timestamp(s.end)}\n<v {voice}>{_cue(s.text)}\n")
    return "\n".join(cues)


def render_diarized(t: DiarizedTranscript, body: TranscriptionForm, task: str, headers: dict[str, str]) -> Response:
    fmt = body.response_format
    if fmt == "diarized_json":
        return JSONResponse(as_diarized_json(t), headers=headers)
    if fmt == "json":
        return JSONResponse(as_json(t), headers=headers)
    if fmt == "verbose_json":
        grains = body.timestamp_granularities
        return JSONResponse(_verbose(t, "word" in grains, not grains or "segment" in grains), headers=headers)
    text = {"text": as_text, "srt": _srt, "vtt": _vtt}[fmt](t)
    return PlainTextResponse(text, headers=headers, media_type=CONTENT_TYPES[fmt])

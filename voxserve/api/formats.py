"""Render a transcript in OpenAI's response formats: json, text, srt, vtt, verbose_json.

Pure functions: a `Transcript` in, a dict or a string out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from voxserve.engine.segments import TokenLogprob
from voxserve.engine.transcribe import Transcript
from voxserve.text.languages import language_name

__all__ = [
    "CONTENT_TYPES",
    "RESPONSE_FORMATS",
    "as_json",
    "as_srt",
    "as_text",
    "as_verbose_json",
    "as_vtt",
    "logprob_list",
    "timestamp",
    "usage",
]

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
CONTENT_TYPES = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}


def timestamp(seconds: float, decimal: str = ".", always_hours: bool = False) -> str:
    """HH:MM:SS.mmm (SRT uses a comma and always shows hours; VTT may omit them)."""
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    head = f"{hours:02d}:" if always_hours or hours else ""
    return f"{head}{minutes:02d}:{secs:02d}{decimal}{ms:03d}"


def usage(duration: float) -> dict[str, Any]:
    """OpenAI's `usage` of a transcription billed by duration."""
    return {"type": "duration", "seconds": round(duration, 3)}


def _usage(t: Transcript) -> dict[str, Any]:
    return usage(t.duration)


def logprob_list(logprobs: Iterable[TokenLogprob]) -> list[dict[str, Any]]:
    """OpenAI's `logprobs`: each text token with its log-probability and its bytes."""
    return [{"token": lp.token, "logprob": lp.logprob, "bytes": list(lp.bytes)} for lp in logprobs]


def _logprobs(t: Transcript) -> list[dict[str, Any]]:
    return logprob_list(lp for s in t.segments for lp in s.logprobs or ())


def as_json(t: Transcript, logprobs: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"text": t.text}
    if logprobs:
        body["logprobs"] = _logprobs(t)
    if logprobs:
        body["logprobs"] = _logprobs(t)
    body["usage"] = _usage(t)
    return body


def as_text(t: Transcript) -> str:
    return t.text + "\n" if t.text else ""


def _cue_text(text: str) -> str:
    # A blank line would end the cue early; "-->" would read as a timing line.
    return " ".join(text.split()).replace("-->", "->")


def as_srt(t: Transcript) -> str:
    cues = []
    for i, s in enumerate(t.segments, start=1):
        span = f"{timestamp(s.start, ',', True)} --> {timestamp(s.end, ',', True)}"
        cues.append(f"{i}\n{span}\n{_cue_text(s.text)}\n")
    return "\n".join(cues)


def as_vtt(t: Transcript) -> str:
    cues = ["WEBVTT\n"]
    for s in t.segments:
        cues.append(f"{timestamp(s.start)} --> {timestamp(s.end)}\n{_cue_text(s.text)}\n")
    return "\n".join(cues)


def as_verbose_json(
    t: Transcript, words: bool, segments: bool = True, task: str = "transcribe", logprobs: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": task,
        "language": language_name(t.language),
        "duration": round(t.duration, 3),
        "text": t.text,
    }
    if segments:
        body["segments"] = [
            {
                "id": i,
                "seek": s.seek,
                "start": s.start,
                "end": s.end,
                "text": s.text,
                "tokens": list(s.tokens),
                "temperature": s.temperature,
                "avg_logprob": round(s.avg_logprob, 6),
                "compression_ratio": round(s.compression_ratio, 6),
                "no_speech_prob": round(s.no_speech_prob, 6),
            }
            for i, s in enumerate(t.segments)
        ]
    if words:
        body["words"] = [
            {"word": w.word.strip(), "start": w.start, "end": w.end}
            for s in t.segments
            for w in s.words or ()
        ]
    body["usage"] = _usage(t)
    return body

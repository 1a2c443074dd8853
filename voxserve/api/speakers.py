"""The known-speaker fields of a diarization request, as OpenAI and Speaches send them:
`known_speaker_names[]` and `known_speaker_references[]`, one data URL of audio
(`data:audio/wav;base64,...`) per name, in the same order.

Bounds: at most `MAX_KNOWN_SPEAKERS` names, each 1-64 printable characters and unique;
each reference at most `MAX_REFERENCE_CHARS` characters of base64 (a 10 s 48 kHz
stereo 24-bit WAV is 3.8 MB of it), all of them together at most
`MAX_REFERENCES_CHARS`. The multipart parser holds a reference part to its own bound
while reading (`api/transcriptions.py`), so an oversized one is refused before it is
read whole. Its length in seconds (2-10 s) is checked once decoded
(`serving/diarization.py`). References are never logged or stored. HTTP parsing only.
"""

from __future__ import annotations

import base64
import binascii

from starlette.datastructures import FormData

from voxserve.errors import InvalidRequest
from voxserve.serving.diarization import MAX_KNOWN_SPEAKERS, MAX_REFERENCE_S, MIN_REFERENCE_S

__all__ = [
    "MAX_NAME_CHARS",
    "MAX_REFERENCES_CHARS",
    "MAX_REFERENCE_CHARS",
    "NAMES",
    "REFERENCES",
    "is_reference",
    "parse_known_speakers",
]

NAMES = "known_speaker_names"
REFERENCES = "known_speaker_references"
MAX_NAME_CHARS = 64
MAX_REFERENCE_CHARS = 4 * 1024 * 1024
MAX_REFERENCES_CHARS = 12 * 1024 * 1024
_HINT = (f"send up to {MAX_KNOWN_SPEAKERS} known_speaker_names[] with as many known_speaker_references[], "
         f"each a data URL of {MIN_REFERENCE_S:g}-{MAX_REFERENCE_S:g} s of the speaker's voice "
         "(data:audio/wav;base64,...)")


def is_reference(field_name: str) -> bool:
    """Whether a form part is a reference (`known_speaker_references[]`, with or without
    the brackets, as clients differ)."""
    return field_name in (REFERENCES, REFERENCES + "[]")


def _values(form: FormData, name: str) -> list[str]:
    values = [v for key in (name + "[]", name) for v in form.getlist(key)]
    if any(not isinstance(v, str) for v in values):
        raise InvalidRequest(f"'{name}' must be text fields, not files; {_HINT}", param=name)
    return [v for v in values if isinstance(v, str)]


def _name(value: str) -> str:
    name = value.strip()
    if not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
        shown = name[:40] + ("..." if len(name) > 40 else "")
        raise InvalidRequest(
            f"invalid 'known_speaker_names': {shown!r} must be 1-{MAX_NAME_CHARS} printable characters",
            param=NAMES,
        )
    return name


def _audio(index: int, value: str) -> bytes:
    head, sep, payload = value.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise InvalidRequest(f"known_speaker_references[{index}] is not a base64 data URL; {_HINT}", param=REFERENCES)
    try:
        return base64.b64decode(payload.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"known_speaker_references[{index}] is not valid base64; {_HINT}",
                             param=REFERENCES) from None


def parse_known_speakers(form: FormData, diarizes: bool) -> tuple[tuple[str, bytes], ...]:
    """(name, audio bytes) of each known speaker; 400 naming the field for too many,
    counts that differ, a bad name or a reference that is not a data URL, and for known
    speakers sent to a model that does not diarize."""
    names = _values(form, NAMES)
    references = _values(form, REFERENCES)
    if not names and not references:
        return ()
    if not diarizes:
        raise InvalidRequest(
            "known speakers need a model that labels speakers: send model=gpt-4o-transcribe-diarize",
            param=NAMES if names else REFERENCES,
        )
    if len(names) > MAX_KNOWN_SPEAKERS or len(references) > MAX_KNOWN_SPEAKERS:
        raise InvalidRequest(f"at most {MAX_KNOWN_SPEAKERS} known speakers; {_HINT}",
                             param=NAMES if len(names) > MAX_KNOWN_SPEAKERS else REFERENCES)
    if len(names) != len(references):
        raise InvalidRequest(
            f"{len(names)} known_speaker_names but {len(references)} known_speaker_references: send one reference "
            "per name, in the same order",
            param=REFERENCES,
        )
    if sum(len(r) for r in references) > MAX_REFERENCES_CHARS:
        raise InvalidRequest(f"the references are over {MAX_REFERENCES_CHARS // (1024 * 1024)} MB together; "
                             "send shorter clips", param=REFERENCES)
    parsed = [_name(n) for n in names]
    if len(set(parsed)) != len(parsed):
        raise InvalidRequest("known_speaker_names must be different from each other", param=NAMES)
    return tuple((name, _audio(i, ref)) for i, (name, ref) in enumerate(zip(parsed, references, strict=True)))

"""Known speakers of a diarized request, whatever channel it came by: each reference is
decoded, bounded (2-10 s) and embedded once per request, in the audio pool; references
are never logged or stored. The diarized streams themselves are
`serving/transcription.py: DiarizedStream` and `SpeakersOnly`. No HTTP here.
"""

from __future__ import annotations

from collections.abc import Sequence

from voxserve.audio.decode import decode_audio
from voxserve.engine.diarize import KnownSpeaker, reference_embedding
from voxserve.errors import InvalidRequest

__all__ = ["MAX_KNOWN_SPEAKERS", "MAX_REFERENCE_S", "MIN_REFERENCE_S", "REFERENCE_RATE", "known_speakers"]

MAX_KNOWN_SPEAKERS = 4
MIN_REFERENCE_S = 2.0
MAX_REFERENCE_S = 10.0
REFERENCE_RATE = 16000


def known_speakers(references: Sequence[tuple[str, bytes]]) -> list[KnownSpeaker]:
    """Each (name, audio bytes) reference decoded and embedded; 400
    `param: known_speaker_references` for one that is not audio or not 2-10 s long.
    CPU work: run it in the audio pool."""
    known = []
    for i, (name, data) in enumerate(references):
        where = f"known_speaker_references[{i}] ({name[:64]!r})"
        try:
            audio = decode_audio(data, MAX_REFERENCE_S + 0.05, REFERENCE_RATE)
        except InvalidRequest as exc:
            raise InvalidRequest(f"{where}: {exc.message}; send {MIN_REFERENCE_S:g}-{MAX_REFERENCE_S:g} s of "
                                 "the speaker's voice as a data URL (data:audio/wav;base64,...)",
                                 param="known_speaker_references") from None
        seconds = len(audio) / REFERENCE_RATE
        if seconds < MIN_REFERENCE_S:
            raise InvalidRequest(f"{where} is {seconds:.2f} s long; send {MIN_REFERENCE_S:g}-{MAX_REFERENCE_S:g} s "
                                 "of the speaker's voice", param="known_speaker_references")
        known.append(KnownSpeaker(name, reference_embedding(audio)))
    return known

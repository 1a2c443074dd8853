"""semantic_vad's rule: when the end-of-turn model and the turn's transcript end a turn.

Under `semantic_vad` a pause in speech is not an end by itself. From the eagerness's first
silence (`EAGERNESS_FIRST_MS`) on, the end-of-turn model (`runners/turn.py`) is asked,
at each of `PROBES_MS`, whether the speech so far is a finished thought; the turn ends
when it says so and the turn's transcript, when one is decoded in time, does not trail
off. The model hears how the words are said, the transcript what they say. Whatever they
answer, the turn ends after the eagerness's longest wait (`EAGERNESS_WAIT_S`).

Pure functions and constants: nothing here runs a model, decodes, or knows a session.
"""

from __future__ import annotations

import functools

from voxserve.runners.turn import COMPLETE_AT

__all__ = [
    "COMPLETE_AT",
    "DOUBTFUL_AT",
    "DOUBT_AFTER_MS",
    "EAGERNESS_FIRST_MS",
    "EAGERNESS_WAIT_S",
    "OPEN_ENDINGS",
    "OPEN_WORDS_EN",
    "PROBES_MS",
    "TEXT_WAIT_MS",
    "WORDS_ALONE_AFTER_MS",
    "due_probe",
    "early_lead_ms",
    "ends_turn",
    "heard_an_end",
    "probes",
    "trails_off",
]

EAGERNESS_WAIT_S = {"low": 8.0, "medium": 4.0, "high": 2.0, "auto": 4.0}
"""The longest silence that ends a turn the model calls unfinished (OpenAI's documented
maxima; `auto` is `medium`)."""
EAGERNESS_FIRST_MS = {"low": 1000.0, "medium": 700.0, "high": 250.0, "auto": 700.0}
"""The shortest silence after which the end-of-turn model may end a turn. Speakers pause
mid-thought, often after words that already make a sentence ("Please send the report |
to my manager"), and at such a pause neither the model nor the transcript can tell the
thought goes on; a speaker's pauses between phrases of one sentence run shorter than this
wait. So `medium` (and `auto`) waits out the pauses inside a sentence, `low` waits longer
still, and `high` ends turns sooner at the price of cutting thoughts at their pauses
(docs/REALTIME.md gives the measured trade)."""
PROBES_MS = (250.0, 400.0, 550.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0)
"""Silences at which the end-of-turn model is asked again whether the thought is complete
(from the eagerness's first one on): its answer firms up as the silence grows."""
DOUBT_AFTER_MS = 1000.0
"""After this much silence a turn ends at `DOUBTFUL_AT` rather than `COMPLETE_AT`: a long
pause after words that do not trail off is more likely an end than a hesitation."""
DOUBTFUL_AT = 0.2
WORDS_ALONE_AFTER_MS = 1500.0
"""After this much silence, words that do not trail off end the turn whatever the model
says, so that a model that never warms to a finished sentence does not hold the turn for
the eagerness's longest wait (by which time the speaker has often begun the next)."""
TEXT_WAIT_MS = 300.0
"""How long a probe that heard a finished thought waits for the early final's text before
it ends the turn on the model's word alone. On a busy machine the decode of a long turn
can outlast the pause after it; waiting it out would let the next utterance resume the
turn, and the turn, grown, would decode slower still."""
OPEN_ENDINGS = ("...", "…", "-", "–", "—", ",", ";", ":")
"""A transcript that ends so (or on a letter or digit) trails off: the thought goes on."""
OPEN_WORDS_EN = frozenset({
    "a", "an", "the", "my", "your", "our", "their", "its",
    "and", "or", "but", "nor", "because", "if", "than",
    "to", "for", "of", "with", "from", "at", "into", "onto", "between", "through", "during", "without",
    "i'm", "i'd", "i'll", "you're", "we're", "they're", "is", "are", "um", "uh", "er",
})
"""English words a finished sentence rarely ends on (articles, possessives, conjunctions,
prepositions that are not also particles, a subject with its verb): Whisper writes "Set a
timer for." or "My order number is." at a hesitation, so a transcript whose last word is
one of these trails off whatever its final mark. Words that end short answers ("I do.",
"Thank you.", "Turn it on.") are left out: a wrong entry only makes a turn wait longer."""


@functools.cache
def probes(eagerness: str) -> tuple[float, ...]:
    """`PROBES_MS` from this eagerness's first silence on, short of its longest wait."""
    first, last = EAGERNESS_FIRST_MS[eagerness], EAGERNESS_WAIT_S[eagerness] * 1000
    return tuple(t for t in PROBES_MS if first <= t < last)


def due_probe(eagerness: str, asked: int, silence_ms: float) -> int | None:
    """How many of this eagerness's `probes` count as asked once the model is asked now,
    `silence_ms` into the pause after `asked` questions; None while the next is not due
    (or none is left). One question at a time: one that answers late skips the silences
    it overran."""
    due = probes(eagerness)
    if asked >= len(due) or silence_ms < due[asked]:
        return None
    while asked + 1 < len(due) and silence_ms >= due[asked + 1]:
        asked += 1
    return asked + 1


def early_lead_ms(eagerness: str, early_final_ms: float) -> float:
    """How far into a pause the final is decoded early: halfway to the model's first
    question, and no sooner than server VAD's `early_final_ms`, since speech resumes after
    most shorter pauses and each decode they start is thrown away."""
    return max(early_final_ms, EAGERNESS_FIRST_MS[eagerness] / 2)


def heard_an_end(silence_ms: float, p: float) -> bool:
    """Whether the end-of-turn model's probability `p`, asked `silence_ms` into a pause,
    ends the turn unless its words trail off: `COMPLETE_AT`, `DOUBTFUL_AT` from
    `DOUBT_AFTER_MS`, and any answer from `WORDS_ALONE_AFTER_MS`."""
    if silence_ms >= WORDS_ALONE_AFTER_MS:
        return True
    return p >= (DOUBTFUL_AT if silence_ms >= DOUBT_AFTER_MS else COMPLETE_AT)


def ends_turn(silence_ms: float, p: float, text: str | None, english: bool = True) -> bool:
    """The rule at one question: the model heard an end (`heard_an_end`) and the turn's
    transcript, when there is one in time, does not trail off."""
    return heard_an_end(silence_ms, p) and (text is None or not trails_off(text, english))


def trails_off(text: str, english: bool = True) -> bool:
    """Whether a transcript ends mid-thought: on a letter or digit, an `OPEN_ENDINGS` mark,
    or (in English) one of `OPEN_WORDS_EN`. An empty one does not (nothing was said to go
    on with)."""
    text = text.strip()
    if not text:
        return False
    if text.endswith(OPEN_ENDINGS) or text[-1].isalnum():
        return True
    if not english:
        return False
    words = "".join(c if c.isalnum() or c == "'" else " " for c in text.lower().replace("’", "'")).split()
    return bool(words) and words[-1] in OPEN_WORDS_EN

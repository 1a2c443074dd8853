"""Text normalization and segmentation for streaming synthesis.

Pure functions: str in, list of str out. Segments are what stage A sees at once, so the
first one is kept short (time to first audio grows with its length) and no segment is
unboundedly long. `segment` serves a model that streams chunks within a segment (Piper);
`grow_segments` serves one that decodes each segment whole (Kokoro), whose segments must
start short and then grow no faster than its decoder keeps ahead of playback.

Every function here does work linear in its input, whatever the input: text comes from
clients. Each regex has a linear worst case (no quantified group can backtrack over the same
characters from many starting points: runs are matched from their first character only,
and possessively), and the abbreviation test reads a bounded tail, never the whole prefix.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass

__all__ = [
    "SegmentPlan",
    "grow_segments",
    "normalize",
    "period_is_not_an_end",
    "segment",
    "speakable",
    "split_clauses",
    "split_phrase",
    "split_sentences",
]

_SPACE = re.compile(r"\s+")
# End of sentence: terminal punctuation, optional closing quotes/brackets, then space. The
# lookbehind starts a run of marks only at its first mark, and the possessive quantifiers
# never give characters back: "a" + "!" * 4095 is one linear pass, not a quadratic one.
_SENTENCE_END = re.compile(r"(?<![.!?\u2026])[.!?\u2026]++[\"'\u201d\u2019)\]]*+(?=\s)|\n\s*\n")
_PARAGRAPH = re.compile(r"\n\s*\n")
_ABBREVIATIONS = frozenset(
    ["mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no", "fig", "approx", "dept", "est", "inc", "ltd", "co", "mt"]
)
_WORD_TAIL = max(len(a) for a in _ABBREVIATIONS) + 1
"""Characters before a period that decide whether it ends a sentence: a longer word is
neither an abbreviation nor an initial."""
# Clause boundary: comma, semicolon, colon or dash followed by space. A whitespace run is
# tried from its first character only, so a long run costs one pass.
_CLAUSE_END = re.compile(r"(?<=[,;:\u2014\u2013])\s+|(?<!\s)\s++(?=[\u2014\u2013-]\s)")


def normalize(text: str) -> str:
    """NFC-normalize, turn control characters into spaces, collapse runs of whitespace.

    Paragraph breaks (blank lines) survive as a single newline so that they still end a
    sentence.
    """
    text = unicodedata.normalize("NFC", text)
    text = "".join(
        ch if ch == "\n" or unicodedata.category(ch)[0] != "C" else " " for ch in text
    )
    paragraphs = [_SPACE.sub(" ", p).strip() for p in _PARAGRAPH.split(text)]
    return "\n\n".join(p for p in paragraphs if p)


def speakable(text: str) -> bool:
    """Whether `text` has anything to say: a letter, a digit or a symbol (an emoji, "$").

    Text of only punctuation, spaces and control characters has nothing, even where the
    phonemizer would read a run of it out by name ("!!!!" as "exclamation").
    """
    return any(unicodedata.category(ch)[0] in "LNS" for ch in text)


def split_sentences(text: str) -> list[str]:
    """Split normalized text at sentence ends and paragraph breaks.

    A period after a common abbreviation ("Dr.", "e.g.") or a single capital ("J.") does
    not end a sentence.
    """
    out: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        mark = match.start()
        if match.group().startswith(".") and period_is_not_an_end(text[max(start, mark - _WORD_TAIL) : mark]):
            continue
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        start = end
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def period_is_not_an_end(before: str) -> bool:
    """Whether a period right after `before` belongs to a word, not to the sentence: after
    a common abbreviation ("Dr", "e.g") or a single letter, as in an initial ("J").

    Only the last few characters of `before` are read, so a caller may pass a long prefix
    or (cheaper) just its tail."""
    words = before[-_WORD_TAIL:].split()
    word = words[-1].lower() if words else ""
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def split_clauses(sentence: str, min_chars: int) -> list[str]:
    """Split a sentence at clause boundaries; pieces shorter than `min_chars` are merged
    into the next one, so that no piece is a lone word with clipped prosody."""
    pieces = [p for p in _CLAUSE_END.split(sentence) if p and p.strip()]
    out: list[str] = []
    pending = ""
    for piece in pieces:
        pending = f"{pending} {piece}".strip() if pending else piece.strip()
        if len(pending) >= min_chars:
            out.append(pending)
            pending = ""
    if pending:
        if out and len(pending) < min_chars:
            out[-1] = f"{out[-1]} {pending}"
        else:
            out.append(pending)
    return out


def _split_words(text: str, max_chars: int) -> list[str]:
    """Lines of at most `max_chars`, cut at spaces; a word longer than that is cut inside."""
    out: list[str] = []
    line: list[str] = []
    size = 0  # len(" ".join(line)); the words are joined once per line, not once per word
    for word in text.split(" "):
        while len(word) > max_chars:
            if size:
                out.append(" ".join(line))
                line, size = [], 0
            out.append(word[:max_chars])
            word = word[max_chars:]
        if size and size + 1 + len(word) > max_chars:
            out.append(" ".join(line))
            line, size = [], 0
        if size:
            line.append(word)
            size += 1 + len(word)
        else:
            line, size = [word], len(word)
    if size:
        out.append(" ".join(line))
    return out


# Words that open a clause, before which a spoken phrase break is natural. "and", "or"
# and "that" are left out: they join nouns too ("between two and four").
_PHRASE_WORDS = frozenset(
    [
        "but", "because", "which", "who", "whose", "while", "when", "where", "after",
        "before", "since", "although", "though", "until", "unless", "whereas",
    ]
)  # fmt: skip


def split_phrase(sentence: str, min_head: int = 20, min_tail: int = 15) -> tuple[str, str] | None:
    """Split a sentence with no clause punctuation before a conjunction or relative word.

    The head gets a comma, so that the phonemizer gives it a continuing (not a final)
    intonation and a short pause, as a reader would at that point.
    """
    position = 0
    for word in sentence.split(" ")[:-1]:
        if position >= min_head and word.lower() in _PHRASE_WORDS:
            head, tail = sentence[: position - 1], sentence[position:]
            if len(tail) >= min_tail:
                return f"{head},", tail
        position += len(word) + 1
    return None


def segment(text: str, first_max_chars: int = 60, max_chars: int = 400) -> list[str]:
    """Normalized text -> synthesis segments.

    - every sentence is a segment;
    - the first sentence, when longer than `first_max_chars`, is split at its first clause
      boundary, or else before a conjunction, so that audio can start after a short
      stage A pass;
    - any sentence longer than `max_chars` is split at clauses, then at spaces, and a
      word longer than `max_chars` (a run of digits, say) inside the word.
    """
    segments: list[str] = []
    for sentence in split_sentences(text):
        if not segments and len(sentence) > first_max_chars:
            clauses = split_clauses(sentence, min_chars=min(20, first_max_chars))
            if len(clauses) > 1:
                segments.append(clauses[0])
                sentence = " ".join(clauses[1:])
            elif (phrase := split_phrase(sentence)) is not None:
                segments.append(phrase[0])
                sentence = phrase[1]
        if len(sentence) > max_chars:
            for clause in split_clauses(sentence, min_chars=40):
                segments.extend(_split_words(clause, max_chars))
        else:
            segments.append(sentence)
    return segments


@dataclass(frozen=True)
class SegmentPlan:
    """How text is cut for a model that decodes each segment whole: the first segment is
    a few words, and each later one only as long as can be decoded while the segments
    before it play.

    With decoding at RTF r, segment k+1 is ready in time if, in audio,
    `L[k+1] <= L[1] + (growth - 1) * (L[1] + ... + L[k])` with `r * growth <= 1`: each
    segment's decode then ends before the audio made so far has played. Audio is counted
    in characters, plus `pause_chars` per segment for the silence every segment brings.
    """

    first_chars: int = 18
    """The first segment's most characters: about 1 s of speech."""
    max_chars: int = 150
    """No segment is longer (a whole-segment decode holds a worker for its whole length)."""
    growth: float = 1.5
    """How fast the segments may grow (see above); at most 1 / the decoder's RTF."""
    pause_chars: int = 6
    """The silence each segment adds to its text's speech (pads, final punctuation), in
    characters of speech."""
    min_chars: int = 12
    """No cut inside a sentence leaves a piece of it shorter than this on either side, so
    that no piece is a lone short word."""
    slack: float = 1.25
    """A sentence (or the rest of one) up to this many times the limit is kept whole
    rather than cut near its end: the growth bound has margin, a clumsy cut does not."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_chars <= self.first_chars <= self.max_chars:
            raise ValueError("need 1 <= min_chars <= first_chars <= max_chars")
        if self.growth < 1 or self.pause_chars < 0 or self.slack < 1:
            raise ValueError("growth and slack must be >= 1 and pause_chars >= 0")


# Words a cut at a space should not leave at the end of a piece: articles, prepositions,
# determiners, pronouns, auxiliaries. The cut backs off to the space before them.
_DANGLING = frozenset(
    [
        "a", "an", "the", "of", "to", "in", "on", "at", "for", "with", "by", "from", "into",
        "onto", "upon", "like", "about", "over", "under", "between", "through", "across",
        "around", "without", "within", "against", "among", "behind", "below", "above",
        "near", "after", "before", "until", "since", "than", "then", "via", "per", "and",
        "or", "nor", "but", "as", "if", "so", "that", "this", "these", "those", "my", "your",
        "our", "their", "his", "her", "its", "is", "are", "was", "were", "be", "been", "am",
        "will", "would", "can", "could", "shall", "should", "may", "might", "must", "do",
        "does", "did", "has", "have", "had", "not", "no", "very", "some", "any", "every",
        "each", "all", "both", "more", "most", "such", "what", "which", "who", "whose",
        "when", "where", "while", "i", "we", "you", "they", "he", "she", "it",
    ]
)  # fmt: skip


def grow_segments(text: str, plan: SegmentPlan) -> list[str]:
    """Normalized text -> segments for a whole-segment model, as `plan` says.

    Sentences are packed into a segment while they fit. A sentence that does not fit is
    cut, in this order of preference, at a clause boundary, before a conjunction or
    relative word, or at a space (backing off from a dangling article or preposition);
    a head cut at a space or a conjunction gets a comma, for a continuing intonation. A
    word longer than a segment is cut inside. Linear in the text: every search reads only
    the window of the piece being cut.
    """
    sentences = split_sentences(text)
    joined = " ".join(sentences)
    ends: list[int] = []  # offsets in `joined` just after each sentence
    offset = 0
    for sentence in sentences:
        offset += len(sentence)
        ends.append(offset)
        offset += 1
    cutter = _Cutter(joined, ends, plan)
    out: list[str] = []
    first = 0
    spoken = 0  # characters of speech out so far, pauses included
    limit = plan.first_chars
    pos = 0
    while pos < len(joined):
        if len(joined) - pos <= limit * plan.slack:
            head, pos = joined[pos:], len(joined)
        else:
            head, pos = cutter.cut(pos, limit)
        head = head.strip()
        if head:
            out.append(head)
            first = first or len(head) + plan.pause_chars
            spoken += len(head) + plan.pause_chars
            allowed = first + (plan.growth - 1) * spoken - plan.pause_chars
            limit = max(plan.min_chars, min(plan.max_chars, int(allowed)))
        while pos < len(joined) and joined[pos] == " ":
            pos += 1
    return out


@dataclass(frozen=True)
class _Cutter:
    """Finds where the next piece of `text` ends; `ends` are its sentence ends."""

    text: str
    ends: list[int]
    plan: SegmentPlan

    def _fits(self, at: int, pos: int) -> bool:
        """Whether a cut at `at` leaves a head of at least 2/3 `min_chars` (from `pos` or
        its sentence's start) and at least `min_chars` of its sentence after it."""
        k = bisect.bisect_left(self.ends, at)
        begin = self.ends[k - 1] + 1 if k > 0 else 0
        end = self.ends[k] if k < len(self.ends) else len(self.text)
        head = at - max(begin, pos)
        return 3 * head >= 2 * self.plan.min_chars and end - at >= self.plan.min_chars

    def cut(self, pos: int, limit: int) -> tuple[str, int]:
        """The next piece of text[pos:] and where the rest starts. The piece is at most
        `limit` characters, or `slack` times that when it ends at a sentence or clause
        end, or one word longer than that."""
        text, plan = self.text, self.plan
        window_end = pos + limit
        wide_end = pos + int(limit * plan.slack)
        half = pos + limit // 2
        i = bisect.bisect_right(self.ends, wide_end) - 1
        sentence = self.ends[i] if i >= 0 and self.ends[i] > pos else None
        if sentence is not None and sentence >= half:
            return text[pos:sentence], sentence
        clause = None
        for match in _CLAUSE_END.finditer(text[pos : wide_end + 1]):
            if self._fits(pos + match.start(), pos):
                clause = (pos + match.start(), pos + match.end())
        if clause is not None and clause[0] >= half:
            return text[pos : clause[0]], clause[1]
        phrase = None
        at = pos
        for word in text[pos : window_end + 1].split(" ")[:-1]:
            if word.lower() in _PHRASE_WORDS and self._fits(at - 1, pos):
                phrase = at - 1
            at += len(word) + 1
        if phrase is not None and phrase >= half:
            return _with_comma(text[pos:phrase]), phrase + 1
        space, dangles = self._space(pos, window_end)
        if space is not None and not dangles:
            return _with_comma(text[pos:space]), space + 1
        # No clean cut in the window (none fits, or each leaves an article or a preposition
        # hanging): rather the whole sentence if it is short, else the first clean cut
        # past the window, within twice the limit.
        reach = pos + min(2 * limit, plan.max_chars)
        k = bisect.bisect_right(self.ends, pos)
        if k < len(self.ends) and self.ends[k] <= reach:
            return text[pos : self.ends[k]], self.ends[k]
        later = self._space_after(pos, window_end, reach)
        if later is not None:
            return _with_comma(text[pos:later]), later + 1
        if space is not None:
            return _with_comma(text[pos:space]), space + 1
        if clause is not None:
            return text[pos : clause[0]], clause[1]
        if sentence is not None:
            return text[pos:sentence], sentence
        if phrase is not None:
            return _with_comma(text[pos:phrase]), phrase + 1
        # No cut fits: to the end of the word (or text) if a segment holds it, else inside
        # the word.
        after = text.find(" ", window_end, pos + plan.max_chars + 1)
        if after == -1 and len(text) <= pos + plan.max_chars:
            after = len(text)
        stop = after if after != -1 else window_end
        return text[pos:stop], stop

    def _space_after(self, pos: int, window_end: int, reach: int) -> int | None:
        """The first space in (window_end, reach] where a cut fits and leaves no dangling
        word."""
        text = self.text
        start = text.rfind(" ", pos, window_end + 1) + 1
        space = text.find(" ", window_end + 1, reach + 1)
        while space != -1:
            word = text[max(start, pos) : space]
            if self._fits(space, pos) and word.lower().strip(",;:") not in _DANGLING:
                return space
            start = space + 1
            space = text.find(" ", start, reach + 1)
        return None

    def _space(self, pos: int, window_end: int) -> tuple[int | None, bool]:
        """The last space in the window where a cut fits and leaves no dangling word at
        the head's end, else the last one that fits, and whether it dangles."""
        text = self.text
        last = None
        space = text.rfind(" ", pos, window_end + 1)
        while space > pos:
            start = text.rfind(" ", pos, space) + 1
            if self._fits(space, pos):
                last = space if last is None else last
                if text[start:space].lower().strip(",;:") not in _DANGLING:
                    return space, False
            if start <= pos + 1:
                break
            space = start - 1
        return last, last is not None


def _with_comma(head: str) -> str:
    head = head.rstrip()
    return head if not head or head[-1] in ",;:.!?\u2026\u2014\u2013-" else head + ","

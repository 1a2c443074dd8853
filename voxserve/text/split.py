"""Text normalization and segmentation for streaming synthesis.

Pure functions: str in, list of str out. Segments are what stage A sees at once, so the
first one may be kept short (time to first audio grows with its length) and no segment is
unboundedly long. A model whose prosody needs whole sentences (Kokoro) asks `segment` for
whole sentences only.

Every function here does work linear in its input, whatever the input: text comes from
clients. Each regex has a linear worst case (no quantified group can backtrack over the same
characters from many starting points: runs are matched from their first character only,
and possessively), and the abbreviation test reads a bounded tail, never the whole prefix.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
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
# Chinese and Japanese end a sentence with a full-width mark and no space after it.
_SENTENCE_END = re.compile(
    r"(?<![.!?\u2026])[.!?\u2026]++[\"'\u201d\u2019)\]]*+(?=\s)"
    r"|(?<![。！？])[。！？]++[\"'\u201d\u2019)\]」』）]*+"
    r"|\n\s*\n"
)
_PARAGRAPH = re.compile(r"\n\s*\n")
_ABBREVIATIONS = frozenset(
    ["mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no", "fig", "approx", "dept", "est", "inc", "ltd", "co", "mt"]
)
_WORD_TAIL = max(len(a) for a in _ABBREVIATIONS) + 1
"""Characters before a period that decide whether it ends a sentence: a longer word is
neither an abbreviation nor an initial."""
# Clause boundary: comma, semicolon, colon or dash followed by space. A whitespace run is
# tried from its first character only, so a long run costs one pass.
_CLAUSE_END = re.compile(r"(?<=[,;:\u2014\u2013])\s+|(?<=[、，；：])\s*+|(?<!\s)\s++(?=[\u2014\u2013-]\s)")
_CJK_CLAUSE_MARKS = ("、", "，", "；", "：")
"""Clause marks of Chinese and Japanese: a clause after one joins it without a space."""


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
        pending = _join(pending, piece).strip() if pending else piece.strip()
        if len(pending) >= min_chars:
            out.append(pending)
            pending = ""
    if pending:
        if out and len(pending) < min_chars:
            out[-1] = _join(out[-1], pending)
        else:
            out.append(pending)
    return out


def _join(head: str, tail: str) -> str:
    return head + tail if head.endswith(_CJK_CLAUSE_MARKS) else f"{head} {tail}"


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


def segment(text: str, first_max_chars: int | None = 60, max_chars: int = 400) -> list[str]:
    """Normalized text -> synthesis segments.

    - every sentence is a segment;
    - the first sentence, when longer than `first_max_chars` (None: never), is split at
      its first clause boundary, or else before a conjunction, so that audio can start
      after a short stage A pass;
    - any sentence longer than `max_chars` is split at clauses, then at spaces, and a
      word longer than `max_chars` (a run of digits, say) inside the word.
    """
    segments: list[str] = []
    for sentence in split_sentences(text):
        if not segments and first_max_chars is not None and len(sentence) > first_max_chars:
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

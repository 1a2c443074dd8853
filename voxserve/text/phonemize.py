"""Phonemes and phoneme ids for a Piper voice, through the espeak-ng bundled in piper-tts.

espeak-ng keeps global state (voice, buffers), so every call into it in this process goes
through `espeak_clauses` and its one lock; other phonemizers (`voxserve.text.kokoro_g2p`)
call it too. This module does no I/O beyond reading the voice config it is given.

`Phonemizer.sentences` also says which ids each written word became (for word timings):
espeak separates the words it reads with spaces, and a written word it reads as several
("1990", "well-known") is found by reading the words alone, as `voxserve.text.kokoro_g2p`
does.
"""

from __future__ import annotations

import difflib
import itertools
import re
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Phonemizer", "PiperSentence", "UnsupportedVoice", "espeak_clauses", "written_words"]

_ESPEAK_LOCK = threading.Lock()
_espeak_ready = False  # guarded by _ESPEAK_LOCK
_espeak_voice: str | None = None
"""The voice espeak-ng reads with now (guarded by _ESPEAK_LOCK; None: unknown)."""
# espeak-ng marks a language switch as "(en)". No "(" inside, so a run of "(" with no ")"
# is one linear pass, not one pass per "(".
_LANG_SWITCH = re.compile(r"\([^()]+\)")


@dataclass(frozen=True)
class PiperSentence:
    """One sentence's phoneme ids and the written words they came from."""

    ids: np.ndarray
    """int64 ids, BOS, pads and EOS included."""
    words: tuple[tuple[str, int, int], ...]
    """Each written word, its first id and the id just past its last."""


def written_words(text: str) -> list[str]:
    """The words of `text` as written: whitespace-separated, punctuation stripped from both
    ends, and only those with a letter, digit or symbol (which espeak reads)."""
    words = []
    for token in text.split():
        word = token if token in _SPOKEN else token.strip(_EDGE_PUNCTUATION)
        if any(unicodedata.category(c)[0] in "LNS" or c in _SPOKEN for c in word):
            words.append(word)
    return words


_SPOKEN = frozenset("&%@#")
"""Punctuation that espeak reads as a word ("and", "percent")."""
_EDGE_PUNCTUATION = "".join(chr(c) for c in range(0x3000) if unicodedata.category(chr(c))[0] == "P")


class UnsupportedVoice(ValueError):
    """The voice uses a phoneme type this server does not implement."""


def espeak_clauses(voice: str, texts: Sequence[str]) -> list[list[tuple[str, str, bool]]]:
    """espeak-ng's IPA for each of `texts`, read with `voice`: one (phonemes, terminator,
    end_of_sentence) per clause, as `piper.espeakbridge.get_phonemes` gives them.

    The only way into espeak-ng in this process: it holds the lock for the whole batch,
    since the voice and espeak's buffers are global. The voice is set only when it
    changes: setting it costs more than reading a word, and a text's first-audio path
    reads twice (its sentences, then its words alone for their timings). A text's IPA
    does not depend on the voices read before it, so skipping the call changes nothing.
    """
    global _espeak_ready, _espeak_voice
    from piper import espeakbridge
    from piper.phonemize_espeak import ESPEAK_DATA_DIR

    with _ESPEAK_LOCK:
        if not _espeak_ready:
            espeakbridge.initialize(str(ESPEAK_DATA_DIR))
            _espeak_ready = True
        if voice != _espeak_voice:
            _espeak_voice = None  # unknown if setting it fails
            espeakbridge.set_voice(voice)
            _espeak_voice = voice
        return [espeakbridge.get_phonemes(text) for text in texts]


class Phonemizer:
    """Text -> phoneme id arrays, one per sentence, for one voice config."""

    def __init__(self, voice_config: Mapping[str, Any]):
        from piper.config import PiperConfig

        self._config = PiperConfig.from_dict(dict(voice_config))
        kind = str(self._config.phoneme_type.value)
        if kind not in ("espeak", "text"):
            raise UnsupportedVoice(f"phoneme type {kind!r} is not supported (espeak, text)")
        self._kind = kind
        self._id_map = self._config.phoneme_id_map

    def _espeak(self, text: str) -> list[tuple[list[str], list[tuple[int, int]]]]:
        (clauses,) = espeak_clauses(self._config.espeak_voice, [text])
        sentences: list[tuple[list[str], list[tuple[int, int]]]] = []
        current: list[str] = []
        spans: list[tuple[int, int]] = []
        for phonemes, terminator, end_of_sentence in clauses:
            body = unicodedata.normalize("NFD", _LANG_SWITCH.sub("", phonemes))
            spans.extend(_runs(body, len(current)))
            phonemes = _LANG_SWITCH.sub("", phonemes) + terminator
            if terminator in (",", ":", ";"):
                phonemes += " "
            current.extend(unicodedata.normalize("NFD", phonemes))
            if end_of_sentence:
                sentences.append((current, spans))
                current, spans = [], []
        if current:
            sentences.append((current, spans))
        return sentences

    def _groups(self, text: str) -> list[tuple[list[str], list[tuple[int, int]]]]:
        """Each sentence's phonemes and the phoneme spans of the words espeak read."""
        if self._kind == "text":
            chars = list(unicodedata.normalize("NFD", text))
            groups = [(chars, _runs("".join(chars), 0))]
        else:
            groups = self._espeak(text)
        return [g for g in groups if any(not p.isspace() for p in g[0])]

    def phonemes(self, text: str) -> list[list[str]]:
        """One phoneme list per sentence; empty sentences dropped."""
        return [phonemes for phonemes, _ in self._groups(text)]

    def ids(self, text: str) -> list[np.ndarray]:
        """One int64 id array per sentence (BOS, pads and EOS included)."""
        return [s.ids for s in self.sentences(text, timed=False)]

    def sentences(self, text: str, timed: bool = True) -> list[PiperSentence]:
        """One `PiperSentence` per sentence, its words filled in when `timed`."""
        bos, pad, eos = self._id_map["^"], self._id_map["_"], self._id_map["$"]
        out: list[_Sentence] = []
        for sentence, spans in self._groups(text):
            ids: list[int] = [*bos, *pad]
            at: list[int] = []  # index in ids of each phoneme (where it would go, if dropped)
            for phoneme in sentence:
                at.append(len(ids))
                mapped = self._id_map.get(phoneme)
                if mapped is None:
                    continue  # unknown symbols (e.g. emoji remnants) carry no sound
                ids.extend(mapped)
                ids.extend(pad)
            at.append(len(ids))
            ids.extend(eos)
            if len(ids) > len(bos) + len(pad) + len(eos):
                out.append(_Sentence(np.asarray(ids, dtype=np.int64), sentence, at, spans))
        if not timed:
            return [PiperSentence(s.ids, ()) for s in out]
        words: list[list[tuple[str, int, int]]] = [[] for _ in out]
        for word, k, lo, hi in self._align(written_words(text), out):
            # A word's ids run from its first phoneme's to its last one's pad.
            words[k].append((word, out[k].at[lo], out[k].at[hi]))
        return [PiperSentence(s.ids, tuple(w)) for s, w in zip(out, words, strict=True)]

    def _align(self, written: list[str], read: list[_Sentence]) -> list[tuple[str, int, int, int]]:
        """Each written word, its sentence and the phonemes [lo, hi) it became there.

        espeak separates the words it reads with spaces. Where it reads as many words as
        were written, they pair one to one; where it reads a written word as several
        ("1990"), the words are read alone to count them. Where it joins written words
        into one ("from the" as "fɹʌmðə"), each word's reading alone is aligned to the
        sentence's phonemes, character by character.
        """
        spoken = [(k, span) for k, s in enumerate(read) for span in s.spans]
        counts = [1] * len(written)
        alone: list[str] = []
        if len(written) != len(spoken) and self._kind != "text":
            clauses = espeak_clauses(self._config.espeak_voice, written)
            alone = ["".join(_LANG_SWITCH.sub("", p) for p, _, _ in c) for c in clauses]
            counts = [len(_runs(reading, 0)) for reading in alone]
        if sum(counts) != len(spoken):
            return _align_phonemes(written, alone, read)
        out = []
        at = 0
        for word, count in zip(written, counts, strict=True):
            if count:
                k = spoken[at][0]
                inside = [span for s, span in spoken[at : at + count] if s == k]
                out.append((word, k, inside[0][0], inside[-1][1]))
            at += count
        return out


@dataclass(frozen=True)
class _Sentence:
    ids: np.ndarray
    phonemes: list[str]
    at: list[int]
    """Index in `ids` of each phoneme, and of the end."""
    spans: list[tuple[int, int]]
    """[start, end) in `phonemes` of each word espeak read."""


_MAX_ALIGN = 4_000_000
"""Most character pairs the phoneme alignment compares (len(alone) x len(read)); longer
text (past any segment the engine makes) falls back to spreading the words evenly."""
_MARKS = frozenset("ˈˌ")
"""Stress marks: espeak places them differently in a word read alone."""


def _align_phonemes(written: list[str], alone: list[str], read: list[_Sentence]) -> list[tuple[str, int, int, int]]:
    """Written words located by aligning their readings alone (`alone`, one per word; or
    none when espeak was not asked) with the phonemes the sentences were read as."""
    where = [(k, i) for k, s in enumerate(read) for a, b in s.spans for i in range(a, b)
             if s.phonemes[i] not in _MARKS]  # fmt: skip
    if not where or not written:
        return []
    whole = "".join(read[k].phonemes[i] for k, i in where)
    letters: list[str] = []
    bounds = [0]
    for reading in alone:
        letters.extend(c for c in unicodedata.normalize("NFD", reading) if not c.isspace() and c not in _MARKS)
        bounds.append(len(letters))
    own = "".join(letters)
    if not own or len(own) * len(whole) > _MAX_ALIGN:
        # No reading to align: spread the written words evenly over the phonemes.
        own = "x" * len(whole)
        bounds = [round(n * len(whole) / len(written)) for n in range(len(written) + 1)]
        target = list(range(len(whole)))
    else:
        target = _char_map(own, whole)
    out = []
    floor = 0
    for n, word in enumerate(written):
        a, b = bounds[n], bounds[n + 1]
        if b <= a:
            continue
        first = max(floor, target[a])
        last = max(first, target[b - 1])
        if first >= len(where):
            break
        k = where[first][0]
        while where[last][0] != k:
            last -= 1
        out.append((word, k, where[first][1], where[last][1] + 1))
        floor = last + 1
    return out


def _char_map(own: str, whole: str) -> list[int]:
    """For each character of `own`, the index of its partner in `whole`: matched
    characters exactly, the rest interpolated between their matched neighbours."""
    blocks = difflib.SequenceMatcher(None, own, whole, autojunk=False).get_matching_blocks()
    anchors = [(-1, -1)]
    for a, b, size in blocks:
        anchors.extend((a + j, b + j) for j in range(size))
    anchors.append((len(own), len(whole)))
    target = [0] * len(own)
    for (a0, b0), (a1, b1) in itertools.pairwise(anchors):
        for a in range(a0 + 1, a1):
            target[a] = min(len(whole) - 1, max(0, b0 + round((a - a0) * (b1 - b0) / (a1 - a0))))
        if 0 <= a1 < len(own):
            target[a1] = b1
    return target


def _runs(text: str, offset: int) -> list[tuple[int, int]]:
    """[start, end) of each run of non-space characters of `text`, shifted by `offset`."""
    return [(offset + m.start(), offset + m.end()) for m in re.finditer(r"\S+", text)]

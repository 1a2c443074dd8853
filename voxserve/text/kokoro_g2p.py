"""Text -> Kokoro-82M phonemes and token ids, with the ids each input word produced.

Kokoro reads symbols from its own vocabulary: IPA plus misaki's letters for English
diphthongs (`A I O Q W Y`) and affricates (`ʤ ʧ ʦ ʣ`). This module gets IPA from the
espeak-ng bundled with piper-tts, through `voxserve.text.phonemize.espeak_clauses` (one
lock, one espeak state in the process), and maps it with one documented table per
language. It keeps the punctuation Kokoro has tokens for and drops the rest. Mandarin and
Japanese, which espeak does not read as Kokoro's voices were trained, go to their own
readers (`kokoro_zh.py`, `kokoro_ja.py`), loaded once per process by `load_readers`; their
Latin words come back here, read as US English.

It owns: splitting text into words and punctuation marks, asking espeak for each run of
words, the per-language tables, the readers' registry, and the word -> id ranges that
word timings are built from. It must not: load models, or cut text to Kokoro's context
(510 ids); the runner does that, at word boundaries, with the ranges given here.

The work is linear in the text: one scan over the characters (no regex that can
backtrack), each word goes to espeak at most twice, and the tables are applied by one
alternation of literal keys per language.
"""

from __future__ import annotations

import importlib.metadata
import re
import threading
import unicodedata
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from voxserve.errors import InvalidRequest
from voxserve.text import kokoro_ja, kokoro_zh
from voxserve.text.kokoro_cjk import Reader, Unit
from voxserve.text.phonemize import espeak_clauses
from voxserve.text.split import period_is_not_an_end

__all__ = [
    "KOKORO_LANGUAGES",
    "READERS",
    "KokoroG2P",
    "KokoroLanguage",
    "KokoroPhonemes",
    "UnsupportedLanguage",
    "WordPhonemes",
    "kokoro_language",
    "load_readers",
]


class UnsupportedLanguage(InvalidRequest):
    """A language Kokoro's voices speak but this server has no phonemizer for, or no
    Kokoro language at all."""

    code = "unsupported_language"


@dataclass(frozen=True)
class KokoroLanguage:
    code: str
    """Kokoro's one-letter code: the first letter of its voice names (`af_heart` is `a`)."""
    name: str
    """English name, for messages and voice listings."""
    espeak_voice: str
    """espeak-ng voice that reads the text."""
    table: Mapping[str, str]
    """espeak IPA -> Kokoro symbols, applied longest key first; "" deletes the key. A
    symbol that is no key passes through when Kokoro knows it and is counted as dropped
    when it does not."""
    syllabic_endings: tuple[str, ...]
    """Word endings whose schwa misaki writes as syllabic ("ᵊ"): "lˈɪɾᵊl", "ˈæpᵊlz"."""
    reader: str = ""
    """For a language espeak does not read here: the name of its reader in `READERS`
    (Mandarin and Japanese, read as Kokoro's own pipeline reads them)."""


# --- The tables ------------------------------------------------------------------------
# Sources (facts, not code): Kokoro's own pipeline (the `kokoro` 0.9.4 sdist, pipeline.py)
# reads English with misaki's lexicon and espeak-ng as fallback, and every other
# non-CJK language with misaki's `EspeakG2P` (misaki 0.9.4, espeak.py); its model then
# drops every symbol outside the vocabulary (model.py, `KModel.forward`). The tables below
# write the same mapping for the espeak-ng in piper-tts, which prints IPA without tie bars,
# so multi-letter phonemes are recognized as letter sequences.
# - misaki's espeak -> misaki map (E2M, and EspeakG2P's e2m): diphthongs aɪ aʊ eɪ ɔɪ oʊ əʊ
#   -> I W A Y O Q; affricates tʃ dʒ ts dz -> ʧ ʤ ʦ ʣ; ɐ -> ə; r -> ɹ; x, ç -> k; ɬ -> l;
#   a syllabic consonant (U+0329) becomes "ᵊ" before it; a tilde is dropped in English.
# - misaki's US rules: oʊ -> O, ɜː and ɜːɹ -> ɜɹ, ɪə -> iə, no length marks, o -> ɔ; its
#   GB rules: eə -> ɛː, əʊ -> Q, length marks kept. The symbols misaki's US and GB
#   lexicons use (us_gold.json, gb_gold.json) decide the rest: US has no ɚ (it writes əɹ),
#   no a or ɒ; GB has no æ, ɾ, ʔ, ᵻ or ɚ.
_AFFRICATES = {"tʃ": "ʧ", "dʒ": "ʤ"}
_DIPHTHONGS = {"aɪ": "I", "aʊ": "W", "eɪ": "A", "ɔɪ": "Y"}
_SYLLABIC = {"n\u0329": "ᵊn", "l\u0329": "ᵊl", "m\u0329": "ᵊm"}

_ENGLISH = {
    **_AFFRICATES,
    **_DIPHTHONGS,
    **_SYLLABIC,
    "ɐ": "ə",
    "r": "ɹ",
    "x": "k",
    "ç": "k",
    "ɬ": "l",
    "e": "A",  # espeak's lone "e" is the FACE vowel (misaki: e -> A)
    "ʲə": "jə",
    "ʲ": "",
    "\u0303": "",
}
_US = {
    **_ENGLISH,
    "oʊ": "O",
    "o": "ɔ",
    "ɜːɹ": "ɜɹ",
    "ɜː": "ɜɹ",
    "ɚɹ": "əɹ",  # a linking r after ɚ ("nature and") is the same r
    "ɚ": "əɹ",
    "ɪə": "iə",
    "ʔn\u0329": "ʔn",
    "a": "æ",
    "ɒ": "ɑ",
    "ː": "",
}
_GB = {
    **_ENGLISH,
    "əʊ": "Q",
    "oʊ": "Q",
    "o": "ɔ",
    "eə": "ɛː",
    "iə": "ɪə",
    "ɚ": "ə",
    "æ": "a",
    "ɾ": "t",
    "ʔn\u0329": "tᵊn",
    "ʔ": "t",
    "ᵻ": "ɪ",
}
# misaki's EspeakG2P: the tied diphthongs and affricates, hyphens deleted, nothing else;
# the syllabic and dental marks (U+0329, U+032A; Italian spells "d" as "d̪ˈi"), which
# Kokoro has no tokens for, are deleted as its pipeline does. Nasal vowels: Kokoro has the combining tilde as a token of its own, so precomposed
# ones are split into vowel + tilde.
_ESPEAK_G2P = {
    **_AFFRICATES,
    **_DIPHTHONGS,
    "oʊ": "O",
    "əʊ": "Q",
    "-": "",
    "\u0329": "",
    "\u032a": "",
    "ɬ": "l",  # as misaki maps it for English; espeak's French spells "hl" with it
    "ã": "a\u0303",
    "ẽ": "e\u0303",
    "ĩ": "i\u0303",
    "õ": "o\u0303",
    "ũ": "u\u0303",
}
# Italian is the one language here whose espeak has the affricates ts and dz ("pizza",
# "zucchero"). Elsewhere t+s is two phonemes (French "vingt-cinq": vɛ̃tsˈɛ̃k), and without
# espeak's tie bar the letters cannot tell, so only Italian maps them.
_ITALIAN = {**_ESPEAK_G2P, "ts": "ʦ", "dz": "ʣ"}
# espeak's Hindi writes the flap of ड़ and ढ़ as "r." (its ASCII name) inside words and
# "r̩" for the letter alone, not IPA ɽ. The retroflex lateral ळ (ɭ, in Marathi loans) has
# no Kokoro token: the plain lateral is the nearest.
_HINDI = {**_ESPEAK_G2P, "r.": "ɽ", "r\u0329": "ɽ", "ɭ": "l"}


def _language(
    code: str, name: str, voice: str, table: dict[str, str], endings: tuple[str, ...] = (), reader: str = ""
) -> KokoroLanguage:
    return KokoroLanguage(code, name, voice, MappingProxyType(table), endings, reader)


# espeak's syllabic "əl" and "ən" carry their mark only in a tie bar that the bridge does
# not print, so the end of the word decides, as misaki's lexicons mostly do: a final
# "əl" (with a plural or past ending) is "ᵊl" in both (3350 of 5220 US words ending in
# either); a final "ən" or "ənt" is "ᵊn", "ᵊnt" in the GB lexicon only (4633 of 6729).
_US_ENDINGS = ("əl", "əlz", "əld")
_GB_ENDINGS = (*_US_ENDINGS, "ən", "ənt")


KOKORO_LANGUAGES: Mapping[str, KokoroLanguage] = MappingProxyType(
    {
        "a": _language("a", "English (US)", "en-us", _US, _US_ENDINGS),
        "b": _language("b", "English (UK)", "en", _GB, _GB_ENDINGS),
        "e": _language("e", "Spanish", "es", _ESPEAK_G2P),
        "f": _language("f", "French", "fr", _ESPEAK_G2P),
        "h": _language("h", "Hindi", "hi", _HINDI),
        "i": _language("i", "Italian", "it", _ITALIAN),
        "p": _language("p", "Portuguese (Brazil)", "pt-br", _ESPEAK_G2P),
        "j": _language("j", "Japanese", "", {}, reader="ja"),
        "z": _language("z", "Mandarin", "", {}, reader="zh"),
    }
)
"""The languages this module phonemizes, by Kokoro's one-letter code."""

READERS: Mapping[str, tuple[Callable[[], Reader], str]] = MappingProxyType(
    {
        "zh": (kokoro_zh.MandarinReader, "jieba, pypinyin and cn2an"),
        "ja": (kokoro_ja.JapaneseReader, "fugashi, unidic-lite and misaki"),
    }
)
"""Reader name -> (its class, the packages it needs). They are runtime dependencies, so a
server whose environment lacks them was installed without them."""

_loaded: dict[str, Reader] = {}
_missing: dict[str, str] = {}
_loading = threading.Lock()


def load_readers() -> dict[str, str]:
    """Load every reader once per process (dictionaries are read here: at start-up, never
    in a request); returns the readers that could not load, with the reason."""
    with _loading:
        for name, (make, packages) in READERS.items():
            if name in _loaded or name in _missing:
                continue
            try:
                # Once, at start-up, under the lock: jieba imports the deprecated
                # pkg_resources where setuptools still has it, which warns.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    warnings.simplefilter("ignore", UserWarning)
                    _loaded[name] = make()
            except (ImportError, importlib.metadata.PackageNotFoundError) as e:
                _missing[name] = f"it needs {packages}, which this server lacks ({e})"
        return dict(_missing)


def _reader(lang: KokoroLanguage) -> Reader:
    found = _loaded.get(lang.reader)
    if found is None:
        missing = load_readers().get(lang.reader)
        found = _loaded.get(lang.reader)
        if found is None:
            raise UnsupportedLanguage(
                f"{lang.name} cannot be read here: {missing}; install them with "
                "`pip install -c constraints.txt -e .`",
                param="language",
            )
    return found


_ALIASES = {
    "en": "a", "en-us": "a", "en_us": "a",
    "en-gb": "b", "en_gb": "b",
    "es": "e", "fr": "f", "fr-fr": "f", "hi": "h", "it": "i",
    "pt": "p", "pt-br": "p", "pt_br": "p",
    "ja": "j", "ja-jp": "j", "ja_jp": "j",
    "zh": "z", "zh-cn": "z", "zh_cn": "z", "zh-hans": "z", "cmn": "z",
}  # fmt: skip


def kokoro_language(code: str) -> KokoroLanguage:
    """The language for a Kokoro code (`a`) or a language tag (`en-us`, `es`); raises
    UnsupportedLanguage, a 400, naming what is accepted."""
    key = code.strip().lower()
    key = _ALIASES.get(key, key)
    language = KOKORO_LANGUAGES.get(key)
    if language is not None:
        return language
    accepted = ", ".join(f"{c} ({lang.name})" for c, lang in KOKORO_LANGUAGES.items())
    raise UnsupportedLanguage(f"unknown Kokoro language {code!r}; use one of: {accepted}.", param="language")


# --- Results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WordPhonemes:
    """One input word and what it became."""

    text: str
    start: int
    """Offset of the word's first character in the input text."""
    end: int
    """Offset just past its last character."""
    first: int
    """Index of its first symbol in `KokoroPhonemes.phonemes` (and `ids`)."""
    last: int
    """Index just past its last symbol; equal to `first` when it produced nothing."""


@dataclass(frozen=True)
class KokoroPhonemes:
    phonemes: str
    """Kokoro symbols, one code point per token; words are separated by spaces."""
    ids: np.ndarray
    """int64 token ids of `phonemes`, one per symbol, without the pads (id 0) the model
    wants at both ends."""
    words: tuple[WordPhonemes, ...]
    """Every input word in order; ranges are increasing and do not overlap. Every symbol
    outside them is a space or a punctuation mark."""
    dropped: tuple[str, ...]
    """espeak symbols that no table maps and Kokoro does not know: none, for the texts
    the tests read."""


# --- Splitting text into words and punctuation --------------------------------------------

# Punctuation Kokoro has tokens for, and what other marks become: "" keeps them out of the
# output (they still separate words). Any other punctuation is also left out.
_MARKS: Mapping[str, str] = MappingProxyType(
    {
        ".": ".", ",": ",", ";": ";", ":": ":", "!": "!", "?": "?", "…": "…",
        "—": "—", "–": "—", "―": "—", "-": "—",
        '"': '"', "“": "“", "”": "”", "«": "“", "»": "”", "„": "“",
        "(": "(", ")": ")", "[": "(", "]": ")", "{": "(", "}": ")",
        "。": ".", "，": ",", "、": ",", "；": ";", "：": ":", "！": "!", "？": "?",
        "।": ".", "॥": ".",
        "¡": "", "¿": "", "'": "", "‘": "", "’": "", "‚": "",
    }
)  # fmt: skip
_SPOKEN = frozenset("&%@#")
"""Punctuation (by Unicode category) that espeak reads as a word: "and", "percent"..."""
_IN_NUMBER = frozenset(".,:")
_APOSTROPHES = frozenset("'’")
_JOINERS = frozenset("-‐‑/")
_MAX_MARKS = 4
"""Punctuation marks kept in a row; the rest of a run ("!!!!!!!!") carries no more."""
_ABBREVIATION_TAIL = 12
"""Characters of a word before a period that `period_is_not_an_end` needs to read."""
# espeak marks a language switch as "(en)" ... "(es)"; a run of "(" with no ")" is one
# linear pass, since no "(" can be inside a match.
_LANG_SWITCH = re.compile(r"\([^()]+\)")
# A run of letters and digits: the common case of a word's inside, skipped in one step.
# One character class, so one pass whatever the input.
_LETTERS = re.compile(r"[^\W_]+")
_MAX_WORD_CHARS = 100
"""A longer run without a space is no word (a URL, a hash, a key smash): only its first
characters are read. espeak spells such runs letter by letter, at a cost that grows with
the run."""
_NOT_IN_WORDS = frozenset(_MARKS.values()) | {" "}
"""Kokoro symbols that never come from inside an espeak word: a "." there is no pause."""


@dataclass
class _Token:
    word: bool
    text: str
    """The word as written, or the Kokoro mark."""
    start: int
    end: int
    space_before: bool


def _word_char(text: str, i: int, word_start: int) -> bool:
    """Whether text[i] belongs to a word that starts at `word_start` (i when none has
    started yet). Reads at most a few characters around i."""
    ch = text[i]
    if unicodedata.category(ch)[0] in "LMNS" or ch in _SPOKEN:
        return True
    after = text[i + 1] if i + 1 < len(text) else ""
    if word_start == i:  # a word may start with a minus sign: "-5" is "minus five"
        return ch == "-" and after.isdigit()
    before = text[i - 1]
    if ch in _IN_NUMBER and before.isdigit() and after.isdigit():
        return True  # 3.14, 1,000, 12:30: espeak reads them in the language
    if ch in _APOSTROPHES and before.isalpha() and after.isalpha():
        return True  # don't, l'homme
    if ch in _JOINERS and before.isalnum() and after.isalnum():
        return True  # well-known, and/or
    if ch == ".":
        if before.isalpha() and after.isalpha():
            return True  # U.S.A, e.g
        return period_is_not_an_end(text[max(word_start, i - _ABBREVIATION_TAIL) : i])
    return False


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    marks_in_row = 0
    space = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            space = True
            i += 1
        elif _word_char(text, i, i):
            start = i
            i += 1
            while i < n:
                letters = _LETTERS.match(text, i)
                if letters is not None:
                    i = letters.end()
                elif _word_char(text, i, start):
                    i += 1
                else:
                    break
            tokens.append(_Token(True, text[start:i], start, i, space))
            marks_in_row = 0
            space = False
        else:
            start = i
            i += 1
            if ch in ".-":  # "..." is an ellipsis, "--" a dash
                while i < n and text[i] == ch:
                    i += 1
                mark = "…" if ch == "." and i - start > 1 else _MARKS[ch]
            else:
                mark = _MARKS.get(ch, "")
            if mark and marks_in_row < _MAX_MARKS:
                tokens.append(_Token(False, mark, start, i, space))
                marks_in_row += 1
                space = False
    return tokens


# --- The phonemizer ---------------------------------------------------------------------


class KokoroG2P:
    """Text -> `KokoroPhonemes` for the languages in `KOKORO_LANGUAGES`.

    `vocab` is Kokoro's symbol -> id table. Every symbol the tables and marks can write is
    checked against it here, so a wrong table fails at start-up, not in a request.
    """

    def __init__(self, vocab: Mapping[str, int]):
        self._vocab = dict(vocab)
        missing: set[str] = set()
        for language in KOKORO_LANGUAGES.values():
            for value in language.table.values():
                missing.update(s for s in value if s not in self._vocab)
        missing.update(s for s in _MARKS.values() if s and s not in self._vocab)
        missing.update(s for s in " ᵊ" if s not in self._vocab)
        missing.update(s for s in kokoro_zh.SYMBOLS | kokoro_ja.SYMBOLS if s not in self._vocab)
        if missing:
            raise ValueError(f"the vocabulary lacks symbols the tables write: {sorted(missing)}")
        self._in_words = frozenset(self._vocab) - _NOT_IN_WORDS
        # One alternation of each table's keys, longest first: literals only, so a match
        # is tried at each position against a bounded set of keys and never backtracks.
        self._keys = {
            code: re.compile("|".join(re.escape(k) for k in sorted(lang.table, key=len, reverse=True)))
            for code, lang in KOKORO_LANGUAGES.items()
            if lang.table
        }

    def __call__(self, text: str, language: str) -> KokoroPhonemes:
        """Phonemize `text` (normalized: `voxserve.text.split.normalize`) in `language`,
        a Kokoro code or a language tag (see `kokoro_language`)."""
        lang = kokoro_language(language)
        if lang.reader:
            return self._units(text, _reader(lang)(text, self._latin))
        tokens = _tokens(text)
        runs: list[list[int]] = []  # token indexes of words with no mark between them
        previous_was_word = False
        for index, token in enumerate(tokens):
            if token.word:
                if not previous_was_word:
                    runs.append([])
                runs[-1].append(index)
            previous_was_word = token.word
        readings = self._read(lang, [[tokens[k].text for k in run] for run in runs])
        dropped: list[str] = []
        spoken: dict[int, str] = {}  # token index -> Kokoro symbols of that word
        for run, groups in zip(runs, readings, strict=True):
            for index, group in zip(run, groups, strict=True):
                mapped = (self._map(lang, ipa, dropped) for ipa in group)
                spoken[index] = " ".join(m for m in mapped if m)
        return self._assemble(tokens, spoken, dropped)

    def _latin(self, text: str) -> list[Unit]:
        """A run of Latin script inside Mandarin or Japanese, read as US English."""
        result = self(text, "a")
        units: list[Unit] = []
        at = 0
        for word in result.words:
            if word.first > at:
                units.append(Unit(result.phonemes[at : word.first]))
            if word.last > word.first:
                units.append(Unit(result.phonemes[word.first : word.last], word.start, word.end))
            at = max(at, word.last)
        if at < len(result.phonemes):
            units.append(Unit(result.phonemes[at:]))
        return units

    def _units(self, text: str, units: list[Unit]) -> KokoroPhonemes:
        """A reader's units -> phonemes, leaving out what Kokoro has no token for (as its
        model does). A word whose span overlaps the one before (two words read from one
        number) is one word with it."""
        parts: list[str] = []
        size = 0
        words: list[WordPhonemes] = []
        for unit in units:
            symbols = "".join(s for s in unit.symbols if s in self._vocab)
            first = size
            parts.append(symbols)
            size += len(symbols)
            if not unit.is_word:
                continue
            if words and unit.start < words[-1].end:
                last = words[-1]
                end = max(last.end, unit.end)
                words[-1] = WordPhonemes(text[last.start : end], last.start, end, last.first, size)
            else:
                words.append(WordPhonemes(text[unit.start : unit.end], unit.start, unit.end, first, size))
        phonemes = "".join(parts)
        ids = np.fromiter((self._vocab[s] for s in phonemes), dtype=np.int64, count=len(phonemes))
        return KokoroPhonemes(phonemes, ids, tuple(words), ())

    def _read(self, lang: KokoroLanguage, runs: list[list[str]]) -> list[list[list[str]]]:
        """espeak's words for each word of each run: runs[r][w] -> [ipa, ...].

        Each run is read whole, so that each word is read in its context (a lone "a" is
        read as the letter's name). espeak separates words with spaces, but may read one
        written word as several ("1990", "25%"). For a run whose counts differ, each of its
        words is read alone, only to count how many words it becomes, and the run's
        reading is grouped by those counts; if they do not add up (espeak joined words),
        each word's own reading is used. Two espeak batches in all, so the voice is set
        twice, not once per run.
        """
        runs = [[word[:_MAX_WORD_CHARS] for word in run] for run in runs]
        whole = _espeak_words(lang.espeak_voice, [" ".join(run) for run in runs])
        uneven = [r for r, run in enumerate(runs) if len(whole[r]) != len(run)]
        alone = iter(_espeak_words(lang.espeak_voice, [w for r in uneven for w in runs[r]]))
        out = [[[ipa] for ipa in reading] for reading in whole]
        for r in uneven:
            own = [next(alone) for _ in runs[r]]
            if sum(len(o) for o in own) != len(whole[r]):
                out[r] = own
                continue
            at = 0
            groups: list[list[str]] = []
            for o in own:
                groups.append(whole[r][at : at + len(o)])
                at += len(o)
            out[r] = groups
        return out

    def _map(self, lang: KokoroLanguage, ipa: str, dropped: list[str]) -> str:
        """One espeak word -> Kokoro symbols: table keys replaced, longest first; other
        symbols kept where Kokoro knows them and counted in `dropped` where not."""
        table = lang.table
        word = self._keys[lang.code].sub(lambda m: table[m[0]], ipa)
        if not set(word) <= self._in_words:
            dropped.extend(s for s in word if s not in self._in_words)
            word = "".join(s for s in word if s in self._in_words)
        return _syllabic(word, lang.syllabic_endings)

    def _assemble(self, tokens: list[_Token], spoken: dict[int, str], dropped: list[str]) -> KokoroPhonemes:
        parts: list[str] = []
        size = 0
        words: list[WordPhonemes] = []
        last_was_word = False
        for index, token in enumerate(tokens):
            symbols = spoken.get(index, "") if token.word else token.text
            if symbols:
                if parts and (token.space_before or (token.word and last_was_word)):
                    parts.append(" ")
                    size += 1
                parts.append(symbols)
                size += len(symbols)
                last_was_word = token.word
            if token.word:
                words.append(WordPhonemes(token.text, token.start, token.end, size - len(symbols), size))
        phonemes = "".join(parts)
        ids = np.fromiter((self._vocab[s] for s in phonemes), dtype=np.int64, count=len(phonemes))
        return KokoroPhonemes(phonemes, ids, tuple(words), tuple(dropped))


def _espeak_words(voice: str, texts: Sequence[str]) -> list[list[str]]:
    """espeak's IPA for each of `texts`: one string per word it read, language switches
    removed."""
    return [
        [word for phonemes, _, _ in clauses for word in _LANG_SWITCH.sub("", phonemes).split()]
        for clauses in espeak_clauses(voice, [unicodedata.normalize("NFC", t) for t in texts])
    ]


def _syllabic(word: str, endings: tuple[str, ...]) -> str:
    """`word` with the schwa of the first of `endings` it ends with written "ᵊ"."""
    if not endings or not word.endswith(endings):
        return word
    for ending in endings:
        if word.endswith(ending):
            cut = len(word) - len(ending)
            return word[:cut] + "ᵊ" + word[cut + 1 :]
    return word

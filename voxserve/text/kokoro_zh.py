"""Mandarin text -> Kokoro-82M phoneme units, as Kokoro's own pipeline reads Mandarin for
this model.

Sources (facts, not code): the `kokoro` 0.9.4 sdist (pipeline.py) reads Mandarin for
Kokoro-82M v1.0 with misaki 0.9.4's legacy `ZHG2P` (zh.py, with no frontend version):
Arabic numbers become Chinese ones (cn2an's `transform(text, "an2cn")`), full-width marks
become ASCII ones followed by a space, each run of CJK ideographs (U+4E00-U+9FFF) is cut
into words by jieba (its default dictionary, HMM on), each word is read by pypinyin
(`lazy_pinyin`, tone numbers, neutral tone 5) and each syllable written in IPA
(misaki's transcription.py, after pinyin-to-ipa: the first variant of each initial and
final), with the tone as an arrow after the syllable's vowel (1 →, 2 ↗, 3 ↓, 4 ↘,
neutral none), the syllabic "i" of zhi/chi/shi/ri and zi/ci/si as ɨ, and the
non-syllabic mark of diphthongs removed. Words are joined with spaces; no tone sandhi.
Everything that is not a CJK ideograph passes through unread, and the model drops what
is not in its vocabulary.

Where this differs, on purpose: a run with Latin letters is read by `Latin` (English),
with a space either side, where misaki passes the letters through as if they were
phonemes; a syllable pypinyin cannot read (an ideograph with no reading) is left out,
where misaki raises; a run of more than 16 digits is read digit by digit, where cn2an
leaves it as digits; non-ASCII decimal digits are read as ASCII ones; a run of more than
`MAX_RUN` ideographs is cut into runs of that length for jieba.

The work is linear in the text: the number rules match runs of at most 16 digits, jieba
looks up prefixes no longer than its longest word and runs its HMM on at most `MAX_RUN`
characters, and pypinyin reads one word at a time.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

from voxserve.text.kokoro_cjk import (
    Char,
    Latin,
    Piece,
    Traced,
    Unit,
    shift,
    traced_chars,
    traced_sub,
)

__all__ = ["MAX_RUN", "SYMBOLS", "MandarinReader", "syllable_ipa"]

MAX_RUN = 256
"""Ideographs jieba reads at once: its HMM keeps a path per character, so a longer run
would cost more than linear time. An engine segment is shorter (300 characters with its
marks), so real sentences are read whole."""

_MAX_DIGITS = 16
"""The longest number cn2an reads; a longer run is read digit by digit."""

# --- Numbers (cn2an's an2cn transform, rule by rule, in its order) ----------------------
_MEASURE_WORDS = (
    "斤|克|千克|公斤|吨|米|厘米|毫米|公里|升|毫升|元|角|分|个|只|条|张|块|瓶|杯|份|本|"
    "辆|台|匹|头|位|亩|小时|分钟|秒|天|半"
)
_RANGE = re.compile(rf"[0-9]+(?:\.[0-9]+)?-[0-9]+(?:\.[0-9]+)?(?=(?:{_MEASURE_WORDS}))")
_DATE = re.compile(r"(?:[0-9]{2,4}年)?(?:[0-9]{1,2}月)?(?:[0-9]{1,2}日)?")
_FRACTION = re.compile(r"[0-9]+/[0-9]+")
_PERCENT = re.compile(r"-?(?:[0-9]+\.)?[0-9]+%")
_CELSIUS = re.compile(r"[0-9]+℃")
_NUMBER = re.compile(r"-?(?:[0-9]+\.)?[0-9]+")
_YEAR = re.compile(r"[0-9]+(?=年)")
_DIGITS = re.compile(r"[0-9]+")
_ANY_DIGITS = re.compile(r"\d+")
_CHINESE_DIGITS = "零一二三四五六七八九"

# --- Marks (misaki's map_punctuation) ------------------------------------------------------
_MARKS = {
    "、": ", ", "，": ", ", "。": ". ", "．": ". ", "！": "! ", "：": ": ", "；": "; ", "？": "? ",
    "«": " “", "»": "” ", "《": " “", "》": "” ", "「": " “", "」": "” ", "【": " “", "】": "” ",
    "（": " (", "）": ") ",
}  # fmt: skip


def _is_han(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff"


# --- Pinyin -> IPA ------------------------------------------------------------------------
# Each final is written with "0" where the tone goes: after its vowel.
_INITIALS = {
    "b": "p", "p": "pʰ", "m": "m", "f": "f", "d": "t", "t": "tʰ", "n": "n", "l": "l",
    "g": "k", "k": "kʰ", "h": "x", "j": "ʨ", "q": "ʨʰ", "x": "ɕ",
    "zh": "ꭧ", "ch": "ꭧʰ", "sh": "ʂ", "r": "ɻ", "z": "ʦ", "c": "ʦʰ", "s": "s",
}  # fmt: skip
_FINALS = {
    "a": "a0", "ai": "ai0", "an": "a0n", "ang": "a0ŋ", "ao": "au0", "e": "ɤ0", "ei": "ei0",
    "en": "ə0n", "eng": "ə0ŋ", "i": "i0", "ia": "ja0", "ian": "jɛ0n", "iang": "ja0ŋ",
    "iao": "jau0", "ie": "je0", "in": "i0n", "iou": "jou0", "ing": "i0ŋ", "iong": "jʊ0ŋ",
    "ong": "ʊ0ŋ", "ou": "ou0", "u": "u0", "uei": "wei0", "ua": "wa0", "uai": "wai0",
    "uan": "wa0n", "uen": "wə0n", "uang": "wa0ŋ", "ueng": "wə0ŋ", "uo": "wo0", "o": "wo0",
    "ü": "y0", "üe": "ɥe0", "üan": "ɥɛ0n", "ün": "y0n",
}  # fmt: skip
# Whole syllables read without the initial + final split: interjections and syllabic
# nasals ("er" is ɚ, "o" alone ɔ, "ng" ŋ).
_WHOLE = {
    "io": "jɔ0", "ê": "ɛ0", "er": "ɚ0", "o": "ɔ0",
    "hm": "hm0", "hng": "hŋ0", "m": "m0", "n": "n0", "ng": "ŋ0",
}  # fmt: skip
_TONES = {"1": "→", "2": "↗", "3": "↓", "4": "↘", "5": ""}
_APICAL = "ɨ"
"""The "i" of zhi, chi, shi, ri (ɻ̩) and of zi, ci, si (ɹ̩), both written ɨ."""

SYMBOLS = frozenset(
    "".join([*_INITIALS.values(), *_FINALS.values(), *_WHOLE.values(), *_TONES.values(), _APICAL]).replace("0", "")
)
"""Every symbol the tables write (the vocabulary must have them all)."""


def syllable_ipa(syllable: str) -> str | None:
    """One pinyin syllable with its tone number ("zhong1", "de5") -> Kokoro symbols, or
    None for what is not a syllable."""
    from pypinyin.contrib.tone_convert import to_finals, to_initials

    tone = syllable[-1:]
    if tone not in _TONES:
        return None
    plain = syllable[:-1]
    whole = _WHOLE.get(plain)
    if whole is not None:
        return whole.replace("0", _TONES[tone])
    initial = to_initials(plain, strict=True)
    final = to_finals(plain, strict=True, v_to_u=True)
    if initial and initial not in _INITIALS:
        return None
    if final == "i" and initial in ("zh", "ch", "sh", "r", "z", "c", "s"):
        body = _APICAL + "0"
    elif final in _FINALS:
        body = _FINALS[final]
    else:
        return None
    return _INITIALS.get(initial, "") + body.replace("0", _TONES[tone])


class MandarinReader:
    """jieba + pypinyin + cn2an, loaded once (`load`, at start-up: jieba's dictionary
    takes about a second to index)."""

    def __init__(self) -> None:
        import jieba
        from cn2an.an2cn import An2Cn
        from pypinyin import Style, lazy_pinyin

        tokenizer = jieba.Tokenizer()
        # Index the bundled dictionary directly: jieba's own start-up would read and
        # write a marshal cache in the shared temporary directory.
        tokenizer.FREQ, tokenizer.total = tokenizer.gen_pfdict(tokenizer.get_dict_file())
        tokenizer.initialized = True
        self._tokenizer: Any = tokenizer
        self._an2cn: Any = An2Cn().an2cn
        self._pinyin: Any = lazy_pinyin
        self._style: Any = Style.TONE3
        self._syllables: dict[str, str | None] = {}
        self._lock = threading.Lock()
        lazy_pinyin("中文", style=Style.TONE3)  # pypinyin reads its phrase tables on first use

    def __call__(self, text: str, latin: Latin) -> list[Unit]:
        chars = [c for c in traced_chars(self._numbers(text)) for c in _marks(c)]
        lo, hi = 0, len(chars)
        while lo < hi and chars[lo].ch.isspace():
            lo += 1
        while hi > lo and chars[hi - 1].ch.isspace():
            hi -= 1
        chars = chars[lo:hi]
        units: list[Unit] = []
        i = 0
        while i < len(chars):
            j = i + 1
            han = _is_han(chars[i].ch)
            while j < len(chars) and _is_han(chars[j].ch) == han:
                j += 1
            run = chars[i:j]
            if han:
                self._read_han(run, units)
            else:
                self._read_other(run, units, after_han=i > 0, before_han=j < len(chars), latin=latin)
            i = j
        return units

    # -- numbers --------------------------------------------------------------------------
    def _numbers(self, text: str) -> Traced:
        pieces: Traced = [Piece(text, 0, len(text), True)]
        pieces = _aligned_digits(pieces)
        low = self._low
        pieces = traced_sub(pieces, _RANGE, lambda m: "到".join(low(x) for x in m[0].split("-")))
        pieces = traced_sub(pieces, _DATE, self._date)
        pieces = traced_sub(pieces, _FRACTION, lambda m: "{1}分之{0}".format(*(low(x) for x in m[0].split("/"))))
        pieces = traced_sub(pieces, _PERCENT, lambda m: "百分之" + low(m[0][:-1]))
        pieces = traced_sub(pieces, _CELSIUS, lambda m: low(m[0][:-1]) + "摄氏度")
        return traced_sub(pieces, _NUMBER, lambda m: low(m[0]))

    def _low(self, number: str) -> str:
        return str(self._an2cn(number, "low"))

    def _date(self, m: re.Match[str]) -> str:
        text = _YEAR.sub(lambda y: str(self._an2cn(y[0], "direct")), m[0])
        return _DIGITS.sub(lambda d: self._low(d[0]), text)

    # -- reading --------------------------------------------------------------------------
    def _read_han(self, run: Sequence[Char], units: list[Unit]) -> None:
        for at in range(0, len(run), MAX_RUN):
            part = run[at : at + MAX_RUN]
            text = "".join(c.ch for c in part)
            offset = 0
            for word in self._tokenizer.lcut(text, cut_all=False):
                chars = part[offset : offset + len(word)]
                offset += len(word)
                symbols = "".join(self._syllable(s) for s in self._pinyin(word, style=self._style, neutral_tone_with_five=True))
                if units and (at or offset > len(word)):
                    units.append(Unit(" "))
                units.append(Unit(symbols, chars[0].start, chars[-1].end))

    def _syllable(self, syllable: str) -> str:
        known = self._syllables.get(syllable, "?")
        if known == "?":
            known = syllable_ipa(syllable)
            with self._lock:
                if len(self._syllables) < 8192:  # pypinyin's syllables, a few thousand
                    self._syllables[syllable] = known
        return known or ""

    @staticmethod
    def _read_other(
        run: Sequence[Char], units: list[Unit], *, after_han: bool, before_han: bool, latin: Latin
    ) -> None:
        if not any("a" <= c.ch.lower() <= "z" for c in run):
            units.extend(Unit(c.ch) for c in run)  # marks and spaces, as misaki passes them
            return
        lo, hi = 0, len(run)
        while run[lo].ch.isspace():
            lo += 1
        while run[hi - 1].ch.isspace():
            hi -= 1
        core = run[lo:hi]
        units.extend(Unit(c.ch) for c in run[:lo])
        if after_han and lo == 0 and core[0].ch.isalnum():
            units.append(Unit(" "))  # a word that follows an ideograph is still a word
        units.extend(shift(latin("".join(c.ch for c in core)), core))
        if before_han and hi == len(run) and core[-1].ch.isalnum():
            units.append(Unit(" "))
        units.extend(Unit(c.ch) for c in run[hi:])


def _aligned_digits(pieces: Traced) -> Traced:
    """Decimal digits of any script as ASCII ones, one for one; a run longer than cn2an
    reads becomes Chinese digits, read one by one."""
    out: Traced = []
    for piece in pieces:
        text = _ANY_DIGITS.sub(_digit_run, piece.text)
        out.append(Piece(text, piece.start, piece.end, True))
    return out


def _digit_run(m: re.Match[str]) -> str:
    digits = "".join(str(int(d)) for d in m[0])
    if len(digits) > _MAX_DIGITS:
        return "".join(_CHINESE_DIGITS[int(d)] for d in digits)
    return digits


def _marks(c: Char) -> list[Char]:
    mapped = _MARKS.get(c.ch)
    if mapped is None:
        return [c]
    return [Char(ch, c.start, c.end) for ch in mapped]

"""Japanese text -> Kokoro-82M phoneme units, as Kokoro's own pipeline reads Japanese.

Sources (facts, not code): the `kokoro` 0.9.4 sdist (pipeline.py) reads Japanese with
misaki 0.9.4's `JAG2P()`, whose default is its cutlet reader (misaki's cutlet.py, after
cutlet): the text is NFKC-normalized, a wave dash before a digit becomes "から", each run
of digits becomes its reading in kana (num2kana.py: "2024" is "にせんにじゅうよん"),
MeCab (fugashi) cuts it into words and gives each its pronunciation in katakana, runs of
words of one character class that together spell a word of misaki's list
(`misaki/data/ja_words.txt`) are read as one word, and each word's kana are written in IPA
one by one, looking at their neighbours (digraphs such as しゃ, ん as m, ŋ, ɲ, n or ɴ by
the next kana, っ as ʔ, ー as ː). Words are separated by spaces, except around ʔ and
before closing marks; ( and ) become « and », which the model then drops, as it drops
every symbol outside its vocabulary.

The dictionary: misaki's `JAG2P` takes whatever MeCab dictionary fugashi finds first:
`unidic` (UniDic 3.1, 526 MB, downloaded by `python -m unidic download`) when installed,
else `unidic-lite` (UniDic 2.1.2, bundled in its wheel). This reader always uses
unidic-lite, named explicitly, since nothing may be fetched at run time. The two agree on
the pronunciation of common words; they differ on words added to UniDic after 2.1.2
(recent loanwords, names) and on some segmentations, which change the spaces between
words, not the sounds within them.

Where this differs, on purpose: a run of ASCII words is read by `Latin` (English), where
cutlet passes ASCII through as if it were phonemes; a number of more than 9 digits is
read digit by digit, where misaki's converter gives an English error message; non-ASCII
decimal digits are read as ASCII ones; an iteration mark (ゝ) repeats nothing, as Kokoro
then drops the kana cutlet writes for it.

The work is linear in the text: MeCab reads at most `MECAB_CHARS` at once, a run of words is joined into a
listed word only up to the list's longest entry (24 characters), and each kana is mapped
by looking at its two neighbours.
"""

from __future__ import annotations

import importlib.metadata
import re
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from voxserve.text.kokoro_cjk import Char, Latin, Piece, Traced, Unit, traced_chars, traced_sub

__all__ = ["MECAB_CHARS", "SYMBOLS", "JapaneseReader", "number_kana"]

# --- Numbers (num2kana's rules) -----------------------------------------------------------
_DIGIT = ("ゼロ", "いち", "に", "さん", "よん", "ご", "ろく", "なな", "はち", "きゅう")
_HUNDREDS = {"1": "ひゃく", "3": "さんびゃく", "6": "ろっぴゃく", "8": "はっぴゃく"}
_THOUSANDS = {"3": "さんぜん", "8": "はっせん"}
_MAX_DIGITS = 9


def _d(ch: str) -> str:
    return _DIGIT[int(ch)]


def _two(n: str) -> str:
    if n[0] == "0":
        return _d(n[1])
    if n == "10":
        return "じゅう"
    if n[0] == "1":
        return "じゅう" + _d(n[1])
    if n[1] == "0":
        return _d(n[0]) + "じゅう"
    return _d(n[0]) + "じゅう" + _d(n[1])


def _three(n: str) -> str:
    head = _HUNDREDS.get(n[0]) or _d(n[0]) + "ひゃく"
    if n[1:] == "00":
        return head
    return head + (_d(n[2]) if n[1] == "0" else _two(n[1:]))


def _four(n: str, alone: bool) -> str:
    """Four digits (or fewer after leading zeros); a leading 1 is "いっせん" inside a
    larger number, "せん" alone."""
    n = n.lstrip("0")
    if len(n) < 4:
        return _short(n)
    if n[0] == "1":
        head = "せん" if alone else "いっせん"
    else:
        head = _THOUSANDS.get(n[0]) or _d(n[0]) + "せん"
    if n[1:] == "000":
        return head
    return head + (_two(n[2:]) if n[1] == "0" else _three(n[1:]))


def _short(n: str) -> str:
    """Up to three digits with no leading zero ("" for none)."""
    if len(n) == 3:
        return _three(n)
    if len(n) == 2:
        return _two(n)
    return _d(n) if n else ""


def number_kana(digits: str) -> str:
    """ASCII digits -> their reading in kana, as misaki's converter gives it (up to 9
    digits, "man" and "oku" counted in groups of four); a longer run digit by digit."""
    if len(digits) > _MAX_DIGITS:
        return "".join(_d(c) for c in digits)
    n = digits.lstrip("0") or "0"
    if len(n) <= 3:
        return _short(n)
    if len(n) == 4:
        return _four(n, True)
    upper, lower = n[:-4], n[-4:]
    if len(upper) == 5:
        head = _d(upper[0]) + "おく" + _four(upper[1:], False) + ("" if upper[1:] == "0000" else "まん")
    else:
        head = (_short(upper) if len(upper) < 4 else _four(upper, False)) + "まん"
    return head + _four(lower, False)


# --- Kana -> IPA (cutlet's Hepburn table as misaki writes it in IPA) ------------------------
def _rows(spec: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in spec.split():
        kana, ipa = entry.split("=")
        out[kana] = ipa
    return out


_KANA = _rows(
    "あ=a ぁ=a い=i ぃ=i う=ɯ ぅ=ɯ え=e ぇ=e お=o ぉ=o "
    "か=ka き=kʲi く=kɯ け=ke こ=ko が=ɡa ぎ=ɡʲi ぐ=ɡɯ げ=ɡe ご=ɡo "
    "さ=sa し=ɕi す=sɨ せ=se そ=so ざ=ʣa じ=ʥi ず=zɨ ぜ=ʣe ぞ=ʣo "
    "た=ta ち=ʨi つ=ʦɨ て=te と=to だ=da ぢ=ʥi づ=zɨ で=de ど=do "
    "な=na に=ɲi ぬ=nɯ ね=ne の=no "
    "は=ha ひ=çi ふ=ɸɯ へ=he ほ=ho ば=ba び=bʲi ぶ=bɯ べ=be ぼ=bo ぱ=pa ぴ=pʲi ぷ=pɯ ぺ=pe ぽ=po "
    "ま=ma み=mʲi む=mɯ め=me も=mo や=ja ゃ=ja ゆ=jɯ ゅ=jɯ よ=jo ょ=jo "
    "ら=ɾa り=ɾʲi る=ɾɯ れ=ɾe ろ=ɾo わ=βa ゎ=βa ゐ=i ゑ=e を=o ゔ=vɯ ゕ=ka ゖ=ke "
    "ヷ=va ヸ=vʲi ヹ=ve ヺ=vo"
)
_PAIRS = _rows(
    "いぇ=je うぃ=βi うぇ=βe うぉ=βo "
    "きぇ=kʲe きゃ=kʲa きゅ=kʲɨ きょ=kʲo ぎゃ=ɡʲa ぎゅ=ɡʲɨ ぎょ=ɡʲo "
    "くぁ=kᵝa くぃ=kᵝi くぇ=kᵝe くぉ=kᵝo ぐぁ=ɡᵝa ぐぃ=ɡᵝi ぐぇ=ɡᵝe ぐぉ=ɡᵝo "
    "しぇ=ɕe しゃ=ɕa しゅ=ɕɨ しょ=ɕo じぇ=ʥe じゃ=ʥa じゅ=ʥɨ じょ=ʥo "
    "ちぇ=ʨe ちゃ=ʨa ちゅ=ʨɨ ちょ=ʨo ぢゃ=ʥa ぢゅ=ʥɨ ぢょ=ʥo "
    "つぁ=ʦa つぃ=ʦʲi つぇ=ʦe つぉ=ʦo てぃ=tʲi てゅ=tʲɨ でぃ=dʲi でゅ=dʲɨ とぅ=tɯ どぅ=dɯ "
    "にぇ=ɲe にゃ=ɲa にゅ=ɲɨ にょ=ɲo ひぇ=çe ひゃ=ça ひゅ=çɨ ひょ=ço "
    "びゃ=bʲa びゅ=bʲɨ びょ=bʲo ぴゃ=pʲa ぴゅ=pʲɨ ぴょ=pʲo "
    "ふぁ=ɸa ふぃ=ɸʲi ふぇ=ɸe ふぉ=ɸo ふゅ=ɸʲɨ ふょ=ɸʲo みゃ=mʲa みゅ=mʲɨ みょ=mʲo "
    "りゃ=ɾʲa りゅ=ɾʲɨ りょ=ɾʲo ゔぁ=va ゔぃ=vʲi ゔぇ=ve ゔぉ=vo ゔゅ=bʲɨ ゔょ=bʲo"
)
_SYMBOLS = {
    "。": ".", "、": ",", "？": "?", "！": "!", "「": "“", "」": "”", "『": "“", "』": "”",
    "：": ":", "；": ";", "（": "(", "）": ")", "《": "(", "》": ")", "【": "[", "】": "]",
    "・": " ", "，": ",", "～": "—", "〜": "—", "—": "—", "«": "“", "»": "”",
    "\u309a": "", "\u3099": "",
}  # fmt: skip
_TABLE = {**_KANA, **_PAIRS, **_SYMBOLS}
SYMBOLS = frozenset("".join([*_KANA.values(), *_PAIRS.values()]) + "ːʔɴmŋɲn")
"""Every sound symbol the tables write (the vocabulary must have them all)."""
_SMALL = frozenset("ゃゅょぁぃぅぇぉ")
_VOICED = dict(zip("かきくけこさしすせそたちつてとはひふへほ", "がぎぐげござじずぜぞだぢづでどばびぶべぼ", strict=True))
_PHONETIC_EXTENSIONS = dict(zip("ㇰㇱㇲㇳㇴㇵㇶㇷㇸㇹㇺㇻㇼㇽㇾㇿ", "クシストヌハヒフヘホムラリルレロ", strict=True))
_WAVE_BEFORE_DIGIT = re.compile(r"[〜～](?=\d)")
_ANY_DIGITS = re.compile(r"\d+")
_SPACE_SEEN = '!",.:;?»—…”'
_SPACE_KEPT = '"«“'
_WORD_CLASS = 6
"""MeCab's character class for kana, and cutlet's for every word the dictionary knows."""
_SYMBOL_CLASS = 3


def _hiragana(text: str) -> str:
    return "".join(chr(ord(c) - 0x60) if "ァ" <= c <= "ヶ" or c in "ヽヾ" else c for c in text)


def _kana_ipa(before: str | None, kana: str, after: str | None) -> str:
    """One kana of a word -> IPA, by its neighbours within the word."""
    if kana in "〃々ゝゞヽ":
        if kana == "ゞ" and before in _VOICED:
            return _TABLE[_VOICED[before]]
        return ""
    if before is not None and before + kana in _TABLE:
        return _TABLE[before + kana]
    if after is not None and kana + after in _TABLE:
        return ""
    if after is not None and after in _SMALL:
        if kana == "っ":
            return ""
        return _TABLE.get(kana, "")[:-1] + _TABLE[after]
    if kana in _SMALL:
        return ""
    if kana == "ー":
        return "ː"
    if kana == "っ":
        return "ʔ"
    if kana == "ん":
        nxt = _TABLE.get(after or "", "")
        if nxt[:1] in ("m", "p", "b"):
            return "m"
        if nxt[:1] in ("k", "ɡ"):
            return "ŋ"
        if nxt[:1] in ("ɲ", "ʨ", "ʥ"):
            return "ɲ"
        if nxt[:1] in ("n", "t", "d", "ɾ", "z"):
            return "n"
        return "ɴ"
    return _TABLE.get(kana, "")


@dataclass
class _Word:
    surface: str
    hira: str
    kind: int
    start: int
    """Index of its first character in the text MeCab read."""
    end: int


@dataclass
class _Token:
    symbols: str
    space: bool
    owner: tuple[int, int] | None
    """Input span of the word it reads."""
    units: Sequence[Unit] = ()
    """Units of a run read by `Latin` (then `symbols` is only for the spacing rules)."""


class JapaneseReader:
    """MeCab (fugashi) with unidic-lite, and misaki's word list, loaded once (`load`, at
    start-up)."""

    def __init__(self) -> None:
        import fugashi
        import unidic_lite

        dicdir = unidic_lite.DICDIR
        self._tagger: Any = fugashi.Tagger(f'-d "{dicdir}" -r "{dicdir}/mecabrc"')
        words = importlib.metadata.distribution("misaki").locate_file("misaki/data/ja_words.txt")
        with open(str(words), encoding="utf-8") as f:
            self._words = frozenset(line.strip() for line in f)
        self._longest = max(len(w) for w in self._words)
        self._mecab = threading.Lock()
        """MeCab's tagger keeps its lattice between calls: one call at a time, from any
        text-pool thread."""
        self._tagger("日本語")

    def __call__(self, text: str, latin: Latin) -> list[Unit]:
        chars = list(traced_chars(self._normalize(text)))
        mecab = "".join(c.ch for c in chars)
        words = self._tag(mecab)
        tokens = self._tokens(self._group(words), chars, mecab, latin)
        return _units(tokens)

    # -- text -----------------------------------------------------------------------------
    @staticmethod
    def _normalize(text: str) -> Traced:
        pieces: Traced = traced_sub([Piece(text, 0, len(text), True)], _WAVE_BEFORE_DIGIT, lambda m: "から")
        out: Traced = []
        for piece in pieces:
            if not piece.aligned:
                out.append(piece)
                continue
            out.extend(_nfkc(piece))
        return traced_sub(_merge(out), _ANY_DIGITS, lambda m: " " + number_kana("".join(str(int(d)) for d in m[0])))

    def _tag(self, text: str) -> list[_Word]:
        words: list[_Word] = []
        for lo, hi in _chunks(text):
            at = lo
            with self._mecab:  # a node's fields point into the tagger's lattice: read them now
                nodes = [
                    (n.surface, len(n.white_space), getattr(n.feature, "pron", None) or getattr(n.feature, "kana", None),
                     _WORD_CLASS if n.char_type == 7 or not n.is_unk else n.char_type)
                    for n in self._tagger(text[lo:hi])
                ]  # fmt: skip
            for surface, space, reading, kind in nodes:
                at += space
                if text.startswith(surface, at):
                    start = at
                else:  # not expected: MeCab returns the text it read
                    start = text.find(surface, at, hi)
                    start = at if start < 0 else start
                at = start + len(surface)
                words.append(_Word(surface, _hiragana(reading or surface), kind, start, at))
        return words

    def _group(self, words: list[_Word]) -> list[_Word]:
        """Runs of words of one class that spell a listed word, read as one, longest
        first; a run is tried only up to the list's longest word."""
        out: list[_Word] = []
        i = 0
        while i < len(words):
            kind = words[i].kind
            candidates: list[str] = []
            spelled = ""
            j = i
            while j < len(words) and words[j].kind == kind and len(spelled) + len(words[j].surface) <= self._longest:
                spelled += words[j].surface
                candidates.append(spelled)
                j += 1
            take = next((n + 1 for n in range(len(candidates) - 1, -1, -1) if candidates[n] in self._words), 1)
            group = words[i : i + take]
            if take == 1:
                out.append(group[0])
            else:
                out.append(_Word("".join(w.surface for w in group), "".join(w.hira for w in group), kind, group[0].start, group[-1].end))
            i += take
        return out

    def _tokens(self, words: list[_Word], chars: Sequence[Char], mecab: str, latin: Latin) -> list[_Token]:
        out: list[_Token] = []
        i = 0
        while i < len(words):
            word = words[i]
            if word.surface.isascii() and any(c.isalpha() for c in word.surface):
                j = i + 1  # a run of ASCII words with letters: read together
                while j < len(words) and words[j].surface.isascii():
                    j += 1
                run = chars[word.start : words[j - 1].end]
                read = [
                    Unit(u.symbols, run[u.start].start, run[u.end - 1].end) if u.is_word and u.end > u.start else Unit(u.symbols)
                    for u in latin(mecab[word.start : words[j - 1].end])
                ]
                symbols = "".join(u.symbols for u in read)
                self._space(out, _Token(symbols, False, None, read), word.surface)
                i = j
                continue
            spoken = any(unicodedata.category(c)[0] in "LN" for c in word.surface)
            owner = (chars[word.start].start, chars[word.end - 1].end) if spoken else None
            self._space(out, _Token(_word_ipa(word), False, owner), word.surface)
            i += 1
        return out

    @staticmethod
    def _space(out: list[_Token], token: _Token, surface: str) -> None:
        """cutlet's spacing: a space after each word, none before a closing mark, one
        before an opening one. Its tests are substring tests, kept as they are (an empty
        reading counts as an opening mark)."""
        before = out[-1] if out else None
        roma = token.symbols
        if surface in "「『«" or roma in "([":
            if before is not None:
                before.space = True
        elif surface in "」』»" or roma in "]).,?!:":
            if before is not None:
                before.space = False
            token.space = True
        elif roma != " ":
            token.space = True
        out.append(token)


MECAB_CHARS = 512
"""The most characters MeCab reads at once: its time grows faster than the text beyond
about a thousand. A longer text is cut after a mark or a space in the second half of
each span, or at its end where there is none; a sentence is shorter."""
_CUT_AFTER = frozenset("。、！？!?,. \n")


def _chunks(text: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    lo = 0
    while len(text) - lo > MECAB_CHARS:
        hi = lo + MECAB_CHARS
        cut = next((k + 1 for k in range(hi - 1, lo + MECAB_CHARS // 2, -1) if text[k] in _CUT_AFTER), hi)
        out.append((lo, cut))
        lo = cut
    out.append((lo, len(text)))
    return out


def _word_ipa(word: _Word) -> str:
    surface = word.surface
    if surface.isascii():
        return surface
    if word.kind == _SYMBOL_CLASS:
        return "".join(_TABLE.get(c, c) for c in surface)
    if word.kind != _WORD_CLASS:
        return ""  # a character MeCab does not know (a rare kanji): cutlet says nothing
    hira = word.hira
    n = len(hira)
    return "".join(_kana_ipa(hira[k - 1] if k else None, hira[k], hira[k + 1] if k + 1 < n else None) for k in range(n))


def _units(tokens: list[_Token]) -> list[Unit]:
    """Tokens -> units, with cutlet's clean-up of the joined string: outer spaces
    stripped, runs of spaces made one, ( ) as « », and no space next to ʔ (unless a mark
    is before it, or an opening quote after it)."""
    chars: list[tuple[str, tuple[int, int] | None]] = []
    for token in tokens:
        if token.units:
            for u in token.units:
                owner = (u.start, u.end) if u.is_word else None
                chars.extend((ch, owner) for ch in u.symbols)
        else:
            chars.extend((ch, token.owner) for ch in token.symbols)
        if token.space:
            chars.append((" ", None))
    lo, hi = 0, len(chars)
    while lo < hi and chars[lo][0].isspace():
        lo += 1
    while hi > lo and chars[hi - 1][0].isspace():
        hi -= 1
    squeezed: list[tuple[str, tuple[int, int] | None]] = []
    for ch, owner in chars[lo:hi]:
        if ch.isspace():
            if squeezed and squeezed[-1][0] == " ":
                continue
            squeezed.append((" ", None))
        else:
            squeezed.append(({"(": "«", ")": "»"}.get(ch, ch), owner))
    kept: list[tuple[str, tuple[int, int] | None]] = []
    for k, (ch, owner) in enumerate(squeezed):
        if ch == " ":
            before = squeezed[k - 1][0] if k else ""
            after = squeezed[k + 1][0] if k + 1 < len(squeezed) else ""
            if after == "ʔ" and (not before or before not in _SPACE_SEEN):
                continue
            if before == "ʔ" and (not after or after not in _SPACE_KEPT):
                continue
        kept.append((ch, owner))
    units: list[Unit] = []
    for ch, owner in kept:
        if units and owner is not None and (units[-1].start, units[-1].end) == owner:
            units[-1] = Unit(units[-1].symbols + ch, owner[0], owner[1])
        elif owner is None:
            units.append(Unit(ch))
        else:
            units.append(Unit(ch, owner[0], owner[1]))
    return units


def _nfkc(piece: Piece) -> Traced:
    """NFKC, one character with its combining marks at a time, so that each result keeps
    the span it came from."""
    text = piece.text
    if unicodedata.is_normalized("NFKC", text) and not any(c in _PHONETIC_EXTENSIONS for c in text):
        return [piece]
    out: Traced = []
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and unicodedata.combining(text[j]):
            j += 1
        cluster = "".join(_PHONETIC_EXTENSIONS.get(c, c) for c in text[i:j])
        new = unicodedata.normalize("NFKC", cluster)
        start = piece.start + i
        out.append(Piece(new, start, piece.start + j, len(new) == j - i))
        i = j
    return out


def _merge(pieces: Traced) -> Traced:
    """Adjacent aligned pieces as one, so that a number split by normalization is one."""
    out: Traced = []
    run: list[Piece] = []
    for piece in [*pieces, Piece("", -1, -1, False)]:
        if piece.aligned and (not run or run[-1].end == piece.start):
            run.append(piece)
            continue
        if run:
            out.append(Piece("".join(p.text for p in run), run[0].start, run[-1].end, True))
            run = []
        if piece.aligned:
            run.append(piece)
        elif piece.start >= 0:
            out.append(piece)
    return out

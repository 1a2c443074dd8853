"""Text -> Kokoro phonemes (voxserve.text.kokoro_g2p), through the real espeak-ng of
piper-tts: known words per language, every symbol in Kokoro's vocabulary and none
dropped, word ranges in order, punctuation, refused languages, and a linear worst case.

English expectations are the spellings of misaki's own lexicons (us_gold.json and
gb_gold.json in misaki 0.9.4), which Kokoro's English voices were trained on; the others
are the IPA of each word written with Kokoro's affricate letters.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from tests.growth import grows_linearly
from voxserve.errors import ClientError
from voxserve.text.kokoro_g2p import (
    KOKORO_LANGUAGES,
    KokoroG2P,
    KokoroPhonemes,
    UnsupportedLanguage,
    kokoro_language,
)
from voxserve.text.kokoro_vocab import KOKORO_VOCAB
from voxserve.text.phonemize import espeak_clauses

VOCAB: dict[str, int] = dict(KOKORO_VOCAB)
MARKS = set(';:,.!?—…"()“”')


@pytest.fixture(scope="module")
def g2p() -> KokoroG2P:
    return KokoroG2P(VOCAB)


KNOWN = [
    ("a", "hello", "həlˈO"),
    ("a", "world", "wˈɜɹld"),
    ("a", "little", "lˈɪɾᵊl"),
    ("a", "nature", "nˈAʧəɹ"),
    ("a", "four", "fˈɔɹ"),
    ("a", "thought", "θˈɔt"),
    ("a", "square", "skwˈɛɹ"),
    ("a", "people", "pˈipᵊl"),
    ("a", "button", "bˈʌʔn"),
    ("b", "hello", "həlˈQ"),
    ("b", "world", "wˈɜːld"),
    ("b", "little", "lˈɪtᵊl"),
    ("b", "square", "skwˈɛː"),
    ("b", "nature", "nˈAʧə"),
    ("b", "happy", "hˈapi"),
    ("b", "button", "bˈʌtᵊn"),
    ("e", "hola", "ˈola"),
    ("e", "muchacho", "muʧˈaʧo"),
    ("e", "mañana", "maɲˈana"),
    ("f", "bonjour", "bɔ̃ʒˈuʁ"),
    ("f", "enfants", "ɑ̃fˈɑ̃"),
    ("h", "भारत", "bʰˈaːɾət"),
    ("h", "बड़ा", "bˈʌɽaː"),
    ("h", "ड़", "ˈɽə"),
    ("i", "pizza", "pˈiʦːa"),
    ("i", "zucchero", "ʣˈukːeɾo"),
    ("i", "ciao", "ʧˈao"),
    ("p", "pão", "pˈɐ̃ʊ̃"),
    ("p", "ótimo", "ˈɔʧimʊ"),
]


@pytest.mark.parametrize(("language", "word", "expected"), KNOWN)
def test_known_words(g2p: KokoroG2P, language: str, word: str, expected: str) -> None:
    assert g2p(word, language).phonemes == expected


SENTENCES = {
    "a": [
        "Hello, world! The quick brown fox jumps over the lazy dog.",
        "I have 25 apples, 3.5 pounds of flour and $12 in 1990.",
        'Dr. Smith said "yes" (twice) -- then left at 10:30... Really?!',
        "She's well-known for her thoughts on nature, pizza & people; 50% agree.",
        "Their choir sang a joyful, beautiful song about the tour near the square.",
        "Mr. O'Neil can't buy the U.S.A. a new car 😀",
    ],
    "b": [
        "Hello, world! The quick brown fox jumps over the lazy dog.",
        "I have 25 apples, 3.5 pounds of flour and £12 in 1990.",
        "Their choir sang a joyful, beautiful song about the tour near the square.",
        "The butter's in the kitchen; it's quite hot — isn't it?",
    ],
    "e": [
        "¡Hola! ¿Qué tal estás? Tengo 25 años y 3,14 euros.",
        "«Mañana llueve», dijo el muchacho; la guerra terminó en 1945.",
        "El rey hay que verlo: jamón, pingüino y año.",
    ],
    "f": [
        "Bonjour le monde, les enfants sont très heureux.",
        "Un bon vin blanc, j'ai 25 ans ; « c'est la vie ! »",
        "Il y a des oiseaux dans l'arbre, n'est-ce pas ?",
    ],
    "h": [
        "नमस्ते, आप कैसे हैं?",
        "भारत एक बड़ा देश है। मेरे पास 25 किताबें हैं।",
        "ज़िंदगी, ख़ुशी, फ़िल्म, ग़लत, शहर, ऋषि, क्षमा, ज्ञान, सड़क, पढ़ना।",
        "ऑफिस, डॉक्टर, क़लम, ड़, ढ़, ऋतु, संस्कृत, अंग्रेज़ी, श्री, कृपया, धन्यवाद, १२३।",
    ],
    "i": [
        "Ciao, la pizza è buona!",
        "Gli uomini mangiano gnocchi e zucchero; ho 25 anni.",
        "Perché l'acqua è così fredda? Non lo so.",
    ],
    "p": [
        "Olá, tudo bem? O pão é ótimo.",
        "Eu tenho 25 anos, mãe e irmão; a cidade é linda.",
        "Você quer café ou chá? Leite, tia e mal.",
    ],
}


def _check(text: str, result: KokoroPhonemes) -> None:
    """Every symbol is Kokoro's, ids match, and word ranges are in order and cover every
    symbol that is neither a space nor a mark."""
    assert result.dropped == ()
    assert set(result.phonemes) <= VOCAB.keys()
    assert result.ids.tolist() == [VOCAB[s] for s in result.phonemes]
    covered = [False] * len(result.phonemes)
    position = 0
    for word in result.words:
        assert text[word.start : word.end] == word.text
        assert position <= word.first <= word.last <= len(result.phonemes)
        position = word.last
        covered[word.first : word.last] = [True] * (word.last - word.first)
    outside = {s for s, inside in zip(result.phonemes, covered, strict=True) if not inside}
    assert outside <= MARKS | {" "}


@pytest.mark.parametrize("language", sorted(SENTENCES))
def test_every_symbol_is_kokoros_and_words_cover_the_ids(g2p: KokoroG2P, language: str) -> None:
    for text in SENTENCES[language]:
        result = g2p(text, language)
        _check(text, result)
        spoken = [w for w in result.words if any(c.isalpha() for c in w.text)]
        assert all(w.last > w.first for w in spoken), text


# Letters of each language's alphabet, digits and symbols: random spellings make espeak
# spell letters and read rare clusters, which is where it writes symbols (ɭ, ɬ, the dental
# and syllabic marks) that no sentence above reaches.
ALPHABETS = {
    "a": "abcdefghijklmnopqrstuvwxyz",
    "b": "abcdefghijklmnopqrstuvwxyz",
    "e": "abcdefghijklmnopqrstuvwxyzáéíóúñü",
    "f": "abcdefghijklmnopqrstuvwxyzàâçéèêëîïôûùüÿœ",
    "h": "अआइईउऊऋएऐओऔकखगघङचछजझञटठडढणतथदधनपफबभमयरलळवशषसह" + "ािीुूृेैोौंँ़्",
    "i": "abcdefghijklmnopqrstuvzàèéìòù",
    "p": "abcdefghijklmnopqrstuvwxyzáâãàçéêíóôõú",
}
SYMBOLS = "0123456789$€£%&@#+=<>~^|😀👍©®°§½²µ"


@pytest.mark.parametrize("language", sorted(ALPHABETS))
def test_random_spellings_drop_nothing(g2p: KokoroG2P, language: str) -> None:
    rng = random.Random(7)
    letters = ALPHABETS[language] * 3 + SYMBOLS
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(400)]
    for start in range(0, len(words), 50):
        text = " ".join(words[start : start + 50])
        _check(text, g2p(text, language))


def test_every_language_has_sentences() -> None:
    assert set(SENTENCES) == set(KOKORO_LANGUAGES)


def test_numbers_keep_their_word(g2p: KokoroG2P) -> None:
    """espeak reads "25" as two words; both belong to the one written word."""
    result = g2p("I have 25 apples", "a")
    assert [result.phonemes[w.first : w.last] for w in result.words] == ["I", "hæv", "twˈɛnti fˈIv", "ˈæpᵊlz"]


def test_punctuation_kokoro_knows_is_kept_and_the_rest_dropped(g2p: KokoroG2P) -> None:
    result = g2p("¿Qué? «Sí» (no) — ‘vale’... ¡ya!!!!!!", "e")
    assert result.phonemes == "kˈe? “sˈi” (nˈo) — bˈale… ʝˈa!!!!"
    _check("¿Qué? «Sí» (no) — ‘vale’... ¡ya!!!!!!", result)


def test_a_lone_article_is_read_in_context(g2p: KokoroG2P) -> None:
    """The run is read at once: espeak reads a lone "a" as the letter's name."""
    assert g2p("a cat", "a").phonemes == "ə kˈæt"


def test_languages_resolve_from_codes_and_tags() -> None:
    assert kokoro_language("a").espeak_voice == "en-us"
    assert kokoro_language("en-GB").code == "b"
    assert kokoro_language("pt-br").code == "p"


@pytest.mark.parametrize(("code", "named"), [("j", "Japanese"), ("ja", "Japanese"), ("z", "Mandarin"), ("xx", "unknown")])
def test_unsupported_languages_are_a_400(g2p: KokoroG2P, code: str, named: str) -> None:
    with pytest.raises(UnsupportedLanguage) as caught:
        g2p("text", code)
    assert isinstance(caught.value, ClientError)
    assert caught.value.status == 400
    assert caught.value.param == "language"
    assert named in caught.value.message
    assert "a (English (US))" in caught.value.message


def test_a_vocabulary_without_a_mapped_symbol_fails_at_start() -> None:
    vocab = {k: v for k, v in VOCAB.items() if k != "ʧ"}
    with pytest.raises(ValueError, match="ʧ"):
        KokoroG2P(vocab)


# Inputs with no words, or one long word: the scan and the tables alone, no espeak work
# to speak of. Each is built at a given size in characters.
PATHOLOGICAL: dict[str, Callable[[int], str]] = {
    "marks": lambda n: "!?.,;:" * (n // 6),
    "parentheses": lambda n: "(" * n,
    "dots": lambda n: "." * n,
    "dashes": lambda n: "-" * n,
    "apostrophes": lambda n: "'" * n,
    "dotted digits": lambda n: ".".join(str(i % 10) for i in range(n // 2)),
    "long word": lambda n: "a" * n,
    "long consonants": lambda n: "x" * n,
    "long digits": lambda n: "7" * n,
}
# Thousands of words: espeak reads every one, and numbers make every word of the run be
# read twice.
WORDY: dict[str, Callable[[int], str]] = {
    "abbreviations": lambda n: "Dr. " * (n // 4),
    "initials": lambda n: "a. " * (n // 3),
    "symbols and dropped marks": lambda n: "¿*_~" * (n // 4),
    "numbers": lambda n: "25 " * (n // 3),
    "hundred-letter words": lambda n: ("x" * 100 + " ") * (n // 101),
}
SIZE = 10_000


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_text_is_linear(g2p: KokoroG2P, name: str) -> None:
    linear, times = grows_linearly(lambda n: g2p(PATHOLOGICAL[name](n), "a"), SIZE)
    assert linear, times
    text = PATHOLOGICAL[name](SIZE)
    _check(text, g2p(text, "a"))


@pytest.mark.parametrize("name", sorted(WORDY))
def test_thousands_of_words_are_linear(g2p: KokoroG2P, name: str) -> None:
    linear, times = grows_linearly(lambda n: g2p(WORDY[name](n), "a"), SIZE)
    assert linear, times
    text = WORDY[name](SIZE)
    _check(text, g2p(text, "a"))


def test_espeak_reads_the_same_whatever_voice_read_before() -> None:
    """espeak-ng's voice is set only when it changes: reading in a shuffled order of voices
    gives what each voice gives for the same text read in a row."""
    voices = [KOKORO_LANGUAGES[code].espeak_voice for code in KOKORO_LANGUAGES]
    texts = ["Hello there, world.", "1990 was 50% of 2k", "Dr. Smith paid $3.50", "pizza, ciao"]
    in_a_row = {(v, t): espeak_clauses(v, [t])[0] for v in voices for t in texts}
    pairs = [(v, t) for v in voices for t in texts] * 3
    random.Random(7).shuffle(pairs)
    for voice, text in pairs:
        assert espeak_clauses(voice, [text])[0] == in_a_row[voice, text], (voice, text)

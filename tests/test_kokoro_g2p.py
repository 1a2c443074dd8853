"""Text -> Kokoro phonemes (voxserve.text.kokoro_g2p), through the real espeak-ng of
piper-tts and the real Mandarin and Japanese dictionaries: known words per language,
every symbol in Kokoro's vocabulary and none dropped, word ranges in order, punctuation,
refused languages, and a linear worst case.

English expectations are the spellings of misaki's own lexicons (us_gold.json and
gb_gold.json in misaki 0.9.4), which Kokoro's English voices were trained on; the others
are the IPA of each word written with Kokoro's affricate letters. Mandarin and Japanese
expectations are what misaki 0.9.4's `ZHG2P()` and `JAG2P()` (cutlet, on unidic-lite)
give for the same sentences, less the symbols Kokoro's model drops.
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
    "z": [
        "你好，世界。我有3个苹果，今天是2024年5月1日。",
        "女儿说：“这是50%的1/2。”温度25℃，3-5个人。",
        "我爱Python和AI，它们很好。",
    ],
    "j": [
        "こんにちは、世界。東京は2024年に100人です！",
        "「本」を読んだ。（かっこ）と『二重』。",
        "今日はHello worldです。ヴァイオリンとチェロを弾きます。",
    ],
}

# misaki 0.9.4's reading of each sentence (ZHG2P() for Mandarin; JAG2P() for Japanese,
# whose fugashi finds unidic-lite), as Kokoro's pipeline hands it to the model.
MISAKI = [
    ("z", "你好，世界。我有3个苹果，今天是2024年5月1日。",
     "ni↓xau↓, ʂɨ↘ʨje↘. wo↓ jou↓ sa→nkɤ↘ pʰi↗ŋkwo↓, ʨi→ntʰjɛ→n ʂɨ↘ ɚ↘li↗ŋɚ↘ sɨ↘njɛ↗n u↓ɥe↘ i→ɻɨ↘."),
    ("z", "女儿说：“这是50%的1/2。”温度25℃，3-5个人。",
     "ny↓ɚ↗ ʂwo→: “ꭧɤ↘ʂɨ↘ pai↓fə→nꭧɨ→u↓ʂɨ↗ tɤ ɚ↘fə→nꭧɨ→i→. ”wə→ntu↘ ɚ↘ʂɨ↗u↓ ʂɤ↘ʂɨ↘tu↘, sa→ntau↘ u↓kɤ↘ ɻə↗n."),
    ("z", "嗯，呣，哦，欸，儿子，日子，知识，词语，四十。",
     "n↗, m↗, ɔ↗, ai→, ɚ↗ʦɨ, ɻɨ↘ʦɨ, ꭧɨ→ʂɨ↗, ʦʰɨ↗y↓, sɨ↘ʂɨ↗."),
    ("z", "绿色的女孩在旅游，略微，选择，云彩，月亮。",
     "ly↘sɤ↘ tɤ ny↓xai↗ ʦai↘ ly↓jou↗, lɥe↘wei→, ɕɥɛ↓nʦɤ↗, y↗nʦʰai↓, ɥe↘lja↘ŋ."),
    ("z", "这本书《红楼梦》很有意思（真的）。",
     "ꭧɤ↘ pə↓nʂu→ “xʊ↗ŋlou↗mə↘ŋ” xə↓n jou↓i↘sɨ (ꭧə→ntɤ) ."),
    ("z", "一二三四五六七八九十，一百零一，一千，一万。",
     "i→ɚ↘sa→nsɨ↘u↓ljou↘ʨʰi→pa→ʨjou↓ʂɨ↗, i↘pai↓ li↗ŋi→, i→ʨʰjɛ→n, i→wa↘n."),
    ("j", "こんにちは、世界。東京は2024年に100人です！",
     "koɲɲiʨiβa, sekai. toːkʲoː βa ɲi seɴ ɲiʥɨːjoɴ neɴ ɲi çakɯ ɲiɴ desɨ!"),
    ("j", "今日はいい天気ですね。散歩に行きましょう。", "kʲoː βa iː teŋkʲi desɨ ne. sampo ɲi ikʲi maɕoː."),
    ("j", "「本」を読んだ。（かっこ）と『二重』。", "“hoɴ” o jonda. «kaʔko» to “ɲiʥɨː”."),
    ("j", "きゃきゅきょ、ファイル、ティー、ディズニー、ウィキ、ッて、ン。",
     "kʲa kʲɨ kʲo, ɸaiɾɯ, tʲiː, dʲizɨɲiː, βikʲi, ʔte, ɴ."),
    ("j", "1,000円と3.14と0と007と123456789と1000と10000と11000と300と3000円。",
     ("iʨi, ʣeɾo eɴ to saɴ. ʥɨːjoɴ to ʣeɾo to na na to iʨi okɯ ɲi seɴ sa ɴ bʲija kɯ joɲʥɨː ɡoma ɴ ɾokɯ seɴ "
      "nana çakɯ haʨi ʥɨːkʲɨː tose ɴ to iʨi maɴ to iʨi ma ɴ iʔse ɴ to saɴ bʲija kɯ to saɴʣeɴ eɴ.")),
    ("j", "5〜10人が来た。東京タワーはとても高いです。",
     "ɡo kaɾa ʥɨː ɲiɴ ɡa kʲita. toːkʲoː taβaː βa totemo takai desɨ."),
    ("j", "新しいコンピューターを買いました。明日は雨が降るかもしれません。",
     "ataɾaɕiː kompʲɨːtaː o kai maɕita. asɨ βa ame ɡa ɸɯɾɯ ka mo ɕiɾe maseɴ."),
]  # fmt: skip


@pytest.mark.parametrize(("language", "text", "expected"), MISAKI)
def test_mandarin_and_japanese_read_as_kokoros_pipeline(g2p: KokoroG2P, language: str, text: str, expected: str) -> None:
    assert g2p(text, language).phonemes == "".join(s for s in expected if s in VOCAB)


@pytest.mark.parametrize(
    ("language", "text", "words"),
    [
        ("z", "今天是2024年5月1日。", ["今天", "是", "2024年5月1日"]),
        ("z", "我爱Python和AI。", ["我", "爱", "Python", "和", "AI"]),
        ("j", "東京は2024年に100人です。", ["東京", "は", "2024", "年", "に", "100", "人", "です"]),
        ("j", "今日はHello worldです。", ["今日", "は", "Hello", "world", "です"]),
    ],
)
def test_cjk_words_are_the_words_written(g2p: KokoroG2P, language: str, text: str, words: list[str]) -> None:
    """Word timings name the client's words: a number read as several words is one word,
    and Latin words inside the sentence are read (as English), not dropped."""
    result = g2p(text, language)
    assert [w.text for w in result.words] == words
    assert all(w.last > w.first for w in result.words)
    _check(text, result)


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
    "z": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单导级难",
    "j": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんがぎぐげござじずぜぞだぢづでどばびぶべぼぱぴぷぺぽゃゅょっーアイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンヴャュョッ日本語東京人大学生時間今年私名前天気雨",
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


def test_unsupported_languages_are_a_400(g2p: KokoroG2P) -> None:
    with pytest.raises(UnsupportedLanguage) as caught:
        g2p("text", "xx")
    assert isinstance(caught.value, ClientError)
    assert caught.value.status == 400
    assert caught.value.param == "language"
    assert "unknown" in caught.value.message
    assert "a (English (US))" in caught.value.message
    assert "z (Mandarin)" in caught.value.message


@pytest.mark.parametrize(("code", "expected"), [("zh", "z"), ("cmn", "z"), ("ja", "j"), ("J", "j")])
def test_mandarin_and_japanese_resolve(code: str, expected: str) -> None:
    assert kokoro_language(code).code == expected


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


# Built to push each step of the Mandarin and Japanese readers, timed at 4,096 characters
# (the request limit) against a quarter of that: one long run for jieba's HMM or for
# MeCab, a long number, marks, Latin words between every ideograph (a reading each),
# number rules on every character.
CJK_SIZE = 4096
CJK_WORST: dict[str, dict[str, Callable[[int], str]]] = {
    "z": {
        "one run": lambda n: "一" * n,
        "unknown ideographs": lambda n: "龘鱻" * (n // 2),
        "digits": lambda n: "1" * n,
        "ranges": lambda n: "1-2个" * (n // 4),
        "percents": lambda n: "5%" * (n // 2),
        "latin between ideographs": lambda n: "a中" * (n // 2),
        "sentences": lambda n: "我们一起去公园散步吧。" * (n // 11),
    },
    "j": {
        "katakana": lambda n: "ア" * n,
        "kanji": lambda n: "漢" * n,
        "digits": lambda n: "1" * n,
        "latin between kana": lambda n: "aあ" * (n // 2),
        "long vowels": lambda n: "ー" * n,
        "wave dashes before digits": lambda n: "〜1" * (n // 2),
        "sentences": lambda n: "今日はいい天気ですね。" * (n // 11),
    },
}


@pytest.mark.parametrize(("language", "name"), [(lang, name) for lang, cases in CJK_WORST.items() for name in cases])
def test_mandarin_and_japanese_worst_cases_are_linear(g2p: KokoroG2P, language: str, name: str) -> None:
    build = CJK_WORST[language][name]
    linear, times = grows_linearly(lambda n: g2p(build(n), language), CJK_SIZE)
    assert linear, times
    text = build(CJK_SIZE)
    _check(text, g2p(text, language))


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
    voices = [lang.espeak_voice for lang in KOKORO_LANGUAGES.values() if lang.espeak_voice]
    texts = ["Hello there, world.", "1990 was 50% of 2k", "Dr. Smith paid $3.50", "pizza, ciao"]
    in_a_row = {(v, t): espeak_clauses(v, [t])[0] for v in voices for t in texts}
    pairs = [(v, t) for v in voices for t in texts] * 3
    random.Random(7).shuffle(pairs)
    for voice, text in pairs:
        assert espeak_clauses(voice, [text])[0] == in_a_row[voice, text], (voice, text)


_WITHOUT_JIEBA = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "jieba":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
from voxserve.text.kokoro_g2p import KokoroG2P, UnsupportedLanguage, load_readers
from voxserve.text.kokoro_vocab import KOKORO_VOCAB
print(sorted(load_readers()))
g2p = KokoroG2P(KOKORO_VOCAB)
print(g2p("こんにちは。", "ja").phonemes)
try:
    g2p("你好。", "zh")
except UnsupportedLanguage as e:
    print(e.status, e.param, e.message)
"""


def test_a_reader_whose_packages_are_missing_refuses_only_its_language() -> None:
    """In a process whose environment lacks jieba: Mandarin is a 400 naming the packages
    to install, and Japanese still reads."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _WITHOUT_JIEBA], capture_output=True, text=True, timeout=60, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "['zh']"
    assert lines[1] == "koɲɲiʨiβa."
    assert lines[2].startswith("400 language Mandarin cannot be read here")
    assert "jieba, pypinyin and cn2an" in lines[2]


@pytest.mark.parametrize("language", ["z", "j"])
def test_readers_give_the_same_from_several_threads(g2p: KokoroG2P, language: str) -> None:
    """The text pool reads from several threads at once; MeCab's tagger is shared."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [text for text in SENTENCES[language] for _ in range(8)]
    alone = [g2p(text, language).phonemes for text in texts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda text: g2p(text, language).phonemes, texts))
    assert together == alone

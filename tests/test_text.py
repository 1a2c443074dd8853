"""Text normalization and segmentation (pure functions)."""

from __future__ import annotations

from voxserve.text.incremental import TextSegmenter
from voxserve.text.split import (
    normalize,
    segment,
    speakable,
    split_phrase,
    split_sentences,
)


def test_normalize_strips_controls_and_keeps_paragraphs() -> None:
    assert normalize("a\x00b\tc  d\n\n\n e") == "a b c d\n\ne"


def test_speakable_needs_a_letter_digit_or_symbol() -> None:
    for text in ["hi", "7", "\u00e9", "\U0001f600", "$", "\u4e2d", "!a!"]:
        assert speakable(text), text
    for text in ["", "   ", "!" * 4096, "?!.,;:-\u2026\u2014", "()[]\u00ab\u00bb\"'", "\x00\x07\u2063", "%&@#*"]:
        assert not speakable(text), text


def test_sentences_respect_abbreviations_and_quotes() -> None:
    text = 'Dr. Smith said "ok." Then J. R. left... Really?! Yes e.g. this.'
    assert split_sentences(text) == ['Dr. Smith said "ok."', "Then J. R. left...", "Really?!", "Yes e.g. this."]


def test_short_first_sentence_is_one_segment() -> None:
    assert segment("Hello there, my friend! How are you?") == ["Hello there, my friend!", "How are you?"]


def test_long_first_sentence_splits_at_a_clause() -> None:
    text = "It was a bright cold day in April, and the clocks were striking thirteen all over town."
    assert segment(text) == ["It was a bright cold day in April,", "and the clocks were striking thirteen all over town."]


def test_long_first_sentence_without_commas_splits_before_a_clause_word() -> None:
    text = "The committee met on Tuesday morning because the budget had to be approved quickly."
    assert segment(text) == ["The committee met on Tuesday morning,", "because the budget had to be approved quickly."]
    assert split_phrase("Your package will arrive between two and four in the afternoon") is None


def test_later_sentences_are_not_split_and_long_ones_are_bounded() -> None:
    long = " ".join(["word"] * 200) + "."
    segments = segment("Short start. " + long)
    assert segments[0] == "Short start."
    assert all(len(s) <= 400 for s in segments) and len(segments) > 2


# -- whole sentences, for a model that plans prosody over the sentence (Kokoro) ---------


def test_whole_sentences_are_never_cut_for_a_fast_start() -> None:
    text = "Welcome back, how can I help you today? The quick brown fox jumps over the lazy dog."
    assert segment(text, first_max_chars=None, max_chars=300) == [
        "Welcome back, how can I help you today?",
        "The quick brown fox jumps over the lazy dog.",
    ]
    assert segment(text, first_max_chars=12)[0] == "Welcome back,"  # Piper's plan


def test_only_a_very_long_sentence_is_cut_and_then_at_its_clauses() -> None:
    clause = "the walkers stopped beside the river to rest their feet"
    text = ", ".join([clause] * 8) + "."
    pieces = segment(text, first_max_chars=None, max_chars=300)
    assert len(pieces) > 1 and all(len(p) <= 300 for p in pieces)
    assert all(p.rstrip(",.").endswith("feet") for p in pieces)  # at commas, never mid-phrase


def test_chinese_and_japanese_sentences_end_at_full_width_marks() -> None:
    """。！？ end a sentence with no space after them, with any closing quote."""
    text = "你好，世界。我很好！你呢？「はい。」そうです。"
    assert split_sentences(text) == ["你好，世界。", "我很好！", "你呢？", "「はい。」", "そうです。"]


def test_a_long_chinese_sentence_is_cut_at_its_clauses_without_spaces() -> None:
    sentence = "我们一起去公园散步，" * 40 + "好吗？"
    pieces = segment(sentence, first_max_chars=None, max_chars=300)
    assert len(pieces) > 1 and all(len(p) <= 300 for p in pieces)
    assert "".join(pieces) == sentence  # clauses joined back as written: no space added


def test_fragments_of_chinese_are_cut_at_full_width_marks() -> None:
    seg = TextSegmenter("clause", min_clause_chars=4)
    out = [piece for ch in "今天天气很好，我们去公园吧。好的！" for piece in seg.feed(ch)] + seg.flush()
    assert out == ["今天天气很好，", "我们去公园吧。", "好的！"]

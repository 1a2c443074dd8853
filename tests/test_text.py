"""Text normalization and segmentation (pure functions)."""

from __future__ import annotations

import pytest

from voxserve.text.split import (
    SegmentPlan,
    grow_segments,
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


# -- growing segments, for a model that decodes each segment whole (Kokoro) ----------
PLAN = SegmentPlan(first_chars=18, max_chars=150, growth=1.5, pause_chars=6, min_chars=12)


def _spoken(pieces: list[str]) -> str:
    return "".join(ch for ch in " ".join(pieces) if ch.isalnum())


def test_growing_segments_start_with_a_few_words_and_grow_within_the_bound() -> None:
    text = (
        "The expedition set out before dawn, when the snow on the ridge was still hard "
        "enough to walk on. For the first few hours the climbers made good progress, "
        "moving in a single line and speaking only when they had to. By midday the sun "
        "had softened the surface, and every step sank deep into the slush. The leader "
        "called a halt below a wide crack in the ice, studied the sky for a long minute, "
        "and decided that they would camp there for the night."
    )
    pieces = grow_segments(text, PLAN)
    assert _spoken(pieces) == _spoken([text])  # nothing lost, nothing added but commas
    assert len(pieces[0]) <= PLAN.first_chars * PLAN.slack
    spoken = 0
    first = len(pieces[0]) + PLAN.pause_chars
    for piece in pieces:
        if spoken:  # each piece within the plan's bound on what came before it
            bound = first + (PLAN.growth - 1) * spoken - PLAN.pause_chars
            assert len(piece) <= max(PLAN.min_chars, min(PLAN.max_chars, bound)) * PLAN.slack, piece
        spoken += len(piece) + PLAN.pause_chars
    assert max(len(p) for p in pieces) > 80  # they do grow
    assert all(len(p) <= PLAN.max_chars * PLAN.slack for p in pieces)


def test_growing_segments_cut_where_a_reader_pauses() -> None:
    # A clause boundary first; then before a conjunction; then at a space, never after
    # an article or a preposition, with a comma for a continuing intonation.
    assert grow_segments("Welcome back, how can I help you today?", PLAN) == [
        "Welcome back,", "how can I help you today?"
    ]
    assert grow_segments("Your package will arrive between two and four in the afternoon.", PLAN)[0] == "Your package,"
    assert grow_segments("It looks like rain this afternoon.", PLAN) == ["It looks like rain,", "this afternoon."]
    # No cut leaves a lone word: a short sentence stays whole rather than dangle.
    assert grow_segments("Welcome to the city gardens.", PLAN) == ["Welcome to the city gardens."]
    assert grow_segments("Hello there.", PLAN) == ["Hello there."]


def test_growing_segments_pack_short_sentences() -> None:
    pieces = grow_segments("Thank you for calling. All of our agents are busy. Please hold. We will be with you soon.", PLAN)
    assert pieces[0] == "Thank you for calling."
    assert "All of our agents are busy. Please hold." in pieces


def test_growing_segments_bound_a_word_longer_than_a_segment() -> None:
    pieces = grow_segments("x" * 1000, PLAN)
    assert "".join(pieces) == "x" * 1000 and all(len(p) <= PLAN.max_chars for p in pieces)
    url = "see " + "y" * 40 + " now"
    assert grow_segments(url, PLAN) == ["see " + "y" * 40, "now"]


def test_segment_plan_checks_its_fields() -> None:
    with pytest.raises(ValueError):
        SegmentPlan(first_chars=10, min_chars=12)
    with pytest.raises(ValueError):
        SegmentPlan(growth=0.9)

"""Kokoro-82M: the joined model verifies, the voices load and verify, the two stages give
the full graph's audio, and stage A's durations account for every output sample."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from voxserve.engine.adapters.kokoro import speech_end
from voxserve.runners.kokoro.onnx_runner import (
    HOP,
    MODEL_SHA256,
    SAMPLE_RATE,
    DecoderInput,
    KokoroFrames,
    KokoroInput,
    KokoroModel,
    decode_span,
    default_voices_dir,
    list_voices,
    load_voice,
    model_file,
    style_row,
)
from voxserve.text.kokoro_vocab import KOKORO_VOCAB, UnknownPhoneme, phonemes_to_ids

HELLO = "həlˈO wˈɜɹld."  # "Hello world." in Kokoro's (misaki's) US English phonemes


@pytest.fixture(scope="module")
def model() -> KokoroModel:
    return KokoroModel()


@pytest.fixture(scope="module")
def hello(model: KokoroModel) -> KokoroInput:
    ids = phonemes_to_ids(HELLO)
    return KokoroInput(ids, style_row(model.voice("af_heart"), len(ids)))


def test_the_model_is_joined_once_and_verified(tmp_path: Path) -> None:
    path = model_file(tmp_path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MODEL_SHA256
    mtime = path.stat().st_mtime_ns
    assert model_file(tmp_path) == path and path.stat().st_mtime_ns == mtime
    path.write_bytes(b"half a model")  # a damaged cache is joined again
    assert hashlib.sha256(model_file(tmp_path).read_bytes()).hexdigest() == MODEL_SHA256


def test_voices_load_with_their_shape_and_are_checked(tmp_path: Path) -> None:
    voices = list_voices()
    assert len(voices) == 54
    assert sum(v.language in ("en-US", "en-GB") for v in voices) == 28
    assert {v.name: (v.language, v.gender) for v in voices}["bm_fable"] == ("en-GB", "male")
    heart = load_voice("af_heart")
    assert heart.shape == (510, 256) and heart.dtype == np.float32
    assert np.all(np.isfinite(heart)) and float(np.abs(heart).max()) > 0
    assert style_row(heart, 12).shape == (256,)

    shutil.copy(default_voices_dir() / "af_heart.bin", tmp_path)
    with (tmp_path / "af_heart.bin").open("r+b") as f:
        f.seek(1000)
        f.write(b"\x01")
    with pytest.raises(RuntimeError, match="sha256"):
        load_voice("af_heart", tmp_path)
    with pytest.raises(KeyError):
        load_voice("af_nobody")


def test_phonemes_outside_the_vocabulary_are_refused() -> None:
    assert phonemes_to_ids(HELLO).tolist() == [KOKORO_VOCAB[s] for s in HELLO]
    with pytest.raises(UnknownPhoneme, match=r"U\+0001"):
        phonemes_to_ids("hə\x01")


def test_a_short_sequence_speaks(model: KokoroModel, hello: KokoroInput) -> None:
    frames = model.acoustic.run([hello])[0]
    pcm = model.decoder.run([frames.decoder_input])[0]
    assert model.sample_rate == SAMPLE_RATE == 24000
    seconds = len(pcm) / SAMPLE_RATE
    assert 0.5 < seconds < 2.5
    assert pcm.dtype == np.float32 and np.all(np.isfinite(pcm))
    assert float(np.sqrt(np.mean(pcm**2))) > 0.01  # speech, not silence
    assert float(np.abs(pcm).max()) <= 1.5


def test_durations_sum_to_the_audio_length(model: KokoroModel, hello: KokoroInput) -> None:
    for speed in (1.0, 1.5):
        frames = model.acoustic.run([KokoroInput(hello.ids, hello.style, speed)])[0]
        assert frames.durations.shape == (len(hello.ids) + 2,)
        assert np.all(frames.durations >= 1)
        assert int(frames.durations.sum()) == frames.frames
        pcm = model.decoder.run([frames.decoder_input])[0]
        assert len(pcm) == frames.frames * HOP  # 600 samples (25 ms) per frame


def test_two_stages_equal_the_full_graph(model: KokoroModel, hello: KokoroInput) -> None:
    full = ort.InferenceSession(str(model.model_path), providers=["CPUExecutionProvider"])
    tokens = np.concatenate([[0], hello.ids, [0]]).astype(np.int64)[np.newaxis]
    speed = np.array([1.0], dtype=np.float32)
    reference = full.run(None, {"tokens": tokens, "style": hello.style[np.newaxis], "speed": speed})
    frames = model.acoustic.run([hello])[0]
    staged = model.decoder.run([frames.decoder_input])[0]
    if model.precision == "int8":
        np.testing.assert_allclose(staged, reference[0].reshape(-1), rtol=0, atol=1e-4)


def test_a_span_decoded_with_context_has_the_span_length(model: KokoroModel, hello: KokoroInput) -> None:
    whole = model.acoustic.run([hello])[0].decoder_input
    pcm = decode_span(model.decoder, whole, 4, 12, 8, 8)
    assert len(pcm) == 8 * HOP


def test_the_leading_pad_is_trimmed_before_stage_b(model: KokoroModel, hello: KokoroInput) -> None:
    whole = model.acoustic.run([hello])[0]
    lead = int(whole.durations[0])
    assert lead >= 12  # the model's own pad: 0.3-0.45 s of near silence
    trimmed = whole.trim_lead(6)
    assert int(trimmed.durations[0]) == 6 and np.array_equal(trimmed.durations[1:], whole.durations[1:])
    assert trimmed.frames == whole.frames - (lead - 6) == int(trimmed.durations.sum())
    assert whole.trim_lead(lead) is whole and whole.trim_lead(100) is whole
    pcm = model.decoder.run([trimmed.decoder_input])[0]
    assert len(pcm) == trimmed.frames * HOP
    # The onset survives the cut: speech starts within the kept pad's last frames, as it
    # does in the whole decode, and the rest is as loud as the whole decode.
    full = model.decoder.run([whole.decoder_input])[0]
    rms = [float(np.sqrt(np.mean(pcm[i * HOP : (i + 1) * HOP] ** 2))) for i in range(10)]
    assert max(rms[:2]) < 0.01 and max(rms[4:10]) > 0.05
    assert float(np.sqrt(np.mean(pcm**2))) == pytest.approx(float(np.sqrt(np.mean(full[(lead - 6) * HOP :] ** 2))), rel=0.2)
    with pytest.raises(ValueError):
        whole.trim_lead(0)
    # A crop at both ends clips each token's frames to the window.
    both = whole.crop(3, whole.frames - 5)
    assert both.frames == whole.frames - 8 == int(both.durations.sum())
    assert int(both.durations[0]) == lead - 3 and int(both.durations[-1]) == max(0, int(whole.durations[-1]) - 5)
    with pytest.raises(ValueError):
        whole.crop(10, 10)


def _frames(durations: list[int]) -> KokoroFrames:
    n = sum(durations)
    z = np.zeros(2 * n, np.float32)
    asr = np.arange(512 * n, dtype=np.float32).reshape(512, n)
    return KokoroFrames(np.array(durations, np.int64), DecoderInput(asr, z, z, np.zeros(256, np.float32)))


def test_a_crop_keeps_the_weight_of_the_frames_it_leaves_out() -> None:
    whole = _frames([15, 4, 6, 3, 12, 8])  # lead pad, 4 phonemes, trailing pad: 48 frames
    assert whole.decoder_input.left_out == (0, 0)
    cut = whole.crop(9, 40)
    assert cut.frames == 31 == int(cut.durations.sum()) and cut.durations.tolist() == [6, 4, 6, 3, 12, 0]
    assert np.array_equal(cut.decoder_input.asr, whole.decoder_input.asr[:, 9:40])
    assert cut.decoder_input.left_out == (9, 8)  # counted on the first and last frames
    again = cut.crop(2, 30)  # a crop of a crop adds up
    assert again.decoder_input.left_out == (11, 9)
    assert cut.decoder_input.window(0, 5).left_out == (0, 0)  # a plain window leaves them out


def test_frames_left_out_weigh_on_the_window_edges(model: KokoroModel, hello: KokoroInput) -> None:
    whole = model.acoustic.run([hello])[0]
    speech = whole.crop(int(whole.durations[0]) - 6, whole.frames - 10)
    plain = replace(speech.decoder_input, left_out=(0.0, 0.0))
    counted, bare = model.decoder.run([speech.decoder_input, plain])
    full = model.decoder.run([whole.decoder_input])[0][(int(whole.durations[0]) - 6) * HOP :]
    # Counting the left-out silence keeps the speech at the whole decode's level; the
    # bare window comes out quieter.
    level = [float(np.sqrt(np.mean(x[: len(counted)] ** 2))) for x in (full, counted, bare)]
    assert abs(20 * np.log10(level[1] / level[0])) < 0.5 < 20 * np.log10(level[0] / level[2])


def test_the_speech_ends_a_few_frames_after_the_last_phoneme_starts() -> None:
    durations = np.array([6, 4, 6, 3, 12, 8, 1])  # lead, 4 ids, "," and the trailing pad
    words = [("hello", 0, 2), ("there", 2, 4)]
    assert speech_end(durations, words, 12) == 6 + 4 + 6 + 3 + 12  # the last phoneme starts at 19
    assert speech_end(durations, words, 100) == int(durations.sum())
    assert speech_end(durations, [("hello", 0, 2)], 5) == 6 + 4 + 5  # "hello" ends with id 1
    assert speech_end(durations, [], 5) == int(durations.sum())


def test_sessions_are_made_per_thread_count_once(model: KokoroModel, hello: KokoroInput) -> None:
    assert model.runners(1) == (model.acoustic, model.decoder)
    two = model.runners(2)
    assert model.runners(2) is two
    frames = two[0].run([hello])[0]
    assert np.array_equal(frames.durations, model.acoustic.run([hello])[0].durations)

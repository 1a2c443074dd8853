"""Moonshine base-en on a real recording (beckett.wav, shipped with moonshine-cpp: a person
reading "Ever tried. Ever failed. No matter. Try again. Fail again. Fail better."): exact
transcripts of the whole clip and of pieces cut at its pauses, a batch of pieces of
different lengths gives each piece's tokens alone, silence gives no words, the token
budget holds, and the vocabulary decodes as the model's tokenizer does."""

from __future__ import annotations

import wave

import numpy as np
import onnx
import pytest

from voxserve.runners.moonshine.graphs import prepared_graphs
from voxserve.runners.moonshine.onnx_runner import (
    MIN_SAMPLES,
    SAMPLE_RATE,
    MoonshineRunner,
    bundled_model_dir,
    token_limit,
)
from voxserve.runners.moonshine.tokenizer import MoonshineTokenizer, parse_vocabulary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

WHOLE = "Ever tried ever failed, no matter try again fail again fail better."
PIECES = {  # (start s, end s): transcript; the cuts fall in the reader's pauses
    (0.0, 2.9): "Ever tried, ever failed.",
    (2.9, 5.5): "No matter, try again.",
    (6.0, 9.96): "Fail again. Fail better.",
    (2.9, 9.96): "No matter try again, fail again, fail better.",
}


@pytest.fixture(scope="module")
def runner() -> MoonshineRunner:
    return MoonshineRunner()


@pytest.fixture(scope="module")
def beckett() -> np.ndarray:
    path = bundled_model_dir().parents[1] / "test-data" / "beckett.wav"
    with wave.open(str(path)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (SAMPLE_RATE, 1, 2)
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    return pcm.astype(np.float32) / 32768


def _cut(audio: np.ndarray, start: float, end: float) -> np.ndarray:
    return audio[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)]


def test_whole_recording(runner: MoonshineRunner, beckett: np.ndarray) -> None:
    (out,) = runner.run([beckett])
    assert out.text == WHOLE
    assert not out.hit_limit
    assert len(out.logprobs) == len(out.tokens) == 14
    assert all(lp <= 0 for lp in out.logprobs)
    assert -1.0 < out.avg_logprob < 0
    assert "".join(runner.tokenizer.token_strings(out.tokens)) == " " + WHOLE


def test_batch_equals_pieces_alone(runner: MoonshineRunner, beckett: np.ndarray) -> None:
    pieces = [_cut(beckett, a, b) for a, b in PIECES] + [beckett]
    alone = [runner.run([p])[0] for p in pieces]
    assert [o.text for o in alone] == [*PIECES.values(), WHOLE]
    batched = runner.run(pieces)
    for one, many in zip(alone, batched, strict=True):
        assert many.tokens == one.tokens
        np.testing.assert_allclose(many.logprobs, one.logprobs, atol=1e-4)


def test_equal_lengths_share_the_encoder_call(runner: MoonshineRunner, beckett: np.ndarray) -> None:
    piece = _cut(beckett, 0.0, 2.9)
    outs = runner.run([piece, piece, _cut(beckett, 2.9, 5.5)])
    assert [o.text for o in outs] == [PIECES[0.0, 2.9], PIECES[0.0, 2.9], PIECES[2.9, 5.5]]


def test_sessions_on_two_threads_agree(runner: MoonshineRunner, beckett: np.ndarray) -> None:
    piece = _cut(beckett, 2.9, 9.96)
    (one,) = runner.run([piece])
    (two,) = runner.run([piece], threads=2)
    assert two.tokens == one.tokens
    assert runner.sessions(2) is runner.sessions(2)


def test_rewritten_graphs_are_cached(runner: MoonshineRunner) -> None:
    graphs = prepared_graphs(bundled_model_dir())  # the runner made them already
    written = graphs.decoder.stat().st_mtime_ns
    assert prepared_graphs(bundled_model_dir()) == graphs
    assert graphs.decoder.stat().st_mtime_ns == written


def test_encoder_weights_stay_int8(runner: MoonshineRunner) -> None:
    encoder = onnx.load(str(prepared_graphs(bundled_model_dir()).encoder))
    ops = [n.op_type for n in encoder.graph.node]
    assert ops.count("MatMulNBits") == 48  # every projection of the encoder's 8 layers
    assert "Cast" not in ops or all(  # no weight left to dequantize on each call
        n.input[0] not in {t.name for t in encoder.graph.initializer}
        for n in encoder.graph.node
        if n.op_type == "Cast"
    )


def test_silence_gives_no_words(runner: MoonshineRunner) -> None:
    hiss = np.random.default_rng(0).normal(0, 0.003, 3 * SAMPLE_RATE).astype(np.float32)
    outs = runner.run([np.zeros(2 * SAMPLE_RATE, np.float32), hiss])
    assert [len(o.tokens) for o in outs] == [0, 0]
    assert [o.text for o in outs] == ["", ""]


def test_token_budget(runner: MoonshineRunner, beckett: np.ndarray) -> None:
    assert token_limit(SAMPLE_RATE) == 7  # 6.5 tokens a second, rounded up
    assert token_limit(MIN_SAMPLES) == 4  # the least budget
    assert token_limit(60 * SAMPLE_RATE) == 194  # the absolute cap
    whole, piece = runner.run([beckett, _cut(beckett, 0.0, 2.9)], max_tokens=5)
    assert whole.hit_limit and piece.hit_limit
    assert [len(whole.tokens), len(piece.tokens)] == [5, 5]
    assert [whole.text, piece.text] == ["Ever tried ever failed,", "Ever tried, ever failed"]


def test_rejects_what_it_cannot_read(runner: MoonshineRunner) -> None:
    assert runner.run([]) == []
    with pytest.raises(ValueError, match="0.1-64 s"):
        runner.run([np.zeros(MIN_SAMPLES - 1, np.float32)])
    with pytest.raises(ValueError, match="max_tokens"):
        runner.run([np.zeros(SAMPLE_RATE, np.float32)], max_tokens=0)
    with pytest.raises(ValueError, match="mono"):
        runner.run([np.zeros((2, SAMPLE_RATE), np.float32)])


def test_vocabulary() -> None:
    tokenizer = MoonshineTokenizer.from_file(bundled_model_dir() / "tokenizer.bin")
    assert tokenizer.size == 32000
    e_acute = [3 + 0xC3, 3 + 0xA9]  # byte fallback: "é" as its two UTF-8 bytes
    assert tokenizer.decode([1, *e_acute, 2]) == "é"
    assert tokenizer.token_strings(e_acute) == ["\ufffd", "\ufffd"]
    assert tokenizer.decode([32700]) == ""  # a reserved id past the file
    assert parse_vocabulary(b"\x02ab\x00\x01c") == [b"ab", b"", b"c"]
    with pytest.raises(ValueError, match="ends inside"):
        parse_vocabulary(b"\x05ab")

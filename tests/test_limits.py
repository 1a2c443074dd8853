"""Limits a client can run into, each a flag: input characters, the request timeout (408 for
a slow upload, 504 for an answer that cannot start, a cut-off stream), the buffered-audio
budget of transcriptions, and what a client that leaves mid-upload leaves behind."""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest

from tests.asr_support import SHORT, speak_pcm, wav_bytes
from tests.conftest import RunningServer, run_server, silent_speech_reader, wait_for
from voxserve.cli import build_parser, server_config
from voxserve.config import ASRConfig, ServerConfig, TTSConfig

# Timeouts timed to a tenth of a second, and transcriptions at the default nice 10, which
# get only what other processes leave: run alone.
pytestmark = [pytest.mark.serial, pytest.mark.timeout(120)]

TIMEOUT_S = 1.0
MAX_AUDIO_S = 1800.0
"""The strict server's longest transcription: room for a file sized to outlast the
timeout several times on a fast machine."""
LONG = " ".join(f"Sentence {i} of a story long enough to outlast the request timeout." for i in range(20))


def _port(srv: RunningServer) -> int:
    return int(srv.base_url.rsplit(":", 1)[1])


def _error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error: dict[str, Any] = r.json()["error"]
    return error


@pytest.fixture(scope="module")
def strict() -> Any:
    """A server with small limits: 1000 input characters and a 1 s request timeout."""
    config = ServerConfig(
        tts=replace(TTSConfig(), max_input_chars=1000, noise_w=0.0, noise_scale=0.0),
        asr=replace(ASRConfig(), max_audio_seconds=MAX_AUDIO_S, max_buffered_audio_s=MAX_AUDIO_S, max_upload_mb=80.0),
        request_timeout_s=TIMEOUT_S,
    )
    with run_server(config) as srv:
        yield srv


def test_limits_are_flags() -> None:
    args = build_parser().parse_args(
        ["serve", "--tts-max-input-chars", "500", "--request-timeout-s", "30", "--asr-max-buffered-audio-s", "20000",
         "--asr-max-upload-mb", "5", "--asr-max-audio-s", "600", "--tts-max-streams", "8",
         "--tts-max-queue", "4"]
    )
    config = server_config(args, env={})
    assert config.tts.max_input_chars == 500 and config.request_timeout_s == 30
    assert config.asr.max_buffered_audio_s == 20000 and config.asr.max_upload_mb == 5
    assert config.asr.max_audio_seconds == 600
    assert (config.tts.max_streams, config.tts.max_queue) == (8, 4)
    with pytest.raises(ValueError):
        ASRConfig(max_audio_seconds=600, max_buffered_audio_s=60)
    with pytest.raises(ValueError):
        TTSConfig(max_input_chars=0)


def test_input_chars_limit(strict: RunningServer) -> None:
    body = {"model": "tts-1", "voice": "alloy", "response_format": "pcm"}
    with httpx.Client(base_url=strict.base_url, timeout=30) as c:
        error = _error(c.post("/v1/audio/speech", json={**body, "input": "word " * 201}), 400)
        assert error["param"] == "input" and error["code"] == "input_too_long"
        assert "at most 1000" in error["message"]
        assert c.post("/v1/audio/speech", json={**body, "input": "Hi." + " " * 997}).status_code == 200
        schema = c.get("/openapi.json").json()["components"]["schemas"]["SpeechRequest"]
        assert schema["properties"]["input"]["maxLength"] == 1000


def test_slow_upload_gets_408(strict: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", _port(strict)), timeout=10) as s:
        s.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 1000\r\n\r\n{\"model\": \"tts-1\", "
        )
        started = time.monotonic()
        head = s.recv(65536).decode()
        waited = time.monotonic() - started
    assert head.startswith("HTTP/1.1 408"), head
    assert '"code":"request_timeout"' in head
    assert TIMEOUT_S * 0.8 < waited < TIMEOUT_S + 2


def test_stream_past_the_timeout_is_cut_off_and_freed(strict: RunningServer) -> None:
    engine = strict.state.engine
    before = set(engine.stream_ids())
    # A reader that takes nothing for a while: the stream cannot end within the timeout,
    # so the server cuts it off.
    with silent_speech_reader(strict, LONG[:1000]) as sock:
        time.sleep(TIMEOUT_S + 0.5)
        wait_for(lambda: strict.state.admission.active == 0, timeout=1)
        assert not any(engine.has_work(i) for i in set(engine.stream_ids()) - before)
        sock.settimeout(10)
        response = b""
        while data := sock.recv(65536):
            response += data
    assert response.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding: chunked" in response.lower()
    assert not response.endswith(b"0\r\n\r\n"), "the cut-off stream must not end like a complete one"


def test_transcription_past_the_timeout_gets_504_and_frees_its_audio(
    strict: RunningServer, client: httpx.Client
) -> None:
    # The file must take several times the timeout to transcribe on whatever machine runs
    # this: its length follows from this machine's speed, measured first on the server
    # without a timeout.
    rate = 16000
    sentences = np.concatenate([speak_pcm(client, text, rate) for text in SHORT])  # each text spoken once
    seconds = len(sentences) / rate
    started = time.perf_counter()
    assert client.post(
        "/v1/audio/transcriptions", files={"file": ("a.wav", wav_bytes(sentences, rate))}, data={"model": "whisper-1"}
    ).status_code == 200
    real_time_factor = seconds / (time.perf_counter() - started)
    copies = min(max(6, math.ceil(5 * TIMEOUT_S * real_time_factor / seconds)), int(MAX_AUDIO_S // seconds))
    speech = np.tile(sentences, copies)
    with httpx.Client(base_url=strict.base_url, timeout=60) as c:
        r = c.post(
            "/v1/audio/transcriptions", files={"file": ("a.wav", wav_bytes(speech, rate))}, data={"model": "whisper-1"}
        )
    error = _error(r, 504)
    assert error["code"] == "request_timeout" and error["type"] == "server_error"
    asr = strict.asr
    wait_for(lambda: asr.budget.held == 0 and strict.asr_admission.active == 0, timeout=2)
    # The batches already decoding cannot be stopped midway; let them end here, not in
    # the next module's measurements.
    wait_for(lambda: not asr.busy(), timeout=30)


def test_buffered_audio_budget_answers_429(
    server: RunningServer, client: httpx.Client, short_speech: list[np.ndarray]
) -> None:
    asr = server.asr
    assert asr.budget.held == 0
    refused_before = asr.budget.refused  # the session server is shared with other tests
    audio = wav_bytes(short_speech[0])
    hog = asr.budget.lease()  # stands for other requests holding nearly the whole budget
    hog.take(asr.budget.capacity - 16000)
    try:
        r = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", audio)}, data={"model": "whisper-1"})
        error = _error(r, 429)
        assert error["type"] == "rate_limit_error" and "minutes of audio" in error["message"]
        assert int(r.headers["retry-after"]) >= 1
        assert asr.budget.held == asr.budget.capacity - 16000  # the refused upload holds nothing
    finally:
        hog.release()
    r = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", audio)}, data={"model": "whisper-1"})
    assert r.status_code == 200 and "fox" in r.json()["text"]
    assert asr.budget.held == 0
    assert f"voxserve_asr_budget_refused_total {refused_before + 1:.1f}" in client.get("/metrics").text


def test_disconnect_mid_upload_frees_everything_within_100ms(server: RunningServer) -> None:
    # The upload holds its share of the upload budget while it arrives, never a slot.
    admission = server.asr_admission
    uploads = server.uploads
    head = (
        b"POST /v1/audio/transcriptions HTTP/1.1\r\nhost: x\r\n"
        b"content-type: multipart/form-data; boundary=b\r\ncontent-length: 5000000\r\n\r\n"
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
    )
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as s:
        s.sendall(head + b"\0" * 200_000)
        wait_for(lambda: uploads.held >= 200_000, timeout=5)
        assert admission.active == 0
        closed_at = time.monotonic()
    wait_for(lambda: uploads.held == 0, timeout=2)
    assert time.monotonic() - closed_at < 0.1
    assert admission.active == 0 and server.asr.budget.held == 0

    # The same for speech: a JSON body cut off half-way.
    tts = server.state.admission
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as s:
        s.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b'content-length: 5000\r\n\r\n{"model": "tts-1", "input": "'
        )
        time.sleep(0.1)
    time.sleep(0.1)
    assert tts.active == 0 and tts.queued == 0


def _nice(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/stat", encoding="ascii") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def test_transcription_threads_run_below_speech() -> None:
    """With the default `--asr-nice`, on a server of its own (the other test servers run
    their transcriptions at the speech threads' priority: tests/conftest.py)."""
    before = {t.native_id for t in threading.enumerate()}
    with run_server(ServerConfig(), asr_nice=True) as server, httpx.Client(base_url=server.base_url, timeout=60) as client:
        asr_nice = server.asr.config.nice
        assert asr_nice == 10
        audio = wav_bytes(speak_pcm(client, SHORT[1]))
        r = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", audio)}, data={"model": "whisper-1"})
        assert r.status_code == 200  # the audio pool's threads exist now
        threads = {t.name: t.native_id for t in threading.enumerate() if t.native_id not in before}
        asr = [tid for name, tid in threads.items() if tid and name.startswith(("asr-worker", "asr-audio"))]
        tts = [tid for name, tid in threads.items() if tid and name.startswith("tts-worker")]
        assert asr and tts
        assert {_nice(t) for t in asr} == {asr_nice}
        assert {_nice(t) for t in tts} == {0}
        # CTranslate2's own decoding threads were started by a lowered thread, so they are
        # lowered too: the process has more lowered threads than the Python ones.
        lowered = [int(t) for t in os.listdir("/proc/self/task") if _nice(int(t)) == asr_nice]
        assert len(lowered) >= len(asr) + server.asr.config.workers

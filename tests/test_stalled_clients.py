"""A stalled client costs a connection, never a slot, each test shaped
as the attack: stalled and slow-drip uploads, uploads past the upload budget, half-sent
headers, a speech client that stops reading, and more connections than the server
serves; and the Ray front end, which must read an upload before it asks a replica for a
slot. Each one also checks that other clients are served meanwhile.

One small server for the module, with short timeouts so that the attacks end quickly."""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest

from tests.asr_support import wav_bytes
from tests.conftest import RunningServer, run_server, silent_speech_reader, wait_for
from voxserve.api.remote import Remote, RemoteStream, SpeechJob, TranscriptionJob, TTSCatalog
from voxserve.config import ASRConfig, ServerConfig, TTSConfig
from voxserve.engine.transcribe import Transcript
from voxserve.serving.jobs import LiveInput, LiveOpen, LiveReply, SegmentJob, SessionRef, VoiceCheck

# A clip beside the stalled clients is timed against the same clip alone: run alone.
pytestmark = [pytest.mark.serial, pytest.mark.timeout(120)]

BODY_IDLE_S = 2.0
HEADER_TIMEOUT_S = 2.0
SEND_STALL_S = 1.0
MIN_RATE = 4096
MAX_REQUESTS = 2
LIMIT = 24
MIB = 1024 * 1024
BOUNDARY = b"vox"
STORY = " ".join(f"Sentence {i} of a story that nobody is going to listen to." for i in range(60))


@pytest.fixture(scope="module")
def srv() -> Iterator[RunningServer]:
    config = ServerConfig(
        tts=replace(TTSConfig(), noise_w=0.0, noise_scale=0.0),
        asr=replace(ASRConfig(), max_requests=MAX_REQUESTS, max_queue=4, max_upload_mb=1.0, max_buffered_upload_mb=1.0),
        header_timeout_s=HEADER_TIMEOUT_S,
        body_idle_timeout_s=BODY_IDLE_S,
        min_upload_bytes_per_s=MIN_RATE,
        send_stall_timeout_s=SEND_STALL_S,
        limit_concurrency=LIMIT,
    )
    with run_server(config) as running:
        yield running


@pytest.fixture(scope="module")
def clip(short_speech: list[np.ndarray]) -> bytes:
    """About 2.5 s of speech, as WAV (`SHORT[0]`, spoken by the session's server)."""
    return wav_bytes(short_speech[0])


def _port(srv: RunningServer) -> int:
    return int(srv.base_url.rsplit(":", 1)[1])


def _upload_head(length: int) -> bytes:
    """A transcription request's headers and the start of its multipart body."""
    return (
        b"POST /v1/audio/transcriptions HTTP/1.1\r\nhost: x\r\n"
        b"content-type: multipart/form-data; boundary=" + BOUNDARY + b"\r\n"
        b"content-length: " + str(length).encode() + b"\r\n\r\n"
        b"--" + BOUNDARY + b'\r\ncontent-disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
    )


def _read_all(s: socket.socket, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed."""
    s.settimeout(timeout)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data, time.monotonic()


def _nothing_yet(s: socket.socket) -> bool:
    """The server has neither answered nor closed the connection yet."""
    try:
        s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    return False


TCP_CLOSE = 7


def _tcp_state(s: socket.socket) -> int:
    """The socket's TCP state (the first byte of TCP_INFO)."""
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


def _served_meanwhile(srv: RunningServer, clip: bytes) -> float:
    """A /health probe and one normal transcription; returns the transcription's seconds."""
    with httpx.Client(base_url=srv.base_url, timeout=30) as c:
        assert c.get("/health").status_code == 200
        started = time.monotonic()
        r = c.post("/v1/audio/transcriptions", files={"file": ("a.wav", clip)}, data={"model": "whisper-1"})
        elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    assert "fox" in r.json()["text"].lower()
    return elapsed


def test_stalled_uploads_take_no_slot(srv: RunningServer, clip: bytes) -> None:
    """More stalled uploads than transcription slots: a normal clip is still transcribed
    at once, and each stalled upload gets 408 after the body idle timeout, then EOF."""
    n = MAX_REQUESTS + 6
    alone = _served_meanwhile(srv, clip)  # this machine's time for the clip, nothing stalled
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.create_connection(("127.0.0.1", _port(srv)))) for _ in range(n)]
        began = time.monotonic()
        for s in socks:
            s.sendall(_upload_head(200_000) + b"RIFF" + b"\0" * 1000)
        wait_for(lambda: srv.uploads.held >= n * 1000, timeout=5)
        assert srv.asr_admission.active == 0 and srv.asr_admission.queued == 0  # no slot held
        elapsed = _served_meanwhile(srv, clip)
        assert elapsed < 3 * alone + 0.5, f"a normal clip took {elapsed:.2f} s beside {n} stalled uploads, {alone:.2f} s alone"
        if elapsed < BODY_IDLE_S * 0.8:  # served while the stalled uploads were all still there
            assert all(_nothing_yet(s) for s in socks)
        for s in socks:
            data, closed_at = _read_all(s, timeout=BODY_IDLE_S + 5)
            assert data.startswith(b"HTTP/1.1 408"), data[:200]
            assert b'"code":"request_timeout"' in data and b"connection: close" in data.lower()
            assert BODY_IDLE_S * 0.8 < closed_at - began < BODY_IDLE_S + 4
    wait_for(lambda: srv.uploads.held == 0, timeout=2)
    assert srv.asr_admission.active == 0


def test_slow_drip_upload_gets_408(srv: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", _port(srv))) as s:
        s.sendall(_upload_head(200_000))
        began = time.monotonic()
        # 100 bytes every 0.3 s, far below the minimum rate, but never idle for long.
        while time.monotonic() - began < BODY_IDLE_S + 5:
            answered, _, _ = select.select([s], [], [], 0.3)
            if answered:
                break
            s.sendall(b"\0" * 100)
        waited = time.monotonic() - began
        data, _ = _read_all(s, timeout=5)
    assert data.startswith(b"HTTP/1.1 408"), data[:200]
    assert b"bytes/s, below the minimum" in data
    assert BODY_IDLE_S * 0.9 < waited < BODY_IDLE_S + 3
    assert srv.uploads.held == 0


def test_upload_budget_answers_429_as_bytes_arrive(srv: RunningServer, clip: bytes) -> None:
    """Two uploads hold most of the 1 MiB budget and stall; a third that would pass it
    gets 429 with Retry-After before it has sent its whole body."""
    part = 400_000
    with contextlib.ExitStack() as stack:
        hogs = [stack.enter_context(socket.create_connection(("127.0.0.1", _port(srv)))) for _ in range(2)]
        for s in hogs:
            s.sendall(_upload_head(900_000) + b"\0" * part)
        wait_for(lambda: srv.uploads.held >= 2 * part, timeout=5)
        refused_before = srv.uploads.refused
        with socket.create_connection(("127.0.0.1", _port(srv))) as third:
            third.sendall(_upload_head(900_000) + b"\0" * part)  # 500 KB of its body never sent
            third.settimeout(10)
            head = third.recv(65536)
        assert head.startswith(b"HTTP/1.1 429"), head[:200]
        assert b"retry-after: 2" in head.lower() and b'"type":"rate_limit_error"' in head
        assert srv.uploads.refused == refused_before + 1
        assert srv.uploads.held >= 2 * part  # the refused upload gave its share back
        page = httpx.get(f"{srv.base_url}/metrics").text
        assert f"voxserve_asr_upload_refused_total {refused_before + 1:.1f}" in page
        assert f"voxserve_asr_buffered_upload_bytes {float(srv.uploads.held)}" in page
        _served_meanwhile(srv, clip)  # a small upload still fits beside the two
        for s in hogs:
            data, _ = _read_all(s, timeout=BODY_IDLE_S + 5)
            assert data.startswith(b"HTTP/1.1 408"), data[:200]
    wait_for(lambda: srv.uploads.held == 0, timeout=2)


def test_half_sent_headers_are_closed_after_the_header_timeout(srv: RunningServer, clip: bytes) -> None:
    with contextlib.ExitStack() as stack:
        half = stack.enter_context(socket.create_connection(("127.0.0.1", _port(srv))))
        silent = stack.enter_context(socket.create_connection(("127.0.0.1", _port(srv))))
        began = time.monotonic()
        half.sendall(b"POST /v1/audio/transcrip")
        _served_meanwhile(srv, clip)
        data, closed_at = _read_all(half, timeout=HEADER_TIMEOUT_S + 5)
        assert data.startswith(b"HTTP/1.1 408"), data[:200]
        assert b'"code":"request_timeout"' in data
        assert HEADER_TIMEOUT_S * 0.8 < closed_at - began < HEADER_TIMEOUT_S + 3
        data, closed_at = _read_all(silent, timeout=5)  # a connection that never sent a byte
        assert data == b""
        assert closed_at - began < HEADER_TIMEOUT_S + 3


def test_oversized_headers_get_431(srv: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", _port(srv))) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n" + b"x-filler: " + b"a" * 70_000 + b"\r\n\r\n")
        data, _ = _read_all(s, timeout=5)
    assert data.startswith(b"HTTP/1.1 431"), data[:200]
    assert b'"code":"headers_too_large"' in data
    with httpx.Client(base_url=srv.base_url, timeout=10) as c:
        assert c.get("/health", headers={"x-filler": "a" * 4000}).status_code == 200


def test_speech_client_that_stops_reading_frees_its_slot(srv: RunningServer) -> None:
    state = srv.state
    with silent_speech_reader(srv, STORY[:4000]) as sock:
        wait_for(lambda: state.admission.active == 1, timeout=10)
        began = time.monotonic()
        with httpx.Client(base_url=srv.base_url, timeout=30) as c:  # served meanwhile
            assert c.get("/health").status_code == 200
            r = c.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hello there.", "response_format": "pcm"})
            assert r.status_code == 200 and len(r.content) > 10_000
        # The reader takes nothing; its slot is freed once writing has stalled that long,
        # and its connection is reset, not left to the kernel to drain.
        wait_for(lambda: state.admission.active == 0, timeout=SEND_STALL_S + 10)
        freed = time.monotonic() - began
        assert state.engine.active_streams == 0
        wait_for(lambda: _tcp_state(sock) == TCP_CLOSE, timeout=2)  # by a reset: no FIN, no linger
    assert freed < SEND_STALL_S + 8


def test_connections_past_limit_concurrency_get_503(srv: RunningServer) -> None:
    connections = srv.server.server_state.connections
    with contextlib.ExitStack() as stack:
        for _ in range(LIMIT):
            stack.enter_context(socket.create_connection(("127.0.0.1", _port(srv))))
        wait_for(lambda: len(connections) >= LIMIT, timeout=5)
        with httpx.Client(base_url=srv.base_url, timeout=10) as c:
            r = c.get("/health")
        assert r.status_code == 503
    wait_for(lambda: len(connections) < LIMIT // 2, timeout=5)
    with httpx.Client(base_url=srv.base_url, timeout=10) as c:
        assert c.get("/health").status_code == 200


class _RecordingASR:
    """The ASR side of a Ray deployment, stubbed at its process boundary: it records what
    each call received and how many upload bytes the front end held meanwhile."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.app: Any = None

    async def models(self) -> dict[str, dict[str, Any]]:
        return {"stub-whisper": {"default": True}}

    async def transcribe(self, job: TranscriptionJob) -> tuple[str, Transcript]:
        self.calls.append((len(job.data), self.app.state.vox.uploads.held))
        return "asr-1", Transcript("hello from the replica", "en", 1.0, [])

    async def stream(self, job: TranscriptionJob) -> RemoteStream:
        raise AssertionError("not used")

    async def live(self, job: LiveOpen) -> RemoteStream:
        raise AssertionError("not used")

    async def live_input(self, batch: LiveInput) -> LiveReply:
        raise AssertionError("not used")

    def replica_stats(self) -> dict[str, Any]:
        return {}


class _NoTTS:
    async def catalog(self) -> TTSCatalog:
        return TTSCatalog({"tts-1": "stub-voice", "stub-voice": "stub-voice"}, [])

    async def speech(self, job: SpeechJob) -> RemoteStream:
        raise AssertionError("not used")

    async def segment(self, job: SegmentJob) -> RemoteStream:
        raise AssertionError("not used")

    async def check_voice(self, check: VoiceCheck) -> None:
        raise AssertionError("not used")

    async def end_session(self, ref: SessionRef) -> None:
        raise AssertionError("not used")

    def replica_stats(self) -> dict[str, Any]:
        return {}


def test_ray_front_end_reads_the_upload_before_it_asks_a_replica() -> None:
    asr = _RecordingASR()
    config = ServerConfig(asr=replace(ASRConfig(), enabled=False), body_idle_timeout_s=1.0)
    with run_server(config, remote=Remote(_NoTTS(), asr)) as front:
        asr.app = front.app
        uploads = front.remote_state.uploads
        with socket.create_connection(("127.0.0.1", _port(front))) as stalled:
            stalled.sendall(_upload_head(200_000) + b"\0" * 5000)
            wait_for(lambda: uploads.held >= 5000, timeout=5)
            with httpx.Client(base_url=front.base_url, timeout=10) as c:
                assert c.get("/health").status_code == 200
                audio = b"RIFF" + b"\0" * 30_000
                r = c.post("/v1/audio/transcriptions", files={"file": ("a.wav", audio)}, data={"model": "whisper-1"})
            assert r.status_code == 200 and r.json()["text"] == "hello from the replica"
            assert r.headers["x-voxserve-replica"] == "asr-1"
            # Only the complete upload reached a replica, whole, while its bytes were held.
            assert len(asr.calls) == 1
            size, held = asr.calls[0]
            assert size == len(audio) and held >= 5000 + len(audio)
            data, _ = _read_all(stalled, timeout=6)
            assert data.startswith(b"HTTP/1.1 408"), data[:200]
        wait_for(lambda: uploads.held == 0, timeout=2)
        assert len(asr.calls) == 1

"""SIGTERM and SIGINT under load: the real `voxserve serve` process, signalled and timed.

The server runs as a subprocess (signals only reach uvicorn's handlers in a main thread).
Eight long TTS streams and one transcription are in flight when the signal arrives. The
process must exit 0 within 2 s, every client call must end (complete, truncated or an
error, never a hang), and the port must refuse connections afterwards.

The server signalled with SIGINT reads its API key from a file, as a user keeps it out of
`ps`: before the signal, the key is checked to be in neither its command line nor its
environment, and to be asked of every request.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.asr_support import LONG, SHORT, speak
from voxserve.runners.piper.onnx_runner import bundled_voice, split_model
from voxserve.runners.piper.prior_graph import FIXED_LAYOUT, PRIOR_LENGTHS

# The first test includes both starts. Exits are timed under load: run alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(150)]

STREAMS = 8
EXIT_BUDGET_S = 2.0
LONG_TEXT = " ".join(LONG)
KEY = "vx-file-key-8d2e61"
"""The SIGINT server's API key, in a file of mode 0600."""


@dataclass
class Call:
    """What one client saw."""

    received: int = 0
    status: int | None = None
    outcome: str = "running"
    flowing: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(base: str, proc: subprocess.Popen[bytes], log: Path, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited during start-up ({proc.returncode}):\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return
        time.sleep(0.2)
    pytest.fail(f"server did not answer /health within {limit_s:.0f} s:\n{log.read_text()[-3000:]}")


def _stream_speech(base: str, call: Call, headers: dict[str, str]) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": LONG_TEXT, "response_format": "pcm"}
    try:
        with httpx.stream("POST", f"{base}/v1/audio/speech", json=body, headers=headers, timeout=30) as r:
            call.status = r.status_code
            for chunk in r.iter_bytes():
                call.received += len(chunk)
                call.flowing.set()
        call.outcome = "complete"
    except httpx.HTTPError as exc:
        call.outcome = type(exc).__name__
    finally:
        call.done.set()


def _transcribe(base: str, audio: bytes, call: Call, headers: dict[str, str]) -> None:
    try:
        r = httpx.post(
            f"{base}/v1/audio/transcriptions",
            files={"file": ("speech.wav", audio)},
            data={"model": "whisper-1"},
            headers=headers,
            timeout=30,
        )
        call.status = r.status_code
        call.outcome = "complete"
    except httpx.HTTPError as exc:
        call.outcome = type(exc).__name__
    finally:
        call.done.set()


def _refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


@dataclass
class Server:
    """One `voxserve serve` process (see FLAGS)."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    headers: dict[str, str] = field(default_factory=dict)
    """What every request to it carries: its API key, where it has one."""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _serve(log: Path, *flags: str, headers: dict[str, str] | None = None) -> Server:
    """Start `voxserve serve` on a free port with `flags`, its output to `log`, in an
    environment without VOXSERVE_ variables (the flags alone configure it)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOXSERVE_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "voxserve.cli", "serve", "--port", str(port), *flags],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    return Server(proc, port, log, headers or {})


SIGNALS = [signal.SIGTERM, signal.SIGINT]
FLAGS = {signal.SIGTERM: [], signal.SIGINT: ["--tts-models", "piper"]}
"""SIGTERM (what service managers send) reaches a server started with the defaults, as a
user starts it; SIGINT one with Piper alone, and its key in a file. The streams here are
Piper's either way, and Kokoro's load and warm-up are ~5 s of CPU a start (uvicorn
handles both signals alike)."""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[signal.Signals, Server]]:
    """A server for each signal, both started at once: a start is about 12 s of CPU
    with Kokoro and 7 s without (imports, model loads, warm-up), and two overlap on two
    cores instead of queueing.
    The second idles, using no CPU (tests/test_load_behaviour.py), while the first is
    signalled."""
    started: dict[signal.Signals, Server] = {}
    key_file = tmp_path_factory.mktemp("key") / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    keyed = {signal.SIGINT: ["--api-key-file", str(key_file)]}
    try:
        for sig in SIGNALS:
            folder = tmp_path_factory.mktemp(sig.name)
            headers = {"Authorization": f"Bearer {KEY}"} if sig in keyed else None
            started[sig] = _serve(folder / "server.log", *FLAGS[sig], *keyed.get(sig, []), headers=headers)
        for server in started.values():
            _wait_healthy(server.base, server.proc, server.log, limit_s=90.0)
        yield started
    finally:
        for server in started.values():
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait(10)


def test_serve_takes_the_key_from_a_file_and_keeps_it_out_of_ps(servers: dict[signal.Signals, Server]) -> None:
    server = servers[signal.SIGINT]
    # What `ps` and other users see of the process: neither holds the key.
    with open(f"/proc/{server.proc.pid}/cmdline", "rb") as f:
        assert KEY.encode() not in f.read()
    with open(f"/proc/{server.proc.pid}/environ", "rb") as f:
        assert KEY.encode() not in f.read()
    refused = httpx.get(f"{server.base}/v1/models", timeout=10)
    assert refused.status_code == 401 and KEY not in refused.text
    ok = httpx.get(f"{server.base}/v1/models", headers=server.headers, timeout=10)
    assert ok.status_code == 200 and any(m["id"] == "tts-1" for m in ok.json()["data"])
    log = server.log.read_text()
    assert "API key required" in log and KEY not in log


@pytest.mark.parametrize("sig", SIGNALS, ids=[sig.name for sig in SIGNALS])
def test_signal_under_load_exits_promptly_and_cleanly(
    sig: signal.Signals, servers: dict[signal.Signals, Server]
) -> None:
    server = servers[sig]
    proc, port, base, log = server.proc, server.port, server.base, server.log
    try:
        with httpx.Client(base_url=base, headers=server.headers, timeout=30) as client:
            audio = speak(client, " ".join(SHORT), "wav", 16000)

        calls = [Call() for _ in range(STREAMS)]
        asr_call = Call()
        threads = [threading.Thread(target=_stream_speech, args=(base, c, server.headers), daemon=True) for c in calls]
        threads.append(threading.Thread(target=_transcribe, args=(base, audio, asr_call, server.headers), daemon=True))
        for t in threads:
            t.start()
        # Signal once audio flows on most streams (admission may still hold a few back).
        deadline = time.monotonic() + 20
        while sum(c.flowing.is_set() for c in calls) < STREAMS // 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        flowing = sum(c.flowing.is_set() for c in calls)
        assert flowing >= 1, f"no audio flowed before the signal: {[c.outcome for c in calls]}"
        assert not any(c.done.is_set() for c in calls), "a stream ended before the signal"

        signalled = time.monotonic()
        proc.send_signal(sig)
        late = Call()
        time.sleep(0.3)
        late_thread = threading.Thread(target=_stream_speech, args=(base, late, server.headers), daemon=True)
        late_thread.start()
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"server still running 10 s after {sig.name}:\n{log.read_text()[-3000:]}")
        exit_s = time.monotonic() - signalled
        print(f"{sig.name}: exit {code} after {exit_s * 1000:.0f} ms with {flowing} streams flowing")
        text = log.read_text()
        assert exit_s < EXIT_BUDGET_S, f"exit took {exit_s:.2f} s:\n{text[-3000:]}"
        assert code == 0, f"exit code {code}:\n{text[-3000:]}"
        assert "Traceback" not in text, text[-3000:]
        assert KEY not in text

        for t in [*threads, late_thread]:
            t.join(5)
        assert not any(t.is_alive() for t in [*threads, late_thread]), "a client call hung"
        # Streams end truncated or with an error; none can have got its full text's audio.
        for c in calls:
            assert c.outcome != "complete" or c.status != 200, c
        assert asr_call.done.is_set()
        # Work sent after the signal is refused: no connection, or a 503 before any audio.
        assert late.received == 0 and late.status in (None, 503), late
        assert _refused(port)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_stop_during_the_background_prior_build_exits_cleanly(tmp_path: Path) -> None:
    """A server stopped while its fixed-length priors are still building (a first start
    on a machine: the copies take ~8 s after /health answers) exits at once with 0. It used
    to finalize the process under the build thread, inside onnxsim or ONNX Runtime, and
    abort ("terminate called without an active exception", exit 134)."""
    graphs = split_model(bundled_voice().model)
    cache = tmp_path / "cache"
    folder = cache / graphs.prior.parent.relative_to(graphs.prior.parent.parent.parent)
    folder.mkdir(parents=True)
    for graph in graphs.files():  # the split, not the copies
        shutil.copyfile(graph, folder / graph.name)
    server = _serve(tmp_path / "server.log", "--no-asr", "--tts-models", "piper", "--tts-cache-dir", str(cache))
    proc, log = server.proc, server.log
    try:
        _wait_healthy(server.base, proc, log)
        built = list(folder.glob(f"prior-*-{FIXED_LAYOUT}.onnx"))
        assert len(built) < len(PRIOR_LENGTHS), "every copy was built before /health"
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=EXIT_BUDGET_S + 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = log.read_text()
    assert code == 0 and "terminate called" not in text, text[-2000:]

"""Check what `make serve` installs: start its server, speak, and transcribe the speech.

    VENV/bin/python scripts/serve_check.py

Run with the Python of a runtime-only install (`make install`: no test extras, no
torch), as `make test` does. It checks that neither torch nor pytest can be imported,
starts `voxserve serve` on a free loopback port with an empty model cache of its own
(so the first-run joins and splits happen), asks `tts-1` for a sentence as WAV, sends
that WAV to `/v1/audio/transcriptions`, and checks that the transcript holds the
sentence's words. Only the standard library is used here, so the check depends on
nothing the runtime install lacks. Exits 0 on success; otherwise prints why and the
server's log, and exits 1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

SENTENCE = "The quick brown fox jumps over the lazy dog."
FRENCH = ("ff_siwis", "fr", "Le petit chat dort sur le canapé du salon.")
"""A sentence Kokoro speaks in French, transcribed back with `language` given: the
install's multilingual model must serve it."""
START_TIMEOUT_S = 300.0
"""A first start splits and caches the models: tens of seconds on two cores."""
REQUEST_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: bytes, content_type: str) -> bytes:
    request = urllib.request.Request(url, data=body, headers={"content-type": content_type}, method="POST")
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
        return bytes(response.read())


def _multipart(fields: dict[str, str], filename: str, data: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\ncontent-disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\ncontent-disposition: form-data; name="file"; filename="{filename}"\r\n'
        "content-type: audio/wav\r\n\r\n".encode() + data + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def _wait_healthy(base: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with status {server.returncode} before it was ready")
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server was not ready within {START_TIMEOUT_S:g} s")


def _words(text: str) -> set[str]:
    return set(re.findall(r"[^\W\d_]+", text.lower()))


def check(base: str) -> str:
    """Speak and transcribe through the server at `base`; what went wrong, or ''."""
    wav = _post(
        base + "/v1/audio/speech",
        json.dumps({"model": "tts-1", "voice": "alloy", "input": SENTENCE, "response_format": "wav"}).encode(),
        "application/json",
    )
    if not wav.startswith(b"RIFF") or len(wav) < 24000:
        return f"speech: expected a WAV of a sentence, got {len(wav)} bytes"
    body, content_type = _multipart({"model": "whisper-1"}, "speech.wav", wav)
    text = str(json.loads(_post(base + "/v1/audio/transcriptions", body, content_type))["text"])
    missing = _words(SENTENCE) - _words(text)
    if len(missing) > 2:
        return f"transcription: {text!r} lacks {sorted(missing)}"
    voice, language, sentence = FRENCH
    wav = _post(
        base + "/v1/audio/speech",
        json.dumps({"model": "tts-1-hd", "voice": voice, "input": sentence, "response_format": "wav"}).encode(),
        "application/json",
    )
    body, content_type = _multipart({"model": "whisper-1", "language": language}, "speech.wav", wav)
    text = str(json.loads(_post(base + "/v1/audio/transcriptions", body, content_type))["text"])
    missing = _words(sentence) - _words(text)
    if len(missing) > 2:
        return f"transcription in {language}: {text!r} lacks {sorted(missing)}"
    return ""


def main() -> int:
    present = [name for name in ("torch", "pytest") if importlib.util.find_spec(name) is not None]
    if present:
        print(f"serve_check: the runtime install has {', '.join(present)}; `make serve` must not", file=sys.stderr)
        return 1
    voxserve = Path(sys.prefix) / "bin" / "voxserve"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="voxserve-serve-check-") as scratch:
        log_path = Path(scratch) / "server.log"
        env = {**os.environ, "XDG_CACHE_HOME": str(Path(scratch) / "cache")}
        with log_path.open("wb") as log:
            server = subprocess.Popen(
                [str(voxserve), "serve", "--host", "127.0.0.1", "--port", str(port)],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
            started = time.monotonic()
            try:
                _wait_healthy(base, server)
                ready_s = time.monotonic() - started
                problem = check(base)
            except (RuntimeError, OSError, ValueError, KeyError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
                ready_s = float("nan")
            finally:
                server.send_signal(signal.SIGINT)
                try:
                    server.wait(30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
        if problem:
            print(f"serve_check: {problem}\n--- server log ---\n{log_path.read_text(errors='replace')[-6000:]}", file=sys.stderr)
            return 1
    print(
        "serve_check: the runtime install served speech and transcriptions in English and French "
        f"(ready in {ready_s:.1f} s, no torch)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

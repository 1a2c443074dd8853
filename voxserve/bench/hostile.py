"""Hostile clients for `bench soak --hostile N`: attacks on the server's connections, run in
loops beside the well-behaved load, to show that they cost the server a connection and
nothing else.

Five kinds, N clients of each:
- `stalled_upload`: starts a transcription upload, sends a little of it, then stops
  sending. The server should answer 408 (or close) once the body stops moving.
- `header_dribble`: opens a connection and sends half a request's headers, then nothing.
  The server should close it after its header timeout.
- `slow_reader`: asks for a long speech stream and never reads the body, with a small
  receive buffer. The server should cut it off once it stops making progress.
- `vanishing_ws`: opens a WebSocket speech session, sends 40 clauses, reads a little
  audio, then drops the TCP connection without a close handshake.
- `oversized_ws`: sends a 1 MiB WebSocket text message. The server should close the
  session (code 1009) without reading it all into memory.

Every attempt is timed from its first byte until the server ends it. An attempt the server
has not ended after `hold_s` is a failure (the client gives up then), and so is any 5xx.
Speaks raw sockets and `websockets` only; never imports the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import connect as ws_connect

from voxserve.bench.metrics import summarize

__all__ = ["HOSTILE_KINDS", "HostileRecord", "judge_hostile", "run_hostile", "summarize_hostile"]

HOSTILE_KINDS = ("stalled_upload", "header_dribble", "slow_reader", "vanishing_ws", "oversized_ws")
LONG_TEXT = " ".join(
    f"Sentence number {i} of a long reply, which nobody is going to listen to." for i in range(40)
)


@dataclass
class HostileRecord:
    kind: str
    started_at_s: float
    ended_by_server: bool = False
    """The server closed the connection, answered, or ended the session."""
    seconds: float = 0.0
    """From the first byte sent until the server ended it (or the client gave up)."""
    status: int | None = None
    """HTTP status or WebSocket close code the server gave, when it gave one."""
    error: str | None = None


@dataclass(frozen=True)
class _Target:
    host: str
    port: int
    ws_url: str
    headers: dict[str, str] = field(default_factory=dict)


def _target(base_url: str, api_key: str | None) -> _Target:
    parts = urlsplit(base_url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    scheme = "wss" if parts.scheme == "https" else "ws"
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return _Target(host, port, f"{scheme}://{host}:{port}/v1/audio/speech/stream", headers)


def _status(head: bytes) -> int | None:
    line = head.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[1].isdigit() else None


async def _until_closed(reader: asyncio.StreamReader, hold_s: float) -> tuple[bool, bytes]:
    """Read (and drop) what the server sends until it closes; False if it is still open
    after `hold_s`. Returns the first bytes received, for the status line."""
    first = b""
    deadline = time.monotonic() + hold_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            data = await asyncio.wait_for(reader.read(65536), left)
        except TimeoutError:
            return False, first
        except (ConnectionError, OSError):
            return True, first
        if not data:
            return True, first
        if len(first) < 256:
            first += data[: 256 - len(first)]
    return False, first


async def _raw(t: _Target, payload: bytes, record: HostileRecord, hold_s: float,
               rcvbuf: int | None = None) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    started = time.perf_counter()
    try:
        await asyncio.get_running_loop().sock_connect(sock, (t.host, t.port))
        reader, writer = await asyncio.open_connection(sock=sock)
    except OSError as exc:
        sock.close()
        record.error = f"connect: {exc}"
        return
    try:
        writer.write(payload)
        await writer.drain()
        if rcvbuf is not None:
            # A reader that never reads: wait for the server to give up on it, then look.
            closed = await _wait_reset(writer, hold_s)
            record.ended_by_server = closed
        else:
            closed, head = await _until_closed(reader, hold_s)
            record.ended_by_server = closed
            record.status = _status(head)
    except (ConnectionError, OSError) as exc:
        record.ended_by_server = True
        record.error = type(exc).__name__
    finally:
        record.seconds = time.perf_counter() - started
        writer.transport.abort()


async def _wait_reset(writer: asyncio.StreamWriter, hold_s: float) -> bool:
    """Whether the server closed a connection whose client reads nothing, within
    `hold_s`: polled through the socket's state, never by reading."""
    sock = writer.get_extra_info("socket")
    deadline = time.monotonic() + hold_s
    while time.monotonic() < deadline:
        # TCP_INFO's first byte is the state; 1 is ESTABLISHED.
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)
        if info[0] != 1:
            return True
        await asyncio.sleep(0.25)
    return False


def _upload_head(t: _Target, length: int) -> bytes:
    auth = "".join(f"{k}: {v}\r\n" for k, v in t.headers.items())
    return (
        f"POST /v1/audio/transcriptions HTTP/1.1\r\nhost: {t.host}:{t.port}\r\n{auth}"
        f"content-type: multipart/form-data; boundary=b0und\r\ncontent-length: {length}\r\n\r\n"
        '--b0und\r\ncontent-disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'
        '--b0und\r\ncontent-disposition: form-data; name="file"; filename="a.wav"\r\n'
        "content-type: audio/wav\r\n\r\n"
    ).encode() + b"RIFF" + bytes(1020)


def _speech_request(t: _Target) -> bytes:
    body = json.dumps({"model": "tts-1", "input": LONG_TEXT[:4000], "voice": "alloy",
                       "response_format": "pcm"}).encode()
    auth = "".join(f"{k}: {v}\r\n" for k, v in t.headers.items())
    return (
        f"POST /v1/audio/speech HTTP/1.1\r\nhost: {t.host}:{t.port}\r\n{auth}"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _vanishing_ws(t: _Target, record: HostileRecord, hold_s: float) -> None:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(hold_s):
            ws = await ws_connect(t.ws_url, additional_headers=t.headers, max_size=None)
            for i in range(40):
                await ws.send(json.dumps({"type": "input.text", "text": f"Clause {i} of many, "}))
            await ws.send(json.dumps({"type": "input.done"}))
            got = 0
            while got < 2:
                if isinstance(await ws.recv(), bytes):
                    got += 1
            assert ws.transport is not None
            ws.transport.abort()  # gone, with no close handshake
            record.ended_by_server = True  # judged by the sessions gauge, not here
    except (TimeoutError, OSError, websockets.exceptions.WebSocketException) as exc:
        record.error = f"{type(exc).__name__}: {exc}"[:200]
    record.seconds = time.perf_counter() - started


async def _oversized_ws(t: _Target, record: HostileRecord, hold_s: float) -> None:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(hold_s):
            async with ws_connect(t.ws_url, additional_headers=t.headers, max_size=None) as ws:
                with contextlib.suppress(websockets.exceptions.ConnectionClosed):
                    await ws.send("x" * (1 << 20))
                    while True:
                        await ws.recv()
                record.ended_by_server = True
                record.status = ws.close_code
    except (TimeoutError, OSError, websockets.exceptions.WebSocketException) as exc:
        record.error = f"{type(exc).__name__}: {exc}"[:200]
    record.seconds = time.perf_counter() - started


async def _attempt(kind: str, t: _Target, record: HostileRecord, hold_s: float) -> None:
    if kind == "stalled_upload":
        await _raw(t, _upload_head(t, 4 << 20), record, hold_s)
    elif kind == "header_dribble":
        await _raw(t, f"POST /v1/audio/speech HTTP/1.1\r\nhost: {t.host}\r\ncontent-".encode(),
                   record, hold_s)
    elif kind == "slow_reader":
        await _raw(t, _speech_request(t), record, hold_s, rcvbuf=4096)
    elif kind == "vanishing_ws":
        await _vanishing_ws(t, record, hold_s)
    elif kind == "oversized_ws":
        await _oversized_ws(t, record, hold_s)
    else:
        raise ValueError(f"unknown hostile kind {kind!r}")


async def run_hostile(base_url: str, per_kind: int, until: float, start: float,
                      records: list[HostileRecord], hold_s: float = 60.0,
                      api_key: str | None = None, pause_s: float = 1.0) -> None:
    """Run `per_kind` clients of every kind in loops until `until` (perf_counter)."""
    t = _target(base_url, api_key)

    async def client(kind: str, n: int) -> None:
        await asyncio.sleep(0.3 * n)
        while time.perf_counter() < until:
            record = HostileRecord(kind, time.perf_counter() - start)
            await _attempt(kind, t, record, max(1.0, min(hold_s, until - time.perf_counter() + hold_s)))
            records.append(record)
            await asyncio.sleep(pause_s)

    await asyncio.gather(*(client(k, n) for k in HOSTILE_KINDS for n in range(per_kind)))


def summarize_hostile(records: list[HostileRecord]) -> dict[str, Any]:
    """Per kind: attempts, how many the server ended, how long that took, statuses seen."""
    out: dict[str, Any] = {}
    for kind in HOSTILE_KINDS:
        rs = [r for r in records if r.kind == kind]
        statuses: dict[str, int] = {}
        for r in rs:
            if r.status is not None:
                statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
        out[kind] = {
            "attempts": len(rs),
            "ended_by_server": sum(1 for r in rs if r.ended_by_server),
            "seconds": summarize([r.seconds for r in rs if r.ended_by_server]),
            "statuses": statuses,
            "errors": sorted({r.error for r in rs if r.error})[:5],
        }
    return out


def judge_hostile(summary: dict[str, Any]) -> list[str]:
    """Why the hostile clients show a defence missing; empty when every attempt was ended
    by the server and none got a 5xx."""
    problems = []
    for kind, s in summary.items():
        if s["attempts"] and s["ended_by_server"] < s["attempts"]:
            problems.append(f"{kind}: the server left {s['attempts'] - s['ended_by_server']} of "
                            f"{s['attempts']} attempts open until the client gave up")
        bad = {k: v for k, v in s["statuses"].items() if k.startswith("5") and len(k) == 3
               and k != "503"}
        if bad:
            problems.append(f"{kind}: server errors {bad}")
        if kind == "oversized_ws":
            codes = {k: v for k, v in s["statuses"].items() if k not in ("1009", "1008")}
            if codes:
                problems.append(f"{kind}: closed with {codes}, not 1009 (message too big)")
    return problems

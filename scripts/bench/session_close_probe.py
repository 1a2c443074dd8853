"""How a speech session ends, and how long the next new connection waits for first audio.

    python scripts/bench/session_close_probe.py ws://127.0.0.1:8000 3

Each round runs the ways a voice agent ends a speech WebSocket session (close after
`input.flushed`, close at the last `audio.done`, close mid-reply, `input.cancel` then
close, a cancel then another reply, two contexts with one cancelled, a cancel while the
first segment opens, the socket dropped mid-reply), and after each one opens a new
connection that speaks a short reply, timed from connect to its first audio frame. A
stream slot that outlives its session shows, where the replica has no room beside it,
as a new connection that waits about `HOLD_SLOT_S` (2 s). Prints every figure and those
over 1 s.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from websockets.sync.client import ClientConnection, connect

LONG = " ".join(f"This is sentence number {i} of a long answer that the agent reads out, clause by clause." for i in range(12))
SHORT = "Sure, what would you like instead?"


def send(ws: ClientConnection, **message: Any) -> None:
    ws.send(json.dumps(message))


def first_audio(ws: ClientConnection, since: float) -> float:
    while True:
        message = ws.recv(timeout=30)
        if isinstance(message, bytes):
            return time.perf_counter() - since
        if json.loads(message)["type"] == "error":
            raise SystemExit(message)


def until(ws: ClientConnection, kind: str) -> None:
    while True:
        message = ws.recv(timeout=30)
        if not isinstance(message, bytes) and json.loads(message)["type"] == kind:
            return


def opened(url: str) -> tuple[ClientConnection, float]:
    started = time.perf_counter()
    return connect(url), started


def flushed_close(url: str) -> float:
    ws, started = opened(url)
    send(ws, type="input.text", text=SHORT)
    send(ws, type="input.done")
    took = first_audio(ws, started)
    until(ws, "input.flushed")
    ws.close()
    return took


def close_at_last_audio_done(url: str) -> None:
    ws, started = opened(url)
    send(ws, type="input.text", text="Okay.")
    send(ws, type="input.done")
    first_audio(ws, started)
    until(ws, "audio.done")
    ws.close()


def speaking(url: str) -> ClientConnection:
    """A session speaking LONG, its first audio just come."""
    ws, started = opened(url)
    send(ws, type="input.text", text=LONG)
    first_audio(ws, started)
    return ws


def mid_reply(url: str) -> ClientConnection:
    """A session 0.4 s into speaking LONG."""
    ws = speaking(url)
    time.sleep(0.4)
    return ws


def close_mid_reply(url: str) -> None:
    mid_reply(url).close()


def cancel_then_close(url: str) -> None:
    ws = mid_reply(url)
    send(ws, type="input.cancel")
    ws.close()


def cancel_reply_close(url: str) -> None:
    ws = mid_reply(url)
    send(ws, type="input.cancel")
    until(ws, "audio.cancelled")
    send(ws, type="input.text", text=SHORT)
    send(ws, type="input.done")
    until(ws, "input.flushed")
    ws.close()


def two_contexts(url: str) -> None:
    ws, started = opened(url)
    send(ws, type="input.text", text=LONG, context_id="a")
    send(ws, type="input.done", context_id="a")
    send(ws, type="input.text", text=SHORT, context_id="b")
    send(ws, type="input.done", context_id="b")
    first_audio(ws, started)
    time.sleep(0.3)
    send(ws, type="input.cancel", context_id="a")
    until(ws, "input.flushed")
    ws.close()


def cancel_while_opening(url: str) -> None:
    ws, _ = opened(url)
    send(ws, type="input.text", text=SHORT)
    send(ws, type="input.done")
    time.sleep(0.02)
    send(ws, type="input.cancel")
    until(ws, "audio.cancelled")
    ws.close()


def socket_dropped(url: str) -> None:
    speaking(url).socket.close()


ENDINGS: list[Callable[[str], object]] = [
    flushed_close, close_at_last_audio_done, close_mid_reply, cancel_then_close,
    cancel_reply_close, two_contexts, cancel_while_opening, socket_dropped,
]  # fmt: skip


def main(base: str, rounds: int) -> None:
    url = base + "/v1/audio/speech/stream"
    flushed_close(url)  # warm-up
    slow: list[tuple[str, float]] = []
    for r in range(rounds):
        for ending in ENDINGS:
            ending(url)
            took = flushed_close(url)
            print(f"round {r}, after {ending.__name__:24s} a new connection's first audio: {took * 1e3:6.0f} ms", flush=True)
            if took > 1.0:
                slow.append((ending.__name__, took))
    print(f"{len(slow)} of {rounds * len(ENDINGS)} new connections over 1 s: {slow}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

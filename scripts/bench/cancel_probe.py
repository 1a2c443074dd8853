"""Barge-in on `WS /v1/audio/speech/stream`, timed from a client on loopback.

    python scripts/bench/cancel_probe.py ws://127.0.0.1:8000 40

N times: a new connection speaks a short reply (connect to first audio); another speaks a
long reply, cancels it 0.3-0.7 s into its audio, and times `input.cancel` to
`audio.cancelled` and the last audio frame after the cancel (any audio after the answer
fails the run), then speaks the short reply on the same socket (text to first audio).
Prints the medians, 90th percentiles and maxima.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from websockets.sync.client import ClientConnection, connect

LONG = " ".join(f"This is sentence number {i} of a long answer that the agent reads out, clause by clause." for i in range(12))
SHORT = "Sure, what would you like instead?"


def first_audio(ws: ClientConnection, since: float) -> float:
    while True:
        message = ws.recv(timeout=30)
        if isinstance(message, bytes):
            return time.perf_counter() - since
        kind = json.loads(message)["type"]
        if kind not in ("audio.start", "audio.done", "input.flushed"):
            raise SystemExit(f"unexpected {message[:200]}")


def until(ws: ClientConnection, kind: str) -> None:
    while True:
        message = ws.recv(timeout=30)
        if not isinstance(message, bytes) and json.loads(message)["type"] == kind:
            return


def reply(ws: ClientConnection, text: str) -> None:
    ws.send(json.dumps({"type": "input.text", "text": text}))
    ws.send(json.dumps({"type": "input.done"}))


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    return f"p50 {statistics.median(ordered) * 1e3:.1f} ms, p90 {p90 * 1e3:.1f} ms, max {ordered[-1] * 1e3:.1f} ms"


def main(url: str, n: int) -> None:
    url += "/v1/audio/speech/stream"
    fresh: list[float] = []
    answer: list[float] = []
    after: list[float] = []
    following: list[float] = []
    for i in range(n):
        started = time.perf_counter()
        with connect(url) as ws:
            reply(ws, SHORT)
            fresh.append(first_audio(ws, started))
            until(ws, "input.flushed")
        with connect(url) as ws:
            ws.send(json.dumps({"type": "input.text", "text": LONG}))
            first_audio(ws, time.perf_counter())
            time.sleep(0.3 + 0.1 * (i % 5))
            sent = time.perf_counter()
            ws.send(json.dumps({"type": "input.cancel"}))
            last = sent
            while True:
                message = ws.recv(timeout=30)
                if isinstance(message, bytes):
                    last = time.perf_counter()
                elif json.loads(message)["type"] == "audio.cancelled":
                    answer.append(time.perf_counter() - sent)
                    break
            try:
                late = ws.recv(timeout=0.3)
            except TimeoutError:
                pass
            else:
                raise SystemExit(f"sent after audio.cancelled: {late[:80]!r}")
            after.append(last - sent)
            started = time.perf_counter()
            reply(ws, SHORT)
            following.append(first_audio(ws, started))
            until(ws, "input.flushed")
    print(f"{n} cancels")
    print(f"input.cancel to audio.cancelled: {summary(answer)}")
    print(f"the cancelled reply's audio after input.cancel: {summary(after)}")
    print(f"the next reply on the same socket, text to first audio: {summary(following)}")
    print(f"a new connection, connect to first audio: {summary(fresh)}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

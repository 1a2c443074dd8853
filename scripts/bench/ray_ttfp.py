"""Added time to first audio of the Ray Serve path, measured in pairs.

Sends the same short request alternately to a plain server and to a Ray deployment (both
running, both idle between requests), so that machine-wide noise hits both sides alike,
and prints the median of the paired differences. Used for docs/BENCHMARKS.md:

    python scripts/bench/ray_ttfp.py http://127.0.0.1:8031 http://127.0.0.1:8032 60
"""

from __future__ import annotations

import statistics
import sys
import time

import httpx

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "A rainbow is a division of white light into many beautiful colors.",
    "The museum opens early on weekends, so we should arrive before the crowds.",
]


def ttfp_ms(client: httpx.Client, text: str) -> float:
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
    started = time.perf_counter()
    first = None
    with client.stream("POST", "/v1/audio/speech", json=body) as r:
        r.raise_for_status()
        for chunk in r.iter_bytes():
            if chunk and first is None:
                first = time.perf_counter() - started
    assert first is not None
    return first * 1000


def main(plain_url: str, ray_url: str, pairs: int) -> None:
    times: dict[str, list[float]] = {"plain": [], "ray": []}
    with httpx.Client(base_url=plain_url, timeout=60) as plain, httpx.Client(base_url=ray_url, timeout=60) as ray:
        for client in (plain, ray):
            for text in TEXTS:
                ttfp_ms(client, text)  # warm-up
        for i in range(pairs):
            text = TEXTS[i % len(TEXTS)]
            order = [("plain", plain), ("ray", ray)] if i % 2 == 0 else [("ray", ray), ("plain", plain)]
            for name, client in order:
                times[name].append(ttfp_ms(client, text))
            time.sleep(0.2)
    for name, values in times.items():
        print(f"{name}: TTFP p50 {statistics.median(values):.1f} ms")
    diffs = [r - p for p, r in zip(times["plain"], times["ray"], strict=True)]
    print(f"paired difference (ray - plain), median of {pairs}: {statistics.median(diffs):.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 60)

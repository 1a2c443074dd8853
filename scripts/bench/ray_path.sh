#!/bin/bash
# Ray: the plain server against `serve --ray` behind HAProxy and behind Serve's proxy, then
# the added first audio in pairs (docs/BENCHMARKS.md, "Ray").
# usage: scripts/bench/ray_path.sh OUTDIR [ROUNDS] [PAIRS]
# One TTS replica, ASR off everywhere; within a round the three servers run one after the other.
# The pairs: the same short request alternately to the plain server and to one Ray path (both
# running, both idle between requests), so that machine-wide noise hits both sides alike; the
# median of the paired differences, for each Ray path in turn.
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
OUT=${1:?usage: ray_path.sh OUTDIR [ROUNDS] [PAIRS]}; ROUNDS=${2:-2}; PAIRS=${3:-60}; mkdir -p "$OUT"
BENCH=(--concurrency 1,16 --num-prompts 32 --warmup 2 --seed 0 --no-progress)

up() {  # port env args...: start a server, wait for /health; its pid in $PID
  local port=$1 env=$2; shift 2
  env $env "$B/voxserve" serve --no-asr --port "$port" "$@" > "$OUT/server-$port.log" 2>&1 &
  PID=$!
  for _ in $(seq 180); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && return; sleep 1; done
  echo "the server on $port did not start" >&2; return 1
}
down() { kill "$1"; wait "$1" || true; }

for round in $(seq "$ROUNDS"); do
  up 8031 X=0; "$B/voxserve" bench speech --base-url http://127.0.0.1:8031 "${BENCH[@]}" -o "$OUT/ray-path-plain-$round.json"; down $PID
  up 8032 RAY_SERVE_ENABLE_HA_PROXY=0 --ray
  "$B/voxserve" bench speech --base-url http://127.0.0.1:8032 "${BENCH[@]}" -o "$OUT/ray-path-serve-$round.json"; down $PID
  up 8033 X=0 --ray; "$B/voxserve" bench speech --base-url http://127.0.0.1:8033 "${BENCH[@]}" -o "$OUT/ray-path-haproxy-$round.json"; down $PID
done
pairs() {  # plain_url ray_url pairs
  "$B/python" - "$@" <<'EOF'
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


main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
EOF
}
up 8031 X=0; PLAIN=$PID
up 8033 X=0 --ray; pairs http://127.0.0.1:8031 http://127.0.0.1:8033 "$PAIRS" | tee "$OUT/ray-ttfp-haproxy.txt"; down $PID
up 8032 RAY_SERVE_ENABLE_HA_PROXY=0 --ray
pairs http://127.0.0.1:8031 http://127.0.0.1:8032 "$PAIRS" | tee "$OUT/ray-ttfp-serve.txt"; down $PID
down $PLAIN

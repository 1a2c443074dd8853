#!/bin/bash
# Ray: the plain server against `serve --ray` behind HAProxy and behind Serve's proxy, then the paired TTFP probe (docs/BENCHMARKS.md, "Ray").
# usage: scripts/bench/ray_path.sh OUTDIR [ROUNDS]
# One TTS replica, ASR off everywhere; within a round the three servers run one after the other.
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
OUT=${1:?usage: ray_path.sh OUTDIR [ROUNDS]}; ROUNDS=${2:-2}; mkdir -p "$OUT"
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
up 8031 X=0; PLAIN=$PID
up 8033 X=0 --ray; RAY=$PID
"$B/python" scripts/bench/ray_ttfp.py http://127.0.0.1:8031 http://127.0.0.1:8033 60 | tee "$OUT/ray-ttfp.txt"
down $RAY; down $PLAIN

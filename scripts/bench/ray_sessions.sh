#!/bin/bash
# WebSocket sessions: one process against `serve --ray` on the same cores, run alternately (docs/SCALING.md, "Sessions").
# usage: scripts/bench/ray_sessions.sh OUTDIR [ROUNDS]
# Each round starts a plain server, runs `bench realtime` at 1 and 4 sessions and
# `bench stream-text` at 1 and 8, stops it, then does the same with `serve --ray` (one TTS
# and one ASR replica, the same flags). The live sessions speak the same clips in every
# run, made once by the first server. ray_sessions_summary.py prints the medians and ratios.
set -eu
cd "$(dirname "$0")/../.."
B=${VENV:-$PWD/.venv}/bin
OUT=${1:?usage: ray_sessions.sh OUTDIR [ROUNDS]}; ROUNDS=${2:-3}; mkdir -p "$OUT"
SERVER=(--realtime-max-sessions 8)
REALTIME=(--concurrency 1,4 --language en --warmup 1 --seed 0 --no-progress)
TEXT=(--concurrency 1,8 --num-prompts 8 --warmup 1 --seed 0 --no-progress)

up() {  # port args...: start a server, wait for /health; its pid in $PID
  local port=$1; shift
  "$B/voxserve" serve --port "$port" "${SERVER[@]}" "$@" > "$OUT/server-$port.log" 2>&1 &
  PID=$!
  for _ in $(seq 240); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && return; sleep 1; done
  echo "the server on $port did not start" >&2; return 1
}
down() { kill "$1"; wait "$1" || true; }
trap 'kill $PID 2> /dev/null || true' EXIT

if [ ! -d "$OUT/clips" ]; then
  up 8041; "$B/voxserve" bench make-asr-set --base-url http://127.0.0.1:8041 --out "$OUT/clips" --num-clips 16; down $PID
fi
for round in $(seq "$ROUNDS"); do
  for setup in plain ray; do
    if [ $setup = plain ]; then up 8041; URL=http://127.0.0.1:8041; else up 8042 --ray; URL=http://127.0.0.1:8042; fi
    "$B/voxserve" bench realtime --base-url $URL --audio-dir "$OUT/clips" "${REALTIME[@]}" -o "$OUT/realtime-$setup-$round.json"
    "$B/voxserve" bench stream-text --base-url $URL "${TEXT[@]}" -o "$OUT/stream-text-$setup-$round.json"
    down $PID
  done
done
"$B/python" scripts/bench/ray_sessions_summary.py "$OUT" | tee "$OUT/summary.txt"

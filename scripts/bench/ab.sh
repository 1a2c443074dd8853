#!/bin/bash
# Two source trees of voxserve served in turn on one machine, each round alternating which
# goes first: Piper at c=1 and 16, Kokoro at c=1 and 2, transcription at c=1 and 4, one
# realtime session, and the simulated H200 with Kokoro at c=256.
# usage: [SETS="piper kokoro asr sim"] scripts/bench/ab.sh TREE_A TREE_B OUTDIR [ROUNDS]
# Summarize with: python scripts/bench/ab_summary.py OUTDIR
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
A=${1:?usage: ab.sh TREE_A TREE_B OUTDIR [ROUNDS]}; BT=${2:?}; OUT=${3:?}; ROUNDS=${4:-3}
SETS=${SETS:-piper kokoro asr sim}
PORT=8473; URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"

start() {  # tree log serve-flags...
  local tree=$1 log=$2; shift 2
  PYTHONPATH=$tree "$B/python" -m voxserve.cli serve --port $PORT "$@" > "$log" 2>&1 &
  PID=$!
  for _ in $(seq 180); do curl -sf $URL/health > /dev/null && break; sleep 1; done
  sleep 3  # what comes online in the background after the first health
}
stop() { kill "$PID"; wait "$PID" || true; }

run_set() {  # tree name set
  local tree=$1 name=$2
  case $3 in
    piper)
      start "$tree" "$OUT/piper-$name.log" --no-asr --tts-models piper
      "$B/voxserve" bench speech --base-url $URL --concurrency 1,16 --num-prompts 32 --no-progress \
        -o "$OUT/piper-$name.json" > /dev/null ;;
    kokoro)
      start "$tree" "$OUT/kokoro-$name.log" --no-asr --tts-models kokoro
      "$B/voxserve" bench speech --base-url $URL --model tts-1-hd --concurrency 1,2 --num-prompts 8 \
        --no-progress -o "$OUT/kokoro-$name.json" > /dev/null ;;
    asr)
      start "$tree" "$OUT/asr-$name.log" --tts-models piper
      [ -d "$OUT/asr-set" ] || "$B/voxserve" bench make-asr-set --base-url $URL --out "$OUT/asr-set" \
        --num-clips 16 --request-sample-rate 16000 > /dev/null
      "$B/voxserve" bench transcribe --base-url $URL --audio-dir "$OUT/asr-set" --concurrency 1,4 \
        --warmup 2 --no-progress -o "$OUT/asr-$name.json" > /dev/null
      "$B/voxserve" bench realtime --base-url $URL --concurrency 1 --num-clips 6 --language en \
        --no-progress -o "$OUT/realtime-$name.json" > /dev/null ;;
    sim)
      start "$tree" "$OUT/sim-$name.log" --device sim --no-asr --tts-models kokoro
      "$B/voxserve" bench speech --base-url $URL --model tts-1-hd --concurrency 256 --num-prompts 512 \
        --processes 2 --no-progress -o "$OUT/sim-$name.json" > /dev/null ;;
  esac
  stop
}

for round in $(seq "$ROUNDS"); do
  for set in $SETS; do
    if (( round % 2 )); then
      run_set "$A" "a-$round" "$set"; run_set "$BT" "b-$round" "$set"
    else
      run_set "$BT" "b-$round" "$set"; run_set "$A" "a-$round" "$set"
    fi
  done
done

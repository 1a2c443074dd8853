#!/bin/bash
# Two source trees of voxserve served in turn on one machine, each round alternating which
# goes first: Piper at c=1 and 16, Kokoro at c=1 and 2, transcription at c=1 and 4, one
# realtime session, and the simulated H200 with Kokoro at c=256.
# usage: [SETS="piper kokoro asr sim"] scripts/bench/ab.sh TREE_A TREE_B OUTDIR [ROUNDS]
# It ends with each set's and level's median over rounds for each tree, and B over A;
# ROUNDS=0 prints that summary of an OUTDIR alone.
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
A=${1:?usage: ab.sh TREE_A TREE_B OUTDIR [ROUNDS]}; BT=${2:?}; OUT=${3:?}; ROUNDS=${4:-3}
SETS=${SETS:-piper kokoro asr sim}
PORT=8473; URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"

summary() {  # speech: first audio p50; transcription: latency p50; realtime: end of speech to completed, p50
  "$B/python" - "$OUT" <<'PY'
import json
import statistics
import sys
from pathlib import Path

FIGURES = {
    "piper": ("ttfp_s", "first audio p50 ms"),
    "kokoro": ("ttfp_s", "first audio p50 ms"),
    "sim": ("ttfp_s", "first audio p50 ms"),
    "asr": ("latency_s", "latency p50 ms"),
    "realtime": ("completed_latency_s", "completed p50 ms"),
}


def figures(path: Path, key: str) -> dict[int, float]:
    levels = json.loads(path.read_text())["levels"]
    return {level["concurrency"]: level["summary"][key]["p50"] * 1000 for level in levels}


def main(out: Path) -> None:
    print("set      | c   | A median | B median | B/A  | rounds | figure")
    for name, (key, label) in FIGURES.items():
        runs = {
            tree: [figures(p, key) for p in sorted(out.glob(f"{name}-{tree}-*.json"))]
            for tree in "ab"
        }
        if not runs["a"] or not runs["b"]:
            continue
        for c in sorted(runs["a"][0]):
            a = statistics.median(run[c] for run in runs["a"])
            b = statistics.median(run[c] for run in runs["b"])
            print(
                f"{name:<8} | {c:<3} | {a:8.0f} | {b:8.0f} | {b / a:.2f} | {len(runs['a'])}/{len(runs['b'])}    | {label}"
            )


main(Path(sys.argv[1]))
PY
}

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
      "$B/voxserve" bench speech --base-url $URL --model tts-1-hd --concurrency 256 --num-prompts 256 \
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
summary

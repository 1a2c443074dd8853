#!/bin/bash
# Two source trees of voxserve served in turn on the same machine: TTS first audio and
# continuity at c=1, 16 and 24 (Piper, ASR off), alternating which tree goes first.
# usage: [PROMPTS=48] scripts/bench/tts_ab.sh TREE_A TREE_B OUTDIR [ROUNDS]
# Summarize with: python scripts/bench/tts_ab_summary.py OUTDIR
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
A=${1:?usage: tts_ab.sh TREE_A TREE_B OUTDIR [ROUNDS]}; BT=${2:?}; OUT=${3:?}; ROUNDS=${4:-3}; PROMPTS=${PROMPTS:-48}
mkdir -p "$OUT"

serve() {  # tree name
  PYTHONPATH=$1 "$B/python" -m voxserve.cli serve --port 8472 --no-asr --tts-models piper > "$OUT/$2.log" 2>&1 &
  local pid=$!
  for _ in $(seq 90); do curl -sf http://127.0.0.1:8472/health > /dev/null && break; sleep 1; done
  sleep 3  # the fixed-length priors come online in the background
  "$B/voxserve" bench speech --base-url http://127.0.0.1:8472 --concurrency 1,16,24 --num-prompts "$PROMPTS" \
    --no-progress -o "$OUT/$2.json" > /dev/null
  kill "$pid"; wait "$pid" || true
}

for round in $(seq "$ROUNDS"); do
  if (( round % 2 )); then first=$A; second=$BT; fn=a; sn=b; else first=$BT; second=$A; fn=b; sn=a; fi
  serve "$first" "$fn-$round"
  serve "$second" "$sn-$round"
done

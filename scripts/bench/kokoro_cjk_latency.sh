#!/bin/bash
# Kokoro in Mandarin and Japanese against English: first audio at c=1 and continuity at c=2,
# the same twelve prompts in each language (scripts/bench/prompts/), one voice each, one
# server (docs/KOKORO.md, "Mandarin and Japanese").
# usage: scripts/bench/kokoro_cjk_latency.sh OUTDIR
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
OUT=${1:?usage: kokoro_cjk_latency.sh OUTDIR}; mkdir -p "$OUT"
"$B/voxserve" serve --port 8742 --no-asr --tts-models kokoro > "$OUT/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 90); do curl -sf http://127.0.0.1:8742/health > /dev/null && break; sleep 1; done
sleep 3
for pair in en:af_heart zh:zf_xiaoxiao ja:jf_alpha; do
    lang=${pair%%:*}; voice=${pair#*:}
    "$B/voxserve" bench speech --base-url http://127.0.0.1:8742 --model tts-1-hd --concurrency 1,2 \
        --voice "$voice" --prompts "scripts/bench/prompts/$lang.txt" --num-prompts 12 --warmup 1 \
        --no-probe-health --no-progress -o "$OUT/kokoro-$lang.json"
done

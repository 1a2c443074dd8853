#!/bin/bash
# Kokoro TTS: voxserve's streams at c=1,2,3, then how it sounds against the whole-sentence decode and kokoro-onnx (docs/BENCHMARKS.md, "TTS on Kokoro").
# usage: scripts/bench/kokoro_tts.sh OUTDIR
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
OUT=${1:?usage: kokoro_tts.sh OUTDIR}; mkdir -p "$OUT"
"$B/voxserve" serve --port 8741 --no-asr --tts-models kokoro > "$OUT/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 90); do curl -sf http://127.0.0.1:8741/health > /dev/null && break; sleep 1; done
sleep 3
"$B/voxserve" bench speech --base-url http://127.0.0.1:8741 --model tts-1-hd --concurrency 1,2,3 \
    --voice af_nova --num-prompts 6 --warmup 1 --no-probe-health --no-progress -o "$OUT/kokoro-c1-2-3.json"
kill $PID
"$B/voxserve" bench kokoro-prosody --no-progress -o "$OUT/kokoro-prosody.json"

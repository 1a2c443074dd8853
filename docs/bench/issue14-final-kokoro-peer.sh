#!/bin/bash
cd "$(dirname "$0")/../.."
B=.venv/bin; OUT=${OUT:-/tmp/kpeer-final}; mkdir -p $OUT
$B/voxserve serve --port 8741 --no-asr --tts-models kokoro > $OUT/server.log 2>&1 &
S=$!
for i in $(seq 90); do curl -sf http://127.0.0.1:8741/health >/dev/null && break; sleep 1; done
sleep 3
$B/voxserve bench kokoro-peer --threads 2 --num-prompts 8 --base-url http://127.0.0.1:8741 --no-progress -o $OUT/kpeer.json > $OUT/kpeer.txt 2>&1
kill $S; wait $S
echo done > $OUT/done

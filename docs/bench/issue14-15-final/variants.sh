#!/bin/bash
# Variants tried after the final run (c=16 admission, libgomp waits). The
# --admit-starting-per-worker flag was a trial, reverted with the young-stream rule;
# the first two servers ran on a tree with that flag.
cd "$(dirname "$0")/../../.."
B=.venv/bin; OUT=/tmp/c16; mkdir -p $OUT
for k in 4 1; do
$B/voxserve serve --port 8475 --no-asr --tts-models piper --admit-starting-per-worker $k > $OUT/server-$k.log 2>&1 &
SRV=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:8475/health >/dev/null && break; sleep 1; done
$B/voxserve bench speech --base-url http://127.0.0.1:8475 --concurrency 1,16 --num-prompts 48 --no-progress -o $OUT/vox-$k.json > $OUT/vox-$k.txt 2>&1
curl -s http://127.0.0.1:8475/metrics | grep -E "admission_held" > $OUT/held-$k.txt
kill $SRV; wait $SRV
done
OMP_WAIT_POLICY= $B/python -m voxserve.bench.asr_offline --repeat 3 --nice 0 --audio /tmp/asrA-offline/long-00.wav --text /tmp/asrA-offline/long-00.txt --json $OUT/long-spin.json > $OUT/long-spin.txt 2>&1
GOMP_SPINCOUNT=20000 OMP_WAIT_POLICY= $B/voxserve serve --port 8482 > $OUT/server-sc.log 2>&1 &
S=$!
for i in $(seq 90); do curl -sf http://127.0.0.1:8482/health >/dev/null && break; sleep 1; done
sleep 3
$B/voxserve bench transcribe --base-url http://127.0.0.1:8482 --manifest /tmp/asrA-set20/manifest.jsonl --concurrency 1,4 --num-requests 20 --no-progress -o $OUT/asr-sc.json > $OUT/asr-sc.txt 2>&1
kill $S; wait $S
echo done > $OUT/done

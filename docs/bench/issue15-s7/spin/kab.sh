#!/bin/bash
B=/work/main/.venv/bin; OUT=$1; shift; R=$1; shift; mkdir -p $OUT
run() { local name=$1 dir=$2
  (cd $dir && PYTHONPATH=$dir $B/voxserve serve --port 8472 --no-asr > $OUT/$name.log 2>&1) &
  for i in $(seq 90); do curl -sf http://127.0.0.1:8472/health >/dev/null && break; sleep 1; done
  sleep 3
  $B/voxserve bench speech --base-url http://127.0.0.1:8472 --model tts-1-hd --voice af_heart --concurrency 1 --num-prompts 24 --no-progress -o $OUT/$name.json > $OUT/$name.txt 2>&1
  pkill -f "voxserve serve --port 8472"; sleep 2
}
for r in $(seq $R); do for v in "$@"; do run ${v%%:*}$r ${v#*:}; done; done

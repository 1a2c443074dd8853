#!/bin/bash
# usage: ab.sh OUTDIR ROUNDS CONC name:dir ...
B=/work/main/.venv/bin; OUT=$1; shift; R=$1; shift; CONC=$1; shift; mkdir -p $OUT
run() { local name=$1 dir=$2 envs=$3
  (cd $dir && env X=0 $envs PYTHONPATH=$dir $B/voxserve serve --port 8472 --no-asr > $OUT/$name.log 2>&1) &
  for i in $(seq 60); do curl -sf http://127.0.0.1:8472/health >/dev/null && break; sleep 1; done
  sleep 3
  $B/voxserve bench speech --base-url http://127.0.0.1:8472 --concurrency $CONC --num-prompts 48 --no-progress -o $OUT/$name.json > $OUT/$name.txt 2>&1
  curl -s http://127.0.0.1:8472/metrics | grep -E "^voxserve_tts_admission_held|^voxserve_tts_model_cost.*joe|^voxserve_tts_capacity" | sed 's/voxserve_tts_admission_held_total//' | tr '\n' ' ' > $OUT/$name.held
  pkill -f "voxserve serve --port 8472"; sleep 2
}
for r in $(seq $R); do for v in "$@"; do IFS=: read n d e <<< "$v"; run $n$r $d "$e"; done; done
echo done > $OUT/done

#!/bin/bash
# usage: c16.sh OUTDIR rounds name=ENV... ; each variant: env string
B=/work/main/.venv/bin; OUT=$1; shift; R=$1; shift; mkdir -p $OUT
run() { local name=$1; shift
  (cd /work/wt-c16 && env "$@" PYTHONPATH=/work/wt-c16 $B/voxserve serve --port 8472 --no-asr > $OUT/$name.log 2>&1) &
  for i in $(seq 60); do curl -sf http://127.0.0.1:8472/health >/dev/null && break; sleep 1; done
  sleep 3
  $B/voxserve bench speech --base-url http://127.0.0.1:8472 --concurrency ${CONC:-16} --num-prompts 48 --no-progress -o $OUT/$name.json > $OUT/$name.txt 2>&1
  curl -s http://127.0.0.1:8472/metrics | grep -E "^voxserve_tts_admission_held|^voxserve_tts_model_cost.*joe|^voxserve_tts_capacity" | sed 's/voxserve_tts_admission_held_total//' | tr '\n' ' ' > $OUT/$name.held
  pkill -f "voxserve serve --port 8472"; sleep 2
}
for r in $(seq $R); do
  for v in "$@"; do name=${v%%:*}; envs=${v#*:}; run $name$r $envs; done
done
echo done > $OUT/done

#!/bin/bash
# c=16 admission variants (issue 15, session 6), on a throwaway build of b58e21c with
# variants.diff applied: each switched by a temporary environment variable. Rounds 1-2:
# c=16 only; rounds 3-4 (second loop): c=4,16, base and grace only.
# c=16 admission variants, alternating: base, starting x2, grace 0.5, both
B=/work/main/.venv/bin; OUT=/tmp/s6/c16; mkdir -p $OUT
run() { # name, env...
  local name=$1; shift
  (cd /work/wt-adm && env "$@" PYTHONPATH=/work/wt-adm $B/voxserve serve --port 8472 --no-asr > $OUT/$name.log 2>&1) &
  for i in $(seq 60); do curl -sf http://127.0.0.1:8472/health >/dev/null && break; sleep 1; done
  sleep 3
  $B/voxserve bench speech --base-url http://127.0.0.1:8472 --concurrency 16 --num-prompts 48 --no-progress -o $OUT/$name.json > $OUT/$name.txt 2>&1
  curl -s http://127.0.0.1:8472/metrics | grep -E "^voxserve_tts_admission_held" | sed 's/voxserve_tts_admission_held_total//' | tr '\n' ' ' > $OUT/$name.held
  pkill -f "voxserve serve --port 8472"; sleep 1
}
for r in 1 2; do
  run base$r X=0
  run st2_$r VOXSERVE_X_STARTING=2
  run gr_$r VOXSERVE_X_GRACE=0.5
  run both$r VOXSERVE_X_STARTING=2 VOXSERVE_X_GRACE=0.5
  run defer$r VOXSERVE_X_DEFER=1
  run all$r VOXSERVE_X_STARTING=2 VOXSERVE_X_GRACE=0.5 VOXSERVE_X_DEFER=1
done
echo done > $OUT/done

B=/work/main/.venv/bin; OUT=/tmp/s6/c16b; mkdir -p $OUT
run() { # name, env...
  local name=$1; shift
  (cd /work/wt-adm && env "$@" PYTHONPATH=/work/wt-adm $B/voxserve serve --port 8472 --no-asr > $OUT/$name.log 2>&1) &
  for i in $(seq 60); do curl -sf http://127.0.0.1:8472/health >/dev/null && break; sleep 1; done
  sleep 3
  $B/voxserve bench speech --base-url http://127.0.0.1:8472 --concurrency 4,16 --num-prompts 48 --no-progress -o $OUT/$name.json > $OUT/$name.txt 2>&1
  curl -s http://127.0.0.1:8472/metrics | grep -E "^voxserve_tts_admission_held" | sed 's/voxserve_tts_admission_held_total//' | tr '\n' ' ' > $OUT/$name.held
  pkill -f "voxserve serve --port 8472"; sleep 1
}
for r in 3 4; do
  run gr_$r VOXSERVE_X_GRACE=0.5
  run base$r X=0
done
echo done > $OUT/done

# round c_: starting counted until the first packet only (VOXSERVE_X_FIRSTONLY), both with the grace
B=/work/main/.venv/bin; OUT=/tmp/s6/c16c; mkdir -p $OUT
run() { # name, env...
  local name=$1; shift
  (cd /work/wt-adm && env "$@" PYTHONPATH=/work/wt-adm $B/voxserve serve --port 8472 --no-asr > $OUT/$name.log 2>&1) &
  for i in $(seq 60); do curl -sf http://127.0.0.1:8472/health >/dev/null && break; sleep 1; done
  sleep 3
  $B/voxserve bench speech --base-url http://127.0.0.1:8472 --concurrency 4,16 --num-prompts 48 --no-progress -o $OUT/$name.json > $OUT/$name.txt 2>&1
  curl -s http://127.0.0.1:8472/metrics | grep -E "^voxserve_tts_admission_held" | sed 's/voxserve_tts_admission_held_total//' | tr '\n' ' ' > $OUT/$name.held
  pkill -f "voxserve serve --port 8472"; sleep 1
}
for r in 1 2; do
  run first$r VOXSERVE_X_GRACE=0.5 VOXSERVE_X_FIRSTONLY=1
  run gr$r VOXSERVE_X_GRACE=0.5
done
echo done > $OUT/done

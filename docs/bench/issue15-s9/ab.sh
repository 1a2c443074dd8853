#!/bin/bash
# Alternating A/B of voxserve servers under `voxserve bench speech`, one level.
# usage: ab.sh OUTDIR ROUNDS CONC name:checkout[:ENV[:SERVE-ARGS]] ...
# e.g.   ab.sh /tmp/ab 6 16 now:/work/main::"--burst-waiting 0" base:/work/wt-base
# Each server runs from its checkout (PYTHONPATH) with this checkout's .venv, on port
# 8472 without ASR; per run: NAME.json (the bench), NAME.held (admission counters).
# Summaries: python docs/bench/issue15-s7/explore/summ.py OUTDIR/*.json
B=$(cd "$(dirname "$0")/../../.." && pwd)/.venv/bin
OUT=$1; shift; R=$1; shift; CONC=$1; shift; mkdir -p "$OUT"
run() {
  local name=$1 dir=$2 envs=$3 args=$4
  (cd "$dir" && env X=0 $envs PYTHONPATH="$dir" "$B/voxserve" serve --port 8472 --no-asr $args > "$OUT/$name.log" 2>&1) &
  for _ in $(seq 60); do curl -sf http://127.0.0.1:8472/health >/dev/null && break; sleep 1; done
  sleep 3
  "$B/voxserve" bench speech --base-url http://127.0.0.1:8472 --concurrency "$CONC" --num-prompts 48 \
      --no-progress -o "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  curl -s http://127.0.0.1:8472/metrics | grep -E "^voxserve_tts_admission_held" \
      | sed 's/voxserve_tts_admission_held_total//' | tr '\n' ' ' > "$OUT/$name.held"
  pkill -f "voxserve serve --port 8472"; sleep 2
}
for r in $(seq "$R"); do
  for v in "$@"; do IFS=: read -r n d e a <<< "$v"; run "$n$r" "$d" "$e" "$a"; done
done

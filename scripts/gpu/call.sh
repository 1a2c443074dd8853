#!/usr/bin/env bash
# One call of the GPU bench on a lent machine (docs/GPU.md): scripts/gpu/call.sh K [flags]
# Runs scripts/gpu/call.py under a hard limit, and packs $OUT/results.tar.gz once more on
# exit, so whatever a killed call measured still comes back. VOX_LIMIT: seconds (default
# 560, inside the lent machine's 600 s per command); the measuring stops 20 s before it.
set -uo pipefail
n=$1
shift
cd "$(dirname "$0")/../.."
work=${VOX_WORK:-/tmp/vox}
out=${OUT:-$PWD/out}
limit=${VOX_LIMIT:-560}
python=${PYTHON:-python3}
mkdir -p "$work/results/call$n" "$out"
pack() {
    tar -czf "$out/.results.tar.gz.tmp" -C "$work" results && mv -f "$out/.results.tar.gz.tmp" "$out/results.tar.gz"
}
trap pack EXIT
timeout -k 5 "$limit" "$python" -u scripts/gpu/call.py "$n" --work "$work" --out "$out" \
    --budget $((limit - 20)) "$@" > >(tee "$work/results/call$n/log.txt") 2>&1
rc=$?
echo "call $n: exit $rc" | tee -a "$work/results/call$n/log.txt"
exit $rc

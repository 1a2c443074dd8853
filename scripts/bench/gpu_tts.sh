#!/usr/bin/env bash
# The GPU speech figures in one command, on a machine with torch and no network: install
# what `gpu_tts.py prepare` packed (its parts in PARTS) into a venv over the system's
# packages, once, then run `gpu_tts.py measure` from outside the repository, so that the
# installed package is the one measured.
#
#   scripts/bench/gpu_tts.sh PARTS OUT [measure flags...]
set -euo pipefail

parts=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
here=$(cd "$(dirname "$0")" && pwd)
target=${TARGET:-/tmp/gpu-tts}
if [ ! -x "$target/venv/bin/python" ]; then
    python3 "$here/gpu_tts.py" install --parts "$parts" --target "$target"
fi
cd "$(mktemp -d)"
"$target/venv/bin/python" "$here/gpu_tts.py" measure --out "$out" "$@" 2>&1 | tee "$out/log.txt"

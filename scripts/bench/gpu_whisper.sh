#!/usr/bin/env bash
# The GPU figures in one command, on a machine with torch, numpy, tokenizers and
# transformers and no network: install voxserve from the wheel in DATA (no dependencies:
# the torch runner needs none beyond those), then run `gpu_whisper.py measure` from
# outside the repository, so that the installed package is the one measured.
#
#   scripts/bench/gpu_whisper.sh DATA OUT [measure flags...]
#
# DATA is what `python scripts/bench/gpu_whisper.py prepare --out DATA` wrote.
set -euo pipefail

data=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
site=$(mktemp -d)/site
wheel=$(ls "$data"/voxserve-*.whl)
# --ignore-requires-python: the package declares the Python it is tested on; the torch
# runner also runs on newer ones. A wheel is a zip: unpack it where pip cannot install.
if ! "$python" -m pip install --quiet --no-deps --no-index --ignore-requires-python --target "$site" "$wheel"; then
    "$python" -m zipfile -e "$wheel" "$site"
fi
cd "$(mktemp -d)"
PYTHONPATH="$site" "$python" "$here/gpu_whisper.py" measure --data "$data" --out "$out" "$@" 2>&1 | tee "$out/log.txt"

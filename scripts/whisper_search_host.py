"""Measure the host's share of the torch Whisper runner's decoding search, per step and per
piece, and write it as the simulated device's table (`runners/sim/whisper_search.json`).

    PYTHONPATH=$PWD .venv/bin/python scripts/whisper_search_host.py            # CPU
    PYTHONPATH=$PWD .venv/bin/python scripts/whisper_search_host.py --device cuda --out /tmp/search-cuda.json

The search (`runners/whisper/search.py`) runs as the runner runs it, on a stand-in
model whose device work is next to nothing: the logits come from a table made up front
(a step costs one indexing), over a vocabulary of 32 text tokens and 40 timestamps, with
the token rules the server decodes with (no timestamps; `--timestamps` for all of them),
and the beams reorder the self-attention cache of a real decoder of tiny.en's four
layers, one unit wide. What a step then costs is the search's Python and the dispatch of
its operations: the host's share (on a CPU, the thread's CPU time; on CUDA, the wall
time, which also counts each kernel's launch). The model's own step is left out: its
host share is a graph replay (or an eager decoder's launches), costed apart in
`runners/sim/costs.py`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from voxserve.runners.whisper.model import Cache, Decoder
from voxserve.runners.whisper.search import TokenRules, beam_search, sample
from voxserve.runners.whisper.weights import Dims

TABLE = Path(__file__).resolve().parent.parent / "voxserve" / "runners" / "sim" / "whisper_search.json"
EOT, NO_TIMESTAMPS, STAMPS = 32, 34, 40
VOCAB = NO_TIMESTAMPS + 1 + STAMPS
PROMPT = 3
"""Tokens before the search's first step (`<|startoftranscript|>`, language, task)."""


def stand_in(rows: int, steps: int, device: torch.device, seed: int) -> torch.Tensor:
    """Logits [steps + 8, rows, vocab]: random, the end of text unlikely until the last
    few steps of `steps`, then likely, so each piece ends near `steps`."""
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(steps + 8, rows, VOCAB, generator=gen) * 2.0
    table[: steps - 4, :, EOT] = -30.0
    table[steps - 4 :, :, EOT] = 6.0
    return table.to(device)


def measure(pieces: int, per_piece: int, mode: str, steps: int, device: torch.device, repeat: int,
            timestamps: bool) -> dict[str, float]:
    """Median host seconds a step of one batch's search, and the steps it ran."""
    rules = TokenRules(vocab=VOCAB, eot=EOT, suppress=(EOT + 1,), suppress_begin=(EOT,), timestamps=timestamps,
                       no_timestamps=NO_TIMESTAMPS, max_initial_timestamp=10)
    dims = Dims(n_mels=80, width=1, encoder_layers=4, encoder_heads=1, decoder_layers=4, decoder_heads=1,
                vocab=VOCAB, audio_ctx=8, text_ctx=448)
    decoder = Decoder(dims).to(device).eval()
    rows = pieces * per_piece
    # On a CPU the thread's own CPU time (one intra-op thread: the search's whole cost),
    # which other load on the machine does not inflate; on CUDA the wall time to the end
    # of the device's work.
    clock = time.thread_time if device.type == "cpu" else time.perf_counter
    times: list[float] = []
    ran = 0
    for r in range(repeat + 1):
        table = stand_in(rows, steps, device, r)
        with torch.inference_mode():
            cache = decoder.new_cache(torch.zeros(pieces, dims.audio_ctx, 1, device=device), repeat=per_piece)
            start = torch.full((rows,), EOT + 1, dtype=torch.long, device=device)
            calls = 0

            def step(tokens: torch.Tensor, i: int, table: torch.Tensor = table) -> torch.Tensor:
                nonlocal calls
                calls += 1
                return table[i]

            def reorder(order: torch.Tensor, i: int, cache: Cache = cache) -> None:
                cache.reorder(order, PROMPT + i + 1)

            if device.type == "cuda":
                torch.cuda.synchronize()
            began = clock()
            if mode == "sample":
                gen = torch.Generator(device=device).manual_seed(r)
                sample(step, start, per_piece, 0.5, steps + 8, rules, generator=gen)
            else:
                beam_search(step, reorder, start, per_piece, steps + 8, rules)
            if device.type == "cuda":
                torch.cuda.synchronize()
            took = clock() - began
        if r:  # the first run warms the allocator and the dispatcher
            times.append(took / calls)
            ran = calls
    return {"pieces": pieces, "per_piece": per_piece, "mode": mode, "steps": ran,
            "step_s": statistics.median(times)}


def fit(points: list[dict[str, float]]) -> dict[str, float]:
    """Least squares line of step seconds over pieces: the step's and each further piece's."""
    xs = [p["pieces"] - 1 for p in points]
    ys = [p["step_s"] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    slope = max(0.0, slope)
    return {"step_s": max(0.0, my - slope * mx), "per_piece_s": slope}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--pieces", default="1,8,32,64,128")
    parser.add_argument("--steps", type=int, default=48, help="steps a piece runs before its end of text")
    parser.add_argument("--repeat", type=int, default=5, help="runs per point (the median is kept)")
    parser.add_argument("--timestamps", action="store_true", help="with the timestamp rules (the server decodes without)")
    parser.add_argument("--out", type=Path, default=TABLE)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(1)
    searches = {"beam5": (5, "beam"), "greedy": (1, "beam"), "sample5": (5, "sample")}
    points: dict[str, list[dict[str, float]]] = {}
    for name, (per_piece, mode) in searches.items():
        points[name] = [measure(int(p), per_piece, mode, args.steps, device, args.repeat, args.timestamps)
                        for p in args.pieces.split(",")]
        for p in points[name]:
            print(f"{name} pieces={p['pieces']:4d}: {1e3 * p['step_s']:.3f} ms a step ({p['steps']} steps)")
    table = {
        "measured_on": {"device": str(device), "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
                        "python": platform.python_version(), "timestamps": args.timestamps,
                        "command": "scripts/whisper_search_host.py"},
        "searches": {name: {"rows_per_piece": searches[name][0], "mode": searches[name][1], **fit(p), "points": p}
                     for name, p in points.items()},
    }
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    for name, entry in table["searches"].items():
        print(f"{name}: {1e3 * entry['step_s']:.3f} ms a step + {1e6 * entry['per_piece_s']:.2f} us a further piece")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

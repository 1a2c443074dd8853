"""Piper's prior: time and durations of the fixed-length copies against the dynamic graph.

The dynamic graph against its fixed-length copies (`voxserve/runners/piper/prior_graph.py`), one
item at a time, in one process.

Per length of ids, the four calls alternate within each round: the dynamic graph and
the copy that holds the ids, each on one and on two intra-op threads; each prints its
median over the rounds and its ratio to the dynamic graph on one thread. Then the
check: for every prefix (8, 13, ... ids) of the built-in bench prompts' sentences that a copy
holds, at three length scales with noise scales 0, are the durations equal, and how far
is z_p from the dynamic graph's?

    python scripts/bench/prior_graph_probe.py --rounds 41 --lengths 12,20,30,45,60,85
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from voxserve.bench.prompts import BUILTIN_PROMPTS
from voxserve.runners.piper.onnx_runner import (
    AcousticInput,
    AcousticRunner,
    PiperModel,
    bundled_voice,
)
from voxserve.runners.piper.prior_graph import PRIOR_LENGTHS, fixed_priors
from voxserve.text.phonemize import Phonemizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--lengths", default="12,20,30,45,60,85")
    args = parser.parse_args()
    model = PiperModel(bundled_voice())
    dynamic = model.acoustic
    fixed = AcousticRunner(model.graphs.prior, model.graphs.flow, False, fixed=fixed_priors(model.graphs.prior))
    phonemizer = Phonemizer(model.config)
    sentences = [ids for text in BUILTIN_PROMPTS for ids in phonemizer.ids(text)]
    longest = max(sentences, key=len)
    for n in (int(x) for x in args.lengths.split(",")):
        item = [AcousticInput(longest[:n], 0.667, 1.0, 0.8)]
        calls = {"dynamic t1": (dynamic, 1), "dynamic t2": (dynamic, 2), "fixed t1": (fixed, 1), "fixed t2": (fixed, 2)}
        for runner, threads in calls.values():
            for _ in range(3):
                runner.run_prior(item, threads)
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, (runner, threads) in calls.items():
                started = time.perf_counter()
                runner.run_prior(item, threads)
                times[name].append(time.perf_counter() - started)
        base = statistics.median(times["dynamic t1"])
        print(f"{n} ids: " + "  ".join(
            f"{name} {statistics.median(t) * 1e3:.2f} ms ({statistics.median(t) / base:.2f})" for name, t in times.items()
        ), flush=True)
    runs, equal, worst = 0, 0, 0.0
    for ids in sentences:
        for k in range(8, min(len(ids), max(PRIOR_LENGTHS)) + 1, 5):
            for length_scale in (0.8, 1.0, 1.3):
                item = [AcousticInput(ids[:k], 0.0, length_scale, 0.0)]
                ((want, want_durations),) = dynamic.run_prior(item)
                ((got, durations),) = fixed.run_prior(item)
                runs += 1
                if np.array_equal(durations, want_durations) and got.frames == want.frames:
                    equal += 1
                    worst = max(worst, float(np.abs(got.z_p - want.z_p).max()))
    print(f"{runs} runs: durations equal in {equal}; largest |z_p difference| {worst:.3g}")


if __name__ == "__main__":
    main()

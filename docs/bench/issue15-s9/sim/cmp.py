import sys, os, json, numpy as np
sys.argv = sys.argv[:1]
import importlib.util
spec = importlib.util.spec_from_file_location("sim", os.path.join(os.path.dirname(os.path.abspath(__file__)), "sim.py")); sim = importlib.util.module_from_spec(spec); spec.loader.exec_module(sim)
cfgs = json.loads(os.environ.get("CFGS", '{"base":{}}'))
for name, kw in cfgs.items():
    for conc in (16, 24):
        rs = [sim.run(conc, 48, noise=0.1, seed=k, **kw) for k in range(int(os.environ.get("SEEDS", "8")))]
        print("%-12s c=%d burst med %.3f p99 med %.3f p50 %.3f under %s" % (name, conc, np.median([r["burst"] for r in rs]), np.median([r["p99"] for r in rs]), np.median([r["p50"] for r in rs]), [r["under"] for r in rs]))

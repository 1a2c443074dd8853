import sys, os, numpy as np, importlib.util
spec = importlib.util.spec_from_file_location("sim", os.path.join(os.path.dirname(os.path.abspath(__file__)), "sim.py")); sim = importlib.util.module_from_spec(spec); spec.loader.exec_module(sim)
for bw in (0, 1, 2, 3, 4, 6):
    rs=[]; late=[]
    for k in range(32):
        r = sim.run(16, 48, noise=0.1, seed=k, burst_waiting=bw); rs.append(r); late += [l[0] for l in sim.LATE]
    print(bw, "burst med %.3f p90 %.3f  p50 %.3f late n=%d max %.3f" % (np.median([r["burst"] for r in rs]), np.percentile([r["burst"] for r in rs], 90), np.median([r["p50"] for r in rs]), len(late), max(late or [0])))

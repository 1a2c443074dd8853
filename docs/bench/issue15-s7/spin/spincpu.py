import time, resource, numpy as np, onnxruntime as ort
from voxserve.runners.piper import PiperModel, bundled_voice, split_model
from voxserve.runners.prior_graph import prior_feeds
files = bundled_voice(); g = split_model(files.model)
def mk(threads, spin):
    o = ort.SessionOptions(); o.intra_op_num_threads = threads; o.inter_op_num_threads = 1
    o.add_session_config_entry("session.intra_op.allow_spinning", spin[0]); o.log_severity_level = 3
    if len(spin) > 1: o.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(str(g.prior), o, providers=["CPUExecutionProvider"])
feeds = prior_feeds([np.arange(1, 86, dtype=np.int64) % 50 + 1], 85, (0.667, 1.0, 0.8), None)
for spin in ("0", "1", "1s", "0", "1", "1s"):
    s = mk(2, spin); s.run(None, feeds)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF); busy = 0.0
    for _ in range(20):
        a = time.perf_counter(); s.run(None, feeds); busy += time.perf_counter() - a
        time.sleep(0.05)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    print("spin %s: calls %.1f ms wall in all, process CPU %.1f ms (%.2f CPU-s per call-s)" % (spin, busy*1e3, cpu*1e3, cpu/busy))

import time, numpy as np, statistics as st, onnxruntime as ort
from voxserve.runners import piper as P
from voxserve.runners.piper import AcousticInput, PiperModel, bundled_voice, split_model
from voxserve.text.phonemize import Phonemizer
from voxserve.text.split import normalize, segment
from voxserve.bench.prompts import BUILTIN_PROMPTS
files = bundled_voice(); m = PiperModel(files); ph = Phonemizer(m.config)
g = split_model(files.model)
print(g)
items = []
for t in BUILTIN_PROMPTS[:24]:
    ids = ph.ids(segment(normalize(t), first_max_chars=60)[0])[0]
    items.append(AcousticInput(ids, m.noise_scale, m.length_scale, m.noise_w))
def mk(path, threads, spin):
    o = ort.SessionOptions(); o.intra_op_num_threads = threads; o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    o.add_session_config_entry("session.intra_op.allow_spinning", spin[0])
    if len(spin) > 1: o.add_session_config_entry("session.force_spinning_stop", "1")
    o.log_severity_level = 3
    return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
def T(f, n=5):
    ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    return min(ts)
# prior feeds via runner internals
from voxserve.runners.prior_graph import prior_feeds
res = {}
for name, threads, spin in (("2t-nospin", 2, "0"), ("2t-spinstop", 2, "1s"), ("2t-spin", 2, "1"), ("2t-nospin", 2, "0"), ("2t-spinstop", 2, "1s"), ("2t-spin", 2, "1")):
    s = mk(g.prior, threads, spin); v = mk(g.vocoder, threads, spin); fl = mk(g.flow, threads, spin)
    pri = []
    for it in items:
        feeds = prior_feeds([it.ids], len(it.ids), (it.noise_scale, it.length_scale, it.noise_w), None)
        pri.append(T(lambda: s.run(None, feeds)))
    z = np.random.randn(1, 192, 22).astype(np.float32)*0.5
    names = [i.name for i in v.get_inputs()]
    voc = T(lambda: v.run(None, {names[0]: z}), 9)
    fn = [i.name for i in fl.get_inputs()]
    zp = np.random.randn(1, 192, 46).astype(np.float32); mask = np.ones((1,1,46), np.float32)
    flo = T(lambda: fl.run(None, {fn[0]: zp, fn[1]: mask}), 9)
    print("%-10s prior p50 %.2f ms, vocoder 22 fr %.2f ms, flow 46 fr %.2f ms" % (name, 1e3*st.median(pri), 1e3*voc, 1e3*flo))

import time, numpy as np, statistics as st
from voxserve.runners.piper import AcousticInput, PiperModel, bundled_voice
from voxserve.text.phonemize import Phonemizer
from voxserve.text.split import normalize, segment
from voxserve.bench.prompts import BUILTIN_PROMPTS
m = PiperModel(bundled_voice()); ph = Phonemizer(m.config)
items = []
for t in BUILTIN_PROMPTS:
    ids = ph.ids(segment(normalize(t), first_max_chars=60)[0])[0]
    items.append(AcousticInput(ids, m.noise_scale, m.length_scale, m.noise_w))
ac = m.acoustic
def T(f, n=3):
    ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    return min(ts)
for b in (1, 2, 4):
    singles = []; batched = []
    for i in range(0, 32, b):
        grp = items[i:i+b]
        singles.append(sum(T(lambda it=it: ac.run([it])) for it in grp))
        batched.append(T(lambda: ac.run(grp)))
    print("batch %d: singles %.1f ms, batched %.1f ms per group (sum over groups: %.0f vs %.0f)" % (b, 1e3*st.median(singles), 1e3*st.median(batched), 1e3*sum(singles), 1e3*sum(batched)))
z = np.random.randn(192, 400).astype(np.float32)*0.5
for n in (26, 52):
    w = np.ascontiguousarray(z[:, :n])
    one = T(lambda: m.vocoder.run([w]), 7); four = T(lambda: m.vocoder.run([w, w, w, w]), 7)
    print("vocoder %d frames: 1 x %.1f ms, batch of 4 %.1f ms (%.2fx per item)" % (n, 1e3*one, 1e3*four, four/4/one))

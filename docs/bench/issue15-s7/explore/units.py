import time, numpy as np, statistics as st
from voxserve.config import TTSConfig
from voxserve.runners.piper import AcousticInput, PiperModel, bundled_voice
from voxserve.text.phonemize import Phonemizer
from voxserve.text.split import normalize, segment
from voxserve.bench.prompts import BUILTIN_PROMPTS
m = PiperModel(bundled_voice()); ph = Phonemizer(m.config)
firsts = []
for t in BUILTIN_PROMPTS:
    pieces = segment(normalize(t), first_max_chars=60)
    firsts.append(ph.ids(pieces[0])[0])
ac = m.acoustic
def T(f, n=3):
    ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    return min(ts)
pri=[];flo=[];fr=[];ids=[]
for i in firsts:
    item = AcousticInput(i, m.noise_scale, m.length_scale, m.noise_w)
    (prior, d), = ac.run_prior([item])
    pri.append(T(lambda: ac.run_prior([item]))); flo.append(T(lambda: ac.flow(prior, 0, prior.frames))); fr.append(prior.frames); ids.append(len(i))
print("first segments: ids p50 %d frames p50 %d" % (st.median(ids), st.median(fr)))
print("prior p50 %.1f ms, flow p50 %.1f ms, stageA(run) p50 %.1f" % (1e3*st.median(pri), 1e3*st.median(flo), 1e3*st.median([T(lambda: ac.run([AcousticInput(i, m.noise_scale, m.length_scale, m.noise_w)])) for i in firsts])))
z = np.random.randn(192, 400).astype(np.float32)*0.5
for n in (20, 36, 44, 52, 68, 84, 116, 148):
    w = np.ascontiguousarray(z[:, :n])
    print("vocoder %3d frames: %.1f ms" % (n, 1e3*T(lambda: m.vocoder.run([w]), 7)))

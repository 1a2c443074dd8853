# The c=16 burst in simulation (issue 15, session 9): the engine's own Scheduler, driven by
# two workers whose unit times come from collect.py (the 48 bench prompts' segments, ids and
# frames, and one-thread unit costs measured here), times INFL for a loaded server, with
# NOISE-free or seeded noise. No admission. TREE=<checkout> picks the scheduler to run.
# usage: python sim.py; CFGS='{"name": {scheduler kwargs}}' python cmp.py; python late2.py
import json, sys, heapq, os, itertools
import numpy as np
sys.path.insert(0, os.environ.get("TREE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../..")))
from voxserve.engine.scheduler import Scheduler, ModelProfile, Latent, AcousticWork, VocoderWork
from voxserve.config import VocoderChunking
D = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data.json")))
vx = np.array(sorted(int(k) for k in D["vocoder"])); vy = np.array([D["vocoder"][str(k)] for k in vx])
vb, va = np.polyfit(vx, vy, 1)
# stage A fit: a + b*ids + c*frames (skip first prompt: warm-up)
rows = [s for p in D["prompts"][2:] for s in p]
X = np.array([[1, r[0], r[1]] for r in rows]); y = np.array([r[2] for r in rows])
coef = np.linalg.lstsq(X, y, rcond=None)[0]
SPLITH = int(os.environ.get('SPLITH', '0'))
SLOW = [float(x) for x in os.environ['SLOW'].split(',')] if os.environ.get('SLOW') else None
INFL = float(os.environ.get("INFL", "1.12"))
def acost(ids, frames): return INFL * (coef[0] + coef[1]*ids + coef[2]*frames)
def vcost(n): return INFL * (va + vb*n)
class Item:
    def __init__(s, ids, frames): s.ids = np.zeros(ids); s.frames = frames
LOG = []
LATE = []
def run(conc=16, n=48, noise=0.0, seed=0, **kw):
    LOG.clear(); LATE.clear(); rng = np.random.default_rng(seed)
    ch = VocoderChunking(**{k[3:]: v for k, v in kw.items() if k.startswith("ch_")})
    prof = ModelProfile("joe", 256, 22050, ch, acoustic_s_per_id=5e-4)
    sk = {k: v for k, v in kw.items() if not k.startswith("ch_")}
    s = Scheduler(**{**dict(credits=4, urgent_slack=0.15, acoustic_slots=1, workers=2, idle_threads=2, idle_chunks=2, idle_pair=True), **sk})
    s._acoustic_s_per_id["joe"] = coef[1] + coef[2]*2.1  # warm estimate
    prompts = D["prompts"]
    now = 0.0; ev = []; cnt = itertools.count()
    sent = {}; first = {}; under = set(); nxt = 0
    def submit(t):
        nonlocal nxt
        i = nxt; nxt += 1
        s.add(i, [Item(a, f) for a, f, _ in prompts[i]], t, prof); sent[i] = t
    for _ in range(min(conc, n)): submit(0.0)
    dry = {}; deferred = {}
    def dispatch(t):
        while True:
            w = s.next_work(t)
            if w is None: return
            if isinstance(w, AcousticWork):
                F = w.input.frames
                if SPLITH and F > SPLITH + 2 * 24:
                    F = SPLITH + 24; deferred[(w.stream_id, w.segment)] = w.input.frames
                c = acost(len(w.input.ids), F) / (1.6 if w.threads > 1 else 1)
            else:
                c = vcost(w.hi - w.lo) / (1.5 if w.threads > 1 else 1)
                F = deferred.get((w.stream_id, w.segment))
                if F and w.hi > SPLITH:
                    c += INFL * coef[2] * (F - w.lo + 24); del deferred[(w.stream_id, w.segment)]
            c *= (1 + noise * rng.standard_normal()) if noise else 1
            if SLOW and SLOW[1] <= t < SLOW[2]:
                c *= SLOW[0]  # a machine slowdown: every unit started in [a, b) runs x slower
            heapq.heappush(ev, (t + max(c, 1e-4), next(cnt), w, c)); LOG.append((t, t+c, w))
    dispatch(0.0)
    while ev:
        t, _, w, c = heapq.heappop(ev)
        if isinstance(w, AcousticWork):
            s.complete_acoustic(w, Latent(None, w.input.frames), c)
        else:
            sid = w.stream_id
            if sid in dry and t > dry[sid] + 1e-9: under.add(sid); LATE.append((round(t - dry[sid],3), sid, w.seq, round(t,3)))
            r = s.complete_vocoder(w, (w.end - w.start) * 256, t, c)
            if r is not None:
                for _ in range(r.released): s.taken(sid)
                if r.first: first[sid] = t; dry[sid] = t
                if r.released: dry[sid] = dry.get(sid, t) + r.samples / 22050
                if r.last and nxt < n: submit(t + 0.003)
        dispatch(t)
    ttfp = np.array([first[i] - sent[i] for i in range(n)])
    return dict(first=first, sent=sent, burst=ttfp[:conc].max(), p99=np.percentile(ttfp, 99), p50=np.percentile(ttfp, 50), under=len(under), end=t)
if __name__ == "__main__":
    print("A fit", coef, "V fit", va, vb)
    for conc in (16,):
        print(conc, run(conc))

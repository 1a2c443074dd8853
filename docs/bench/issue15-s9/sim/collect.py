import os
# segments, ids and frames of the 48 bench prompts; unit costs on one thread
import json, time, sys
import numpy as np
from voxserve.config import TTSConfig
from voxserve.engine.piper_voice import PiperVoice
from voxserve.engine.tts import TTSEngine
from voxserve.bench.prompts import BUILTIN_PROMPTS, pick
cfg = TTSConfig(models=("piper",))
voice = PiperVoice.load(cfg)
v = voice.voices[0]
from voxserve.text.split import normalize
from voxserve.text.split import segment
out = []
for text in pick(BUILTIN_PROMPTS, 48, 0):
    segs = []
    for piece in segment(normalize(text), first_max_chars=cfg.first_segment_chars, max_chars=cfg.max_segment_chars):
        for item in voice.inputs(piece, v, 1.0):
            t = time.perf_counter(); lat = voice.acoustic([item])[0]; dt = time.perf_counter() - t
            segs.append((len(item.ids), lat.frames, dt))
    out.append(segs)
# vocoder costs per window
z = voice.acoustic(voice.inputs("the quick brown fox jumps over the lazy dog near the quiet river bank and more words here to be long enough for a big window of frames", v, 1.0))[0]
from voxserve.engine.voices import Span
vc = {}
for n in (22, 26, 34, 44, 52, 68, 84, 100, 116, 148):
    ts = []
    for _ in range(7):
        sp = Span(z, 0, n) if False else None
        t = time.perf_counter(); voice.model.vocoder.run([np.asarray(z.features[:, :n])], 1); ts.append(time.perf_counter() - t)
    vc[n] = float(np.median(ts))
json.dump({"prompts": out, "vocoder": vc}, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data.json"), "w"))
print(vc)
print([[s[:2] for s in p] for p in out[:5]])

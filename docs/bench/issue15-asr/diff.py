import asyncio, difflib, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from voxserve.config import ASRConfig
from voxserve.engine.asr import ASREngine, TranscribeOptions
from voxserve.engine.transcribe import start_transcription
from voxserve.engine.threads import single_threaded_blas
from voxserve.bench.metrics import word_errors
import re
single_threaded_blas()
import os; D=os.environ.get("SET","/tmp/L/set"); data = Path(D+"/long-00.wav").read_bytes(); ref = Path(os.environ.get("REF","/tmp/L/LONG.txt")).read_text()
norm = lambda t: re.sub(r"[^a-z' ]", " ", t.lower()).split()
for lim in map(float, sys.argv[1:]):
    e = ASREngine(ASRConfig(nice=0, even_piece_s=lim)); e.start()
    async def go():
        with ThreadPoolExecutor(2) as pool:
            t = await start_transcription(e, data, TranscribeOptions(language="en"), pool)
            ws = [w async for w in t.windows()]
            return ws
    ws = asyncio.run(go()); e.stop()
    text = "".join(s.text for w in ws for s in w.segments)
    print(lim, f"WER {word_errors(ref, text).wer*100:.1f}%", [round(w.end-w.start,1) for w in ws], e.snapshot()["widened"], e.snapshot()["fallbacks"])
    a, b = norm(ref), norm(text)
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op != "equal": print("   ", op, " ".join(a[max(0,i1-3):i2+2]), "=>", " ".join(b[max(0,j1-3):j2+2]))
    for w in ws: print("      |", "".join(s.text for s in w.segments)[-60:])

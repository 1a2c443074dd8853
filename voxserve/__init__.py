"""voxserve: a speech-serving engine (OpenAI-compatible TTS and STT).

One process-wide setting is made here, on the first import of any voxserve module, because
it must come before CTranslate2 (Whisper) loads GNU OpenMP: its idle threads spin for at
most 20,000 turns at a barrier (`GOMP_SPINCOUNT`) before they sleep, instead of libgomp's
default 300,000. On a 2-core machine shared with the TTS workers the long spinning took the
cores from the threads doing the work: four transcriptions on a busy machine used 9.7-17.7
CPU-seconds, against 1.4-1.6 with no spinning at all (`OMP_WAIT_POLICY=PASSIVE`), which
halved the ASR tests' wall time. Not spinning at all costs a lone clip on an idle machine:
20 short clips at c=1 took 0.33 s (p50) passive, 0.27 s with the default spin and 0.21 s
with 20,000 turns, in one quiet run (docs/BENCHMARKS.md). Set either variable yourself to
override it.
"""

import os

if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "20000"

"""voxserve: a speech-serving engine (OpenAI-compatible TTS and STT).

One process-wide setting is made here, on the first import of any voxserve module, because
it must come before CTranslate2 (Whisper) is loaded: GNU OpenMP threads wait passively.
CTranslate2 runs its intra-op threads on libgomp, whose idle threads otherwise spin for a
while at every barrier. On a 2-core machine shared with the TTS workers that spinning took
the cores from the threads doing the work: four transcriptions on a busy machine used
9.7-17.7 CPU-seconds spinning, against 1.4-1.6 with passive waits (tests/ and the ASR
tests' wall time halved). Set OMP_WAIT_POLICY yourself to override it.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

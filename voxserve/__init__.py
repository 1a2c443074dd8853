"""voxserve: a speech-serving engine (OpenAI-compatible TTS and STT).

One process-wide setting is made here, on the first import of any voxserve module, because
it must come before CTranslate2 (Whisper) loads GNU OpenMP: its idle threads spin for at
most 20,000 turns at a barrier (`GOMP_SPINCOUNT`) before they sleep, instead of libgomp's
default 300,000. On a machine whose cores the TTS workers share, long spinning takes the
cores from the threads doing the work, so a transcription costs several times the CPU it
needs; never spinning (`OMP_WAIT_POLICY=PASSIVE`) makes each barrier a sleep and a wake-up,
which slows a lone clip on an idle machine. A short spin keeps the wake-up cheap and gives
the cores back soon (the figures: docs/BENCHMARKS.md, "Transcription of files"). Set either
variable yourself to override it.
"""

import os

if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "20000"

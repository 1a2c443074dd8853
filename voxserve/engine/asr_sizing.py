"""How the ASR engine sizes itself for its device: its threads, its batcher, its
buffered-audio budget, and how many threads a batch gets.

A CPU spreads batches over several decoding workers; a batched device (CUDA, or the
simulated one) decodes one batch at a time, fed by one worker, and a file group waits
up to one batch's time for company (`file_wait`), counted from when the last file batch
ended if that is later than its oldest piece (`Batcher.free_at`), so pieces that queued
behind a batch gather those arriving just after it. These are pure rules over the configuration and the engine's counts:
the engine (`engine/asr.py`) applies them under its lock.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from voxserve.audio.mel import SAMPLE_RATE
from voxserve.config import ASRConfig
from voxserve.engine import devices
from voxserve.engine.batcher import Batcher
from voxserve.engine.budget import AudioBudget
from voxserve.engine.recognizer import Piece

__all__ = [
    "BATCHED_BURST_WAIT_S",
    "BATCHED_FILE_WAIT_MAX_S",
    "BATCHED_FILE_WAIT_S",
    "BATCHED_SPARE_CORES",
    "BATCH_TIME_WEIGHT",
    "CPU_MAX_REQUESTS",
    "audio_budget",
    "audio_pool_size",
    "batcher_for",
    "file_wait",
    "requests_limit",
    "resolve_device",
    "sized",
    "solo_threads",
]

log = logging.getLogger(__name__)

BATCHED_FILE_WAIT_S = 0.025
"""How long a file group waits to fill on a batched device before any batch has run:
about one batch's time there (short pieces, greedy: 15-25 ms on the H200's figures,
`runners/sim/costs.py`). After that the wait is one batch's time as measured
(`file_wait`)."""
BATCHED_FILE_WAIT_MAX_S = 0.1
"""The longest a file group waits to fill on a batched device: a full batch of 64 short
pieces at beam 5 takes about this long on the H200, so at most one batch's time is added
to a file's latency."""
BATCH_TIME_WEIGHT = 0.25
"""Weight of the latest file batch in the running batch time (`file_wait`)."""
BATCHED_BURST_WAIT_S = 0.25
"""The longest a file group waits on a batched device while more file pieces are coming
(uploads being decoded, pieces of registered requests not yet ready), so that a burst of
uploads goes as one batch: a batch of 64 short pieces takes about 75 ms of the H200, and
64 uploads of 2-17 s arrive and decode over 100-200 ms on two cores."""
BATCHED_SPARE_CORES = 2
"""Cores a batched device's audio pool leaves free: one for the event loop (HTTP), one
for the worker that feeds the device and turns its tokens into text."""
CPU_MAX_REQUESTS = 32
"""Transcriptions in progress at once on a CPU when not set (`ASRConfig.max_requests`)."""


def resolve_device(config: ASRConfig) -> tuple[str, str]:
    """(device, runtime) for `config` (`engine/devices.py`): CTranslate2 is the CPU runtime."""
    return devices.resolve_device(config.device, config.runtime, "ct2")


def sized(config: ASRConfig, batched: bool, cores: int) -> ASRConfig:
    """`config` with what it leaves unset filled in for the device. A GPU decodes one
    batch at a time, so one thread feeds it batches as large as it takes well; several
    threads would only split them."""
    if batched:
        config = replace(config, workers=1, solo_threads=1)
    if config.audio_workers == 0:
        config = replace(config, audio_workers=audio_pool_size(batched, cores))
    if config.max_requests == 0:
        config = replace(config, max_requests=requests_limit(batched, config.gpu_batch))
    return config


def file_wait(batch_s: float, floor_s: float) -> float:
    """How long a file group waits to fill on a batched device: one batch's time
    (`batch_s`, as measured), at least `floor_s` (`--asr-batch-wait-ms`), at most
    `BATCHED_FILE_WAIT_MAX_S`, counted from when the last file batch ended if later
    than the group's oldest piece (`Batcher.free_at`). The pieces that arrive while a
    batch decodes, and those just after it, then join the next one instead of going in
    small batches: on a device with room to spare that costs
    little latency, and every batch saved is host time (launches, the search's
    bookkeeping) given back to the uploads."""
    return max(floor_s, min(BATCHED_FILE_WAIT_MAX_S, batch_s))


def requests_limit(batched: bool, gpu_batch: int) -> int:
    """Transcriptions in progress at once when not set: `CPU_MAX_REQUESTS` on a CPU; on
    a batched device twice its batch, since a 3-8 s upload is one piece and a batch fills
    only with as many uploads in progress (one batch decoding, the next gathering)."""
    return 2 * gpu_batch if batched else CPU_MAX_REQUESTS


def audio_pool_size(batched: bool, cores: int) -> int:
    """Audio threads (upload decoding, resampling, cutting) when not set: two on a CPU,
    where the decoding workers need the other cores; on a batched device every core but
    `BATCHED_SPARE_CORES`, because there the host's upload work, not the model, bounds
    throughput (docs/BENCHMARKS.md, "The host side")."""
    if not batched:
        return min(cores, 2)
    return max(2, cores - BATCHED_SPARE_CORES)


def solo_threads(
    threads: int,
    *,
    live: bool,
    running: int,
    waiting: int,
    live_sessions: int,
    busy_elsewhere: bool,
) -> int:
    """Intra-op threads for a batch about to start: all `threads` when it is the only work
    (no other batch `running`; no piece `waiting`, queued or still to come from the
    batch's own requests; nothing `busy_elsewhere`), else 1. A file
    batch never goes solo while live sessions are open: it would hold the core that
    their turns need."""
    if running or waiting or busy_elsewhere or (live_sessions and not live):
        return 1
    return threads


def audio_budget(config: ASRConfig) -> AudioBudget:
    """The buffered-audio budget of `config`, with a warning when one long upload can
    hold all of it."""
    if config.max_buffered_audio_s < 2 * config.max_audio_seconds:
        log.warning(
            "the buffered-audio budget (%g s) holds less than two files of the longest "
            "accepted length (%g s): one long upload can hold all of it",
            config.max_buffered_audio_s,
            config.max_audio_seconds,
        )
    return AudioBudget(int(config.max_buffered_audio_s * SAMPLE_RATE), SAMPLE_RATE)


def batcher_for(config: ASRConfig, batched: bool, max_batch: int) -> Batcher[Piece]:
    """The engine's batcher: on a CPU batches spread over the workers; on a batched
    device they fill, a file group waiting at least `BATCHED_FILE_WAIT_S`, and up to
    `BATCHED_BURST_WAIT_S` while more file pieces are coming. Its payloads are the
    engine's pieces (`engine/recognizer.py: Piece`)."""
    wait_s = config.batch_wait_ms / 1000
    return Batcher(
        max_batch,
        max(wait_s, BATCHED_FILE_WAIT_S) if batched else wait_s,
        workers=config.workers,
        spread=not batched,
        burst_wait_s=BATCHED_BURST_WAIT_S if batched else 0.0,
    )

"""Kokoro's window plan and its admission against the real scheduler, on a fake clock.

Workers are simulated: a stage A item takes 2 ms per phoneme id, a window's decode takes
`rtf` times the audio of all its frames, context included. A sentence of n characters
makes 20 + 2n frames of 25 ms (~20 characters a second, with the lead and the final
pause). The client takes every chunk at once; a stream is continuous if its player never
waits more than 50 ms once the first audio came.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pytest

from voxserve.engine.adapters.kokoro import CHUNKING, GROWTH, SENTENCE_CHARS
from voxserve.engine.admission import room_for
from voxserve.engine.cpu_scheduler import CpuScheduler
from voxserve.engine.scheduler import Budget
from voxserve.engine.work import (
    AcousticWork,
    Latent,
    ModelProfile,
    VocoderChunking,
    VocoderWork,
    Work,
)
from voxserve.text.split import segment

HOP, RATE = 600, 24000
ACOUSTIC_S_PER_ID = 2e-3
LONG = (
    "The expedition set out before dawn, when the snow on the ridge was still hard enough "
    "to walk on. For the first few hours the climbers made good progress, moving in a "
    "single line and speaking only when they had to. By midday the sun had softened the "
    "surface, and every step sank deep into the slush. The leader called a halt below a "
    "wide crack in the ice, studied the sky for a long minute, and decided that they "
    "would camp there for the night and try for the summit the following morning."
)


@dataclass(frozen=True)
class Piece:
    ids: np.ndarray


def frames_of(piece: Piece) -> int:
    return 20 + 2 * len(piece.ids)


def simulate(
    streams: int, rtf: float, chunking: VocoderChunking = CHUNKING, text: str = LONG, workers: int = 2,
    growth: float = GROWTH,
) -> list[tuple[float, float]]:
    """(time to first audio, longest wait of the player) per stream, all started 0.3 s
    apart, each speaking `text`."""
    profile = ModelProfile(
        "kokoro", HOP, RATE, chunking, acoustic_s_per_id=ACOUSTIC_S_PER_ID, sentence_chars=SENTENCE_CHARS,
        chunk_growth=growth,
    )
    sched = CpuScheduler(credits=4, budget=Budget(acoustic_slots=workers - 1))
    texts = segment(text, first_max_chars=None, max_chars=SENTENCE_CHARS)
    starts = [0.3 * i for i in range(streams)]
    for i, start in enumerate(starts):
        sched.add(i, [Piece(np.zeros(len(t), np.int64)) for t in texts], start, profile)
    running: list[tuple[float, int, Work, float]] = []
    arrivals: dict[int, list[tuple[float, float]]] = {i: [] for i in range(streams)}
    idle, now, order = workers, 0.0, 0
    while True:
        while idle:
            work = sched.next_work(now)
            if work is None:
                break
            if isinstance(work, AcousticWork):
                spent = len(work.input.ids) * ACOUSTIC_S_PER_ID
            else:
                spent = rtf * (work.hi - work.lo) * HOP / RATE
            order += 1
            heapq.heappush(running, (now + spent, order, work, spent))
            idle -= 1
        if not running:
            break
        now, _, work, spent = heapq.heappop(running)
        idle += 1
        if isinstance(work, AcousticWork):
            assert isinstance(work.input, Piece)
            sched.complete_acoustic(work, Latent(None, frames_of(work.input)), spent)
        else:
            assert isinstance(work, VocoderWork)
            samples = (work.end - work.start) * HOP
            sched.complete_vocoder(work, samples, now)
            sched.taken(work.stream_id)
            arrivals[work.stream_id].append((now, samples / RATE))
    results = []
    for i, start in enumerate(starts):
        played_to, longest = arrivals[i][0][0], 0.0
        for at, seconds in arrivals[i]:
            longest = max(longest, at - played_to)
            played_to = max(played_to, at) + seconds
        results.append((arrivals[i][0][0] - start, longest))
    return results


def continuous(results: list[tuple[float, float]]) -> bool:
    return all(wait <= 0.05 for _, wait in results)


def decoded_per_kept(chunking: VocoderChunking, frames: int = 200) -> float:
    """Frames decoded per frame kept over a sentence of `frames`: the context's cost."""
    from voxserve.engine.work import plan_chunk

    pos, index, decoded = 0, 0, 0
    while pos < frames:
        lo, hi, _, pos = plan_chunk(frames, pos, index, chunking, growth=GROWTH)
        decoded += hi - lo
        index += 1
    return decoded / frames


@pytest.mark.parametrize("rtf", [0.45, 0.55, 0.6])
def test_windows_keep_one_or_two_streams_continuous(rtf: float) -> None:
    for streams in (1, 2):
        assert continuous(simulate(streams, rtf)), (streams, rtf)


def test_first_audio_waits_for_one_window_not_the_sentence() -> None:
    first = simulate(1, 0.55)[0][0]
    sentence = segment(LONG, first_max_chars=None, max_chars=SENTENCE_CHARS)[0]
    stage_a = len(sentence) * ACOUSTIC_S_PER_ID
    window = 0.55 * (CHUNKING.first_chunk_frames + CHUNKING.right_context) * HOP / RATE
    assert first == pytest.approx(stage_a + window, abs=0.01)
    assert first < 0.55 * frames_of(Piece(np.zeros(len(sentence), np.int64))) * HOP / RATE / 2


def test_growing_faster_than_one_thread_decodes_stalls() -> None:
    """Why the windows grow by 1.25: doubling, each window takes longer on one thread,
    context included, than the audio before it lasts, once two streams share two
    workers."""
    assert not continuous(simulate(2, 0.55, growth=2.0))


def test_admission_at_the_measured_cost_stops_where_the_simulation_stalls() -> None:
    """The cost meter measures the decode of the context too, and admission weighs it by
    the windows' growth (`ModelProfile.ramp`): on two workers it lets in two streams,
    not three, which stall, from RTF 0.4 per frame decoded (a quiet machine) up."""
    for rtf in (0.4, 0.55):
        assert continuous(simulate(2, rtf))
        assert not continuous(simulate(3, rtf))
    cost = 0.4 * decoded_per_kept(CHUNKING) * GROWTH
    assert 0.57 < cost < 0.85
    budget = 2 * 0.85
    costs = {"kokoro": cost}
    assert room_for(budget, costs, {"kokoro": 1}, 0, "kokoro")
    assert not room_for(budget, costs, {"kokoro": 2}, 0, "kokoro")

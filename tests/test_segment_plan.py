"""Kokoro's segment plan and admission weight against the real scheduler, on a fake clock.

Workers are simulated: a stage A item takes 2 ms per phoneme id, a whole-segment decode
takes `rtf` times its audio. A segment of n characters makes 40 + 2n frames of 25 ms
(fitted to Kokoro: ~20 characters a second, and ~1 s of pauses and lengthening per
segment). The client takes every chunk at once; a stream is continuous if its player
never waits more than 50 ms once the first audio came.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pytest

from voxserve.engine.cost import admission_cost, room_for
from voxserve.engine.kokoro_voice import SEGMENTS
from voxserve.engine.scheduler import (
    AcousticWork,
    Latent,
    ModelProfile,
    Scheduler,
    VocoderWork,
    Work,
)
from voxserve.text.split import SegmentPlan, grow_segments, segment

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
    return 40 + 2 * len(piece.ids)


def simulate(
    streams: int, rtf: float, plan: SegmentPlan | None, text: str = LONG, workers: int = 2
) -> list[tuple[float, float]]:
    """(time to first audio, longest wait of the player) per stream, all started 0.3 s
    apart, each speaking `text`."""
    profile = ModelProfile("kokoro", HOP, RATE, None, acoustic_s_per_id=ACOUSTIC_S_PER_ID, segments=plan)
    sched = Scheduler(credits=4, urgent_slack=0.15, acoustic_slots=workers - 1)
    texts = grow_segments(text, plan) if plan is not None else segment(text, 60, 200)
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
                spent = rtf * (work.end - work.start) * HOP / RATE
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


@pytest.mark.parametrize("rtf", [0.45, 0.55, 0.7])
def test_growing_segments_keep_one_or_two_streams_continuous(rtf: float) -> None:
    for streams in (1, 2):
        assert continuous(simulate(streams, rtf, SEGMENTS)), (streams, rtf)


def test_sentence_segments_stall_and_start_later() -> None:
    """Today's plan for chunked models (a 60-character first clause, whole sentences up
    to 200) stalls a whole-segment stream even alone on an idle machine, as soon as a
    short sentence comes before a long one."""
    text = "Good evening. " + LONG
    old = simulate(1, 0.55, None, text)
    new = simulate(1, 0.55, SEGMENTS, text)
    assert not continuous(old) and continuous(new)
    assert new[0][0] <= old[0][0]
    first_old, first_new = simulate(1, 0.55, None)[0][0], simulate(1, 0.55, SEGMENTS)[0][0]
    assert first_new < 0.75 * first_old  # a few words first, not a clause
    faster = SegmentPlan(first_chars=18, max_chars=150, growth=1.5, pause_chars=6)
    assert not continuous(simulate(2, 0.7, faster))  # why the plan grows by 1.3


def test_admission_stops_kokoro_where_the_simulation_stalls() -> None:
    """Three streams at RTF 0.55 on two workers stall, though their load (1.65) is under
    the budget (1.7): counted at cost x growth, admission lets in two, not three."""
    assert continuous(simulate(2, 0.55, SEGMENTS))
    assert not continuous(simulate(3, 0.55, SEGMENTS))
    budget = 2 * 0.85
    weighted = admission_cost(0.55, SEGMENTS.growth)
    costs = {"kokoro": weighted}
    assert room_for(budget, costs, {"kokoro": 1}, 0, "kokoro")
    assert not room_for(budget, costs, {"kokoro": 2}, 0, "kokoro")
    assert room_for(budget, {"kokoro": 0.55}, {"kokoro": 2}, 0, "kokoro")  # unweighted: 3
    assert admission_cost(0.08, None) == 0.08 and admission_cost(None, 1.3) is None

"""Cost per audio-second and the weighted stream capacity: pure arithmetic."""

from __future__ import annotations

import pytest

from voxserve.engine.cost import CostMeter, load_with, room_for, stream_capacity

PIPER, HEAVY = 0.08, 0.48  # worker-seconds per audio-second: HEAVY costs 6 Piper streams
BUDGET = 2 * 0.85


def test_meter_waits_for_two_seconds_of_audio_then_follows_recent_work() -> None:
    meter = CostMeter(window_s=10.0)
    meter.add("acoustic", 0.05, 2.0)
    meter.add("vocoder", 0.1, 1.0)
    assert meter.cost() is None  # stage B has made 1 s only
    meter.add("vocoder", 0.1, 1.0)
    assert meter.cost() == pytest.approx(0.025 + 0.1)
    for _ in range(20):
        meter.add("vocoder", 0.5, 1.0)  # the machine got slower: the figure follows it
    cost = meter.cost()
    assert cost is not None and cost > 0.45


def test_a_burst_of_starting_streams_costs_what_steady_streams_do() -> None:
    """Sixteen streams start: each one's first sentence (4 s of audio) goes through stage
    A, and only its first 0.2 s is decoded yet. Work over decoded audio would read 0.78
    worker-seconds per audio-second; stage by stage, it is the steady 0.09."""
    steady, burst = CostMeter(), CostMeter()
    for _ in range(16):
        steady.add("acoustic", 0.12, 4.0)
        steady.add("vocoder", 0.24, 4.0)
        burst.add("acoustic", 0.12, 4.0)
        burst.add("vocoder", 0.012, 0.2)
    assert steady.cost() == pytest.approx(0.09)
    assert burst.cost() == pytest.approx(0.09)


def test_units_on_several_threads_count_only_until_one_worker_units_are_measured() -> None:
    """A lone stream's units spread over two threads cost more worker-seconds for their
    audio; once streams share the machine, every unit runs on one worker, and that is the
    cost admission needs."""
    meter = CostMeter()
    meter.add("acoustic", 0.04, 4.0, threads=2)
    meter.add("vocoder", 0.16, 4.0, threads=2)
    assert meter.cost() == pytest.approx(0.02 + 0.08)  # alone so far: counted on both workers
    meter.add("vocoder", 0.24, 4.0)
    assert meter.cost() == pytest.approx(0.02 + 0.06)  # stage B on one worker from now on
    meter.add("acoustic", 0.12, 4.0)
    meter.add("vocoder", 0.5, 1.0, threads=2)  # a lone stream again: not counted
    assert meter.cost() == pytest.approx(0.03 + 0.06)


def test_one_model_is_workers_budget_over_its_cost() -> None:
    capacity = stream_capacity(BUDGET, {"piper": PIPER}, {"piper": 3}, 0, "piper")
    assert capacity == pytest.approx(BUDGET / PIPER)
    idle = stream_capacity(BUDGET, {"piper": PIPER}, {}, 0, "piper")
    assert idle == pytest.approx(capacity)
    assert stream_capacity(BUDGET, {"piper": None}, {"piper": 3}, 0, "piper") is None


def test_a_stream_six_times_as_costly_counts_as_six() -> None:
    costs = {"piper": PIPER, "heavy": HEAVY}
    mixed = stream_capacity(BUDGET, costs, {"piper": 1, "heavy": 1}, 0, "piper")
    assert mixed is not None
    assert 2 * BUDGET / mixed == pytest.approx(7 * PIPER)  # the load of 7 Piper streams
    # Admission lets n streams run while n < capacity, i.e. while their load is under the
    # budget of 1.7: 17 Piper streams (1.36) fit; 16 Piper and one heavy (1.76) do not;
    # 15 Piper and one heavy (1.68) do.
    assert 17 < (stream_capacity(BUDGET, costs, {"piper": 17}, 0, "piper") or 0)
    assert 17 >= (stream_capacity(BUDGET, costs, {"piper": 16, "heavy": 1}, 0, "piper") or 0)
    assert 16 < (stream_capacity(BUDGET, costs, {"piper": 15, "heavy": 1}, 0, "piper") or 0)


def test_unmeasured_model_and_unsubmitted_streams_count_as_costliest() -> None:
    costs: dict[str, float | None] = {"piper": PIPER, "heavy": HEAVY, "new": None}
    unmeasured = stream_capacity(BUDGET, costs, {"new": 2}, 0, "piper")
    assert unmeasured == pytest.approx(BUDGET / HEAVY)
    pending = stream_capacity(BUDGET, costs, {"piper": 1}, 1, "piper")
    assert pending == pytest.approx(BUDGET / ((HEAVY + PIPER) / 2))


def test_a_newcomer_is_let_in_only_if_the_load_with_it_fits() -> None:
    """Kokoro at RTF 0.55 on two workers at 85 %: capacity 3.09 streams. Three fit (1.65
    of 1.7); a fourth must wait, although three streams are still "under capacity"
    (the old test, n < capacity, let the fourth in, and all four stuttered)."""
    kokoro = {"piper": PIPER, "kokoro": 0.55}
    capacity = stream_capacity(BUDGET, kokoro, {"kokoro": 3}, 0, "piper")
    assert capacity is not None and 3 < capacity < 4
    assert room_for(BUDGET, kokoro, {"kokoro": 2}, 0, "kokoro")
    assert not room_for(BUDGET, kokoro, {"kokoro": 3}, 0, "kokoro")
    # A Piper stream does not fit beside three Kokoro streams (1.65 + 0.08 > 1.7), it
    # does beside two and five Piper; a newcomer of no named model counts at the
    # costliest model.
    assert not room_for(BUDGET, kokoro, {"kokoro": 3}, 0, "piper")
    assert room_for(BUDGET, kokoro, {"kokoro": 2, "piper": 5}, 0, "piper")
    assert not room_for(BUDGET, kokoro, {"kokoro": 2, "piper": 2}, 0, None)
    # One admitted but not yet submitted counts at the costliest model: two Kokoro
    # streams live and one on its way leave no room for another.
    assert not room_for(BUDGET, kokoro, {"kokoro": 2}, 1, "kokoro")
    # Piper alone: n + 1 streams are let in while (n + 1) x 0.08 <= 1.7, i.e. 21.
    assert room_for(BUDGET, {"piper": PIPER}, {"piper": 20}, 0, "piper")
    assert not room_for(BUDGET, {"piper": PIPER}, {"piper": 21}, 0, "piper")
    assert room_for(BUDGET, {"piper": None}, {"piper": 30}, 0, "piper")  # nothing measured


def test_load_with_a_newcomer_counts_as_room_for_does() -> None:
    costs = {"piper": PIPER, "heavy": HEAVY}
    assert load_with({"piper": None}, {"piper": 3}, 0, "piper") is None
    assert load_with(costs, {"piper": 15}, 0, "piper") == pytest.approx(16 * PIPER)
    # Unsubmitted streams and a newcomer of no named model count at the costliest model.
    assert load_with(costs, {"piper": 2}, 1, None) == pytest.approx(2 * PIPER + 2 * HEAVY)
    assert room_for(BUDGET, costs, {"piper": 20}, 0, "piper") == (21 * PIPER <= BUDGET)

"""Cost per audio-second and the weighted stream capacity: pure arithmetic."""

from __future__ import annotations

import pytest

from voxserve.engine.admission import LoadView, hold_reason, load_with, room_for, stream_capacity
from voxserve.engine.cost import CostMeter, batch_bucket
from voxserve.engine.work import Playback

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


def test_a_batched_device_costs_less_per_stream_as_its_steps_grow() -> None:
    """A step of 64 chunks takes little more than a step of one: the meter keeps each batch
    size's figure apart, and reads the largest measured size at or below the one asked."""
    meter = CostMeter()
    for _ in range(4):
        meter.add("acoustic", 0.02, 1.0)
        meter.add("vocoder", 0.01, 1.0)
        meter.add("acoustic", 0.03, 64.0, batch=64)
        meter.add("vocoder", 0.02, 64.0, batch=64)
    alone, batch = meter.cost(1), meter.cost(64)
    assert alone is not None and batch is not None
    assert alone == pytest.approx(0.03) and batch < alone / 20
    assert meter.cost(100) == pytest.approx(batch)  # 64 is the bucket at or below 100
    assert meter.cost(32) == pytest.approx(alone)  # nothing measured between 1 and 63
    assert [batch_bucket(n) for n in (1, 2, 3, 64, 100)] == [1, 2, 2, 64, 64]


def test_the_warm_up_curve_is_kept_apart_from_what_traffic_refines() -> None:
    """Warm-up steps (`curve=True`) give both figures from the start; traffic's steps,
    slower on a host busy with other work, move `cost` and leave `curve_cost` as the
    device measured it alone."""
    meter = CostMeter()
    assert meter.curve_cost(8) is None
    for size in (1, 2, 4, 8):
        meter.add("acoustic", 0.001, 4.0, batch=size, curve=True)
        meter.add("vocoder", 0.002 + 0.0001 * size, 2.0 * size, batch=size, curve=True)
    warm = meter.curve_cost(8)
    assert warm == pytest.approx(0.001 / 4 + 0.0028 / 16) and meter.cost(8) == pytest.approx(warm)
    assert meter.curve_cost(1) == pytest.approx(0.001 / 4 + 0.0021 / 2)  # a step of one costs most
    for _ in range(8):
        meter.add("vocoder", 0.03, 16.0, batch=8)  # traffic: ten times the device's time
    assert meter.cost(8) > 4 * warm  # type: ignore[operator]
    assert meter.curve_cost(8) == pytest.approx(warm)


def test_a_batched_device_lets_a_step_of_streams_start_at_once_whatever_its_costs() -> None:
    """Measured costs end the ramp on a CPU; on a batched device a step's worth of
    streams (`slots`) may be starting at once, however cheap the curve says they are."""
    cpu = LoadView(2.0, 2, {"piper": 0.001}, {"piper": 3}, 0, 3, (), 10.0)
    assert hold_reason(cpu, "piper", "piper") is None
    batched = LoadView(1.0, 8, {"piper": 0.001}, {"piper": 8}, 0, 8, (), 10.0, batched=True)
    assert hold_reason(batched, "piper", "piper") == "starting"
    assert hold_reason(LoadView(1.0, 8, {"piper": 0.001}, {"piper": 8}, 0, 7, (), 10.0, batched=True),
                       "piper", "piper") is None


def view(live: int, cost: float | None = PIPER, playback: tuple[Playback, ...] = (), now: float = 10.0) -> LoadView:
    return LoadView(
        capacity=2.0, slots=2, costs={"piper": cost}, live={"piper": live}, unsubmitted=0,
        starting=0, playback=playback, now=now,
    )  # fmt: skip


def test_the_gate_names_the_first_reason_that_holds_a_newcomer() -> None:
    assert hold_reason(view(3), "piper", "piper") is None
    assert hold_reason(view(21), "piper", "piper") == "load"  # 22 x 0.08 > 2 x 0.85
    unmeasured = LoadView(2.0, 2, {"piper": None}, {"piper": 1}, 0, 2, (), 0.0)
    assert hold_reason(unmeasured, "piper", "piper") == "starting"
    dry_soon = (Playback(started=9.0, dry_at=10.05, out_of_credit=False),)
    assert hold_reason(view(3, playback=dry_soon), "piper", "piper") == "lagging"
    stalled_client = (Playback(started=9.0, dry_at=10.05, out_of_credit=True),)
    assert hold_reason(view(3, playback=stalled_client), "piper", "piper") is None
    # Near capacity (above 0.8 of the workers with the newcomer) a stream must have half
    # a second ahead, not a tenth.
    ahead = (Playback(started=9.0, dry_at=10.3, out_of_credit=False),)
    assert hold_reason(view(3, playback=ahead), "piper", "piper") is None
    assert hold_reason(view(20, playback=ahead), "piper", "piper") == "lagging"

"""Cost per audio-second and the weighted stream capacity: pure arithmetic."""

from __future__ import annotations

import pytest

from voxserve.engine.cost import CostMeter, stream_capacity

PIPER, HEAVY = 0.08, 0.48  # worker-seconds per audio-second: HEAVY costs 6 Piper streams
BUDGET = 2 * 0.85


def test_meter_waits_for_two_seconds_of_audio_then_follows_recent_work() -> None:
    meter = CostMeter(window_s=10.0)
    meter.add(0.1, 1.0)
    assert meter.cost() is None
    meter.add(0.1, 1.0)
    assert meter.cost() == pytest.approx(0.1)
    for _ in range(20):
        meter.add(0.5, 1.0)  # the machine got slower: the figure follows it
    cost = meter.cost()
    assert cost is not None and cost > 0.45


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


def test_unmeasured_model_counts_as_costliest_and_unsubmitted_as_cheapest() -> None:
    costs: dict[str, float | None] = {"piper": PIPER, "heavy": HEAVY, "new": None}
    unmeasured = stream_capacity(BUDGET, costs, {"new": 2}, 0, "piper")
    assert unmeasured == pytest.approx(BUDGET / HEAVY)
    pending = stream_capacity(BUDGET, costs, {"heavy": 1}, 1, "piper")
    assert pending == pytest.approx(BUDGET / ((HEAVY + PIPER) / 2))

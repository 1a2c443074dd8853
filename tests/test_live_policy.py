"""The ASR engine's live policy (`engine/live.py`): when a live session may start a
decode, and how many sessions the workers sustain at their measured cost. Pure rules,
driven with a fake clock and a fake view of the engine; one test goes through a real
server for the gauge and the refusal."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import RunningServer, wait_for
from voxserve.config import RealtimeConfig
from voxserve.engine.admission import TARGET_UTILIZATION
from voxserve.engine.live import (
    DECODES_PER_TURN,
    DELTA_SLACK_S,
    FALL_STEP_S,
    SPEECH_DECODE_FACTOR,
    TALK_SHARE,
    TURN_SPEECH_S,
    Damper,
    LiveEstimate,
    LiveMeter,
    LivePolicy,
    LiveView,
    delta_deadline,
    early_final_deadline,
    final_deadline,
    live_capacity,
)

pytestmark = pytest.mark.timeout(120)

TARGET_S = 0.4


class FakeEngine:
    """What the policy reads: a clock and the engine's live queue and idle workers."""

    def __init__(self) -> None:
        self.now = 100.0
        self.live_queued = 0
        self.idle_workers = 2

    def clock(self) -> float:
        return self.now

    def see(self) -> LiveView:
        return LiveView(self.now, self.live_queued, self.idle_workers)

    def policy(self, workers: int = 2) -> LivePolicy:
        return LivePolicy(self.see, self.clock, slots=workers, workers=workers)


# -- when to decode -----------------------------------------------------------------------
def test_a_final_is_due_the_target_after_now() -> None:
    assert final_deadline(LiveView(10.0, 3, 0), TARGET_S) == pytest.approx(10.4)


def test_an_early_final_waits_while_live_work_is_queued() -> None:
    assert early_final_deadline(LiveView(10.0, 1, 2), 0.2, TARGET_S) is None
    assert early_final_deadline(LiveView(10.0, 0, 0), 0.2, TARGET_S) == pytest.approx(10.6)


def test_a_delta_needs_an_idle_worker_and_nothing_busy_elsewhere() -> None:
    assert delta_deadline(LiveView(10.0, 0, 0), elsewhere=False) is None
    assert delta_deadline(LiveView(10.0, 0, 1), elsewhere=True) is None
    assert delta_deadline(LiveView(10.0, 0, 1), elsewhere=False) == 10.0 + DELTA_SLACK_S


def test_the_policy_reads_the_engine_when_asked() -> None:
    engine = FakeEngine()
    policy = engine.policy()
    assert policy.delta_deadline(elsewhere=False) == engine.now + DELTA_SLACK_S
    engine.idle_workers = 0
    assert policy.delta_deadline(elsewhere=False) is None
    engine.live_queued = 1
    assert policy.early_final_deadline(0.1, TARGET_S) is None
    engine.live_queued, engine.now = 0, 200.0
    assert policy.early_final_deadline(0.1, TARGET_S) == pytest.approx(200.5)
    assert policy.final_deadline(TARGET_S) == pytest.approx(200.4)


# -- how many sessions --------------------------------------------------------------------
def test_the_capacity_rule() -> None:
    # Decodes of a quarter of the target: the final's wait may take up to 0.857 of each
    # worker, more than admission's headroom allows.
    assert live_capacity(0.1, 0.1, 2, TARGET_S) == int(TARGET_UTILIZATION * 2 / 0.1)
    # Decodes of half the target: rho = 2 * 0.2 / 0.6.
    assert live_capacity(0.1, 0.2, 2, TARGET_S) == 13
    assert live_capacity(0.1, 0.2, 4, TARGET_S) == 26  # twice the workers, twice the sessions
    assert live_capacity(0.2, 0.2, 2, TARGET_S) == 6  # twice the cost, half the sessions
    # A decode as long as the target misses it even alone; one session is still let in.
    assert live_capacity(0.1, 0.4, 2, TARGET_S) == 1
    assert live_capacity(5.0, 0.1, 2, TARGET_S) == 1


def _speak(engine: FakeEngine, policy: LivePolicy, sessions: int, seconds: float, decode_s: float) -> None:
    """`sessions` sessions open for `seconds`, each decoding once every 2 s (a delta or
    a final) for `decode_s` seconds on one worker."""
    policy.sessions(sessions)
    step = 2.0 / sessions
    end = engine.now + seconds
    while engine.now < end:
        engine.now += step
        policy.ran(decode_s)


def test_a_slower_engine_admits_fewer_sessions() -> None:
    fast, slow = FakeEngine(), FakeEngine()
    fast_policy, slow_policy = fast.policy(), slow.policy()
    # The same sessions doing the same; the slow engine's decodes take 1 / 0.6 as long.
    _speak(fast, fast_policy, 8, 60.0, 0.2)
    _speak(slow, slow_policy, 8, 60.0, 0.2 / 0.6)
    cost = fast_policy.meter.cost(fast.now)
    assert cost is not None and cost == pytest.approx(0.1, rel=0.05)
    assert slow_policy.meter.cost(slow.now) == pytest.approx(cost / 0.6, rel=0.05)
    assert fast_policy.capacity(TARGET_S) == live_capacity(0.1, 0.2, 2, TARGET_S) == 13
    assert slow_policy.capacity(TARGET_S) == live_capacity(0.1 / 0.6, 0.2 / 0.6, 2, TARGET_S) == 3


def test_one_session_per_slot_without_an_estimate_or_a_measure() -> None:
    engine = FakeEngine()
    assert engine.policy(workers=2).capacity(TARGET_S) == 2


def test_the_warm_up_estimate_admits_at_once() -> None:
    """Four users who open a session at once on a fresh server are all let in."""
    engine = FakeEngine()
    policy = engine.policy(workers=2)
    policy.estimate = LiveEstimate.from_warmup(0.06)  # a 3 s turn's decode at warm-up
    est = policy.estimate
    assert est.cost == pytest.approx(TALK_SHARE / TURN_SPEECH_S * DECODES_PER_TURN * 0.06 * SPEECH_DECODE_FACTOR)
    assert policy.capacity(TARGET_S, most=8) == 8
    assert policy.capacity(TARGET_S) == live_capacity(est.cost, est.decode_s, 2, TARGET_S) > 8
    # The end-of-turn model's time per turn counts in the estimate.
    assert policy.capacity(TARGET_S, turn_call_s=1.0) < live_capacity(est.cost, est.decode_s, 2, TARGET_S)


def test_the_capacity_neither_collapses_on_one_noisy_window_nor_stays_down_while_idle() -> None:
    """The sequence of one day's use: 2 sessions, then 4, then 4 again on a noisy machine
    (decodes near the target), then 45 s idle, then a new client's 2 sessions."""
    engine = FakeEngine()
    policy = engine.policy(workers=2)
    policy.estimate = LiveEstimate.from_warmup(0.06)
    cap = 8
    seen = [policy.capacity(TARGET_S, cap)]
    _speak(engine, policy, 2, 30.0, 0.1)
    seen.append(policy.capacity(TARGET_S, cap))
    _speak(engine, policy, 4, 30.0, 0.15)
    seen.append(policy.capacity(TARGET_S, cap))
    assert seen == [8, 8, 8]
    # A noisy window: decodes of 0.39 s, all but the target. The rule alone says one
    # session; what is shown falls one session per FALL_STEP_S at most.
    noisy = [policy.capacity(TARGET_S, cap)]
    policy.sessions(4)
    for _ in range(15):  # 30 s, a decode every half second
        for _ in range(4):
            engine.now += 0.5
            policy.ran(0.39)
        noisy.append(policy.capacity(TARGET_S, cap))
    assert live_capacity(*(policy.figures(engine.now) or (0.0, 0.0)), 2, TARGET_S) <= 2
    assert all(a - b <= 1 for a, b in itertools.pairwise(noisy))
    assert noisy[-1] >= cap - 30.0 / FALL_STEP_S - 1 > 1
    # 45 s idle: the measurement ages back towards the estimate, and the capacity with it.
    policy.sessions(0)
    engine.now += 45.0
    assert policy.capacity(TARGET_S, cap) >= 4
    # Sessions that decode well again are measured as such (the noisy window still weighs).
    _speak(engine, policy, 2, 20.0, 0.1)
    assert policy.capacity(TARGET_S, cap) >= cap - 2


def test_a_rising_capacity_is_shown_at_once_a_falling_one_step_by_step() -> None:
    damper = Damper(step_s=10.0)
    assert damper(5, 0.0) == 5
    assert damper(1, 1.0) == 4
    assert damper(1, 5.0) == 4
    assert damper(1, 11.0) == 3
    assert damper(8, 12.0) == 8


def test_the_meter_follows_recent_sessions() -> None:
    meter = LiveMeter(window_s=60.0)
    now = 0.0
    meter.sessions(2, now)
    for _ in range(60):  # 60 s of two sessions costing 0.2 each
        now += 1.0
        meter.add(0.4, now)
    heavy = meter.cost(now)
    assert heavy == pytest.approx(0.2, rel=0.1)
    for _ in range(240):  # then 240 s of two quiet ones
        now += 1.0
        meter.add(0.02, now)
    assert (meter.cost(now) or 0) < 0.03
    meter.sessions(0, now)
    assert meter.cost(now + 1000) == meter.cost(now)  # no session open, no time counted


def test_a_decode_on_two_threads_costs_both_and_takes_its_wall_time() -> None:
    meter = LiveMeter()
    meter.sessions(1, 0.0)
    for i in range(5):
        meter.add(0.1, 4.0 * (i + 1), threads=2)
    assert meter.cost(20.0) == pytest.approx(5 * 0.2 / 20)
    assert meter.decode_s() == pytest.approx(0.1)


# -- through the server -------------------------------------------------------------------
@pytest.fixture()
def capped(server: RunningServer) -> Iterator[RunningServer]:
    """The session's server (the default cap of 8 live sessions), its live policy's meter
    handed back afterwards as it was, for the tests after this one."""
    assert server.state.config.realtime.max_sessions == RealtimeConfig().max_sessions == 8
    policy = server.asr.live_policy
    meter = policy.meter
    try:
        yield server
    finally:
        wait_for(lambda: server.asr_side.live.open_sessions == 0, 10)
        policy.meter = meter
        policy.reset_damper()


def _capacity_gauge(srv: RunningServer) -> float:
    text = httpx.get(srv.base_url + "/metrics", timeout=10).text
    line = next(ln for ln in text.splitlines() if ln.startswith("voxserve_realtime_capacity_sessions "))
    return float(line.split()[1])


@contextlib.contextmanager
def _session(srv: RunningServer) -> Iterator[ClientConnection]:
    url = srv.base_url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    with connect(url, close_timeout=1) as ws:
        yield ws


def test_the_server_admits_live_sessions_by_the_measured_cost(capped: RunningServer) -> None:
    asr = capped.asr
    assert asr.live_policy.estimate is not None  # the warm-up timed a live decode
    # What the workers would have reported over the last 20 s of one session whose
    # decodes took 2 s each: five times the 0.4 s target, so only one session may be open.
    now = time.monotonic()
    meter = LiveMeter()
    meter.sessions(1, now - 20.0)
    for i in range(5):
        meter.add(2.0, now - 20.0 + 4.0 * (i + 1))
    meter.sessions(0, now)
    asr.live_policy.meter = meter
    asr.live_policy.reset_damper()
    assert _capacity_gauge(capped) == 1
    with _session(capped) as first:
        assert json.loads(first.recv(10))["type"] == "session.created"
        with _session(capped) as second:
            events = []
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    events.append(json.loads(second.recv(10)))
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
            assert events[-1]["type"] == "error"
            assert events[-1]["error"]["code"] == "too_many_sessions"
        first.send(json.dumps({"type": "input_audio_buffer.clear"}))
        assert json.loads(first.recv(10))["type"] == "input_audio_buffer.cleared"  # the first goes on
    assert _capacity_gauge(capped) == 1

"""Whisper's search on the device (`runners/whisper/search.py`), checked on the CPU against
the rules written out per row: the timestamp rules' masks for random token histories, and
beam search against a plain per-piece beam search on a stand-in model whose logits come
from a table (tiny vocabulary, pieces ending at different steps)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from voxserve.runners.whisper.search import TokenRules, _Filter, _Rows, beam_search

pytestmark = pytest.mark.timeout(60)

EOT, NO_TIMESTAMPS = 8, 10
BEGIN = NO_TIMESTAMPS + 1
VOCAB = BEGIN + 12
RULES = TokenRules(vocab=VOCAB, eot=EOT, suppress=(9,), suppress_begin=(EOT,), timestamps=True,
                   no_timestamps=NO_TIMESTAMPS, max_initial_timestamp=4)


def _banned(seq: list[int], logits: np.ndarray) -> set[int]:
    """The tokens the timestamp rules forbid after `seq`, one row, as OpenAI states them."""
    banned = {t for t in range(VOCAB) if t in RULES.suppress or t == NO_TIMESTAMPS}
    last = seq[-1]
    closed = False
    if last >= BEGIN:
        before = seq[-2] if len(seq) > 1 else last
        if before >= BEGIN:
            closed = True
            banned |= set(range(BEGIN, VOCAB))  # a closed pair: text must follow
        else:
            banned |= set(range(EOT))  # an open pair: a timestamp or the end
    stamps = [t for t in seq if t >= BEGIN]
    if stamps:
        banned |= set(range(BEGIN, stamps[-1]))  # never decreasing
    if not closed:
        kept = np.array([-math.inf if t in banned else logits[t] for t in range(VOCAB)])
        logprobs = kept - np.logaddexp.reduce(kept)
        if np.logaddexp.reduce(logprobs[BEGIN:]) > logprobs[:BEGIN].max():
            banned |= set(range(BEGIN))  # the timestamps together are likelier: one is forced
    return banned


def test_timestamp_rules_match_the_rules_per_row() -> None:
    rng = np.random.default_rng(0)
    rows, steps = 64, 6
    history = rng.choice([1, 2, 3, EOT, BEGIN, BEGIN + 2, BEGIN + 5, BEGIN + 7], size=(rows, steps))
    state = _Rows(rows, RULES, torch.device("cpu"))
    rule = _Filter(RULES, torch.device("cpu"))
    for step in range(steps):
        state.push(torch.from_numpy(history[:, step]), step)
        raw = rng.normal(0, 2, size=(rows, VOCAB)).astype(np.float32)
        got = rule(torch.from_numpy(raw), step + 1, state).numpy()
        for r in range(rows):
            banned = {int(t) for t in np.flatnonzero(np.isneginf(got[r]))}
            assert banned == _banned(list(history[r, : step + 1]), raw[r]), (r, step)


def _plain_beam(table: np.ndarray, beam: int, rules: TokenRules) -> tuple[list[int], float]:
    """One piece's best hypothesis, the search written per beam in Python (no timestamp
    rules): the same selection of 2 x beam continuations, finishing and replacement."""
    every, first = (m.numpy() for m in rules.masks(torch.device("cpu")))
    empty: list[int] = []
    beams: list[tuple[list[int], float]] = [(empty, 0.0)] + [(empty, -math.inf)] * (beam - 1)
    finished: list[tuple[list[int], float]] = []
    for step in range(table.shape[0]):
        cands = []
        for b, (seq, score) in enumerate(beams):
            logits = table[step, b].astype(np.float32) + (first if step == 0 else every)
            lp = torch.log_softmax(torch.from_numpy(logits), dim=-1).numpy() + np.float32(score)
            cands += [(float(lp[t]), b, t) for t in range(len(lp))]
        order = sorted(range(len(cands)), key=lambda i: (-cands[i][0], i))[: 2 * beam]
        top = [cands[i] for i in order]
        last = step == table.shape[0] - 1
        spares = [c for c in top[beam:] if c[2] != rules.eot]
        nxt = []
        for k in range(beam):
            value, b, t = top[k]
            if t == rules.eot or last:
                finished.append((beams[b][0] + ([] if t == rules.eot else [t]), value))
                if spares:
                    value, b, t = spares.pop(0)
            nxt.append((beams[b][0] + [t], value))
        if len(finished) >= beam or last:
            break
        beams = nxt
    return max(finished, key=lambda h: h[1] / len(h[0]) if h[0] else -math.inf)


def test_beam_search_matches_a_plain_search_per_piece() -> None:
    rules = TokenRules(vocab=VOCAB, eot=EOT, suppress=(9,), suppress_begin=(EOT,))
    rng = np.random.default_rng(1)
    pieces, beam, steps = 6, 3, 12
    table = rng.normal(0, 1.5, size=(steps, pieces, beam, VOCAB)).astype(np.float32)
    for p in range(pieces):  # the end of text likely from a different step in each piece
        table[: 3 + p, p, :, EOT] -= 8
    state = {"step": 0}

    def step_fn(tokens: torch.Tensor, i: int) -> torch.Tensor:
        state["step"] = i
        return torch.from_numpy(table[i].reshape(pieces * beam, VOCAB)).clone()

    # A stand-in decoder whose logits depend only on the step and the row's beam slot:
    # reordering rows moves nothing, as the plain search assumes.
    start = torch.full((pieces * beam,), 1)
    got = beam_search(step_fn, lambda rows, i: None, start, beam, steps, rules)
    for p in range(pieces):
        tokens, logprob = _plain_beam(table[:, p], beam, rules)
        assert got[p].tokens == tokens, p
        assert got[p].logprob == pytest.approx(logprob, abs=1e-5)

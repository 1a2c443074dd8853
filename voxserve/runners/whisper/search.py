"""Whisper's decoding searches over a decoder step: beam search (greedy is a beam of one)
and sampling, with the token rules OpenAI's decoder applies.

The rules and the search follow CTranslate2's Whisper decoding, so that the torch runner
gives the CTranslate2 runner's transcripts on the same weights:
- tokens in `suppress_ids` are never generated; `suppress_ids_begin` (the blank and end
  of text) not as the first token;
- with timestamps: `<|notimestamps|>` is never generated, the first token is a timestamp
  no later than the initial limit, timestamps come in pairs and never decrease, and a
  timestamp is forced when the timestamps together are likelier than any text token;
- beam search takes the 2 x beam best continuations of all beams; those among the first
  `beam` that end the text become hypotheses and the next continuations that do not take
  their places; a piece is done when it has `beam` hypotheses (or at the last step), and
  its best hypothesis has the highest log probability divided by its length (end of text
  not counted);
- sampling draws `best_of` continuations at the temperature and keeps the best the same
  way.

Every step is a fixed set of tensor operations over the whole batch, on the device that
runs the model: the token rules read each row's last two tokens and last timestamp
(`_Rows`), the beams' choice and the finished hypotheses are gathers and scatters, and
nothing is read back to the host but, once per `CHECK_EVERY` steps, whether every piece
is done. Rows of finished pieces keep running on end-of-text tokens, so the batch keeps
its shape (a captured graph needs that). The host rebuilds each piece's best sequence
once, at the end, from the steps' back-pointers. This module knows nothing of audio,
prompts or tokenizers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["CHECK_EVERY", "Hypothesis", "TokenRules", "beam_search", "sample"]

Step = Callable[[Tensor, int], Tensor]
"""(tokens [rows], step index) -> logits [rows, vocab] of the next token."""
Reorder = Callable[[Tensor, int], None]
"""Rows take the decoder state of the given rows, after the given step."""

CHECK_EVERY = 8
"""The search asks the device whether every piece is done once per this many steps: each
question waits for the device, and the few spare steps on done pieces change nothing."""

_NEG = float("-inf")


@dataclass(frozen=True)
class Hypothesis:
    """One decoded sequence and its log probability."""
    tokens: list[int]
    """Generated tokens, end of text excluded."""
    logprob: float
    """Sum of the tokens' log probabilities, the end of text included."""

    @property
    def avg_logprob(self) -> float:
        """OpenAI's average: over the tokens and the end of text."""
        return self.logprob / (len(self.tokens) + 1)

    @property
    def score(self) -> float:
        """What ranks hypotheses: log probability over length (-inf when empty)."""
        return self.logprob / len(self.tokens) if self.tokens else -np.inf


@dataclass(frozen=True)
class TokenRules:
    """Which tokens each step may generate."""

    vocab: int
    eot: int
    suppress: tuple[int, ...]
    suppress_begin: tuple[int, ...]
    timestamps: bool = False
    no_timestamps: int = 0
    max_initial_timestamp: int = 0
    """Index of the last timestamp allowed first (timestamps mode)."""

    @property
    def timestamp_begin(self) -> int:
        """The first timestamp token (`<|0.00|>`)."""
        return self.no_timestamps + 1

    def masks(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """Additive masks (0 or -inf) for every step and for the first step."""
        every = torch.zeros(self.vocab, device=device)
        every[list(self.suppress)] = _NEG
        first = every.clone()
        first[list(self.suppress_begin)] = _NEG
        if self.timestamps:
            every[self.no_timestamps] = _NEG
            first[self.no_timestamps] = _NEG
            first[: self.no_timestamps + 1] = _NEG
            first[self.no_timestamps + 2 + self.max_initial_timestamp :] = _NEG
        return every, first


class _Rows:
    """What the timestamp rules read of each row's tokens so far, on the device: its last
    token, the one before (the last again after one token) and its last timestamp (the
    first timestamp while there is none, which masks nothing)."""

    def __init__(self, rows: int, rules: TokenRules, device: torch.device):
        begin = rules.timestamp_begin
        self.last = torch.full((rows,), -1, dtype=torch.long, device=device)
        self.before = torch.full((rows,), -1, dtype=torch.long, device=device)
        self.stamp = torch.full((rows,), begin, dtype=torch.long, device=device)
        self.begin = begin

    def push(self, tokens: Tensor, step: int, origin: Tensor | None = None) -> None:
        """Rows take `origin`'s state (the beams' choice), then append `tokens`."""
        last, stamp = self.last, self.stamp
        if origin is not None:
            last, stamp = last.index_select(0, origin), stamp.index_select(0, origin)
        self.before = tokens if step == 0 else last
        self.last = tokens
        self.stamp = torch.where(tokens >= self.begin, tokens, stamp)


class _Filter:
    """A step's token rules as additive masks over the batch's logits."""

    def __init__(self, rules: TokenRules, device: torch.device):
        self.rules = rules
        self.every, self.first = rules.masks(device)
        columns = torch.arange(rules.vocab, device=device)
        self.columns = columns
        self.is_stamp = columns >= rules.timestamp_begin
        self.before_eot = columns < rules.eot
        self.text = ~self.is_stamp

    def __call__(self, raw: Tensor, step: int, rows: _Rows) -> Tensor:
        """`raw` logits in float32 with the step's rules applied."""
        logits = raw.float() + (self.first if step == 0 else self.every)
        if not self.rules.timestamps or step == 0:
            return logits
        begin = self.rules.timestamp_begin
        after_stamp = rows.last >= begin
        closed = after_stamp & (rows.before >= begin)  # a pair is closed: text must follow
        opened = after_stamp & ~closed  # an open pair: a timestamp or the end
        banned = (
            (closed[:, None] & self.is_stamp)
            | (opened[:, None] & self.before_eot)
            | (self.is_stamp & (self.columns < rows.stamp[:, None]))  # never decreasing
        )
        logits = logits.masked_fill(banned, _NEG)
        logprobs = torch.log_softmax(logits, dim=-1)
        stamps = torch.logsumexp(logprobs[:, begin:], dim=-1)
        text = logprobs[:, :begin].max(dim=-1).values
        force = (stamps > text) & ~closed
        return logits.masked_fill(force[:, None] & self.text, _NEG)


class _Finished:
    """The finished hypotheses of every piece, up to `2 x beam` each (a piece may take
    `beam` at its last step with `beam - 1` already kept), in device tensors: per slot
    the step, the row it continued, its last token and its length (`kept`), and its log
    probability. A slot past the end takes the writes of continuations that did not
    finish."""

    def __init__(self, pieces: int, beam: int, device: torch.device):
        self.cap = 2 * beam
        slots = pieces * self.cap + 1
        self.dump = slots - 1
        self.kept = torch.zeros(slots, 4, dtype=torch.long, device=device)
        self.logprob = torch.full((slots,), _NEG, dtype=torch.float64, device=device)
        self.count = torch.zeros(pieces, dtype=torch.long, device=device)
        self.base = torch.arange(pieces, device=device)[:, None] * self.cap

    def add(self, finishing: Tensor, rank: Tensor, step: int, rows: Tensor, tokens: Tensor, ends: Tensor, values: Tensor) -> None:
        """Keep the `finishing` slots [pieces, beam] (`rank`: their order among a piece's
        finishing ones): the row they continue, their token (the end of text or, at the
        last step, any), and their log probability."""
        dest = torch.where(finishing, self.base + self.count[:, None] + rank, self.dump).view(-1)
        kept = torch.stack([torch.full_like(rows, step), rows, tokens, (~ends).long() + step], dim=-1)
        self.kept.index_copy_(0, dest, kept.view(-1, 4))
        self.logprob.index_copy_(0, dest, values.reshape(-1).double())
        self.count += finishing.sum(dim=1)

    def best(self, pieces: int) -> Tensor:
        """Each piece's best slot: the highest log probability over length (-inf when
        empty); the first kept wins a tie."""
        used = torch.arange(self.cap, device=self.count.device)[None, :] < self.count[:, None]
        logprob = self.logprob[:-1].view(pieces, self.cap)
        length = self.kept[:-1, 3].view(pieces, self.cap)
        score = torch.where(length > 0, logprob / length.clamp(min=1).double(), _NEG)
        score = torch.where(used, score, _NEG)
        return self.base[:, 0] + score.argmax(dim=1)


class _Beams:
    """How each piece's beams go on after a step: of the `2 x beam` best continuations,
    those among the first `beam` that end the text (every one at the last step) become
    hypotheses, and the r-th of a piece is replaced by the r-th continuation after the
    first `beam` that does not end it, or keeps its own if none is left."""

    def __init__(self, pieces: int, beam: int, rules: TokenRules, device: torch.device):
        self.pieces, self.beam = pieces, beam
        self.vocab, self.eot = rules.vocab, rules.eot
        self.width = min(2 * beam, rules.vocab)
        self.first_rows = torch.arange(pieces, device=device)[:, None] * beam
        self.own = torch.arange(beam, device=device).expand(pieces, beam)
        self.identity = self.first_rows + self.own

    def advance(
        self, total: Tensor, done: Tensor, step: int, last: bool, finished: _Finished
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The next tokens [pieces, beam], their scores and the rows they continue, from
        the step's `total` log probabilities [pieces, beam, vocab]; the hypotheses that
        end go to `finished`. A piece that is `done` keeps ending its rows."""
        beam = self.beam
        values, flat = total.view(self.pieces, -1).topk(self.width, dim=-1)
        origin_beam, token = flat.div(self.vocab, rounding_mode="floor"), flat.remainder(self.vocab)
        ends = token == self.eot
        finishing = (ends[:, :beam] | last) & ~done[:, None]
        spare_ok = ~ends[:, beam:]
        spare_order = torch.argsort((~spare_ok).to(torch.int8), dim=1, stable=True)
        rank = finishing.long().cumsum(dim=1) - 1
        replaced = finishing & (rank < spare_ok.sum(dim=1, keepdim=True))
        picked = spare_order.gather(1, rank.clamp(0, self.width - beam - 1))
        take = torch.where(replaced, beam + picked, self.own)
        rows = self.first_rows + origin_beam[:, :beam]
        finished.add(finishing, rank, step, rows, token[:, :beam], ends[:, :beam], values[:, :beam])
        next_token = torch.where(done[:, None], self.eot, token.gather(1, take))
        next_score = torch.where(done[:, None], _NEG, values.gather(1, take))
        origin = torch.where(done[:, None], self.identity, self.first_rows + origin_beam.gather(1, take))
        return next_token, next_score, origin


def beam_search(
    step_fn: Step,
    reorder: Reorder,
    start: Tensor,
    beam: int,
    max_steps: int,
    rules: TokenRules,
    first_logits: Callable[[Tensor], None] | None = None,
) -> list[Hypothesis]:
    """The best hypothesis of each piece. `start` [pieces * beam] holds each row's start
    token (a piece's beams are adjacent rows); the decoder state has that many rows.
    `first_logits` sees the first step's raw logits (for the no-speech probability).
    A beam of one is greedy decoding."""
    rows = start.shape[0]
    pieces = rows // beam
    device = start.device
    rules_filter = _Filter(rules, device)
    state = _Rows(rows, rules, device)
    finished = _Finished(pieces, beam, device)
    beams = _Beams(pieces, beam, rules, device)
    scores = torch.full((pieces, beam), _NEG, device=device)
    scores[:, 0] = 0.0
    done = torch.zeros(pieces, dtype=torch.bool, device=device)
    origins = torch.zeros(max_steps, rows, dtype=torch.long, device=device)
    chosen = torch.full((max_steps, rows), rules.eot, dtype=torch.long, device=device)
    tokens = start
    for step in range(max_steps):
        raw = step_fn(tokens, step)
        if step == 0 and first_logits is not None:
            first_logits(raw)
        logprobs = torch.log_softmax(rules_filter(raw, step, state), dim=-1)
        total = logprobs.view(pieces, beam, -1) + scores.unsqueeze(-1)
        last = step == max_steps - 1
        next_token, next_score, origin = beams.advance(total, done, step, last, finished)
        done = done | (finished.count >= beam)
        if last or ((step + 1) % CHECK_EVERY == 0 and bool(done.all())):
            break
        flat_origin = origin.view(-1)
        origins[step] = flat_origin
        chosen[step] = next_token.view(-1)
        if rules.timestamps:
            state.push(next_token.view(-1), step, flat_origin)
        reorder(flat_origin, step)
        tokens = next_token.view(-1)
        scores = next_score
    return _hypotheses(finished, finished.best(pieces), origins, chosen, rules.eot)


def _hypotheses(finished: _Finished, slots: Tensor, origins: Tensor, chosen: Tensor, eot: int) -> list[Hypothesis]:
    """The kept hypotheses at `slots`, their tokens traced back through each step's
    origins (`origins[s][r]`: the row that row r continued at step s; `chosen[s][r]`:
    the token it took): one read of the device, then plain numpy per step."""
    step, row, token, length = finished.kept[slots].cpu().numpy().T
    logprob = finished.logprob[slots].cpu().numpy()
    longest = int(step.max(initial=0))
    back = origins[:longest].cpu().numpy()
    took = chosen[:longest].cpu().numpy()
    seqs = np.full((len(slots), longest + 1), eot, dtype=np.int64)
    seqs[np.arange(len(slots)), step] = token
    at = row.copy()
    for s in range(longest - 1, -1, -1):
        inside = s < step
        seqs[inside, s] = took[s, at[inside]]
        at = np.where(inside, back[s, at], at)
    return [Hypothesis(seqs[i, : length[i]].tolist(), float(logprob[i])) for i in range(len(slots))]


def sample(
    step_fn: Step,
    start: Tensor,
    best_of: int,
    temperature: float,
    max_steps: int,
    rules: TokenRules,
    generator: torch.Generator | None = None,
    first_logits: Callable[[Tensor], None] | None = None,
) -> list[Hypothesis]:
    """The best of `best_of` samples per piece at `temperature`; rows as in
    `beam_search` (a piece's samples are adjacent rows)."""
    rows = start.shape[0]
    pieces = rows // best_of
    device = start.device
    rules_filter = _Filter(rules, device)
    state = _Rows(rows, rules, device)
    tokens = start
    history = torch.full((rows, max_steps), rules.eot, dtype=torch.long, device=device)
    sums = torch.zeros(rows, dtype=torch.float64, device=device)
    lengths = torch.zeros(rows, dtype=torch.long, device=device)
    alive = torch.ones(rows, dtype=torch.bool, device=device)
    for step in range(max_steps):
        raw = step_fn(tokens, step)
        if step == 0 and first_logits is not None:
            first_logits(raw)
        logits = rules_filter(raw, step, state)
        probs = torch.softmax(logits / temperature, dim=-1)
        drawn = torch.multinomial(probs, 1, generator=generator).view(-1)
        logprob = torch.log_softmax(logits, dim=-1).gather(1, drawn.view(-1, 1)).view(-1)
        sums += torch.where(alive, logprob.double(), 0.0)
        drawn = torch.where(alive, drawn, rules.eot)
        history[:, step] = drawn
        alive = alive & (drawn != rules.eot)
        lengths += alive.long()
        if step == max_steps - 1 or ((step + 1) % CHECK_EVERY == 0 and not bool(alive.any())):
            break
        if rules.timestamps:
            state.push(drawn, step)
        tokens = drawn
    length = lengths.view(pieces, best_of)
    score = torch.where(length > 0, sums.view(pieces, best_of) / length.clamp(min=1).double(), _NEG)
    best = torch.arange(pieces, device=device) * best_of + score.argmax(dim=1)
    seqs = history[best].cpu().numpy()
    kept = lengths[best].cpu().numpy()
    totals = sums[best].cpu().numpy()
    return [Hypothesis(seqs[i, : kept[i]].tolist(), float(totals[i])) for i in range(pieces)]

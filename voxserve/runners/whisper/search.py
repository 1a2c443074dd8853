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

Each step hands the device one batch of rows (every piece's beams) and brings its top
candidates back to the host, where the bookkeeping is plain numpy. Rows of finished pieces
keep running on end-of-text tokens, so the batch keeps its shape (a captured graph needs
that). This module knows nothing of audio, prompts or tokenizers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["Hypothesis", "TokenRules", "beam_search", "greedy", "sample"]

Step = Callable[[Tensor, int], Tensor]
"""(tokens [rows], step index) -> logits [rows, vocab] of the next token."""
Reorder = Callable[[Tensor, int], None]
"""Rows take the decoder state of the given rows, after the given step."""


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

    def masks(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """Additive masks (0 or -inf) for every step and for the first step."""
        every = torch.zeros(self.vocab, device=device)
        every[list(self.suppress)] = -np.inf
        first = every.clone()
        first[list(self.suppress_begin)] = -np.inf
        if self.timestamps:
            every[self.no_timestamps] = -np.inf
            first[self.no_timestamps] = -np.inf
            first[: self.no_timestamps + 1] = -np.inf
            first[self.no_timestamps + 2 + self.max_initial_timestamp :] = -np.inf
        return every, first

    def timestamp_mask(self, history: np.ndarray, logits: Tensor) -> Tensor:
        """Timestamps mode, after the first step: the pairing, ordering and forcing rules
        for each row of `history` [rows, steps so far], as an additive mask."""
        begin = self.no_timestamps + 1
        rows = history.shape[0]
        mask = np.zeros((rows, self.vocab), dtype=np.float32)
        check = np.ones(rows, dtype=bool)
        for r in range(rows):
            seq = history[r]
            last = int(seq[-1])
            if last >= begin:
                before = int(seq[-2]) if len(seq) > 1 else last
                if before >= begin:
                    mask[r, begin:] = -np.inf  # a pair is closed: text must follow
                    check[r] = False
                else:
                    mask[r, : self.eot] = -np.inf  # an open pair: a timestamp or the end
            stamps = seq[seq >= begin]
            if len(stamps):
                mask[r, begin : int(stamps[-1])] = -np.inf
        additive = torch.from_numpy(mask).to(logits.device)
        if not check.any():
            return additive
        logprobs = torch.log_softmax((logits.float() + additive), dim=-1)
        stamp = torch.logsumexp(logprobs[:, begin:], dim=-1)
        text = logprobs[:, :begin].max(dim=-1).values
        force = (stamp > text).cpu().numpy() & check
        additive[torch.from_numpy(force).to(logits.device), :begin] = -np.inf
        return additive


def _filtered(logits: Tensor, step: int, rules: TokenRules, masks: tuple[Tensor, Tensor], history: np.ndarray) -> Tensor:
    """`logits` in float32 with the step's token rules applied."""
    logits = logits.float() + (masks[1] if step == 0 else masks[0])
    if rules.timestamps and step > 0:
        logits = logits + rules.timestamp_mask(history, logits)
    return logits


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
    `first_logits` sees the first step's raw logits (for the no-speech probability)."""
    rows = start.shape[0]
    pieces = rows // beam
    device = start.device
    masks = rules.masks(device)
    scores = torch.full((pieces, beam), -np.inf, device=device)
    scores[:, 0] = 0.0
    tokens = start
    history = np.zeros((rows, 0), dtype=np.int64)
    finished: list[list[Hypothesis]] = [[] for _ in range(pieces)]
    done = np.zeros(pieces, dtype=bool)
    width = min(2 * beam, rules.vocab)
    for step in range(max_steps):
        raw = step_fn(tokens, step)
        if step == 0 and first_logits is not None:
            first_logits(raw)
        logprobs = torch.log_softmax(_filtered(raw, step, rules, masks, history), dim=-1)
        total = logprobs.view(pieces, beam, -1) + scores.unsqueeze(-1)
        values, flat = total.view(pieces, -1).topk(width, dim=-1)
        values_np, flat_np = values.cpu().numpy(), flat.cpu().numpy()
        origin_beam, token = np.divmod(flat_np, rules.vocab)
        last = step == max_steps - 1
        ends = token == rules.eot
        # Slots among the first `beam` that end the text (every slot at the last step)
        # become hypotheses; the r-th of a piece takes the r-th continuation after the
        # first `beam` that does not end it, or keeps its own if none is left.
        finishing = (ends[:, :beam] | last) & ~done[:, None]
        spare_ok = ~ends[:, beam:]
        spare_order = np.argsort(~spare_ok, axis=1, kind="stable")
        rank = np.cumsum(finishing, axis=1) - 1
        replaced = finishing & (rank < spare_ok.sum(axis=1, keepdims=True))
        picked = np.take_along_axis(spare_order, np.clip(rank, 0, width - beam - 1), axis=1)
        take = np.where(replaced, beam + picked, np.arange(beam))
        for p, k in np.argwhere(finishing):
            seq = history[p * beam + origin_beam[p, k]].tolist()
            if not ends[p, k]:
                seq.append(int(token[p, k]))
            finished[p].append(Hypothesis(seq, float(values_np[p, k])))
        next_token = np.take_along_axis(token, take, axis=1)
        next_score = np.take_along_axis(values_np, take, axis=1).astype(np.float32)
        origin = np.arange(pieces)[:, None] * beam + np.take_along_axis(origin_beam, take, axis=1)
        next_token[done] = rules.eot
        next_score[done] = -np.inf
        origin[done] = np.arange(rows, dtype=np.int64).reshape(pieces, beam)[done]
        done |= last | (np.array([len(f) for f in finished]) >= beam)
        if done.all():
            break
        flat_origin = origin.reshape(-1)
        history = np.concatenate([history[flat_origin], next_token.reshape(-1, 1)], axis=1)
        order = torch.from_numpy(flat_origin).to(device)
        reorder(order, step)
        tokens = torch.from_numpy(next_token.reshape(-1)).to(device)
        scores = torch.from_numpy(next_score).to(device)
    return [max(hyps, key=lambda h: h.score) for hyps in finished]


GREEDY_CHECK_EVERY = 8
"""Greedy decoding asks the device whether every row has ended once per this many steps:
each question waits for the device, and a few spare steps on ended rows cost less."""


def greedy(
    step_fn: Step,
    start: Tensor,
    max_steps: int,
    rules: TokenRules,
    first_logits: Callable[[Tensor], None] | None = None,
) -> list[Hypothesis]:
    """Beam search of one beam (the most likely token each step), kept on the device: no
    host round trip per step, so a captured step is not held up waiting for the host.
    Gives `beam_search(..., beam=1)`'s hypotheses; without timestamp rules, which need
    the host."""
    rows = start.shape[0]
    device = start.device
    every, first = rules.masks(device)
    tokens = start
    history = torch.full((rows, max_steps), rules.eot, dtype=torch.long, device=device)
    sums = torch.zeros(rows, dtype=torch.float32, device=device)
    ended = torch.zeros(rows, dtype=torch.bool, device=device)
    for step in range(max_steps):
        raw = step_fn(tokens, step)
        if step == 0 and first_logits is not None:
            first_logits(raw)
        logprobs = torch.log_softmax(raw.float() + (first if step == 0 else every), dim=-1)
        best = logprobs.argmax(dim=-1)
        gained = logprobs.gather(1, best.view(-1, 1)).view(-1)
        sums += torch.where(ended, 0.0, gained)
        best = torch.where(ended, rules.eot, best)
        history[:, step] = best
        ended |= best == rules.eot
        tokens = best
        if (step + 1) % GREEDY_CHECK_EVERY == 0 and bool(ended.all()):
            break
    out: list[Hypothesis] = []
    for seq, total in zip(history.cpu().tolist(), sums.cpu().tolist(), strict=True):
        end = seq.index(rules.eot) if rules.eot in seq else len(seq)
        out.append(Hypothesis(seq[:end], float(total)))
    return out


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
    device = start.device
    masks = rules.masks(device)
    tokens = start
    history = np.zeros((rows, 0), dtype=np.int64)
    sums = np.zeros(rows, dtype=np.float64)
    alive = np.ones(rows, dtype=bool)
    for step in range(max_steps):
        raw = step_fn(tokens, step)
        if step == 0 and first_logits is not None:
            first_logits(raw)
        logits = _filtered(raw, step, rules, masks, history)
        probs = torch.softmax(logits / temperature, dim=-1)
        drawn = torch.multinomial(probs, 1, generator=generator).view(-1)
        logprob = torch.log_softmax(logits, dim=-1).gather(1, drawn.view(-1, 1)).view(-1)
        drawn_np = drawn.cpu().numpy()
        sums += np.where(alive, logprob.cpu().numpy(), 0.0)
        drawn_np = np.where(alive, drawn_np, rules.eot)
        history = np.concatenate([history, drawn_np.reshape(-1, 1)], axis=1)
        alive &= drawn_np != rules.eot
        if not alive.any():
            break
        tokens = torch.from_numpy(drawn_np).to(device)
    out: list[Hypothesis] = []
    for p in range(rows // best_of):
        hyps = []
        for r in range(p * best_of, (p + 1) * best_of):
            seq = history[r].tolist()
            if rules.eot in seq:
                seq = seq[: seq.index(rules.eot)]
            hyps.append(Hypothesis(seq, float(sums[r])))
        out.append(max(hyps, key=lambda h: h.score))
    return out

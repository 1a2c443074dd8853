"""CUDA graphs of the Whisper decoder's step, one per batch shape, and of whole greedy
steps, several at a time.

A decode step of a small Whisper is bound by kernel launches, not arithmetic: replaying
a captured graph launches them all at once. A graph replays fixed buffers, so each shape
(rows, audio frames) gets its own static cache, token and position tensors, captured on
first use and kept; exact shapes are captured, never padded to a larger one, so a piece's
result does not depend on the batch it shares.

Greedy decoding needs nothing from the host between steps: the next token, its log
probability, the history and the ended rows are all device tensors. `GreedySteps` is
`GREEDY_STEPS` such steps (decoder, token rules, argmax, bookkeeping) as one function of
fixed-shape state, updated in place; `GreedyLoop` replays it as one graph on CUDA (one
launch for eight steps) and asks the host only whether every row has ended, once per
replay. On a CPU the same loop runs the function eagerly, which is how its arithmetic is
checked against the step-by-step search, and `torch.export` traces it whole (no host
round trip inside).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch
from torch import Tensor, nn

from voxserve.runners.whisper.model import Cache, Decoder
from voxserve.runners.whisper.search import Hypothesis, TokenRules

__all__ = ["GREEDY_STEPS", "GreedyLoop", "GreedyState", "GreedySteps", "StepGraph", "StepGraphs"]

GREEDY_STEPS = 8
"""Greedy steps per replay: the host asks whether every row has ended once per replay, and
at most this many spare steps run on ended rows."""

MAX_GRAPHS = 48
"""Shapes kept at once (batch sizes times window widths); past it the oldest goes. One
graph of 640 rows (128 pieces x 5 beams) holds about 7 GB of tiny.en caches."""


class StepGraph:
    """One captured step: copy the batch's state in, then `step` replays."""

    def __init__(self, decoder: Decoder, audio: Tensor, rows: int):
        self.decoder = decoder
        self.cache = decoder.new_cache(audio[:1].expand(rows, -1, -1).contiguous())
        self.tokens = torch.zeros(rows, dtype=torch.long, device=audio.device)
        self.position = torch.zeros(1, dtype=torch.long, device=audio.device)
        self.greedy: dict[tuple[int, int], GreedyLoop] = {}
        """Greedy loops over this graph's cache, by (end of text, most steps)."""
        self.graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up: kernels choose their algorithms outside the graph
                decoder.step(self.tokens[:, None], self.position, self.cache)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(self.graph):
            self.logits = decoder.step(self.tokens[:, None], self.position, self.cache)

    def start(self, audio: Tensor, repeat: int) -> Cache:
        """Take `audio`'s keys and values (each piece's row repeated `repeat` times);
        returns the graph's cache, on which the caller runs the prompt (eager) and then
        the steps."""
        self.decoder.fill_audio(self.cache, audio, repeat)
        return self.cache

    def greedy_loop(self, eot: int, max_steps: int) -> GreedyLoop:
        """The captured greedy loop over this graph's cache, captured on first use."""
        key = (eot, max_steps)
        loop = self.greedy.get(key)
        if loop is None:
            loop = GreedyLoop(self.decoder, self.cache, eot, max_steps, capture=True)
            self.greedy[key] = loop
        return loop

    def step(self, tokens: Tensor, position: int) -> Tensor:
        """Logits of `tokens` at `position`: the inputs copied in, the graph replayed; the
        result is the graph's own buffer, valid until the next replay."""
        self.tokens.copy_(tokens)
        self.position.fill_(position)
        self.graph.replay()
        return self.logits


class GreedyState:
    """What greedy steps read and write, in fixed-size device tensors: each row's next
    input token, the position and history column of the next step, the number of steps
    the search may take (`limit`), the ended rows, the log-probability sums, the tokens
    so far (end of text where none was written) and the additive token mask."""

    def __init__(self, rows: int, width: int, vocab: int, device: torch.device):
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.limit = torch.zeros(1, dtype=torch.long, device=device)
        self.ended = torch.zeros(rows, dtype=torch.bool, device=device)
        self.sums = torch.zeros(rows, dtype=torch.float32, device=device)
        self.history = torch.zeros(rows, width, dtype=torch.long, device=device)
        self.every = torch.zeros(vocab, dtype=torch.float32, device=device)

    def tensors(self) -> tuple[Tensor, ...]:
        return (self.tokens, self.position, self.column, self.limit, self.ended, self.sums, self.history, self.every)


class GreedySteps(nn.Module):
    """`steps` greedy steps, in place on a `GreedyState` and a cache: the decoder's fixed
    shape step, the token mask, argmax, and the bookkeeping of `search.greedy`. Steps
    past `limit` (the last replay's spare ones) add nothing to the sums and write only
    history columns past the limit, which are dropped; the position stops at the last
    cache slot, so a spare step never indexes past the decoder's context."""

    def __init__(self, decoder: Decoder, eot: int, steps: int = GREEDY_STEPS):
        super().__init__()
        self.decoder = decoder
        self.eot = eot
        self.steps = steps
        self.last = decoder.dims.text_ctx - 1

    def forward(
        self,
        tokens: Tensor,
        position: Tensor,
        column: Tensor,
        limit: Tensor,
        ended: Tensor,
        sums: Tensor,
        history: Tensor,
        every: Tensor,
        self_k: list[Tensor],
        self_v: list[Tensor],
        cross_k: list[Tensor],
        cross_v: list[Tensor],
    ) -> Tensor:
        cache = Cache(self_k, self_v, cross_k, cross_v)
        for _ in range(self.steps):
            logits = self.decoder.step(tokens[:, None], position, cache)
            logprobs = torch.log_softmax(logits.float() + every, dim=-1)
            best = logprobs.argmax(dim=-1)
            gained = logprobs.gather(1, best[:, None])[:, 0]
            counted = ~ended & (column < limit)
            sums.add_(torch.where(counted, gained, torch.zeros_like(gained)))
            best = torch.where(ended, torch.full_like(best, self.eot), best)
            history.index_copy_(1, column, best[:, None])
            ended.logical_or_(best == self.eot)
            tokens.copy_(best)
            position.copy_(torch.clamp(position + 1, max=self.last))
            column.add_(1)
        return ended


class GreedyLoop:
    """Greedy decoding over one cache, `GREEDY_STEPS` steps per call of `GreedySteps`:
    replayed from a CUDA graph (`capture`) or run eagerly. Gives `search.greedy`'s
    hypotheses."""

    def __init__(self, decoder: Decoder, cache: Cache, eot: int, max_steps: int, capture: bool):
        rows = cache.rows
        device = cache.self_k[0].device
        self.eot = eot
        self.cache = cache
        self.state = GreedyState(rows, max_steps + GREEDY_STEPS, decoder.dims.vocab, device)
        self.steps = GreedySteps(decoder, eot)
        self.graph: torch.cuda.CUDAGraph | None = None
        if capture:
            # The warm-up runs the steps for real: at the last cache slot (the clamp keeps
            # it there), which no step reads before writing it, so a prompt already in the
            # cache stays intact.
            self.state.position.fill_(self.steps.last)
            self.graph = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._run()  # warm-up: kernels choose their algorithms outside the graph
            torch.cuda.current_stream().wait_stream(side)
            # thread_local: another thread's allocation or sync meanwhile (a log-mel in the
            # audio pool) does not break this capture.
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self._run()

    def _run(self) -> None:
        c = self.cache
        self.steps(*self.state.tensors(), c.self_k, c.self_v, c.cross_k, c.cross_v)

    def decode(
        self,
        first_step: Callable[[Tensor], Tensor],
        start: Tensor,
        length: int,
        max_steps: int,
        rules: TokenRules,
        first_logits: Callable[[Tensor], None] | None = None,
    ) -> list[Hypothesis]:
        """The first step through `first_step` (its own mask; `first_logits` sees its raw
        logits), then replays from position `length + 1` until every row has ended or
        `max_steps` steps are taken."""
        every, first = rules.masks(start.device)
        st = self.state
        raw = first_step(start)
        if first_logits is not None:
            first_logits(raw)
        logprobs = torch.log_softmax(raw.float() + first, dim=-1)
        best = logprobs.argmax(dim=-1)
        st.sums.copy_(logprobs.gather(1, best[:, None])[:, 0])
        st.history.fill_(self.eot)
        st.history[:, 0] = best
        st.ended.copy_(best == self.eot)
        st.tokens.copy_(best)
        st.position.fill_(length + 1)
        st.column.fill_(1)
        st.limit.fill_(max_steps)
        st.every.copy_(every)
        taken = 1
        while taken < max_steps:
            if self.graph is not None:
                self.graph.replay()
            else:
                self._run()
            taken += GREEDY_STEPS
            if bool(st.ended.all()):
                break
        out: list[Hypothesis] = []
        for seq, total in zip(st.history[:, :max_steps].cpu().tolist(), st.sums.cpu().tolist(), strict=True):
            end = seq.index(self.eot) if self.eot in seq else len(seq)
            out.append(Hypothesis(seq[:end], float(total)))
        return out


class StepGraphs:
    """Graphs by (rows, audio frames), captured on first use."""

    def __init__(self, decoder: Decoder):
        self.decoder = decoder
        self._graphs: dict[tuple[int, int], StepGraph] = {}
        self._lock = threading.Lock()

    def get(self, audio: Tensor, rows: int) -> StepGraph:
        """The graph for `rows` over `audio`'s frame count, captured now if new."""
        key = (rows, audio.shape[1])
        with self._lock:
            graph = self._graphs.pop(key, None)
            if graph is None:
                if len(self._graphs) >= MAX_GRAPHS:
                    self._graphs.pop(next(iter(self._graphs)))
                graph = StepGraph(self.decoder, audio, rows)
            self._graphs[key] = graph  # most recently used last
            return graph

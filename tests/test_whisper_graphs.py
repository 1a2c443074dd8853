"""The greedy steps a CUDA graph captures, checked on the CPU: they trace whole under
`torch.export` (no host round trip inside, so one graph can hold them), and the loop
that replays them gives the step-by-step greedy search's tokens and log probabilities,
also when the limit falls inside a replay and rows end at different steps. The bundled
model's parity through the runner is in `test_whisper_torch.py` (`fixed_steps`)."""

from __future__ import annotations

import pytest
import torch

from voxserve.runners.whisper.graphs import GREEDY_STEPS, GreedyLoop, GreedyState, GreedySteps
from voxserve.runners.whisper.model import Cache, Decoder
from voxserve.runners.whisper.search import TokenRules, beam_search
from voxserve.runners.whisper.weights import Dims

pytestmark = pytest.mark.timeout(60)

DIMS = Dims(n_mels=8, width=32, encoder_layers=1, encoder_heads=2, decoder_layers=2, decoder_heads=2,
            vocab=64, audio_ctx=12, text_ctx=24)  # fmt: skip
EOT = 5


def _decoder(seed: int = 0) -> Decoder:
    torch.manual_seed(seed)
    decoder = Decoder(DIMS)
    with torch.no_grad():
        for p in decoder.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return decoder.requires_grad_(False).eval()


def _cache(decoder: Decoder, rows: int) -> Cache:
    audio = torch.randn(rows, DIMS.audio_ctx, DIMS.width)
    return decoder.new_cache(audio)


def test_the_greedy_steps_trace_whole_under_export() -> None:
    decoder = _decoder()
    rows = 3
    cache = _cache(decoder, rows)
    state = GreedyState(rows, 16, DIMS.vocab, torch.device("cpu"))
    state.limit.fill_(10)
    module = GreedySteps(decoder, EOT, steps=2)
    with torch.no_grad():
        exported = torch.export.export(
            module, (*state.tensors(), cache.self_k, cache.self_v, cache.cross_k, cache.cross_v), strict=False
        )
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    host = {t for t in targets if "local_scalar_dense" in t or "item" in t or "nonzero" in t or "_assert_async" in t}
    assert not host, f"a host round trip inside the graphed steps: {host}"
    assert any("argmax" in t for t in targets) and any("index_copy" in t for t in targets)


@pytest.mark.parametrize("max_steps", [GREEDY_STEPS + 3, 2 * GREEDY_STEPS])
def test_the_graphed_loop_decodes_as_the_step_by_step_search(max_steps: int) -> None:
    """Random weights run most rows to the limit; the end of text is made likely for one
    row, so rows end at different steps."""
    decoder = _decoder(1)
    rows, length = 4, 3
    rules = TokenRules(vocab=DIMS.vocab, eot=EOT, suppress=(7, 9), suppress_begin=(EOT,))
    start = torch.tensor([11, 12, 13, 14])
    prefix = torch.randint(10, DIMS.vocab, (rows, length))

    def fresh() -> Cache:
        torch.manual_seed(2)
        cache = _cache(decoder, rows)
        decoder(prefix, 0, cache)
        with torch.no_grad():  # the end of text follows token 20 in every row's context
            decoder.embedding[20] = decoder.embedding[EOT] * 3
        return cache

    results = []
    with torch.inference_mode():
        for graphed in (False, True):
            cache = fresh()
            position = torch.zeros(1, dtype=torch.long)

            def step(tokens: torch.Tensor, i: int, cache: Cache = cache, position: torch.Tensor = position) -> torch.Tensor:
                position.fill_(length + i)
                return decoder.step(tokens[:, None], position, cache)

            if graphed:
                loop = GreedyLoop(decoder, cache, EOT, max_steps, capture=False)
                results.append(loop.decode(lambda t, s=step: s(t, 0), start, length, max_steps, rules))  # type: ignore[misc]
            else:
                results.append(beam_search(step, lambda rows, i: None, start, 1, max_steps, rules))
    eager, graphed_hyps = results
    assert [h.tokens for h in graphed_hyps] == [h.tokens for h in eager]
    assert [round(h.logprob, 4) for h in graphed_hyps] == [round(h.logprob, 4) for h in eager]
    lengths = {len(h.tokens) for h in eager}
    assert max(lengths) <= max_steps

"""The simulated device's cost model: what each model call costs an H200, in device time
and in host time, from the figures measured there.

Sources (H200, fp16, torch 2.11 + CUDA 13; docs/BENCHMARKS.md, "Transcription on a GPU"):

| figure | value | used for |
|---|---|---|
| Whisper tiny.en, 30 s window, greedy, one at a time, eager | 219 ms | eager step, encoder |
| the same under a CUDA graph (static cache), batch 1 | 35 ms | graphed step, encoder |
| greedy, batch 128, eager | 14,501x real time | encoder per extra window |
| greedy, batch 128, graphed | 33,839x real time | step per extra row |
| a decoder step, eager / graphed | 2.5 ms / 0.36 ms | host and device share |
| beam 5, graphed, batch 1 / 64 | 329x / 5,764x | beam bookkeeping per step |

Derived (a 30 s window of the bench's speech decodes in about 86 steps):
- encoder: 4 ms for one 30 s window (219 - 86 x 2.5 and 35 - 86 x 0.36 agree), plus
  0.362 ms for each further window in the batch (the eager batch of 128 is 264.8 ms, of
  which 86 steps of 2.5 ms are the host's); windows shorter than 30 s cost in
  proportion to their frames (assumed: tiny's encoder is mostly matrix products
  over frames);
- a step's kernels: 0.36 ms plus 0.003 ms per further row (the graphed batch of 128 is
  113.5 ms); eager, the host's 2.5 ms of launches per step bound it, and the device
  waits between them;
- beam (and sampling, best of 5): the host's top-k and cache reordering take 1.01 ms a
  step at batch 1 and 0.0405 ms more per further piece (91 ms and 333 ms for the two
  batches), more than the kernels: the host bounds the step;
- under a graph the host spends 0.06 ms a step (replay and reading the next tokens;
  assumed, not measured); the log-mel of a batch 0.1 ms plus 0.01 ms per 30 s window
  (assumed: a few kernels).

Host time is Python holding the GIL; device time is waited for with the GIL released.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WHISPER_TINY", "Cost", "WhisperCosts"]

FULL_WINDOW = 3000
"""Feature frames in Whisper's 30 s window."""


@dataclass(frozen=True)
class Cost:
    """One call: how long it holds the device, and how much of that the host spends
    holding the GIL (overlapping the device time)."""

    device_s: float
    host_s: float


@dataclass(frozen=True)
class WhisperCosts:
    """Whisper's costs per batch (`batch`); the fields are the derived figures above."""

    encoder_s: float = 4.0e-3
    encoder_per_window_s: float = 0.362e-3
    step_s: float = 0.36e-3
    step_per_row_s: float = 0.003e-3
    eager_host_step_s: float = 2.5e-3
    graph_host_step_s: float = 0.06e-3
    beam_host_step_s: float = 1.01e-3
    beam_host_step_per_piece_s: float = 0.0405e-3
    mel_s: float = 0.1e-3
    mel_per_window_s: float = 0.01e-3

    def batch(self, pieces: int, rows: int, width: int, steps: int, graphs: bool, align: bool) -> Cost:
        """A batch of `pieces` in an encoder window of `width` frames, decoded over `rows`
        (pieces times the beam) for `steps` steps (the longest piece's tokens, plus the
        end), and aligned once more if `align`."""
        windows = pieces * width / FULL_WINDOW
        mel = self.mel_s + self.mel_per_window_s * windows
        encoder = (self.encoder_s + self.encoder_per_window_s * (pieces - 1)) * width / FULL_WINDOW
        kernels = self.step_s + self.step_per_row_s * (rows - 1)
        host = self.graph_host_step_s if graphs else self.eager_host_step_s
        if rows > pieces:
            host += self.beam_host_step_s + self.beam_host_step_per_piece_s * (pieces - 1) - self.graph_host_step_s
        steps += 1 if align else 0
        return Cost(mel + encoder + steps * max(kernels, host), steps * host)


WHISPER_TINY = WhisperCosts()
"""Whisper tiny.en on the H200."""

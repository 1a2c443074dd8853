"""The H200 cost model of the simulated device: what one step of each stage costs the
host and the GPU, by batch and length, and the measured figures it is fitted to.

A step's cost has two shares:
- **host**: Python and driver work that holds the GIL: an eager call's kernel launches,
  or a graph replay with the copies around it. It runs on the server's CPU.
- **device**: the GPU's own time for the step's kernels. It waits with the GIL released,
  and the one GPU runs one step's kernels at a time (`device.SimDevice`).

Each stage is one `StageCost`, a line in batch x length: a fixed floor (a call's kernels
cost a few microseconds each however small the batch) plus a cost per padded unit (frame
or phoneme id, times the batch). Its figures come from `SOURCES`, the H200 measurements
(docs/SIMULATION.md); where no figure exists the field says what it assumes.

Whisper is costed per batch, not per step (`WhisperCost`): one call runs the log-mel,
the encoder and a loop of decoder steps whose number the text decides, and an eager
step's kernels run behind its own launches, so a step costs the larger of its host and
device shares, not their sum. Its model's figures are `WHISPER_SOURCES`; its search's
host share per step and per piece is measured from the torch runner's own search and
shipped as a table (`whisper_search.json`, made by `scripts/whisper_search_host.py`):
the sim runs where torch is not installed, and a table measured once on a quiet machine
is steadier than one measured at each start beside the server's own load.

Nothing here imports torch or touches a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = [
    "KOKORO_ACOUSTIC",
    "KOKORO_DECODER",
    "PIPER_ACOUSTIC",
    "PIPER_VOCODER",
    "SEARCH_TABLE",
    "SOURCES",
    "STAGES",
    "WHISPER_SOURCES",
    "WHISPER_TINY",
    "Cost",
    "SearchHost",
    "Source",
    "StageCost",
    "WhisperCost",
    "WhisperSource",
]


@dataclass(frozen=True)
class StageCost:
    """One stage's step on one H200: host seconds (GIL held) and device seconds (GIL
    released, serialized with every other step on the GPU) for `batch` items padded to
    `length` units each (frames for a vocoder, phoneme ids for an acoustic model)."""

    name: str
    unit: str
    """What `length` counts: "frame" or "id"."""
    launch_s: float
    """Host seconds of an eager call: its kernel launches and syncs, paid once per call
    whatever the batch (the kernels are batched, not their launches)."""
    replay_s: float
    """Host seconds of a call replayed from a captured graph, with the copies of its
    inputs and outputs."""
    floor_s: float
    """Device seconds of the call's kernels at the smallest size."""
    unit_s: float
    """Device seconds per padded unit (batch x length)."""

    def host_s(self, batch: int, length: int, graphed: bool = True) -> float:
        """Host seconds of one call; a batch's launches are the same as one item's."""
        del batch, length  # a graph's replay and an eager call's launches do not grow with them
        return self.replay_s if graphed else self.launch_s

    def device_s(self, batch: int, length: int) -> float:
        """Device seconds of one call of `batch` items padded to `length` units."""
        if batch < 1 or length < 1:
            raise ValueError(f"a step holds at least one item of one unit, not {batch} x {length}")
        return self.floor_s + self.unit_s * batch * length

    def step_s(self, batch: int, length: int, graphed: bool = True) -> float:
        """Wall seconds of one call run alone: the host share, then the device's."""
        return self.host_s(batch, length, graphed) + self.device_s(batch, length)


PIPER_HOP_S = 256 / 22050
"""Seconds of audio per Piper frame (the bundled voice: hop 256 at 22,050 Hz)."""
KOKORO_HOP_S = 600 / 24000
"""Seconds of audio per Kokoro frame (hop 600 at 24 kHz)."""

KOKORO_DECODER = StageCost(
    name="kokoro.decoder",
    unit="frame",
    # About 1,500 launches a call at ~15 us each: the middle of the 15-30 ms of GIL an eager call takes.
    launch_s=22.5e-3,
    # Assumed: one graph launch plus the copies of five inputs and the output; Piper's
    # replay fits 0.15 ms with one input.
    replay_s=0.3e-3,
    # Fitted to 63 audio-s/s at batch 1 and 1,505 at batch 256 (2 s segments, eager):
    # the two calls' walls are 31.7 ms and 340 ms.
    floor_s=8.0e-3,
    unit_s=15.12e-6,
)

KOKORO_ACOUSTIC = StageCost(
    name="kokoro.acoustic",
    unit="id",
    # Launch-bound: 20-30 ms a call eager at batch 1 and at batch 64 alike; most of it
    # is launches and about 15 syncs.
    launch_s=21.0e-3,
    # Assumed: with the lengths taken on the host, two captured pieces (before and
    # after the alignment) replayed, 0.25 ms each with their copies.
    replay_s=0.5e-3,
    floor_s=3.0e-3,
    # Assumed small: the stage is launch-bound, so 64 items of 60 ids add ~2 ms.
    unit_s=0.5e-6,
)

PIPER_VOCODER = StageCost(
    name="piper.vocoder",
    unit="frame",
    # Fitted to 2.3 ms a 52-frame chunk eager, 0.43 ms replayed from a graph, and 7,056
    # audio-s/s at batch 256 (fp32, eager): a replay's host share taken as 0.15 ms.
    launch_s=2.02e-3,
    replay_s=0.15e-3,
    floor_s=0.203e-3,
    unit_s=1.4804e-6,
)

PIPER_ACOUSTIC = StageCost(
    name="piper.acoustic",
    unit="id",
    # Assumed (no H200 figure): launch-bound like Kokoro's stage A, with about 500
    # launches (6 encoder layers, the duration predictor, 4 flow couplings) at ~15 us.
    launch_s=7.5e-3,
    replay_s=0.3e-3,
    floor_s=1.0e-3,
    unit_s=0.3e-6,
)

STAGES: dict[str, StageCost] = {
    stage.name: stage for stage in (PIPER_ACOUSTIC, PIPER_VOCODER, KOKORO_ACOUSTIC, KOKORO_DECODER)
}
"""Every stage the simulated device can run, by name."""


@dataclass(frozen=True)
class Source:
    """One measured H200 figure as the wall seconds of one call (or its host share), and
    how close the model must come to it."""

    stage: str
    batch: int
    length: int
    graphed: bool
    seconds: float
    """The figure as seconds a call."""
    tolerance: float
    """Relative error allowed."""
    share: str = "wall"
    """"wall" (host then device, run alone) or "host"."""
    figure: str = ""
    """The figure as published, and where."""

    def modelled(self) -> float:
        stage = STAGES[self.stage]
        if self.share == "host":
            return stage.host_s(self.batch, self.length, self.graphed)
        return stage.step_s(self.batch, self.length, self.graphed)


def _audio_s(segments: int, seconds: float, rate: float) -> float:
    """Seconds a call takes that renders `segments` of `seconds` audio at `rate` audio-s/s."""
    return segments * seconds / rate


_KOKORO_2S = round(2 / KOKORO_HOP_S)
_PIPER_52_S = 52 * PIPER_HOP_S

SOURCES: tuple[Source, ...] = (
    Source("kokoro.decoder", 1, _KOKORO_2S, False, _audio_s(1, 2.0, 63), 0.02,
           figure="Kokoro decoder, 2 s segments, fp16 eager, batch 1: 63 audio-s/s (BENCHMARKS.md)"),
    Source("kokoro.decoder", 256, _KOKORO_2S, False, _audio_s(256, 2.0, 1505), 0.02,
           figure="Kokoro decoder, 2 s segments, fp16 eager, batch 256: 1,505 audio-s/s (BENCHMARKS.md)"),
    Source("kokoro.decoder", 1, _KOKORO_2S, False, 22.5e-3, 0.34, share="host",
           figure="an eager Kokoro decoder call holds the GIL 15-30 ms (SIMULATION.md)"),
    Source("kokoro.acoustic", 1, 60, False, 25e-3, 0.2,
           figure="Kokoro stage A, eager: 20-30 ms a call at batch 1 (BENCHMARKS.md)"),
    Source("kokoro.acoustic", 64, 60, False, 25e-3, 0.2,
           figure="Kokoro stage A, eager: 20-30 ms a call at batch 64 (BENCHMARKS.md)"),
    Source("piper.vocoder", 1, 52, False, 2.3e-3, 0.02,
           figure="Piper vocoder, 52-frame chunk, fp32 eager, batch 1: 2.3 ms (BENCHMARKS.md)"),
    Source("piper.vocoder", 1, 52, True, 0.43e-3, 0.02,
           figure="Piper vocoder, 52-frame chunk, replayed from a graph: 0.43 ms (BENCHMARKS.md)"),
    Source("piper.vocoder", 256, 52, False, _audio_s(256, _PIPER_52_S, 7056), 0.02,
           figure="Piper vocoder, 52-frame chunks, fp32 eager, batch 256: 7,056 audio-s/s (BENCHMARKS.md)"),
)
"""The H200 figures the speech stages are fitted to (docs/SIMULATION.md, "The cost
model")."""


# -- Whisper ---------------------------------------------------------------------------
WHISPER_FULL_WINDOW = 3000
"""Feature frames in Whisper's 30 s window."""
WHISPER_30S_STEPS = 85
"""Decoder steps of a 30 s window of the bench's speech, the end of text aside (about
2.8 tokens a second): what turns the per-window figures into per-step ones."""


@dataclass(frozen=True)
class Cost:
    """One call: the seconds it holds the device, and the host seconds (GIL held) spent
    meanwhile, overlapping them."""

    device_s: float
    host_s: float


@dataclass(frozen=True)
class SearchHost:
    """The host's share of one step of a decoding search: `step_s` a step, plus
    `per_piece_s` for each piece past the first."""

    step_s: float
    per_piece_s: float

    def seconds(self, pieces: int) -> float:
        return self.step_s + self.per_piece_s * max(0, pieces - 1)


SEARCH_TABLE = Path(__file__).with_name("whisper_search.json")
"""The search's host share as measured from the torch runner's own search
(`scripts/whisper_search_host.py`): beam search of five, of one (greedy) and sampling of
five, a line over the pieces in a batch."""


def _measured(name: str) -> SearchHost:
    entry = json.loads(SEARCH_TABLE.read_text(encoding="utf-8"))["searches"][name]
    return SearchHost(float(entry["step_s"]), float(entry["per_piece_s"]))


@dataclass(frozen=True)
class WhisperCost:
    """Whisper's cost per batch on one H200 (`batch`), fitted to `WHISPER_SOURCES`:

    - encoder: `encoder_s` for one 30 s window plus `encoder_per_window_s` for each
      further piece (the eager batch of 128 is 264.8 ms, of which 86 steps of 2.5 ms are
      the host's launches), in proportion to the window's frames (assumed: tiny's
      encoder is mostly matrix products over frames);
    - a step's kernels: `step_s` plus `step_per_row_s` per further row (the graphed
      batch of 128 is 113.5 ms); eager, the host's `eager_host_step_s` of launches
      bounds each step and the device waits between them;
    - under a graph the host spends `graph_host_step_s` a step (assumed: the replay and
      reading the next tokens); greedy decoding without timestamps runs whole in the
      captured greedy loop and spends only that;
    - every other search (beam search, greedy with the timestamp rules, sampling) adds
      its own host share a step, measured from the runner's search (`SEARCH_TABLE`):
      `beam_host` for a beam of two or more, `greedy_host` for one, `sample_host` for
      sampling;
    - the log-mel of a batch `mel_s` plus `mel_per_window_s` per 30 s window (assumed:
      a few kernels)."""

    encoder_s: float = 4.0e-3
    encoder_per_window_s: float = 0.362e-3
    step_s: float = 0.36e-3
    step_per_row_s: float = 0.003e-3
    eager_host_step_s: float = 2.5e-3
    graph_host_step_s: float = 0.06e-3
    beam_host: SearchHost = field(default_factory=lambda: _measured("beam5"))
    greedy_host: SearchHost = field(default_factory=lambda: _measured("greedy"))
    sample_host: SearchHost = field(default_factory=lambda: _measured("sample5"))
    mel_s: float = 0.1e-3
    mel_per_window_s: float = 0.01e-3

    def search_host_s(self, pieces: int, rows: int, sampling: bool, timestamps: bool, graphs: bool) -> float:
        """The search's host seconds a step, beside the model's own."""
        if sampling:
            return self.sample_host.seconds(pieces)
        if rows > pieces:
            return self.beam_host.seconds(pieces)
        if graphs and not timestamps:
            return 0.0  # the captured greedy loop
        return self.greedy_host.seconds(pieces)

    def batch(
        self,
        pieces: int,
        rows: int,
        width: int,
        steps: int,
        graphs: bool,
        align: bool,
        sampling: bool = False,
        timestamps: bool = False,
    ) -> Cost:
        """A batch of `pieces` in an encoder window of `width` frames, decoded over `rows`
        (pieces times the beam or the samples) for `steps` steps (the longest piece's
        tokens and the end of text), with the timestamp rules if `timestamps`, and
        aligned once more if `align`."""
        scale = width / WHISPER_FULL_WINDOW
        mel = self.mel_s + self.mel_per_window_s * pieces * scale
        encoder = (self.encoder_s + self.encoder_per_window_s * (pieces - 1)) * scale
        kernels = self.step_s + self.step_per_row_s * (rows - 1)
        host = self.graph_host_step_s if graphs else self.eager_host_step_s
        host += self.search_host_s(pieces, rows, sampling, timestamps, graphs)
        steps += 1 if align else 0
        return Cost(mel + encoder + steps * max(kernels, host), steps * host)


WHISPER_TINY = WhisperCost()
"""Whisper tiny.en on the H200, fp16."""


@dataclass(frozen=True)
class WhisperSource:
    """One measured Whisper figure: audio seconds per second for a batch of 30 s
    windows, and how close the model must come to it."""

    batch: int
    beam: int
    graphed: bool
    rtfx: float
    tolerance: float
    figure: str

    def modelled(self) -> float:
        """The model's real-time factor for this batch (the log-mel left out: the probes
        fed features). The probes' greedy bookkeeping was a few device operations a step,
        within the fitted launches, so the model is compared without the search's own
        measured share."""
        model = replace(WHISPER_TINY, greedy_host=SearchHost(0.0, 0.0))
        cost = model.batch(self.batch, self.batch * self.beam, WHISPER_FULL_WINDOW, WHISPER_30S_STEPS + 1, self.graphed, False)
        mel = model.mel_s + model.mel_per_window_s * self.batch
        return self.batch * 30.0 / (cost.device_s - mel)


WHISPER_SOURCES: tuple[WhisperSource, ...] = (
    WhisperSource(1, 1, False, 30 / 0.219, 0.02, "tiny.en, 30 s window, greedy, one at a time, eager: 219 ms (DESIGN)"),
    WhisperSource(1, 1, True, 30 / 0.035, 0.02, "the same under a CUDA graph, static cache: 35 ms, 857x (DESIGN)"),
    WhisperSource(128, 1, False, 14_501, 0.02, "greedy, batch 128, eager: 14,501x (DESIGN)"),
    WhisperSource(128, 1, True, 33_839, 0.02, "greedy, batch 128, graphed: 33,839x (DESIGN)"),
)
"""The H200 figures Whisper's model costs are fitted to (docs/BENCHMARKS.md,
"Transcription on a GPU"; the one-at-a-time and batch-128 probes of 2026-11-27), greedy
without timestamps, where the whole search runs in the captured loop. A decoder step is
2.5 ms eager and 0.36 ms replayed from a graph. The other searches' host share is the
measured `SEARCH_TABLE`."""

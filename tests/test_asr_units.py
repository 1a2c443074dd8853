"""Pure pieces of the ASR path: cutting, batching policy, token splitting, rendering,
decoding edge cases and the in-order result stream. No model needed except where noted."""

from __future__ import annotations

import asyncio
import itertools
import re
import struct
import threading

import numpy as np
import pytest

from voxserve.api.formats import as_json, as_srt, as_text, as_verbose_json, as_vtt, timestamp
from voxserve.audio.blocks import SampleBlocks
from voxserve.audio.chunks import AUTO
from voxserve.audio.cut import Span, plan_spans, quietest_point
from voxserve.audio.decode import decode_audio
from voxserve.audio.encode import wav_file
from voxserve.audio.mel import N_FRAMES, LogMel
from voxserve.engine.asr_audio import _busiest
from voxserve.engine.batcher import Batcher, Pending
from voxserve.engine.chunking import Planner, even_pieces
from voxserve.engine.results import ResultStream
from voxserve.engine.segments import TimedSegment, Word, compression_ratio, group_sentences
from voxserve.engine.transcribe import Transcript
from voxserve.errors import InvalidRequest

RATE = 16000

pytestmark = pytest.mark.timeout(30)


# -- cutting ---------------------------------------------------------------------------
def _tone(seconds: float, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amp * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def test_short_audio_is_one_span() -> None:
    assert plan_spans(_tone(12.0), RATE) == [Span(0, 12 * RATE)]
    assert plan_spans(np.zeros(0, np.float32), RATE) == [Span(0, 0)]


def test_cut_lands_in_the_quiet_gap_before_each_limit() -> None:
    # A tone with 200 ms gaps at 29.3 s and 58.9 s (the second limit is ~29.45 + 30 s).
    audio = _tone(75.0)
    for gap in (29.3, 58.9):
        audio[int(gap * RATE) : int((gap + 0.2) * RATE)] = 0.0
    spans = plan_spans(audio, RATE)
    assert spans[0].start == 0 and spans[-1].end == len(audio)
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))
    assert all(len(s) <= 30 * RATE for s in spans)
    cuts = [s.end / RATE for s in spans[:-1]]
    assert 29.3 <= cuts[0] <= 29.5
    assert 58.9 <= cuts[1] <= 59.1


def test_cut_without_a_gap_still_respects_the_limit() -> None:
    audio = _tone(65.0)
    spans = plan_spans(audio, RATE)
    assert len(spans) == 3
    assert all(len(s) <= 30 * RATE for s in spans)


def test_without_a_pause_in_the_last_second_the_latest_pause_before_it_wins() -> None:
    audio = _tone(65.0)
    audio[int(26.0 * RATE) : int(26.3 * RATE)] = 0.0  # 3.7 s before the limit
    audio[int(27.0 * RATE) : int(29.5 * RATE)] *= 0.5  # quieter, but no pause
    spans = plan_spans(audio, RATE)
    assert 26.0 <= spans[0].end / RATE <= 26.3


def test_blocks_are_cut_exactly_like_one_array() -> None:
    # Pauses and loudness that vary across block (10 s) and level-scan chunk (16 s) edges.
    rng = np.random.default_rng(3)
    audio = _tone(200.0) * rng.uniform(0.2, 1.0, size=int(200 * RATE)).astype(np.float32)
    for gap in rng.uniform(5, 195, size=12):
        audio[int(gap * RATE) : int((gap + 0.35) * RATE)] *= 0.01
    blocks = SampleBlocks()
    for piece in np.array_split(audio, 997):
        blocks.extend(piece)
    assert plan_spans(blocks, RATE) == plan_spans(audio, RATE)


def test_quietest_point_prefers_the_latest_on_ties() -> None:
    audio = np.zeros(RATE, np.float32)
    point = quietest_point(audio, 0, RATE, 1600, 160)
    assert point == RATE - 1600 + 800


# -- batching policy -------------------------------------------------------------------
def _pending(request: int, index: int, key: str = "a") -> Pending[str]:
    return Pending(request, index, key, f"{request}:{index}")


def test_batch_waits_for_company_then_goes() -> None:
    b: Batcher[str] = Batcher(max_batch=4, wait_s=0.005)
    b.add(_pending(1, 0), now=0.0)
    assert b.next_batch(0.001) is None
    assert b.deadline() == pytest.approx(0.005)
    b.add(_pending(2, 0), now=0.002)
    batch = b.next_batch(0.005)
    assert batch is not None and [p.payload for p in batch] == ["1:0", "2:0"]
    assert b.next_batch(1.0) is None and b.deadline() is None


def test_a_file_group_that_queued_behind_a_batch_waits_from_its_end() -> None:
    """On a batched device the wait counts from the later of the oldest piece and the
    end of the last file batch: a piece that queued while a batch ran gathers those
    arriving just after it, and still goes within one wait; live pieces go at once."""
    b: Batcher[str] = Batcher(max_batch=4, wait_s=0.05, spread=False)
    b.add(_pending(1, 0), now=0.0)
    b.free_at = 0.2  # a file batch ran from before 0.0 until 0.2
    assert b.next_batch(0.2) is None
    assert b.deadline() == pytest.approx(0.25)
    b.add(_pending(2, 0), now=0.22)
    b.add(_live(3, deadline=0.5), now=0.23)
    live = b.next_batch(0.23)
    assert live is not None and [p.payload for p in live] == ["live3"]
    assert b.next_batch(0.24) is None
    batch = b.next_batch(0.25)
    assert batch is not None and [p.payload for p in batch] == ["1:0", "2:0"]
    # A batch that ended long before the oldest piece arrived changes nothing.
    b.add(_pending(4, 0), now=1.0)
    assert b.deadline() == pytest.approx(1.05)
    assert b.next_batch(1.04) is None and b.next_batch(1.05) is not None


def test_a_burst_goes_as_one_batch() -> None:
    """On a batched device a group that has waited keeps waiting while the engine says
    pieces are coming, up to the burst wait from its oldest piece; it goes as soon as
    nothing more is coming, or when it fills."""
    b: Batcher[str] = Batcher(max_batch=4, wait_s=0.05, spread=False, burst_wait_s=0.25)
    b.coming = 3  # three uploads still decoding
    b.add(_pending(1, 0), now=0.0)
    assert b.next_batch(0.05) is None and b.deadline() == pytest.approx(0.25)
    b.coming = 1
    b.add(_pending(2, 0), now=0.1)
    b.add(_pending(3, 0), now=0.12)
    assert b.next_batch(0.2) is None
    b.coming = 0
    assert b.deadline() == pytest.approx(0.05)
    batch = b.next_batch(0.2)
    assert batch is not None and [p.payload for p in batch] == ["1:0", "2:0", "3:0"]
    # A burst that never arrives holds the group at most the burst wait.
    b.coming = 5
    b.add(_pending(4, 0), now=1.0)
    assert b.next_batch(1.2) is None and b.next_batch(1.25) is not None
    # A full group goes at once, whatever is coming.
    for r in range(5, 9):
        b.add(_pending(r, 0), now=2.0)
    full = b.next_batch(2.0)
    assert full is not None and len(full) == 4


def test_batches_spread_over_workers() -> None:
    b: Batcher[str] = Batcher(max_batch=8, wait_s=0.0, workers=2)
    for i in range(5):
        b.add(_pending(1, i), now=0.0)
    sizes = []
    while (batch := b.next_batch(0.0)) is not None:
        sizes.append(len(batch))
    assert sizes == [3, 1, 1]  # each take leaves the other worker its share


def test_batches_are_shared_among_the_idle_workers() -> None:
    """Eight pieces of one file on two idle workers go as four and four: the second
    worker to ask is the last idle one, so it takes all that is left."""
    b: Batcher[str] = Batcher(max_batch=8, wait_s=0.0, workers=2)
    for i in range(8):
        b.add(_pending(1, i), now=0.0)
    first, second = b.next_batch(0.0, idle=2), b.next_batch(0.0, idle=1)
    assert first is not None and [p.index for p in first] == [0, 1, 2, 3]
    assert second is not None and [p.index for p in second] == [4, 5, 6, 7]


def _talk(seconds: float) -> np.ndarray:
    """Noise bursts of 3 s with 0.5 s pauses: speech-like, for the cut planner."""
    audio = np.zeros(int(seconds * RATE), np.float32)
    noise = np.random.default_rng(0).normal(0, 0.1, 3 * RATE).astype(np.float32)
    for start in range(0, len(audio), int(3.5 * RATE)):
        piece = audio[start : start + 3 * RATE]
        piece[:] = noise[: len(piece)]
    return audio


def _planner(audio: np.ndarray) -> Planner:
    """`audio`'s VAD plan, with a loud 32 ms frame standing for speech."""
    frames = audio[: len(audio) // 512 * 512].reshape(-1, 512)
    probs = (np.abs(frames).max(axis=1) > 0.01).astype(np.float32)
    return Planner(audio, probs, AUTO)


@pytest.mark.parametrize("seconds", [31, 65, 185])
def test_even_pieces_cut_short_pieces_that_split_among_the_workers(seconds: float) -> None:
    """30 s cuts of 31 s, 65 s and 185 s give 2, 3 and 7 pieces, one of them short;
    recut, every piece fits a 20 s window and each of two workers gets half of them."""
    plan = _planner(_talk(seconds))
    spans = plan()
    even = even_pieces(plan, spans, workers=2, most=16, longest=19.0, cost=_busiest)
    assert len(even) % 2 == 0 and len(even) >= len(spans)
    assert all(a.end <= b.start for a, b in itertools.pairwise(even))
    assert max(len(s) for s in even) <= 19 * RATE


def test_even_pieces_leave_alone_what_they_should_not_recut() -> None:
    plan = _planner(_talk(185))
    spans = plan()
    assert even_pieces(plan, spans, workers=2, most=6, longest=19.0, cost=_busiest) is spans  # too many pieces
    assert even_pieces(plan, spans, workers=2, most=16, longest=0.0, cost=_busiest) is spans  # turned off
    one = [Span(0, 20 * RATE)]
    assert even_pieces(_planner(_talk(20)), one, workers=2, most=16, longest=19.0, cost=_busiest) is one


def test_full_batch_goes_at_once_and_caps_at_max() -> None:
    b: Batcher[str] = Batcher(max_batch=3, wait_s=10.0)
    for i in range(5):
        b.add(_pending(1, i), now=0.0)
    first = b.next_batch(0.0)
    assert first is not None and [p.index for p in first] == [0, 1, 2]
    assert b.next_batch(0.0) is None  # two left, not full, not yet due
    rest = b.next_batch(10.0)
    assert rest is not None and [p.index for p in rest] == [3, 4]


def _live(request: int, deadline: float, key: str = "a") -> Pending[str]:
    return Pending(request, 0, key, f"live{request}", deadline)


def test_live_segments_go_first_earliest_deadline_first() -> None:
    b: Batcher[str] = Batcher(max_batch=2, wait_s=10.0)
    b.add(_pending(1, 0), now=0.0)  # a file's first piece, waiting for company
    b.add(_live(2, deadline=5.0), now=1.0)
    b.add(_live(3, deadline=2.0), now=1.5)
    order: list[str] = []
    while (batch := b.next_batch(2.0)) is not None:
        order.extend(p.payload for p in batch)
    assert order == ["live3", "live2"]  # due at once, by deadline; the file piece still waits
    assert b.next_batch(10.0) is not None


def test_live_and_file_segments_never_share_a_batch() -> None:
    b: Batcher[str] = Batcher(max_batch=8, wait_s=0.0)
    b.add(_pending(1, 0), now=0.0)
    b.add(_live(2, deadline=1.0), now=0.0)
    first, second = b.next_batch(0.0), b.next_batch(0.0)
    assert first is not None and [p.payload for p in first] == ["live2"]
    assert second is not None and [p.payload for p in second] == ["1:0"]


def test_files_can_be_held_back_for_live_work() -> None:
    b: Batcher[str] = Batcher(max_batch=8, wait_s=0.005)
    b.add(_pending(1, 0), now=0.0)
    assert b.next_batch(1.0, files=False) is None
    assert b.deadline(files=False) is None  # nothing allowed waits: sleep until woken
    b.add(_live(2, deadline=3.0), now=1.0)
    assert b.live_queued() == 1
    batch = b.next_batch(1.0, files=False)
    assert batch is not None and [p.payload for p in batch] == ["live2"]
    batch = b.next_batch(1.0)
    assert batch is not None and [p.payload for p in batch] == ["1:0"]


def test_only_equal_options_share_a_batch() -> None:
    b: Batcher[str] = Batcher(max_batch=8, wait_s=0.0)
    b.add(_pending(1, 0, "beam5"), now=0.0)
    b.add(_pending(2, 0, "words"), now=0.0)
    b.add(_pending(3, 0, "beam5"), now=0.0)
    first = b.next_batch(0.0)
    second = b.next_batch(0.0)
    assert first is not None and second is not None
    assert {p.key for p in first} == {"beam5"} and len(first) == 2
    assert {p.key for p in second} == {"words"}


def test_a_new_request_overtakes_a_long_file() -> None:
    b: Batcher[str] = Batcher(max_batch=2, wait_s=0.0)
    for i in range(10, 20):
        b.add(_pending(1, i), now=0.0)
    b.add(_pending(2, 0), now=1.0)
    batch = b.next_batch(1.0)
    assert batch is not None and [p.payload for p in batch] == ["2:0", "1:10"]


def test_abort_drops_only_that_request() -> None:
    b: Batcher[str] = Batcher(max_batch=8, wait_s=0.0)
    for i in range(3):
        b.add(_pending(1, i), now=0.0)
    b.add(_pending(2, 0), now=0.0)
    assert b.abort(1) == 3
    assert len(b) == 1 and b.queued(2) == 1
    batch = b.next_batch(0.0)
    assert batch is not None and [p.request for p in batch] == [2]


# -- words to segments -----------------------------------------------------------------
def _words(*spec: tuple[str, float, float]) -> list[Word]:
    return [Word(w, a, b, 1.0) for w, a, b in spec]


def test_sentences_end_at_sentence_marks() -> None:
    words = _words((" Hi", 0, 0.3), (" there.", 0.3, 0.8), (" How", 1.5, 1.7), (" are", 1.7, 1.9), (" you?", 1.9, 2.3))
    groups = group_sentences(words)
    assert ["".join(w.word for w in g) for g in groups] == [" Hi there.", " How are you?"]


def test_long_sentences_split_at_a_clause_then_anywhere() -> None:
    words = [Word(f" w{i}" + ("," if i == 20 else ""), i * 0.5, i * 0.5 + 0.4, 1.0) for i in range(60)]
    groups = group_sentences(words)
    assert groups[0][-1].word == " w20,"  # 10 s in, first comma after 8 s
    assert all(g[-1].end - g[0].start <= 15.5 for g in groups)
    assert [w for g in groups for w in g] == words


def test_compression_ratio_flags_repetition() -> None:
    assert compression_ratio("") == 0.0
    assert compression_ratio("hello there, how are you") < 2.4
    assert compression_ratio("the the the the " * 20) > 2.4


# -- rendering -------------------------------------------------------------------------
def _transcript() -> Transcript:
    words = (Word(" Hello", 0.5, 0.9, 0.9), Word(" world.", 0.9, 1.4, 0.8))
    segs = [
        TimedSegment(0.5, 1.4, " Hello world.", (1, 2), -0.2, 1.1, 0.01, 0.0, 0, words),
        TimedSegment(3661.25, 3663.0, " Second\n\nline --> here", (3,), -0.3, 1.2, 0.02, 0.0, 366100, ()),
    ]
    return Transcript("Hello world. Second line here", "en", 3663.5, segs)


def test_timestamps() -> None:
    assert timestamp(3661.2504, ",", True) == "01:01:01,250"
    assert timestamp(5.0) == "00:05.000"
    assert timestamp(3600.0) == "01:00:00.000"


SRT_CUE = re.compile(r"^\d+\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\n[^\n]+\n$")
VTT_TIME = re.compile(r"^(\d\d:)?\d\d:\d\d\.\d{3} --> (\d\d:)?\d\d:\d\d\.\d{3}$")


def test_srt_and_vtt_syntax() -> None:
    t = _transcript()
    srt = as_srt(t)
    cues = srt.split("\n\n")
    assert len(cues) == 2
    for cue in cues:
        assert SRT_CUE.match(cue if cue.endswith("\n") else cue + "\n"), cue
    assert "01:01:01,250 --> 01:01:03,000" in srt
    vtt = as_vtt(t)
    blocks = vtt.strip("\n").split("\n\n")
    assert blocks[0] == "WEBVTT"
    for block in blocks[1:]:
        timing, text = block.split("\n")
        assert VTT_TIME.match(timing) and text and "-->" not in text


def test_json_text_and_verbose() -> None:
    t = _transcript()
    assert as_json(t) == {"text": t.text, "usage": {"type": "duration", "seconds": 3663.5}}
    assert as_text(t) == t.text + "\n"
    v = as_verbose_json(t, words=True)
    assert v["language"] == "english" and v["duration"] == 3663.5
    assert [s["id"] for s in v["segments"]] == [0, 1]
    assert set(v["segments"][0]) >= {"id", "start", "end", "text", "avg_logprob", "compression_ratio", "no_speech_prob"}
    assert v["words"] == [{"word": "Hello", "start": 0.5, "end": 0.9}, {"word": "world.", "start": 0.9, "end": 1.4}]
    assert "words" not in as_verbose_json(t, words=False)
    assert "segments" not in as_verbose_json(t, words=True, segments=False)


# -- decoding and features -------------------------------------------------------------
def _wav(samples: np.ndarray, rate: int, channels: int = 1) -> bytes:
    return wav_file(samples, rate, channels)


def test_decode_downmixes_and_resamples() -> None:
    t = np.arange(44100) / 44100
    tone = 8000 * np.sin(2 * np.pi * 440 * t)
    # The signal only in the right channel: FFmpeg's stereo-to-mono matrix keeps it at -3 dB.
    stereo = np.stack([np.zeros_like(tone), tone], axis=1).reshape(-1)
    audio = decode_audio(_wav(stereo, 44100, channels=2), max_seconds=60)
    assert audio.dtype == np.float32 and abs(len(audio) - RATE) <= 2
    assert float(np.max(np.abs(audio))) == pytest.approx(8000 / 32768 * 2**-0.5, rel=0.05)


@pytest.mark.parametrize(
    "data", [b"", b"\x00" * 1000, b"RIFF\x00\x00\x00\x00WAVEfmt garbage", b"hello, this is text\n" * 50]
)
def test_undecodable_input_is_a_client_error(data: bytes) -> None:
    with pytest.raises(InvalidRequest, match="could not decode audio"):
        decode_audio(data, max_seconds=60)


def test_wav_without_samples_is_a_client_error() -> None:
    with pytest.raises(InvalidRequest, match="could not decode audio"):
        decode_audio(_wav(np.zeros(0), 16000), max_seconds=60)


def test_too_long_audio_is_refused_while_decoding() -> None:
    with pytest.raises(InvalidRequest, match="longer than the 2 s limit"):
        decode_audio(_wav(np.zeros(16000 * 3), 16000), max_seconds=2)


@pytest.mark.parametrize(("bad", "at_s"), [(np.nan, 3.0), (np.inf, 17.5), (1e30, 24.9)])
def test_invalid_samples_anywhere_are_refused(bad: float, at_s: float) -> None:
    # The range check runs once per 10 s block and at the end: a bad sample in any block,
    # the last partial one included, is found.
    samples = np.full(25 * RATE, 0.01, dtype=np.float32)
    samples[int(at_s * RATE)] = bad
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + samples.nbytes, b"WAVE", b"fmt ", 16, 3, 1, RATE, RATE * 4, 4, 32,
        b"data", samples.nbytes,
    )
    with pytest.raises(InvalidRequest, match="invalid samples|out of range"):
        decode_audio(header + samples.tobytes(), max_seconds=60)


def test_log_mel_shape_for_short_and_full_pieces() -> None:
    mel = LogMel(80)
    for n in (10, 16000, 30 * 16000):
        features, frames = mel(np.zeros(n, np.float32) + 0.01)
        assert features.shape == (80, N_FRAMES) and features.dtype == np.float32
        assert frames == max(1, min(N_FRAMES, n // 160))


# -- in-order results ------------------------------------------------------------------
def test_results_come_out_in_order_across_threads() -> None:
    async def main() -> list[int]:
        stream: ResultStream[int] = ResultStream(5, asyncio.get_running_loop())

        def produce() -> None:
            for i in (3, 1, 0, 4, 2):
                stream.put(i, i * 10)

        threading.Thread(target=produce).start()
        out = []
        while (item := await stream.get()) is not None:
            out.append(item)
        return out

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]


def test_wait_room_blocks_until_pieces_finish() -> None:
    async def main() -> None:
        stream: ResultStream[int] = ResultStream(4, asyncio.get_running_loop())
        waiter = asyncio.ensure_future(stream.wait_room(submitted=2, limit=2))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        threading.Thread(target=stream.put, args=(1, 1)).start()
        await asyncio.wait_for(waiter, 2)

    asyncio.run(main())


def test_live_turns_get_an_encoder_window_fitted_to_them() -> None:
    from voxserve.engine.asr import fitted_window

    second = 16000
    assert fitted_window(2 * second) == 1000  # 2 s + 1 s margin -> the 10 s minimum
    assert fitted_window(9 * second) == 1000
    assert fitted_window(int(9.5 * second)) == 1500  # 10.5 s -> the next 5 s step
    assert fitted_window(28 * second) == 3000  # never past Whisper's 30 s


def test_a_batch_runs_solo_only_when_it_is_all_the_work() -> None:
    from voxserve.engine.asr import solo_threads

    def threads(
        live: bool = False, running: int = 0, waiting: int = 0, live_sessions: int = 0, busy_elsewhere: bool = False
    ) -> int:
        return solo_threads(
            2, live=live, running=running, waiting=waiting, live_sessions=live_sessions, busy_elsewhere=busy_elsewhere
        )

    assert threads() == 2  # a lone clip gets the idle core
    assert threads(running=1) == 1  # another batch is decoding
    assert threads(waiting=1) == 1  # more work waits: replicas side by side win
    assert threads(busy_elsewhere=True) == 1  # speech is using the cores
    assert threads(live_sessions=1) == 1  # a live turn may need the second core at once
    assert threads(live=True, live_sessions=1) == 2  # a lone live turn goes solo
    assert solo_threads(1, live=False, running=0, waiting=0, live_sessions=0, busy_elsewhere=False) == 1


def test_a_text_that_repeats_its_last_words_is_a_loop() -> None:
    from voxserve.engine.segments import ends_in_a_loop

    assert ends_in_a_loop("People settle along rivers for food and an easy way to travel. Food and an easy way to travel")
    assert ends_in_a_loop("Allow about 40 minutes for the trip. Allow about 40 minutes for the trip.")
    assert not ends_in_a_loop("Allow about 40 minutes for the trip.")
    assert ends_in_a_loop("Hello there. Hello there.")
    assert not ends_in_a_loop("No, no.")  # one word twice: speech does that
    assert not ends_in_a_loop("We said it was fine, and it was fine, and then it was not fine.")
    assert not ends_in_a_loop("")


def test_a_fitted_window_padded_with_zeros_is_the_full_window() -> None:
    """What the engine relies on to widen a looping piece without recomputing features."""
    from voxserve.engine.asr import fitted_window

    samples = _tone(3.2)
    full, _ = LogMel()(samples)
    width = fitted_window(len(samples))
    widened = np.pad(full[:, :width], ((0, 0), (0, N_FRAMES - width)))
    assert width == 1000 and np.array_equal(widened, full)


def test_numpy_blas_can_be_made_single_threaded() -> None:
    """`voxserve serve` does this at start-up; numpy's wheels bundle OpenBLAS."""
    from voxserve.engine.threads import single_threaded_blas

    assert single_threaded_blas()
    a = np.ones((80, 201), dtype=np.float32)
    assert float((a @ np.ones((500, 201), dtype=np.float32).T)[0, 0]) == 201.0  # still computes

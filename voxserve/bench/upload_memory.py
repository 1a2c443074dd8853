"""Peak server memory for the worst uploads a client can craft: small files that decode to
the longest accepted audio (near-silent FLAC, Opus at 6 kbit/s, MP3 at 8 kbit/s, an 8-bit
WAV at 1 kHz).

Speaks HTTP to the server and reads the server process's peak RSS from
`/proc/PID/status` (VmHWM), resetting it before each upload (`/proc/PID/clear_refs`), so
it must run on the server's machine as the same user. Near-silence stays under the
engine's -60 dBFS floor, so no piece reaches Whisper: what is measured is decoding, the
buffered audio and cut planning, the part an upload's content controls.

    voxserve serve --port 8799 &
    python -m voxserve.bench.upload_memory --base-url http://127.0.0.1:8799 --pid $!
"""

from __future__ import annotations

import argparse
import io
import json
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import av
import httpx
import numpy as np
from av.audio.stream import AudioStream

__all__ = ["WORST_FILES", "UploadPeak", "main", "make_file", "measure"]


def _encode(fmt: str, codec: str, rate: int, seconds: float, bit_rate: int | None, sample_format: str) -> bytes:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono", format=sample_format)
        assert isinstance(stream, AudioStream)
        if bit_rate:
            stream.codec_context.bit_rate = bit_rate
        left = int(seconds * rate)
        while left:
            n = min(left, 10 * rate)
            noise = rng.integers(-1, 2, size=(1, n)).astype(np.int16)  # +-1 LSB: near-silence
            frame = av.AudioFrame.from_ndarray(noise, format="s16", layout="mono")
            frame.sample_rate = rate
            if sample_format != "s16":
                frames = av.AudioResampler(format=sample_format, layout="mono", rate=rate).resample(frame)
            else:
                frames = [frame]
            for f in frames:
                out.mux(stream.encode(f))
            left -= n
        out.mux(stream.encode(None))
    return buf.getvalue()


WORST_FILES: dict[str, Callable[[float], bytes]] = {
    "flac-16k": lambda s: _encode("flac", "flac", 16000, s, None, "s16"),
    "flac-1k": lambda s: _encode("flac", "flac", 1000, s, None, "s16"),
    "opus-6kbps": lambda s: _encode("ogg", "libopus", 16000, s, 6000, "s16"),
    "mp3-8kbps": lambda s: _encode("mp3", "libmp3lame", 8000, s, 8000, "s16p"),
    "wav-u8-1k": lambda s: _encode("wav", "pcm_u8", 1000, s, None, "u8"),
}
"""Near-silent files that expand the most: name -> maker(seconds)."""


def make_file(name: str, seconds: float) -> bytes:
    return WORST_FILES[name](seconds)


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)


def _upload(base_url: str, data: bytes) -> tuple[int, str, float]:
    started = time.perf_counter()
    with httpx.Client(base_url=base_url, timeout=600) as c:
        r = c.post("/v1/audio/transcriptions", files={"file": ("a", data)}, data={"model": "whisper-1"})
    body = r.json()
    detail = body["error"]["code"] if r.status_code != 200 else f"{body['usage']['seconds']:.0f} s"
    return r.status_code, detail, time.perf_counter() - started


@dataclass(frozen=True)
class UploadPeak:
    file: str
    upload_bytes: int
    copies: int
    answers: list[str]
    """Status and usage seconds or error code of each upload."""
    seconds: float
    rss_before_mb: float
    peak_rss_mb: float
    growth_mb: float


def measure(base_url: str, pid: int, name: str, data: bytes, copies: int) -> UploadPeak:
    """Peak RSS (MiB) over `copies` simultaneous uploads of one file."""
    time.sleep(1.0)  # let freed blocks go back to the OS
    _reset_peak(pid)
    before = _status(pid)["VmRSS"]
    with ThreadPoolExecutor(copies) as pool:
        answers = list(pool.map(lambda _: _upload(base_url, data), range(copies)))
    peak = _status(pid)["VmHWM"]
    return UploadPeak(
        file=name,
        upload_bytes=len(data),
        copies=copies,
        answers=[f"{status} {detail}" for status, detail, _ in answers],
        seconds=max(t for _, _, t in answers),
        rss_before_mb=before / 2**20,
        peak_rss_mb=peak / 2**20,
        growth_mb=(peak - before) / 2**20,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--pid", type=int, required=True, help="the server's process id (same machine)")
    p.add_argument("--seconds", type=float, default=3590.0, help="audio length of each file")
    p.add_argument("--files", default=",".join(WORST_FILES), help="comma-separated names")
    p.add_argument("--copies", default="1", help="comma-separated counts of simultaneous uploads")
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args(argv)
    rows = []
    print("| file | upload | copies | answers | peak RSS | growth | time |")
    print("|---|---|---|---|---|---|---|")
    for name in args.files.split(","):
        data = make_file(name, args.seconds)
        for copies in (int(c) for c in args.copies.split(",")):
            row = measure(args.base_url, args.pid, name, data, copies)
            rows.append(row)
            answers = ", ".join(f"{n} x {a}" for a, n in sorted(Counter(row.answers).items()))
            print(
                f"| {name} | {len(data) / 1e6:.1f} MB | {copies} | {answers} | {row.peak_rss_mb:.0f} MiB "
                f"| +{row.growth_mb:.0f} MiB | {row.seconds:.1f} s |",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()

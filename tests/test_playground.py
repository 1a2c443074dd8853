"""The browser playground at `/`, in real headless Chromium (Debian's `chromium`, driven
by Playwright) against the real server: speech streams into Web Audio, the model, language
and voice pickers shape the request, the spoken words are lit as they play, an uploaded file
and a microphone recording are transcribed, the Live card transcribes the microphone over
`/v1/realtime`, the metrics panel fills in, screenshots are saved to test-artifacts/, and
the API-key field opens a server started with a key.

The tests share one page and run in file order, so the screenshots show a used page.
The test server loads Piper alone (Kokoro adds 3 s to a start), so the shared page's voice
list gets a few Kokoro-shaped voices added on the way in (at the browser-server boundary):
the pickers offer `tts-1-hd` as they do when Kokoro is loaded, and the Piper-only server's
refusals of those requests show that the page displays the server's own messages.
Chromium is not optional: without /usr/bin/chromium the tests fail (`make test` installs it).
"""

from __future__ import annotations

import base64
import itertools
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright

from tests.asr_support import SHORT, normalize, speak, speak_pcm, wav_bytes, wer
from tests.conftest import API_KEY, RunningServer

pytestmark = pytest.mark.timeout(60)

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
SPOKEN = "Hello from the playground. This sentence streams into the browser as it is made."
UPLOADED = SHORT[0]  # "The quick brown fox jumps over the lazy dog."
RECORDED = SHORT[2]  # "A rainbow is a division of white light into many beautiful colors."
MIC_RATE = 48000
MIC_PAD_S = 1.5  # silence around the sentence: the Live card's server VAD needs the pauses
SPEECH_PATH = "/v1/audio/speech"


def _kokoro(name: str, language: str, gender: str, alias_of: str | None = None) -> dict[str, Any]:
    """A voice as `/v1/audio/voices` lists it for Kokoro (tests/test_kokoro_voice.py checks
    the real list's shape)."""
    return {
        "id": name, "name": name, "alias_of": alias_of, "model": "kokoro-82m-v1.0",
        "openai_model": "tts-1-hd", "language": language, "gender": gender,
    }


KOKORO_VOICES = [
    _kokoro("af_heart", "en-US", "female"),
    _kokoro("bm_george", "en-GB", "male"),
    _kokoro("ef_dora", "es", "female"),
    _kokoro("em_alex", "es", "male"),
    _kokoro("alloy", "en-US", "female", alias_of="af_alloy"),
]
FLAGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
    "--use-fake-ui-for-media-stream",  # grant the microphone without a prompt
    "--use-fake-device-for-media-stream",
]


@dataclass
class Playground:
    page: Page
    problems: list[str] = field(default_factory=list)
    """Console errors and uncaught exceptions seen so far."""

    def state(self, card: str) -> str:
        return str(self.page.locator(f"#{card}").get_attribute("data-state"))

    def transcriptions(self) -> int:
        return int(self.page.evaluate("() => window.voxPlayground.listen.finished"))

    def wait_transcribed(self, before: int) -> None:
        """Until the page has an answer (text or error) to one more transcription."""
        self.page.wait_for_function(
            "n => window.voxPlayground.listen.finished > n", arg=before, timeout=30_000
        )


@dataclass
class Clips:
    upload: Path
    """A WAV as the speech endpoint streams it (sizes unknown in its header)."""
    mic: Path
    """What the fake microphone plays (in a loop): a plain WAV with silence around the sentence."""
    mic_seconds: float


@pytest.fixture(scope="module")
def clips(base_url: str, tmp_path_factory: pytest.TempPathFactory) -> Clips:
    folder = tmp_path_factory.mktemp("playground")
    with httpx.Client(base_url=base_url, timeout=60) as c:
        (folder / "fox.wav").write_bytes(speak(c, UPLOADED, "wav"))
        pcm = speak_pcm(c, RECORDED, rate=MIC_RATE)
    quiet = np.zeros(int(MIC_PAD_S * MIC_RATE), dtype=np.int16)
    samples = np.concatenate([quiet, pcm, quiet])
    (folder / "mic.wav").write_bytes(wav_bytes(samples, rate=MIC_RATE))
    return Clips(folder / "fox.wav", folder / "mic.wav", len(samples) / MIC_RATE)


@pytest.fixture(scope="module")
def browser(clips: Clips) -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: `make test` installs it, or run "
            "`apt-get install -y chromium chromium-driver` (Debian) yourself"
        )
    # Playwright gives every launch a fresh, empty profile (its own --user-data-dir).
    args = [*FLAGS, f"--use-file-for-fake-audio-capture={clips.mic}"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=args)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def playground(browser: Browser, base_url: str) -> Iterator[Playground]:
    context = browser.new_context(viewport={"width": 1200, "height": 720}, base_url=base_url)
    page = context.new_page()
    seen = Playground(page)
    page.on(
        "console",
        lambda m: seen.problems.append(f"console: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: seen.problems.append(f"page error: {e}"))
    page.route("**/v1/audio/voices", _with_kokoro_voices)
    page.goto("/")
    page.wait_for_function("() => document.querySelector('#voice').options.length > 1")
    try:
        yield seen
    finally:
        context.close()


def _with_kokoro_voices(route: Route) -> None:
    response = route.fetch()
    body = response.json()
    body["voices"] += KOKORO_VOICES
    route.fulfill(response=response, json=body)


def test_page_and_assets_are_served(base_url: str) -> None:
    page = httpx.get(f"{base_url}/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assets = ["playground.js", "speech-words.js", "speech-pickers.js", "playground.css"]
    for name, kind in [(a, "text/css" if a.endswith(".css") else "javascript") for a in assets]:
        r = httpx.get(f"{base_url}/static/{name}", timeout=10)
        assert r.status_code == 200 and kind in r.headers["content-type"], name
    assert httpx.get(f"{base_url}/static/nope.js", timeout=10).status_code == 404


PURE_PARTS = """async () => {
    const m = await import("./static/playground.js");
    // 8 samples of s16le, fed whole and in pieces of odd lengths.
    const ints = new Int16Array([0, 1, -1, 32767, -32768, 1234, -4321, 256]);
    const bytes = new Uint8Array(ints.buffer);
    const whole = Array.from(m.pcm16Decoder()(bytes));
    const decode = m.pcm16Decoder();
    const pieces = [];
    for (const [a, b] of [[0, 3], [3, 4], [4, 9], [9, 16]]) pieces.push(...decode(bytes.slice(a, b)));
    const text = [
        "# TYPE voxserve_tts_ttfp_seconds histogram",
        'voxserve_tts_ttfp_seconds_bucket{le="0.05"} 2.0',
        'voxserve_tts_ttfp_seconds_bucket{le="0.1"} 6.0',
        'voxserve_tts_ttfp_seconds_bucket{le="+Inf"} 8.0',
        "voxserve_tts_active_streams 3.0",
    ].join("\\n");
    const parsed = m.parseMetrics(text);
    return {
        whole, pieces,
        p50: m.histogramQuantile(parsed, "voxserve_tts_ttfp_seconds", 0.5),
        p99: m.histogramQuantile(parsed, "voxserve_tts_ttfp_seconds", 0.99),
        none: m.histogramQuantile(parsed, "voxserve_tts_rtf", 0.5),
        active: parsed.get("voxserve_tts_active_streams")[0].value,
    };
}"""


def test_pure_parts_in_the_browser(playground: Playground) -> None:
    got = playground.page.evaluate(PURE_PARTS)
    expected = [v / 32768 for v in (0, 1, -1, 32767, -32768, 1234, -4321, 256)]
    assert got["whole"] == pytest.approx(expected) and got["pieces"] == got["whole"]
    assert got["p50"] == pytest.approx(0.05 + 0.05 * (4 - 2) / (6 - 2))
    assert got["p99"] == pytest.approx(0.1)  # past the last finite bucket: its bound
    assert got["none"] is None and got["active"] == 3


SPEECH_PURE_PARTS = """async () => {
    const m = await import("./static/playground.js");
    // SSE cut at every byte: an event split mid-line, mid-UTF-8 and between its two newlines.
    const sse = new TextEncoder().encode(
        'data: {"type":"speech.words","words":[{"word":"Olá","start_time":0,"end_time":0.5}]}\\n\\n' +
        ': a comment\\n\\ndata: {"type":"speech.audio.delta","audio":"AAEC/w=="}\\n\\n'
    );
    const feed = m.sseEvents();
    const events = [];
    for (let i = 0; i < sse.length; i++) events.push(...feed(sse.subarray(i, i + 1)));
    const place = m.wordPlacer("Dr. Smith paid 40 %, then LEFT.");
    const places = ["Dr", "Smith", "forty", "40", "%", "left"].map((w) => place(w));
    const runs = [{ at: 10, offset: 0 }, { at: 13, offset: 2 }];  // ran dry at 12 s, back at 13 s
    const heard = [9, 10.5, 12.5, 13.5, 20].map((now) => m.playhead(runs, now, 4));
    const voices = [
        { id: "joe", model: "piper", openai_model: "tts-1", language: "en-US", gender: null, alias_of: null },
        { id: "alloy", model: "piper", openai_model: "tts-1", language: "en-US", gender: null, alias_of: "joe" },
        { id: "ef_dora", model: "kokoro", openai_model: "tts-1-hd", language: "es", gender: "female", alias_of: null },
        { id: "af_sky", model: "kokoro", openai_model: "tts-1-hd", language: "en-US", gender: "female", alias_of: null },
        { id: "x", model: "hidden", openai_model: null, language: "en-US", gender: null, alias_of: null },
    ];
    const models = m.speechModels(["tts-1", "kokoro", "tts-1-hd"], voices);
    return {
        events, places, heard,
        models: models.map((x) => [x.id, x.name, x.voices.length]),
        piper: m.voiceGroups(models[0], ""),
        spanish: m.voiceGroups(models[1], "es"),
        bytes: Array.from(m.base64Bytes("AAEC/w==")),
    };
}"""


def test_speech_parts_in_the_browser(playground: Playground) -> None:
    got = playground.page.evaluate(SPEECH_PURE_PARTS)
    words = {"type": "speech.words", "words": [{"word": "Olá", "start_time": 0, "end_time": 0.5}]}
    assert got["events"] == [words, {"type": "speech.audio.delta", "audio": "AAEC/w=="}]
    # "forty" is not in the text: it costs its own place only; "left" is found in any case.
    assert got["places"] == [[0, 2], [4, 9], None, [15, 17], [18, 19], [26, 30]]
    assert got["heard"] == [None, 0.5, 2, 2.5, 4]
    assert got["models"] == [["tts-1", "piper", 2], ["tts-1-hd", "kokoro", 2]]
    assert got["piper"] == [["en-US", [["joe", "joe"]]], ["OpenAI names", [["alloy", "alloy → joe"]]]]
    assert got["spanish"] == [["es", [["ef_dora", "ef_dora (female)"]]]]
    assert got["bytes"] == [0, 1, 2, 255]


LIVE_PURE_PARTS = """async () => {
    const m = await import("./static/live-audio.js");
    const tone = (rate, hz, n) => Float32Array.from({ length: n }, (_, i) => 0.5 * Math.sin((2 * Math.PI * hz * i) / rate));
    const inPieces = (r, x, sizes) => {
        const out = [];
        let at = 0;
        for (let k = 0; at < x.length; k++) {
            const n = sizes[k % sizes.length];
            out.push(...r.feed(x.subarray(at, at + n)));
            at += n;
        }
        return out;
    };
    // Largest distance from the ideal 1 kHz tone at 24 kHz, past the first 10 ms.
    const error = (y) => Math.max(...y.slice(240).map((v, n) => Math.abs(v - 0.5 * Math.sin((2 * Math.PI * 1000 * (n + 240)) / 24000))));
    const rms = (y) => Math.sqrt(y.slice(240).reduce((a, v) => a + v * v, 0) / (y.length - 240));
    const rates = {};
    for (const rate of [48000, 44100, 16000]) {
        const x = tone(rate, 1000, rate / 2);
        const whole = Array.from(new m.Resampler(rate).feed(x));
        const pieces = inPieces(new m.Resampler(rate), x, [128, 1, 37, 500]);
        rates[rate] = { n: whole.length, same: whole.every((v, i) => v === pieces[i]) && whole.length === pieces.length, error: error(whole) };
    }
    const alias = rms(Array.from(new m.Resampler(48000).feed(tone(48000, 15000, 24000))));
    const view = (bytes) => Array.from({ length: bytes.length / 2 }, (_, i) => new DataView(bytes.buffer).getInt16(2 * i, true));
    const blocks = new m.Pcm16Blocks(4);
    const first = blocks.push(Float32Array.from([0.1, -0.2, 0.3]));
    const next = blocks.push(Float32Array.from([-0.9, 0, 0, 0, 0.25, 0.5]));
    const bytes = Uint8Array.from({ length: 100003 }, (_, i) => (i * 7 + 3) % 256);
    return {
        rates, alias,
        pcm: view(m.pcm16Bytes(Float32Array.from([0, 1, -1, 0.5, -0.5, 2, -2]))),
        blocks: [first.length, ...next.map((b) => [view(b.bytes), b.peak])],
        mono: Array.from(m.downmix([Float32Array.from([1, 0.5]), Float32Array.from([0, -0.5])])),
        b64: m.base64(bytes),
    };
}"""


def test_live_audio_parts_in_the_browser(playground: Playground) -> None:
    got = playground.page.evaluate(LIVE_PURE_PARTS)
    for rate, r in got["rates"].items():
        # Half a second in; the output lags by under 1 ms and makes no sample it cannot finish.
        assert 12000 - 40 < r["n"] <= 12000, rate
        assert r["same"], f"{rate}: cutting the input into pieces changed the output"
        assert r["error"] < 1e-4, rate  # a 1 kHz tone comes through unchanged (about 5e-6)
    assert got["alias"] < 1e-4  # 15 kHz cannot fold back into 0-12 kHz (about 2e-5)
    assert got["pcm"] == [0, 32767, -32768, 16384, -16384, 32767, -32768]
    assert got["blocks"][0] == 0
    assert got["blocks"][1:] == [
        [[3277, -6554, 9830, -29491], pytest.approx(0.9)],
        [[0, 0, 0, 8192], pytest.approx(0.25)],
    ]
    assert got["mono"] == [0.5, 0]
    expected = bytes((i * 7 + 3) % 256 for i in range(100003))
    assert base64.b64decode(got["b64"]) == expected


def _speak(page: Page) -> dict[str, Any]:
    """Click Speak; the JSON body the page sent, once the stream has ended."""
    with page.expect_request(lambda r: r.url.endswith(SPEECH_PATH)) as sent:
        page.click("#speak-button")
    page.wait_for_function(
        "() => !['idle', 'streaming'].includes(window.voxPlayground.stats.state)", timeout=30_000
    )
    body = sent.value.post_data_json
    assert isinstance(body, dict), body
    return body


def test_speak_streams_and_schedules_audio(playground: Playground) -> None:
    """Without word timings (the box unticked): audio only, as before timings existed."""
    page = playground.page
    page.fill("#text", SPOKEN)
    assert page.input_value("#model") == "tts-1"
    page.select_option("#voice", "nova")
    page.uncheck("#words")
    sent = _speak(page)
    assert sent == {
        "model": "tts-1", "voice": "nova", "input": SPOKEN, "speed": 1,
        "response_format": "pcm", "stream_format": "sse",
    }
    stats = page.evaluate("() => window.voxPlayground.stats")
    assert stats["state"] == "done", stats
    assert stats["contextState"] == "running"
    assert stats["sampleRate"] == 24000
    assert stats["chunks"] >= 2 and stats["bytes"] == 2 * stats["samples"]
    assert stats["sourcesScheduled"] >= 2
    received = stats["samples"] / stats["sampleRate"]
    assert received > 1.0
    assert stats["scheduledSeconds"] == pytest.approx(received, abs=0.01)
    assert 0 < stats["ttfaMs"] < 10_000 and 0 < stats["rtf"] < 5
    assert re.fullmatch(r"\d+ ms", page.inner_text("#ttfa"))
    assert re.fullmatch(r"\d+\.\d\d", page.inner_text("#rtf"))
    assert page.inner_text("#received") == f"{received:.2f} s"
    assert page.inner_text("#speak-state") == "Done"
    assert playground.state("speak") == "done"
    assert stats["words"] == stats["wordsPlaced"] == 0 and page.locator("#spoken").is_hidden()
    assert not playground.problems


def _options(page: Page, select: str) -> list[list[str]]:
    return list(page.eval_on_selector_all(f"{select} option", "os => os.map(o => [o.value, o.text])"))


def _server_error(base_url: str, body: dict[str, Any]) -> str:
    r = httpx.post(base_url + SPEECH_PATH, json=body, timeout=30)
    assert r.status_code in (400, 404), r.text
    return str(r.json()["error"]["message"])


def test_pickers_shape_the_request_and_show_the_servers_refusal(
    playground: Playground, base_url: str
) -> None:
    page = playground.page
    assert _options(page, "#model") == [["tts-1", "tts-1"], ["tts-1-hd", "tts-1-hd"]]
    assert page.inner_text("#model-name") == "en_US-joe-medium"
    assert [v for v, _ in _options(page, "#language")] == ["", "en-US"]
    page.select_option("#model", "tts-1-hd")
    assert page.inner_text("#model-name") == "kokoro-82m-v1.0"
    languages = _options(page, "#language")
    assert [v for v, _ in languages] == ["", "en-US", "en-GB", "es"]
    assert ["es", "Spanish (es)"] in languages
    page.select_option("#language", "es")
    assert _options(page, "#voice") == [
        ["ef_dora", "ef_dora (female)"], ["em_alex", "em_alex (male)"],
        ["…", "Type a name or a blend…"],
    ]
    page.check("#words")
    sent = _speak(page)
    chosen = {"model": "tts-1-hd", "voice": "ef_dora", "language": "es", "timestamps": True}
    assert sent == {**sent, **chosen}
    # This server runs Piper alone, so tts-1-hd means Piper, which has no ef_dora (404)...
    assert playground.state("speak") == "error"
    assert page.inner_text("#speak-message") == _server_error(base_url, sent)
    # ...and a typed voice it has cannot speak Spanish (400).
    page.select_option("#voice", "…")
    page.fill("#voice-typed", "alloy")
    sent = _speak(page)
    assert sent == {**sent, **chosen, "voice": "alloy"}
    assert page.inner_text("#speak-message") == _server_error(base_url, sent)
    assert "not 'es'" in page.inner_text("#speak-message")
    kept = page.evaluate("() => JSON.parse(localStorage.getItem('voxserve.speech'))")
    assert kept == {"model": "tts-1-hd", "language": "es", "voice": "…", "typed": "alloy"}
    # The browser logs each refused request; nothing else may have gone wrong.
    assert len(playground.problems) == 2 and all(
        "404" in p or "400" in p for p in playground.problems
    ), playground.problems
    playground.problems.clear()


WORD_NOW = """() => {
    const span = document.querySelector("#spoken .word.now");
    const t = window.voxPlayground.heardSeconds;
    return span && { word: span.textContent, start: +span.dataset.start, end: +span.dataset.end, t };
}"""


@pytest.mark.serial  # the light follows the playhead within 0.1 s
def test_words_are_lit_while_the_audio_plays(playground: Playground) -> None:
    page = playground.page
    page.fill("#text", SPOKEN)
    page.select_option("#model", "tts-1")
    assert page.input_value("#language") == ""  # Piper does not speak Spanish
    page.select_option("#voice", "nova")
    assert page.locator("#voice-typed").is_hidden()
    sent = _speak(page)
    assert sent == {**sent, "model": "tts-1", "voice": "nova", "input": SPOKEN, "timestamps": True}
    assert "language" not in sent
    stats = page.evaluate("() => window.voxPlayground.stats")
    assert stats["state"] == "done", stats
    assert stats["scheduledSeconds"] == pytest.approx(stats["samples"] / 24000, abs=0.01)
    # Every timed word is found in the text, in order. (Piper's timings leave out a word
    # that espeak-ng reads joined to the next, such as "the" in "from the", so the spans
    # are the words the server timed, not every word of the text.)
    spans = page.locator("#spoken .word").all_inner_texts()
    words = iter(re.findall(r"\w+", SPOKEN))
    assert all(span in words for span in spans), spans
    assert len(spans) == stats["words"] == stats["wordsPlaced"] >= 8
    assert page.inner_text("#spoken") == SPOKEN  # the text between the words is kept
    # While the audio plays, the lit word is the one whose times hold the playhead, and the
    # light moves on through the words in order.
    lit: dict[float, str] = {}
    deadline = time.monotonic() + 15
    while len(lit) < 3 and time.monotonic() < deadline:
        now = page.evaluate(WORD_NOW)
        if now and now["start"] not in lit:
            assert now["start"] - 0.02 <= now["t"] < now["end"] + 0.1, now
            lit[now["start"]] = now["word"]
            if len(lit) == 2:
                ARTIFACTS.mkdir(exist_ok=True)
                page.locator("#speak").screenshot(path=ARTIFACTS / "playground-words.png")
        page.wait_for_timeout(30)
    assert len(lit) == 3 and list(lit) == sorted(lit), lit
    assert page.evaluate("() => window.voxPlayground.stats.wordsHighlighted") >= 3
    assert not playground.problems


def test_uploaded_file_is_transcribed(playground: Playground, clips: Clips) -> None:
    page = playground.page
    before = playground.transcriptions()
    page.set_input_files("#file-input", clips.upload)
    playground.wait_transcribed(before)
    assert playground.state("listen") == "done", page.inner_text("#listen-message")
    text = normalize(page.inner_text("#transcript"))
    assert "quick brown fox" in text and "lazy dog" in text, text
    _assert_segments(page)
    assert not playground.problems


def test_speaker_column(playground: Playground, clips: Clips) -> None:
    page = playground.page
    page.check("#speakers")
    try:
        before = playground.transcriptions()
        page.set_input_files("#file-input", clips.upload)
        playground.wait_transcribed(before)
        assert playground.state("listen") == "done", page.inner_text("#listen-message")
        _assert_segments(page)
        speakers = page.locator("#segments li .speaker").all_inner_texts()
        assert speakers and set(speakers) == {"A"}, speakers  # one voice: one speaker
    finally:
        page.uncheck("#speakers")
    assert not playground.problems


def test_recording_is_transcribed(playground: Playground, clips: Clips) -> None:
    page = playground.page
    before = playground.transcriptions()
    page.click("#record-button")
    page.wait_for_function(
        "() => document.querySelector('#listen-state').textContent.startsWith('Recording')"
    )
    page.wait_for_timeout(clips.mic_seconds * 1000 + 200)  # the fake microphone plays mic.wav
    page.click("#record-button")
    playground.wait_transcribed(before)
    assert playground.state("listen") == "done", page.inner_text("#listen-message")
    text = normalize(page.inner_text("#transcript"))
    assert "rainbow" in text and "white light" in text, text
    _assert_segments(page)
    assert not playground.problems


LiveLine = dict[str, Any]
LIVE_ON = ("connecting", "listening", "speech")


def _sentence_lines(lines: list[LiveLine]) -> list[LiveLine] | None:
    """The first final lines that together say the sentence (the VAD may cut it in pieces),
    or None while they do not yet."""
    finals = list(itertools.takewhile(lambda line: line["state"] == "final", lines))
    for n in range(1, len(finals) + 1):
        if wer(RECORDED, " ".join(line["text"] for line in finals[:n])) <= 0.3:
            return finals[:n]
    return None


def test_live_transcribes_the_microphone(playground: Playground) -> None:
    page = playground.page
    page.select_option("#live-noise", "far_field")  # the VAD hears it through the noise filter
    page.click("#live-button")
    # The fake microphone loops 1.5 s of silence, the sentence and 1.5 s of silence, so
    # more lines may follow: look for the sentence in the first ones.
    deadline = time.monotonic() + 20
    while True:
        live = page.evaluate("() => window.voxPlayground.live")
        assert live["state"] in LIVE_ON, page.inner_text("#live-message")
        lines = _sentence_lines(live["lines"])
        if lines:
            break
        assert time.monotonic() < deadline, live
        page.wait_for_timeout(100)
    assert not live["errors"] and live["sentSeconds"] > 3
    assert live["noiseReduction"] == "far_field"
    for i, line in enumerate(lines):
        # Both clocks: the page's (speech_stopped to completed), and the audio's.
        assert 0 < line["latencyMs"] < 10_000 and 0 < line["afterWordMs"] < 10_000, line
        item = page.locator("#live-lines .live-line").nth(i)
        assert normalize(item.locator(".live-text").inner_text()) == normalize(line["text"])
        shown = item.locator(".live-latency").inner_text()
        assert re.fullmatch(r"final after end of speech (\d+ ms|\d+\.\d\d s)", shown), shown
    assert page.inner_text("#live-status").startswith("Connected · ")
    page.click("#live-button")
    page.wait_for_function("() => window.voxPlayground.live.state === 'stopped'", timeout=8_000)
    assert page.inner_text("#live-button") == "Start live"
    assert page.locator("#live-message").is_hidden()
    assert not playground.problems


def test_metrics_panel_shows_numbers(playground: Playground, server: RunningServer) -> None:
    page = playground.page
    page.wait_for_function(
        "() => window.voxPlayground.metrics.status === 'live' && window.voxPlayground.metrics.ttfpP50 !== null",
        timeout=6_000,
    )
    assert re.fullmatch(r"\d+", page.inner_text("#m-active"))
    assert re.fullmatch(r"\d+", page.inner_text("#m-queued"))
    assert re.fullmatch(r"\d+ ms", page.inner_text("#m-ttfp"))
    assert re.fullmatch(r"\d+\.\d\d", page.inner_text("#m-rtf"))
    assert page.inner_text("#metrics-state") == "Live"
    assert not playground.problems


def test_screenshots(playground: Playground) -> None:
    page = playground.page
    ARTIFACTS.mkdir(exist_ok=True)
    page.wait_for_timeout(300)  # let the cards' colour transitions finish
    page.screenshot(path=ARTIFACTS / "playground.png", full_page=True)
    page.set_viewport_size({"width": 380, "height": 800})
    # At phone width nothing may stick out sideways.
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 380
    page.screenshot(path=ARTIFACTS / "playground-phone.png", full_page=True)
    page.set_viewport_size({"width": 1200, "height": 720})
    assert not playground.problems


def test_api_key_field_unlocks_a_keyed_server(browser: Browser, keyed_server: RunningServer) -> None:
    keyed = keyed_server  # /metrics needs the key too, and it runs no ASR
    context = browser.new_context(base_url=keyed.base_url)
    for path in ("/", "/static/playground.js"):
        assert httpx.get(keyed.base_url + path, timeout=10).status_code == 200, path
    try:
        page = context.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.goto("/")  # the page itself needs no key
        page.wait_for_function("() => window.voxPlayground.metrics.status === 'denied'")
        assert page.inner_text("#metrics-state") == "Needs key"
        assert "needs an API key" in page.inner_text("#speak-message")
        # Without the key the handshake is refused (403), which tells the page nothing more.
        page.click("#live-button")
        page.wait_for_function("() => window.voxPlayground.live.state === 'error'")
        assert "enter the key above" in page.inner_text("#live-message")
        page.fill("#api-key", API_KEY)
        page.press("#api-key", "Enter")
        page.wait_for_function("() => document.querySelector('#voice').options.length > 1")
        assert page.locator("#speak-message").is_hidden()
        # The Live card offers the key as a subprotocol: the server lets the session in,
        # then ends it because this server runs no speech-to-text, and the card says so
        # (the error event's message first, the error state once the socket closes).
        page.click("#live-button")
        page.wait_for_function(
            "() => window.voxPlayground.live.state === 'error'"
            " && document.querySelector('#live-message').textContent.includes('(asr_disabled)')"
        )
        page.wait_for_function(
            "() => window.voxPlayground.metrics.status === 'live'", timeout=6_000
        )
        page.reload()  # the key was kept in localStorage
        page.wait_for_function("() => document.querySelector('#voice').options.length > 1")
        assert page.input_value("#api-key") == API_KEY
        assert problems and all("401" in p or "403" in p for p in problems), problems
    finally:
        context.close()


def _assert_segments(page: Page) -> None:
    segments = page.locator("#segments li")
    assert segments.count() >= 1
    for i in range(segments.count()):
        item = segments.nth(i)
        start = float(item.get_attribute("data-start") or "nan")
        end = float(item.get_attribute("data-end") or "nan")
        assert 0 <= start < end
        assert re.fullmatch(r"\d+:\d\d\.\d–\d+:\d\d\.\d", item.locator("time").inner_text())

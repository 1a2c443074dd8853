// voxserve playground: speak, transcribe and watch the server, through the public HTTP API
// only (and WS /v1/realtime for the Live card, in live.js). Plain browser APIs, no
// framework, nothing fetched from anywhere but this server.
// Tests read `window.voxPlayground` (a read-only snapshot) and the cards' data-state.

import { livePanel } from "./live.js";
import { speechPickers } from "./speech-pickers.js";
import { base64Bytes, playhead, spokenText, sseEvents } from "./speech-words.js";

const LEAD_S = 0.12; // start offset before the first chunk, to absorb network jitter
const METRICS_EVERY_MS = 2000;
const KEY_STORE = "voxserve.apiKey";
const $ = (id) => document.getElementById(id);

const ui = {
  key: $("api-key"),
  speak: $("speak"), speakState: $("speak-state"), speakMessage: $("speak-message"),
  text: $("text"), count: $("text-count"), speed: $("speed"), words: $("words"),
  speedValue: $("speed-value"), speakButton: $("speak-button"), stopButton: $("stop-button"),
  wave: $("wave"), ttfa: $("ttfa"), rtf: $("rtf"), received: $("received"), chunks: $("chunks"),
  listen: $("listen"), listenState: $("listen-state"), listenMessage: $("listen-message"),
  listenHint: $("listen-hint"), record: $("record-button"), file: $("file-input"), speakers: $("speakers"),
  transcript: $("transcript"), segments: $("segments"),
  server: $("server"), metricsState: $("metrics-state"), metricsNote: $("metrics-note"),
  active: $("m-active"), queued: $("m-queued"), ttfp: $("m-ttfp"), rtfP50: $("m-rtf"),
};

const stats = {
  state: "idle", // idle | streaming | done | stopped | error
  chunks: 0, bytes: 0, samples: 0, sampleRate: 0,
  audioSeconds: 0, scheduledSeconds: 0, sourcesScheduled: 0, underruns: 0,
  ttfaMs: null, rtf: null, error: null,
  words: 0, // timed words received
};
const listen = { state: "idle", finished: 0, error: null }; // finished: transcriptions answered
const metrics = { status: "idle", active: null, queued: null, ttfpP50: null, rtfP50: null };

let audio = null; // AudioContext, made on the first Speak (a user gesture)
let run = null; // the current stream: { controller, sources, peaks, block, runs, scheduled }
const live = livePanel();
const pickers = speechPickers({
  model: $("model"), modelName: $("model-name"), language: $("language"), voice: $("voice"), typed: $("voice-typed"),
});
const spoken = spokenText($("spoken"));

window.voxPlayground = Object.freeze({
  get stats() {
    const words = { wordsPlaced: spoken.placed, wordsHighlighted: spoken.highlighted };
    return Object.freeze({ ...stats, ...words, contextState: audio ? audio.state : null });
  },
  get models() {
    return pickers.models;
  },
  get heardSeconds() {
    return heardSeconds();
  },
  get listen() {
    return Object.freeze({ ...listen });
  },
  get metrics() {
    return Object.freeze({ ...metrics });
  },
  get live() {
    return live.snapshot();
  },
});

// ---------------------------------------------------------------- shared helpers

function authHeaders(extra = {}) {
  const key = ui.key.value.trim();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

/** The server's message from an OpenAI-shaped error body, or the status line. */
async function errorMessage(response) {
  const text = await response.text().catch(() => "");
  let message = `HTTP ${response.status} ${response.statusText}`.trim();
  try {
    message = JSON.parse(text).error.message || message;
  } catch {
    if (text) message += `: ${text.slice(0, 200)}`;
  }
  if (response.status === 401) message += " (enter the server's key in the API key field)";
  return message;
}

function setCard(card, pill, messageBox, state, label, message = "") {
  card.dataset.state = state;
  pill.textContent = label;
  messageBox.hidden = !message;
  messageBox.textContent = message;
}

const fmtSeconds = (s) => `${s.toFixed(2)} s`;
const fmtClock = (s) => `${Math.floor(s / 60)}:${(s % 60).toFixed(1).padStart(4, "0")}`;

// ---------------------------------------------------------------- speak

/** Turns a byte stream of s16le PCM into Float32 samples; keeps an odd byte for the next chunk. */
function pcm16Decoder() {
  let carry = null;
  return (bytes) => {
    if (carry !== null) {
      const joined = new Uint8Array(bytes.length + 1);
      joined[0] = carry;
      joined.set(bytes, 1);
      bytes = joined;
      carry = null;
    }
    const n = bytes.length >> 1;
    if (bytes.length % 2) carry = bytes[bytes.length - 1];
    const view = new DataView(bytes.buffer, bytes.byteOffset, n * 2);
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = view.getInt16(2 * i, true) / 32768;
    return out;
  };
}

/** Schedules sample blocks back to back on the AudioContext clock; `current.runs` records
 * where playback (re)started, for `playhead`. */
function pcmScheduler(ctx, rate, current) {
  let at = 0;
  return (samples) => {
    const buffer = ctx.createBuffer(1, samples.length, rate);
    buffer.copyToChannel(samples, 0);
    const node = ctx.createBufferSource();
    node.buffer = buffer;
    node.connect(ctx.destination);
    const now = ctx.currentTime;
    if (at < now + 0.005) {
      if (at > 0) stats.underruns += 1; // the player ran dry: start again with a fresh lead
      at = now + LEAD_S;
      current.runs.push({ at, offset: current.scheduled });
    }
    node.start(at);
    at += buffer.duration;
    current.scheduled += buffer.duration;
    current.sources.add(node);
    node.onended = () => {
      current.sources.delete(node);
      if (current === run && !current.sources.size && stats.state !== "streaming") {
        ui.stopButton.disabled = true;
      }
    };
    stats.sourcesScheduled += 1;
    stats.scheduledSeconds += buffer.duration;
  };
}

function resetStats() {
  Object.assign(stats, {
    chunks: 0, bytes: 0, samples: 0, sampleRate: 0, audioSeconds: 0, scheduledSeconds: 0,
    sourcesScheduled: 0, underruns: 0, ttfaMs: null, rtf: null, error: null, words: 0,
  });
}

function renderStats() {
  ui.ttfa.textContent = stats.ttfaMs === null ? "–" : `${Math.round(stats.ttfaMs)} ms`;
  ui.rtf.textContent = stats.rtf === null ? "–" : stats.rtf.toFixed(2);
  ui.received.textContent = stats.bytes ? fmtSeconds(stats.audioSeconds) : "–";
  ui.chunks.textContent = stats.chunks ? String(stats.chunks) : "–";
}

const SPEAK_LABELS = { idle: "Idle", streaming: "Streaming", done: "Done", stopped: "Stopped", error: "Error" };
const CARD_STATES = { streaming: "busy", stopped: "idle" };

function setSpeak(state, message = "") {
  stats.state = state;
  stats.error = state === "error" ? message : null;
  const card = CARD_STATES[state] ?? state;
  setCard(ui.speak, ui.speakState, ui.speakMessage, card, SPEAK_LABELS[state], message);
  ui.speakButton.disabled = state === "streaming";
  ui.stopButton.disabled = !(state === "streaming" || (run && run.sources.size));
}

function stopPlayback() {
  if (!run) return;
  run.controller.abort();
  for (const node of run.sources) node.stop();
  run.sources.clear();
  spoken.show(null);
}

/** The second of the current stream being heard, or null before its first sound. */
function heardSeconds() {
  return run && audio ? playhead(run.runs, audio.currentTime, run.scheduled) : null;
}

async function speak(event) {
  event.preventDefault();
  const input = ui.text.value.trim();
  let choice;
  try {
    if (!input) throw new Error("Type some text to speak first.");
    choice = pickers.request();
  } catch (err) {
    setSpeak("error", err.message);
    return;
  }
  stopPlayback();
  audio ??= new AudioContext();
  if (audio.state === "suspended") await audio.resume();
  const current = { controller: new AbortController(), sources: new Set(), peaks: [], runs: [], scheduled: 0 };
  run = current;
  resetStats();
  renderStats();
  spoken.reset(input);
  const started = performance.now();
  setSpeak("streaming");
  drawWave();
  try {
    // SSE rather than raw audio, so that word timings can come between the audio events.
    const body = { ...choice, input, speed: Number(ui.speed.value), response_format: "pcm", stream_format: "sse" };
    if (ui.words.checked) body.timestamps = true;
    const response = await fetch("v1/audio/speech", {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json" }),
      body: JSON.stringify(body),
      signal: current.controller.signal,
    });
    if (!response.ok) throw new Error(await errorMessage(response));
    const rate = Number(response.headers.get("x-sample-rate")) || 24000;
    stats.sampleRate = rate;
    const decode = pcm16Decoder();
    const schedule = pcmScheduler(audio, rate, current);
    const events = sseEvents();
    const reader = response.body.getReader();
    let finished = false;
    requestAnimationFrame(animate);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      for (const event of events(value)) {
        if (event.type === "speech.words") {
          stats.words += event.words.length;
          spoken.add(event.words);
        } else if (event.type === "speech.audio.delta") {
          play(base64Bytes(event.audio), decode, schedule, current, started);
        } else if (event.type === "speech.audio.done") {
          finished = true;
        } else if (event.type === "error") {
          throw new Error(event.error?.message || "the server ended the stream with an error");
        }
      }
    }
    if (!finished) throw new Error("the stream ended before the server said it was done");
    if (!stats.samples) throw new Error("the server sent no audio");
    setSpeak("done");
    drawWave();
  } catch (err) {
    if (current !== run) return; // a newer Speak took over
    if (current.controller.signal.aborted) setSpeak("stopped");
    else setSpeak("error", err instanceof TypeError ? `Network error: ${err.message}` : err.message);
  }
}

/** One audio event's PCM: scheduled, drawn and counted. */
function play(bytes, decode, schedule, current, started) {
  if (!bytes.length) return;
  const rate = stats.sampleRate;
  stats.ttfaMs ??= performance.now() - started;
  stats.chunks += 1;
  stats.bytes += bytes.length;
  const samples = decode(bytes);
  if (samples.length) {
    schedule(samples);
    addPeaks(current, samples, rate);
  }
  stats.samples += samples.length;
  stats.audioSeconds = stats.samples / rate;
  if (stats.samples) stats.rtf = (performance.now() - started) / 1000 / stats.audioSeconds;
  renderStats();
}

function stop() {
  stopPlayback();
  if (stats.state === "streaming") setSpeak("stopped");
  else ui.stopButton.disabled = true;
}

// ---------------------------------------------------------------- waveform

const PEAK_S = 0.02; // one bar per 20 ms of audio

/** One peak per PEAK_S of audio; a block may span two chunks, so the axis stays true. */
function addPeaks(current, samples, rate) {
  const step = Math.round(PEAK_S * rate);
  current.block ??= { peak: 0, count: 0 };
  const block = current.block;
  for (const sample of samples) {
    block.peak = Math.max(block.peak, Math.abs(sample));
    if (++block.count === step) {
      current.peaks.push(block.peak);
      block.peak = 0;
      block.count = 0;
    }
  }
}

function drawWave() {
  const canvas = ui.wave;
  const ratio = window.devicePixelRatio || 1;
  const width = Math.round(canvas.clientWidth * ratio);
  const height = Math.round(canvas.clientHeight * ratio);
  if (canvas.width !== width || canvas.height !== height) Object.assign(canvas, { width, height });
  const g = canvas.getContext("2d");
  g.clearRect(0, 0, width, height);
  const peaks = run ? run.peaks : [];
  const css = getComputedStyle(document.documentElement);
  // While streaming, leave room for the audio the text will probably make (~14 characters
  // a second); once the stream ends, its audio fills the width.
  const received = peaks.length * PEAK_S;
  const expected = stats.state === "streaming" ? ui.text.value.length / 14 / Number(ui.speed.value) : 0;
  const total = Math.max(received, expected, 1);
  const bar = width / (total / PEAK_S);
  const played = heardSeconds() ?? 0;
  const accent = css.getPropertyValue("--accent").trim();
  const muted = css.getPropertyValue("--muted").trim();
  const mid = height / 2;
  peaks.forEach((peak, i) => {
    const heard = i * PEAK_S < played;
    g.fillStyle = heard ? accent : muted;
    g.globalAlpha = heard ? 1 : 0.4;
    const h = Math.max(ratio, Math.min(1, peak * 1.6) * (height - 8 * ratio));
    g.fillRect(i * bar, mid - h / 2, Math.max(ratio, bar * 0.7), h);
  });
}

function animate() {
  drawWave();
  const playing = stats.state === "streaming" || (run && run.sources.size);
  spoken.show(playing ? heardSeconds() : null);
  if (playing) requestAnimationFrame(animate);
}

// ---------------------------------------------------------------- voices

/** Fills the model, language and voice pickers from /v1/models and /v1/audio/voices. */
async function loadVoices() {
  try {
    const answers = await Promise.all([
      fetch("v1/models", { headers: authHeaders() }),
      fetch("v1/audio/voices", { headers: authHeaders() }),
    ]);
    const failed = answers.find((r) => !r.ok);
    if (failed) throw new Error(`Could not list the voices: ${await errorMessage(failed)}`);
    const [{ data }, { voices }] = await Promise.all(answers.map((r) => r.json()));
    pickers.load(data.map((m) => m.id), voices);
  } catch (err) {
    setSpeak("error", err instanceof TypeError ? `Cannot reach the server: ${err.message}` : err.message);
    return;
  }
  if (!pickers.models.length) {
    setSpeak("error", "The server lists no speech model this page can use.");
    return;
  }
  if (stats.state === "error") setSpeak("idle");
}

// ---------------------------------------------------------------- transcribe

let recorder = null;
let recordTimer = null;

function setListen(state, label, message = "") {
  listen.state = state;
  listen.error = state === "error" ? message : null;
  if (state === "done" || state === "error") listen.finished += 1;
  setCard(ui.listen, ui.listenState, ui.listenMessage, state, label, message);
}

async function transcribe(blob, name) {
  setListen("busy", "Transcribing");
  ui.transcript.hidden = true;
  ui.segments.replaceChildren();
  const form = new FormData();
  form.append("file", blob, name);
  form.append("model", ui.speakers.checked ? "gpt-4o-transcribe-diarize" : "whisper-1");
  form.append("response_format", "verbose_json");
  const started = performance.now();
  try {
    const response = await fetch("v1/audio/transcriptions", { method: "POST", headers: authHeaders(), body: form });
    if (!response.ok) throw new Error(await errorMessage(response));
    const body = await response.json();
    const took = (performance.now() - started) / 1000;
    ui.transcript.textContent = body.text.trim() || "(no speech heard)";
    ui.transcript.hidden = false;
    ui.segments.replaceChildren(...(body.segments || []).map(segmentItem));
    ui.listenHint.textContent = `${name}: ${fmtSeconds(body.duration)} of audio, transcribed in ${fmtSeconds(took)}.`;
    setListen("done", "Done");
  } catch (err) {
    setListen("error", "Error", err instanceof TypeError ? `Network error: ${err.message}` : err.message);
  }
}

function segmentItem(segment) {
  const item = document.createElement("li");
  item.dataset.start = segment.start;
  item.dataset.end = segment.end;
  const time = document.createElement("time");
  time.textContent = `${fmtClock(segment.start)}–${fmtClock(segment.end)}`;
  const text = document.createElement("span");
  text.textContent = segment.text.trim();
  item.append(time);
  if (segment.speaker) {
    const speaker = document.createElement("b");
    speaker.className = "speaker";
    speaker.textContent = segment.speaker;
    item.append(speaker);
  }
  item.append(text);
  return item;
}

async function toggleRecording() {
  if (recorder) {
    recorder.stop();
    return;
  }
  if (!navigator.mediaDevices?.getUserMedia || typeof MediaRecorder === "undefined") {
    setListen("error", "Error", "This page cannot record here: browsers allow the microphone only on https or localhost.");
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (err) {
    setListen("error", "Error", `No microphone: ${err.message}`);
    return;
  }
  const parts = [];
  const rec = new MediaRecorder(stream);
  recorder = rec;
  rec.ondataavailable = (e) => {
    if (e.data.size) parts.push(e.data);
  };
  rec.onstop = () => {
    stream.getTracks().forEach((t) => t.stop());
    clearInterval(recordTimer);
    recorder = null;
    ui.record.textContent = "Record";
    ui.record.classList.remove("recording");
    const type = rec.mimeType || "audio/webm";
    const ext = type.includes("ogg") ? "ogg" : type.includes("mp4") ? "m4a" : "webm";
    transcribe(new Blob(parts, { type }), `recording.${ext}`);
  };
  rec.start(250);
  const began = performance.now();
  ui.record.textContent = "Stop recording";
  ui.record.classList.add("recording");
  setListen("busy", "Recording 0.0 s");
  recordTimer = setInterval(() => {
    ui.listenState.textContent = `Recording ${((performance.now() - began) / 1000).toFixed(1)} s`;
  }, 100);
}

function pickFile() {
  const file = ui.file.files[0];
  if (file) transcribe(file, file.name);
  ui.file.value = ""; // choosing the same file again transcribes it again
}

// ---------------------------------------------------------------- metrics

/** Prometheus text exposition -> Map of name -> [{ labels, value }]. */
function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...(m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value: Number(m[3]) });
  }
  return out;
}

/** The q-quantile of a histogram, interpolated inside its bucket as Prometheus does. */
function histogramQuantile(parsed, name, q) {
  const buckets = (parsed.get(`${name}_bucket`) || [])
    .map((s) => ({ le: s.labels.le === "+Inf" ? Infinity : Number(s.labels.le), count: s.value }))
    .sort((a, b) => a.le - b.le);
  const total = buckets.length ? buckets[buckets.length - 1].count : 0;
  if (!total) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const b of buckets) {
    if (b.count >= rank) {
      if (b.le === Infinity) return lower;
      return lower + ((b.le - lower) * (rank - below)) / (b.count - below || 1);
    }
    lower = b.le;
    below = b.count;
  }
  return null;
}

function setMetrics(status, label, note) {
  metrics.status = status;
  ui.server.dataset.state = { live: "done", denied: "error", down: "error" }[status] ?? "idle";
  ui.metricsState.textContent = label;
  if (note) ui.metricsNote.textContent = note;
}

async function pollMetrics() {
  try {
    if (document.hidden) return;
    const response = await fetch("metrics", { headers: authHeaders(), cache: "no-store" });
    if (response.status === 401) {
      setMetrics("denied", "Needs key", "This server keeps /metrics behind its API key: enter the key above to see live numbers.");
      return;
    }
    if (!response.ok) {
      setMetrics("down", "Unavailable", `/metrics answered ${response.status}.`);
      return;
    }
    const parsed = parseMetrics(await response.text());
    const first = (name) => parsed.get(name)?.[0]?.value ?? null;
    Object.assign(metrics, {
      active: first("voxserve_tts_active_streams"),
      queued: first("voxserve_tts_queued_streams"),
      ttfpP50: histogramQuantile(parsed, "voxserve_tts_ttfp_seconds", 0.5),
      rtfP50: histogramQuantile(parsed, "voxserve_tts_rtf", 0.5),
    });
    ui.active.textContent = metrics.active ?? "–";
    ui.queued.textContent = metrics.queued ?? "–";
    ui.ttfp.textContent = metrics.ttfpP50 === null ? "–" : `${Math.round(metrics.ttfpP50 * 1000)} ms`;
    ui.rtfP50.textContent = metrics.rtfP50 === null ? "–" : metrics.rtfP50.toFixed(2);
    const at = new Date().toLocaleTimeString();
    setMetrics("live", "Live", `From /metrics every 2 s, last at ${at}. Percentiles are estimated from the histogram buckets.`);
  } catch (err) {
    setMetrics("down", "Offline", `Cannot reach /metrics: ${err.message}`);
  } finally {
    setTimeout(pollMetrics, METRICS_EVERY_MS);
  }
}

// ---------------------------------------------------------------- wiring

function showCount() {
  ui.count.textContent = `${ui.text.value.length} / 4096`;
}

function applyKey(event) {
  event.preventDefault();
  const key = ui.key.value.trim();
  if (key === (localStorage.getItem(KEY_STORE) || "")) return;
  if (key) localStorage.setItem(KEY_STORE, key);
  else localStorage.removeItem(KEY_STORE);
  loadVoices();
}

ui.key.value = localStorage.getItem(KEY_STORE) || "";
ui.key.addEventListener("change", applyKey);
$("key-form").addEventListener("submit", applyKey);
$("speak-form").addEventListener("submit", speak);
ui.stopButton.addEventListener("click", stop);
ui.text.addEventListener("input", showCount);
ui.text.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) ui.speakButton.click();
});
ui.speed.addEventListener("input", () => {
  ui.speedValue.textContent = `${Number(ui.speed.value).toFixed(2)}×`;
});
ui.record.addEventListener("click", toggleRecording);
ui.file.addEventListener("change", pickFile);
window.addEventListener("resize", drawWave);

showCount();
drawWave();
loadVoices();
pollMetrics();

// The pure parts, for tests that import this module in the page.
export { histogramQuantile, parseMetrics, pcm16Decoder };
export { base64Bytes, playhead, sseEvents, wordPlacer } from "./speech-words.js";
export { speechModels, voiceGroups } from "./speech-pickers.js";

// The Live panel: the microphone streams to WS /v1/realtime (OpenAI's Realtime API,
// transcription sessions) and every utterance becomes one line, grey partial text first,
// then the final text and how long it took. The audio thread (live-worklet.js) makes the
// 24 kHz PCM blocks; this module only talks to the server and draws the card.

import { base64 } from "./live-audio.js";

const BLOCK_MS = 40; // one input_audio_buffer.append per block
const EARLY_BLOCKS = 125; // audio kept while the session is set up (5 s); older blocks are dropped
const BACKLOG_BYTES = 1 << 20; // unsent WebSocket data that means the link cannot keep up
const FINISH_MS = 5000; // how long Stop waits for the last line's final text

const $ = (id) => document.getElementById(id);

const LABELS = {
  idle: "Idle", connecting: "Connecting", listening: "Listening", speech: "Speech",
  finishing: "Finishing", stopped: "Stopped", error: "Error",
};
const CARD_STATES = { connecting: "busy", listening: "busy", speech: "busy", finishing: "busy", stopped: "idle" };

const CLOSE_REASONS = {
  1008: "the server refused the session or one of its messages",
  1009: "a message was too large for the server",
  1011: "the server hit an internal error",
  1013: "the server has too many live sessions; try again later",
};

const fmtMs = (ms) => (ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`);

/** Wires the Live card; returns `snapshot()` for window.voxPlayground. */
export function livePanel() {
  const ui = {
    card: $("live"), pill: $("live-state"), message: $("live-message"), status: $("live-status"),
    button: $("live-button"), silence: $("live-silence"), silenceValue: $("live-silence-value"),
    noise: $("live-noise"), level: $("live-level"), lines: $("live-lines"), key: $("api-key"),
  };
  let state = "idle";
  let current = null; // the session: see start()
  const errors = []; // messages of the server's `error` events, for tests

  function setState(next, message) {
    state = next;
    ui.card.dataset.state = CARD_STATES[next] ?? next;
    ui.pill.textContent = LABELS[next];
    if (message !== undefined) {
      ui.message.hidden = !message;
      ui.message.textContent = message;
    }
    const on = ["connecting", "listening", "speech"].includes(next);
    ui.button.textContent = on ? "Stop live" : "Start live";
    ui.button.classList.toggle("recording", on);
    ui.button.disabled = next === "finishing";
    if (!on) showLevel(0);
    showStatus();
  }

  function showStatus() {
    const s = current;
    const sent = s ? `${(s.sentBytes / 2 / 24000).toFixed(1)} s of audio sent` : "";
    const pause = `a ${ui.silence.value} ms pause ends a line`;
    ui.status.textContent = {
      idle: "Talk into the microphone: the audio streams to /v1/realtime and every pause ends a line.",
      connecting: s?.created ? "Connected; setting up the session…" : "Connecting to /v1/realtime…",
      listening: `Connected · listening (${pause}) · ${sent}`,
      speech: `Connected · speech · ${sent}`,
      finishing: "Stopping: waiting for the last line's final text…",
      stopped: `Stopped · ${sent}.`,
      error: s ? `Disconnected · ${sent}.` : "Not connected.",
    }[state];
  }

  function showLevel(peak) {
    const percent = Math.round(100 * Math.min(1, Math.sqrt(peak))); // sqrt: quiet speech still shows
    ui.level.style.setProperty("--level", `${percent}%`);
    ui.level.setAttribute("aria-valuenow", String(percent));
  }

  function sessionUpdate() {
    const silence = Number(ui.silence.value);
    const input = {
      format: { type: "audio/pcm", rate: 24000 },
      transcription: { model: "whisper-1" },
      turn_detection: { type: "server_vad", threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: silence },
    };
    // The VAD hears the audio through the server's noise filter; "" leaves the server's default.
    if (ui.noise.value) input.noise_reduction = ui.noise.value === "none" ? null : { type: ui.noise.value };
    return { type: "session.update", session: { type: "transcription", audio: { input } } };
  }

  // ------------------------------------------------------------ start and stop

  async function start() {
    if (!navigator.mediaDevices?.getUserMedia || typeof AudioWorkletNode === "undefined") {
      setState("error", "Live needs the microphone, which browsers allow only on https or localhost.");
      return;
    }
    const s = {
      ws: null, stream: null, context: null, created: false, ready: false, early: [],
      sentBytes: 0, blocksSent: 0, lines: new Map(), speaking: null, stopping: false, closedByUs: false,
      finishTimer: null, nextEventId: 0, stopCommit: null,
    };
    current = s;
    const gone = () => current !== s || s.stopping; // Stop was pressed while we waited
    ui.lines.replaceChildren();
    errors.length = 0;
    setState("connecting", "");
    try {
      s.stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    } catch (err) {
      if (!gone()) setState("error", `No microphone: ${err.message}`);
      return;
    }
    try {
      if (gone()) return release(s); // e.g. while the browser asked for permission
      s.context = new AudioContext();
      await s.context.audioWorklet.addModule(new URL("live-worklet.js", import.meta.url));
      if (gone()) return release(s);
      const node = new AudioWorkletNode(s.context, "vox-live-capture", {
        numberOfOutputs: 0,
        processorOptions: { blockMs: BLOCK_MS },
      });
      node.port.onmessage = (e) => onAudio(s, e.data);
      s.context.createMediaStreamSource(s.stream).connect(node);
    } catch (err) {
      release(s);
      if (!gone()) setState("error", `Cannot capture audio here: ${err.message}`);
      return;
    }
    connect(s);
  }

  function connect(s) {
    const url = new URL("v1/realtime?intent=transcription", document.baseURI);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    // Browsers cannot set headers on a WebSocket, so the key travels as a subprotocol.
    const key = ui.key.value.trim();
    try {
      s.ws = key ? new WebSocket(url, ["realtime", `openai-insecure-api-key.${key}`]) : new WebSocket(url);
    } catch (err) {
      release(s);
      setState("error", `Cannot open the WebSocket: ${err.message} (a key with spaces or symbols cannot be sent this way)`);
      return;
    }
    s.ws.onmessage = (e) => {
      let event;
      try {
        event = JSON.parse(e.data);
      } catch {
        return; // the server sends only JSON text; anything else is not ours to show
      }
      if (current === s) onEvent(s, event);
    };
    s.ws.onclose = (e) => onClose(s, e);
  }

  function stop() {
    const s = current;
    if (!s || s.stopping) return;
    s.stopping = true;
    release(s);
    if (!s.ws || s.ws.readyState !== WebSocket.OPEN) {
      s.closedByUs = true;
      s.ws?.close();
      setState("stopped");
      return;
    }
    if (s.speaking) {
      // Mid-utterance: end the turn now so that its final text still comes.
      const line = lineFor(s, s.speaking);
      line.endedAt = performance.now();
      line.endedBy = "Stop";
      s.stopCommit = send(s, { type: "input_audio_buffer.commit" });
    }
    setState("finishing");
    s.finishTimer = setTimeout(() => finish(s), FINISH_MS);
    finishIfDone(s);
  }

  function finishIfDone(s) {
    if (s.stopping && ![...s.lines.values()].some((l) => l.state === "speaking" || l.state === "waiting")) finish(s);
  }

  function finish(s) {
    clearTimeout(s.finishTimer);
    s.closedByUs = true;
    s.ws.close(1000);
    if (current === s) setState("stopped");
  }

  /** Lets go of the microphone and the audio thread (the socket is closed elsewhere). */
  function release(s) {
    s.stream?.getTracks().forEach((t) => t.stop());
    s.stream = null;
    if (s.context && s.context.state !== "closed") s.context.close();
    s.context = null;
  }

  // ------------------------------------------------------------ audio out

  /** Sends a client event; returns its event_id, which the server's `error` events echo. */
  function send(s, event) {
    if (s.ws?.readyState !== WebSocket.OPEN) return null;
    const id = `evt_live_${++s.nextEventId}`;
    s.ws.send(JSON.stringify({ event_id: id, ...event }));
    return id;
  }

  function onAudio(s, block) {
    if (current !== s || s.stopping) return;
    showLevel(block.peak);
    if (!s.ready) {
      s.early.push(block.bytes);
      if (s.early.length > EARLY_BLOCKS) s.early.shift();
      return;
    }
    append(s, block.bytes);
  }

  function append(s, bytes) {
    if (s.ws.bufferedAmount > BACKLOG_BYTES) {
      fail(s, "The connection cannot keep up with the microphone; stopped.");
      return;
    }
    send(s, { type: "input_audio_buffer.append", audio: base64(bytes) });
    s.sentBytes += bytes.length;
    if (++s.blocksSent % 10 === 0) showStatus(); // every 0.4 s is enough
  }

  function fail(s, message) {
    release(s);
    s.closedByUs = true;
    s.ws?.close();
    if (current === s) setState("error", message);
  }

  // ------------------------------------------------------------ events in

  function onEvent(s, event) {
    const id = event.item_id;
    switch (event.type) {
      case "session.created":
        s.created = true;
        send(s, sessionUpdate());
        showStatus();
        break;
      case "session.updated":
        s.noiseReduction = event.session?.audio?.input?.noise_reduction?.type ?? null;
        if (!s.ready) {
          s.ready = true;
          for (const bytes of s.early.splice(0)) append(s, bytes);
          if (!s.stopping) setState("listening");
        }
        break;
      case "input_audio_buffer.speech_started":
        s.speaking = id;
        lineFor(s, id).state = "speaking";
        render(s, id);
        if (!s.stopping) setState("speech");
        break;
      case "input_audio_buffer.speech_stopped": {
        const line = lineFor(s, id);
        line.endedAt = performance.now();
        line.endedBy = "speech_stopped";
        line.audioEndMs = event.audio_end_ms;
        if (line.state === "speaking") line.state = "waiting";
        if (s.speaking === id) s.speaking = null;
        render(s, id);
        if (!s.stopping) setState("listening");
        break;
      }
      case "input_audio_buffer.committed": {
        const line = lineFor(s, id);
        if (line.state === "speaking") line.state = "waiting";
        if (s.speaking === id) s.speaking = null;
        render(s, id);
        break;
      }
      case "conversation.item.input_audio_transcription.delta": {
        const line = lineFor(s, id);
        if (line.state !== "final") line.partial += event.delta;
        render(s, id);
        break;
      }
      case "conversation.item.input_audio_transcription.completed": {
        const line = lineFor(s, id);
        const now = performance.now();
        line.state = "final";
        line.text = (event.transcript || "").trim();
        if (line.endedAt !== null) line.latencyMs = now - line.endedAt;
        if (line.audioEndMs !== null) line.afterWordMs = (s.sentBytes / 2 / 24000) * 1000 - line.audioEndMs;
        render(s, id);
        break;
      }
      case "conversation.item.input_audio_transcription.failed": {
        const line = lineFor(s, id);
        line.state = "failed";
        line.error = event.error?.message || "transcription failed";
        render(s, id);
        break;
      }
      case "error": {
        const err = event.error || {};
        // Stop's commit can cross the server's own end of that turn: then there is nothing to commit.
        if (err.event_id && err.event_id === s.stopCommit) break;
        const message = `${err.message || "unknown error"}${err.code ? ` (${err.code})` : ""}`;
        errors.push(message);
        ui.message.hidden = false;
        ui.message.textContent = `Server error: ${message}`;
        break;
      }
      default:
        break; // input_audio_buffer.cleared and events a newer server may add
    }
    finishIfDone(s);
  }

  function onClose(s, e) {
    clearTimeout(s.finishTimer);
    release(s);
    for (const [id, line] of s.lines) {
      if (line.state === "speaking" || line.state === "waiting") {
        line.state = "failed";
        line.error = "no final text: the session ended first";
        render(s, id);
      }
    }
    if (s.closedByUs || current !== s) return;
    let why;
    if (e.code !== 1006) {
      // The server sends an `error` event before each close of its own: that says most.
      const reason = CLOSE_REASONS[e.code] || `close code ${e.code}${e.reason ? ` (${e.reason})` : ""}`;
      why = `The server ended the session: ${errors.length ? errors[errors.length - 1] : reason}`;
    } else if (!s.created) {
      // A refused handshake tells the page nothing; a missing or wrong key is the usual cause.
      why = ui.key.value.trim()
        ? "Could not open a live session: check the API key."
        : "Could not open a live session: if the server has --api-key, enter the key above.";
    } else {
      why = "The connection to the server was lost.";
    }
    setState("error", why);
  }

  // ------------------------------------------------------------ lines

  function lineFor(s, id) {
    let line = s.lines.get(id);
    if (!line) {
      const item = document.createElement("div");
      item.className = "live-line";
      item.dataset.item = id;
      const text = document.createElement("span");
      text.className = "live-text";
      const meta = document.createElement("span");
      meta.className = "live-meta";
      item.append(text, meta);
      const follow = ui.lines.scrollHeight - ui.lines.scrollTop - ui.lines.clientHeight < 24;
      ui.lines.append(item);
      if (follow) ui.lines.scrollTop = ui.lines.scrollHeight;
      line = {
        item, meta, state: "waiting", partial: "", text: null, error: null,
        endedAt: null, endedBy: null, audioEndMs: null, latencyMs: null, afterWordMs: null,
      };
      s.lines.set(id, line);
    }
    return line;
  }

  function render(s, id) {
    const line = s.lines.get(id);
    line.item.dataset.state = line.state;
    // A fresh span for each text, hidden from screen readers until it is final: the log
    // then announces one line per utterance rather than every partial word.
    const text = document.createElement("span");
    text.className = "live-text";
    if (line.state === "final") {
      text.textContent = line.text || "(nothing heard)";
    } else if (line.state === "failed") {
      text.textContent = `${line.partial ? `${line.partial} ` : ""}(${line.error})`;
    } else {
      text.textContent = line.partial || "…";
      text.setAttribute("aria-hidden", "true");
    }
    line.item.querySelector(".live-text").replaceWith(text);
    line.meta.replaceChildren();
    if (line.latencyMs !== null) {
      line.item.dataset.latencyMs = String(Math.round(line.latencyMs));
      const after = line.endedBy === "Stop" ? "after Stop" : "after end of speech";
      const main = document.createElement("span");
      main.className = "live-latency";
      main.title = `From the ${line.endedBy} event to the final text, on this page's clock`;
      main.append(`final ${after} `);
      const figure = document.createElement("strong");
      figure.textContent = fmtMs(line.latencyMs);
      main.append(figure);
      line.meta.append(main);
    }
    if (line.afterWordMs !== null && line.afterWordMs >= 0) {
      const word = document.createElement("span");
      word.className = "live-after-word";
      word.title =
        "Audio sent when the final text came, minus the server's audio_end_ms: the whole wait after the last word, pause included";
      const figure = document.createElement("strong");
      figure.textContent = fmtMs(line.afterWordMs);
      word.append(figure, " after the last word");
      line.meta.append(word);
    }
  }

  // ------------------------------------------------------------ wiring

  ui.button.addEventListener("click", () => {
    if (["connecting", "listening", "speech"].includes(state)) stop();
    else start();
  });
  ui.silence.addEventListener("input", () => {
    ui.silenceValue.textContent = `${ui.silence.value} ms`;
    showStatus();
  });
  ui.silence.addEventListener("change", () => {
    if (current?.ready && !current.stopping) send(current, sessionUpdate()); // applies to the next pause
  });
  ui.noise.addEventListener("change", () => {
    if (current?.ready && !current.stopping) send(current, sessionUpdate()); // the VAD listens afresh
  });
  setState("idle");

  return {
    snapshot() {
      const s = current;
      return Object.freeze({
        state,
        sentSeconds: s ? s.sentBytes / 2 / 24000 : 0,
        noiseReduction: s?.noiseReduction ?? null,
        errors: [...errors],
        lines: s
          ? [...s.lines.entries()].map(([itemId, l]) =>
              Object.freeze({
                itemId, state: l.state, text: l.state === "final" ? l.text : l.partial, error: l.error,
                latencyMs: l.latencyMs, afterWordMs: l.afterWordMs,
              }),
            )
          : [],
      });
    },
  };
}

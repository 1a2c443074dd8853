// The Speak card's stream and its words: SSE framing, base64 audio, where each timed word
// sits in the spoken text, and which second of the stream is playing on the AudioContext
// clock. Pure functions and one small view over an element passed in; no fetch, no globals.

const MAX_PENDING_CHARS = 4 << 20; // an SSE event larger than this is not one the server sends

/** A feeder that turns SSE bytes into the JSON of each complete `data:` event. */
export function sseEvents() {
  const decoder = new TextDecoder();
  let pending = "";
  return (bytes) => {
    pending += decoder.decode(bytes, { stream: true });
    const events = [];
    let from = 0;
    for (let cut = pending.indexOf("\n\n"); cut >= 0; cut = pending.indexOf("\n\n", from)) {
      const data = pending
        .slice(from, cut)
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(line.startsWith("data: ") ? 6 : 5))
        .join("\n");
      if (data) events.push(JSON.parse(data));
      from = cut + 2;
    }
    pending = pending.slice(from);
    if (pending.length > MAX_PENDING_CHARS) throw new Error("the server sent an event larger than 4 MiB");
    return events;
  };
}

/** The bytes of a base64 string. */
export function base64Bytes(text) {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

/**
 * Finds timed words in the text, in order: each is looked for a short way past the last one
 * found (exactly, then ignoring case), so a word the server wrote differently costs only
 * its own place, never the places of the words after it. `place` gives [start, end) or null.
 */
export function wordPlacer(text, reach = 64) {
  const lower = text.toLowerCase();
  const folded = lower.length === text.length; // else lower-case offsets would not match
  let at = 0;
  const find = (haystack, word) => {
    const i = haystack.indexOf(word, at);
    return i >= 0 && i <= at + reach ? i : -1;
  };
  return (word) => {
    if (!word) return null;
    let i = find(text, word);
    if (i < 0 && folded) i = find(lower, word.toLowerCase());
    if (i < 0) return null;
    at = i + word.length;
    return [i, at];
  };
}

/**
 * The second of the stream playing at context time `now`, or null before the first sound.
 * `runs` lists where playback (re)started: audio from stream second `offset` is scheduled
 * from context time `at`. After a run's audio ends the clock holds until the next run
 * starts (the player ran dry), and it stops at `scheduled`, the seconds scheduled in all.
 */
export function playhead(runs, now, scheduled) {
  let t = null;
  for (let k = 0; k < runs.length && runs[k].at <= now; k++) {
    const end = k + 1 < runs.length ? runs[k + 1].offset : scheduled;
    t = Math.min(runs[k].offset + (now - runs[k].at), end);
  }
  return t;
}

/**
 * The spoken text in `element`, each timed word found in it wrapped in a span; `show(t)`
 * gives the class `now` to the word whose [start, end) holds stream second t.
 */
export function spokenText(element) {
  let words = []; // { start, end, span }, in time order
  let rest = null; // the text node after the last word placed
  let restFrom = 0; // where `rest` starts in the text
  let place = null;
  let next = 0; // the first word that may still be playing
  let lit = null;
  let highlighted = 0;

  function reset(text) {
    rest = document.createTextNode(text);
    element.replaceChildren(rest);
    element.hidden = true;
    words = [];
    restFrom = 0;
    place = wordPlacer(text);
    next = 0;
    lit = null;
    highlighted = 0;
  }

  function add(timed) {
    for (const w of timed) {
      const where = place ? place(String(w.word)) : null;
      if (!where) continue;
      const [start, end] = where;
      const node = rest.splitText(start - restFrom);
      rest = node.splitText(end - start);
      restFrom = end;
      const span = document.createElement("span");
      span.className = "word";
      span.dataset.start = w.start_time;
      span.dataset.end = w.end_time;
      node.replaceWith(span);
      span.append(node);
      words.push({ start: Number(w.start_time), end: Number(w.end_time), span });
    }
    element.hidden = !words.length;
  }

  function light(span) {
    if (span === lit) return;
    lit?.classList.remove("now");
    lit = span;
    if (span) {
      span.classList.add("now");
      highlighted += 1;
    }
  }

  function show(t) {
    if (t === null) return light(null);
    while (next < words.length && words[next].end <= t) next += 1;
    const w = words[next];
    light(w && w.start <= t ? w.span : null);
  }

  reset("");
  return {
    reset,
    add,
    show,
    get placed() {
      return words.length;
    },
    get highlighted() {
      return highlighted;
    },
  };
}

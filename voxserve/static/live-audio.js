// Pure audio helpers for the Live panel, shared by the capture worklet (live-worklet.js)
// and the page: Float32 samples in, samples or bytes out. No DOM, no Web Audio, no state
// beyond the small stream classes, so tests can import this module and check it directly.

export const LIVE_RATE = 24000; // what /v1/realtime's audio/pcm format expects

const ZERO_CROSSINGS = 16; // sinc lobes kept on each side of a tap's centre
const MAX_PHASES = 256; // kernel tables kept; finer offsets round to the nearest one

function gcd(a, b) {
  while (b) [a, b] = [b, a % b];
  return a;
}

/** The mean of the channels (Float32Arrays of one length); one channel is returned as is. */
export function downmix(channels) {
  if (channels.length === 1) return channels[0];
  const out = new Float32Array(channels[0].length);
  for (const channel of channels) {
    for (let i = 0; i < out.length; i++) out[i] += channel[i];
  }
  const scale = 1 / channels.length;
  for (let i = 0; i < out.length; i++) out[i] *= scale;
  return out;
}

/**
 * A band-limited resampler for a stream: `feed()` takes blocks of any length and returns
 * the samples they complete, so the output does not depend on how the input was cut.
 * Windowed sinc (Blackman), low-passed below the lower of the two Nyquist rates; the
 * output lags the input by `half` input samples (under 1 ms at 48 kHz).
 */
export class Resampler {
  constructor(inRate, outRate = LIVE_RATE) {
    const from = Math.round(inRate);
    const to = Math.round(outRate);
    if (!(from > 0 && to > 0)) throw new RangeError(`bad sample rates: ${inRate} -> ${outRate}`);
    const g = gcd(from, to);
    this.step = from / g; // each output sample advances step/den input samples
    this.den = to / g;
    const cutoff = 0.92 * Math.min(1, to / from); // as a fraction of the input Nyquist rate
    this.half = Math.ceil(ZERO_CROSSINGS / cutoff);
    this.phases = Math.min(this.den, MAX_PHASES);
    this.kernels = [];
    for (let p = 0; p < this.phases; p++) this.kernels.push(kernel(p / this.phases, cutoff, this.half));
    // Input not yet used, starting at input index `base`; zeros stand in before the start.
    this.buffer = new Float32Array(this.half);
    this.base = -this.half;
    this.at = 0; // the next output's position: at + rem / den, in input samples
    this.rem = 0;
  }

  feed(input) {
    const joined = new Float32Array(this.buffer.length + input.length);
    joined.set(this.buffer);
    joined.set(input, this.buffer.length);
    const end = this.base + joined.length;
    const out = [];
    // The rounded phase may move the centre up by one, so keep one sample in hand.
    while (this.at + this.half + 1 < end) {
      let centre = this.at;
      let phase = Math.round((this.rem * this.phases) / this.den);
      if (phase === this.phases) {
        phase = 0;
        centre += 1;
      }
      const taps = this.kernels[phase];
      const first = centre - this.half + 1 - this.base;
      let sum = 0;
      for (let k = 0; k < taps.length; k++) sum += joined[first + k] * taps[k];
      out.push(sum);
      this.rem += this.step;
      this.at += Math.floor(this.rem / this.den);
      this.rem %= this.den;
    }
    const keep = Math.max(0, this.at - this.half + 1 - this.base);
    this.buffer = joined.slice(keep);
    this.base += keep;
    return Float32Array.from(out);
  }
}

/** Taps for an output `frac` of a sample past a centre tap; they sum to 1 (unity gain at DC). */
function kernel(frac, cutoff, half) {
  const taps = new Float32Array(2 * half);
  let total = 0;
  for (let k = 0; k < taps.length; k++) {
    const x = frac - (k - half + 1); // distance from this tap to the output position
    const arg = Math.PI * cutoff * x;
    const sinc = arg === 0 ? 1 : Math.sin(arg) / arg;
    const w = (Math.PI * x) / half;
    const blackman = 0.42 + 0.5 * Math.cos(w) + 0.08 * Math.cos(2 * w);
    taps[k] = sinc * blackman;
    total += taps[k];
  }
  for (let k = 0; k < taps.length; k++) taps[k] /= total;
  return taps;
}

/** Float samples to 16-bit little-endian PCM bytes, clipped to [-1, 1]. */
export function pcm16Bytes(samples) {
  const bytes = new Uint8Array(2 * samples.length);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    view.setInt16(2 * i, Math.round(s < 0 ? s * 32768 : s * 32767), true);
  }
  return bytes;
}

/** Cuts a stream of float samples into fixed blocks of 16-bit PCM bytes, with each block's peak. */
export class Pcm16Blocks {
  constructor(size) {
    this.size = size;
    this.pending = new Float32Array(size);
    this.filled = 0;
  }

  /** The blocks that `samples` completes: [{ bytes, peak }], maybe none. */
  push(samples) {
    const blocks = [];
    let from = 0;
    while (from < samples.length) {
      const n = Math.min(this.size - this.filled, samples.length - from);
      this.pending.set(samples.subarray(from, from + n), this.filled);
      this.filled += n;
      from += n;
      if (this.filled === this.size) {
        let peak = 0;
        for (const s of this.pending) peak = Math.max(peak, Math.abs(s));
        blocks.push({ bytes: pcm16Bytes(this.pending), peak: Math.min(1, peak) });
        this.filled = 0;
      }
    }
    return blocks;
  }
}

/** Standard base64 of a byte array (btoa takes a binary string; build it in slices). */
export function base64(bytes) {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

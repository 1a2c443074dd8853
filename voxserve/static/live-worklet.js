// The Live panel's capture, on the audio thread: the microphone's channels are averaged to
// mono, resampled from the context's rate to 24 kHz and cut into blocks of 16-bit PCM,
// which go to the page (live.js) through the node's port. Nothing else happens here.

import { LIVE_RATE, Pcm16Blocks, Resampler, downmix } from "./live-audio.js";

class LiveCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const blockMs = options.processorOptions.blockMs;
    this.resampler = new Resampler(sampleRate, LIVE_RATE); // `sampleRate`: the context's, a global here
    this.blocks = new Pcm16Blocks(Math.round((LIVE_RATE * blockMs) / 1000));
  }

  process(inputs) {
    const channels = inputs[0];
    if (channels.length) {
      for (const block of this.blocks.push(this.resampler.feed(downmix(channels)))) {
        this.port.postMessage(block, [block.bytes.buffer]);
      }
    }
    return true; // keep running until the page closes the context
  }
}

registerProcessor("vox-live-capture", LiveCapture);

// The Speak card's model, language and voice pickers, built from what `/v1/models` and
// `/v1/audio/voices` answered (playground.js fetches them). The choices are kept in
// localStorage. A voice may also be typed (a name the list lacks, or a Kokoro blend); the
// server checks it, and the page shows its answer.

const STORE = "voxserve.speech";
const MAX_VOICE_CHARS = 400; // the server's bound on a voice blend
export const TYPED = "…"; // the voice option that opens the text field

/**
 * The speech models to offer: one per voice model in the voice list, in its order, named by
 * the OpenAI model it claims (`tts-1`, `tts-1-hd`) when `/v1/models` lists that, else by its
 * own id; a voice model `/v1/models` does not list is left out.
 */
export function speechModels(modelIds, voices) {
  const listed = new Set(modelIds);
  const models = new Map();
  for (const voice of voices) {
    if (!models.has(voice.model)) {
      const id = [voice.openai_model, voice.model].find((i) => i && listed.has(i));
      models.set(voice.model, id ? { id, name: voice.model, voices: [] } : null);
    }
    models.get(voice.model)?.voices.push(voice);
  }
  return [...models.values()].filter(Boolean);
}

/** The languages of a model's voices, in the order they first appear. */
export function modelLanguages(model) {
  return [...new Set(model.voices.map((v) => v.language).filter(Boolean))];
}

/**
 * The voice options for a model and a language ("" for any), as [group label, [[value,
 * label]...]]: the model's own voices by language, then OpenAI's names and what they play.
 */
export function voiceGroups(model, language) {
  const fits = model.voices.filter((v) => !language || v.language === language);
  const gender = (v) => (v.gender ? ` (${v.gender})` : "");
  const groups = new Map();
  for (const v of fits.filter((v) => !v.alias_of)) {
    const key = v.language || "other";
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push([v.id, `${v.id}${gender(v)}`]);
  }
  const aliases = fits.filter((v) => v.alias_of).map((v) => [v.id, `${v.id} → ${v.alias_of}${gender(v)}`]);
  if (aliases.length) groups.set("OpenAI names", aliases);
  return [...groups.entries()];
}

function languageName(code) {
  try {
    const name = new Intl.DisplayNames(["en"], { type: "language" }).of(code);
    return name && name !== code ? `${name} (${code})` : code;
  } catch {
    return code;
  }
}

/** Wires the pickers; `request()` gives the request's model, voice and language. */
export function speechPickers(ui, store = window.localStorage) {
  let models = [];
  const saved = (() => {
    try {
      return JSON.parse(store.getItem(STORE)) || {};
    } catch {
      return {};
    }
  })();

  const choose = (select, value) => {
    if ([...select.options].some((o) => o.value === value)) select.value = value;
  };

  function current() {
    return models.find((m) => m.id === ui.model.value) ?? null;
  }

  function fillLanguages() {
    const model = current();
    ui.modelName.textContent = model && model.name !== model.id ? model.name : "";
    const chosen = ui.language.value;
    const codes = model ? modelLanguages(model) : [];
    ui.language.replaceChildren(new Option("Any", ""), ...codes.map((c) => new Option(languageName(c), c)));
    choose(ui.language, chosen);
    fillVoices();
  }

  function fillVoices() {
    const model = current();
    const chosen = ui.voice.value;
    const groups = model ? voiceGroups(model, ui.language.value) : [];
    ui.voice.replaceChildren(
      ...groups.map(([label, options]) => {
        const group = document.createElement("optgroup");
        group.label = label;
        group.append(...options.map(([value, text]) => new Option(text, value)));
        return group;
      }),
      new Option("Type a name or a blend…", TYPED),
    );
    choose(ui.voice, chosen);
    if (ui.voice.value !== chosen) ui.voice.selectedIndex = 0;
    showTyped();
  }

  function showTyped() {
    ui.typed.hidden = ui.voice.value !== TYPED;
  }

  function save() {
    const choice = { model: ui.model.value, language: ui.language.value, voice: ui.voice.value, typed: ui.typed.value };
    try {
      store.setItem(STORE, JSON.stringify(choice));
    } catch {
      // storage full or blocked: the choices just are not remembered
    }
  }

  /** Rebuild from the server's lists, keeping the current (or else the saved) choices. */
  function load(modelIds, voices) {
    const first = !models.length;
    models = speechModels(modelIds, voices);
    const keep = first ? saved : { model: ui.model.value, language: ui.language.value, voice: ui.voice.value };
    ui.model.replaceChildren(...models.map((m) => new Option(m.id, m.id)));
    choose(ui.model, keep.model);
    fillLanguages();
    choose(ui.language, keep.language);
    fillVoices();
    choose(ui.voice, keep.voice);
    if (first && typeof saved.typed === "string") ui.typed.value = saved.typed.slice(0, MAX_VOICE_CHARS);
    showTyped();
  }

  /** { model, voice, language? } for the request, or throws with what to fix. */
  function request() {
    const typed = ui.voice.value === TYPED;
    const voice = typed ? ui.typed.value.trim() : ui.voice.value;
    if (!voice) throw new Error("Type a voice name, or pick one from the list.");
    const body = { model: ui.model.value, voice };
    if (ui.language.value) body.language = ui.language.value;
    return body;
  }

  ui.typed.maxLength = MAX_VOICE_CHARS;
  ui.model.addEventListener("change", () => {
    fillLanguages();
    save();
  });
  ui.language.addEventListener("change", () => {
    fillVoices();
    save();
  });
  ui.voice.addEventListener("change", () => {
    showTyped();
    save();
    if (!ui.typed.hidden) ui.typed.focus();
  });
  ui.typed.addEventListener("change", save);
  return {
    load,
    request,
    get models() {
      return models.map((m) => ({ id: m.id, name: m.name, voices: m.voices.length }));
    },
  };
}

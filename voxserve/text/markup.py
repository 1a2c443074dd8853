"""Speech markup: a documented SSML subset and inline tags, read into a `Script`.

Two forms are read (docs/MARKUP.md lists every tag and attribute):

- **SSML**, when the input starts with `<speak`: `<speak>`, `<break time|strength>`,
  `<p>`, `<s>`, `<prosody rate>`, `<sub alias>`, `<say-as interpret-as>` and
  `<voice name>`. Any other element, attribute, comment, processing instruction, DTD or
  named entity other than XML's five is refused with the name of what was refused: text
  from clients never reaches an XML library, so no DTD, external entity or entity
  expansion can be asked for, and no tag is ever spoken as text.
- **Inline tags** in plain text: `[pause:0.5s]` and `[voice:name]`. A bracketed form that
  is not one of them is left in the text and spoken as before.

The reader is one left-to-right pass over the input with `str.find` and regexes anchored
at a known position over bounded slices (a tag is at most `MAX_TAG_CHARS`), so its work
is linear in the input whatever the input. Every count a client controls has a bound:
nesting depth, pauses (each and in total), voice switches and items.

A `Script` is a list of `Say` spans (text, the voice a tag named or None for the
request's, a rate that multiplies the request's speed, and whether a `say-as` rule made
part of it) and `Pause`s. The rules of `say-as` are English (`voxserve.text.say_as`); the
engine refuses a span that uses them in a voice of another language. Pure: str in, data
out; errors are `InvalidRequest`s (400, `param: input`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from voxserve.errors import InvalidRequest
from voxserve.text.incremental import TextSegmenter
from voxserve.text.say_as import INTERPRETATIONS, say_as

__all__ = [
    "BREAK_STRENGTHS",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_PAUSE_S",
    "MAX_TOTAL_PAUSE_S",
    "MAX_VOICE_SWITCHES",
    "RATE_WORDS",
    "Pause",
    "Say",
    "Script",
    "TaggedSegmenter",
    "parse",
]

MAX_PAUSE_S = 10.0
"""The longest pause one tag may ask for."""
MAX_TOTAL_PAUSE_S = 60.0
"""The most silence one input's pauses may add up to: an input of pauses alone would
otherwise hold a stream slot for minutes while saying nothing."""
MAX_DEPTH = 12
"""SSML elements open at once: `speak > voice > p > s > prosody > say-as` is 6."""
MAX_VOICE_SWITCHES = 64
"""Changes of voice in one input: a dialogue of 64 turns in 4,096 characters is a turn
every 64 characters."""
MAX_ITEMS = 1024
"""Spans and pauses in one input (each costs a stage A call of its own at least)."""
MAX_TAG_CHARS = 512
"""The longest tag, attributes included: a voice blend of 8 voices is under 200."""
MAX_VOICE_NAME = 400
"""The longest voice name a tag may give (a blend's own bound)."""

BREAK_STRENGTHS = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.5, "strong": 0.75, "x-strong": 1.0}
"""Seconds of silence each `<break strength>` inserts; `<break/>` alone is `medium`."""
RATE_WORDS = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "fast": 1.25, "x-fast": 1.5}
"""What each `<prosody rate>` keyword multiplies the request's speed by."""

_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_ENTITY = re.compile(r"&(#[0-9]{1,7}|#x[0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{0,31});")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")
_ATTR = re.compile(r"\s+([A-Za-z_][A-Za-z0-9_.:-]{0,63})\s*=\s*(\"[^\"<]*\"|'[^'<]*')")
_SPACE = re.compile(r"\s+")
_DURATION = re.compile(r"([0-9]{1,6}(?:\.[0-9]{1,6})?)(ms|s)?")
_INLINE = re.compile(r"\[(pause|voice):([^\[\]\s]{1,400})\]")
_VOICE_NAME = re.compile(r"[A-Za-z0-9_.()+:-]{1,400}")
_PERCENT = re.compile(r"([+-]?)([0-9]{1,4}(?:\.[0-9]{1,3})?)%")
_NUMBER = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3})?")

_ALLOWED = {
    "speak": {"version", "xmlns", "xml:lang", "xmlns:xsi", "xsi:schemaLocation"},
    "break": {"time", "strength"},
    "p": set(),
    "s": set(),
    "prosody": {"rate"},
    "sub": {"alias"},
    "say-as": {"interpret-as", "format", "detail"},
    "voice": {"name"},
}
"""Each element read, and the attributes it takes; `speak`'s are XML's own and ignored."""


@dataclass(frozen=True)
class Say:
    """Text to speak in one voice at one rate."""

    text: str
    voice: str | None = None
    """The voice a tag named; None: the request's voice."""
    rate: float = 1.0
    """Multiplies the request's speed."""
    say_as: bool = False
    """Part of the text was written out by a `say-as` rule (English)."""


@dataclass(frozen=True)
class Pause:
    """Exact silence, in seconds."""

    seconds: float


@dataclass(frozen=True)
class Script:
    """What a marked-up input says, in order."""

    items: tuple[Say | Pause, ...]
    spoken_chars: int
    """Characters of text the input speaks, as written (a `<sub>`'s alias in place of
    its text): what the input limit counts."""


def _refuse(message: str) -> InvalidRequest:
    return InvalidRequest(f"input markup: {message}; see docs/MARKUP.md for what is read", param="input")


def is_ssml(text: str) -> bool:
    """Whether `text` is read as SSML: it starts (after white space) with `<speak`, or
    with an XML declaration or DTD, which the reader then refuses."""
    head = text.lstrip()[:7]
    if head.startswith(("<?", "<!")):
        return True  # a declaration or a DTD before the root: read, and refused
    return head.startswith("<speak") and (len(head) == 6 or head[6] in " \t\r\n>/")


def parse(text: str) -> Script | None:
    """The script `text` asks for; None for plain text with no inline tag (it is spoken
    as it is)."""
    if is_ssml(text):
        return _Ssml(text).read()
    if "[" not in text:
        return None
    return _inline(text)


def pause_seconds(value: str, what: str) -> float:
    """A duration such as `700ms`, `1.5s` or `2` (seconds), within `MAX_PAUSE_S`."""
    m = _DURATION.fullmatch(value.strip())
    if m is None:
        raise _refuse(f"{what} {value[:40]!r} is not a duration; write it as 700ms or 1.5s")
    seconds = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
    if seconds > MAX_PAUSE_S:
        raise _refuse(f"{what} {value[:40]!r} is longer than {MAX_PAUSE_S:g} s; ask for at most {MAX_PAUSE_S:g} s")
    return seconds


class _Builder:
    """Collects spans and pauses under the bounds, merging text of one voice and rate."""

    def __init__(self) -> None:
        self.items: list[Say | Pause] = []
        self.parts: list[str] = []
        self.voice: str | None = None
        self.rate = 1.0
        self.say_as = False
        self.paused = 0.0
        self.switches = 0
        self.spoken = 0
        self.last_voice: str | None = None

    def text(self, text: str, voice: str | None, rate: float, spoken: int, by_rule: bool = False) -> None:
        if not text.strip():
            if self.parts:
                self.parts.append(" ")
            return
        if self.parts and (voice != self.voice or rate != self.rate):
            self.end()
        if not self.parts:
            if voice != self.last_voice:
                self.switches += 1
                if self.switches > MAX_VOICE_SWITCHES:
                    raise _refuse(f"more than {MAX_VOICE_SWITCHES} changes of voice; send the rest in another request")
                self.last_voice = voice
            self.voice, self.rate = voice, rate
        self.parts.append(text)
        self.say_as = self.say_as or by_rule
        self.spoken += spoken

    def end(self) -> None:
        """Close the span being built (at a pause, a sentence or a change of voice)."""
        joined = _SPACE.sub(" ", "".join(self.parts)).strip()
        self.parts = []
        if joined:
            self._add(Say(joined, self.voice, self.rate, self.say_as))
        self.say_as = False

    def pause(self, seconds: float) -> None:
        self.end()
        self.paused += seconds
        if self.paused > MAX_TOTAL_PAUSE_S + 1e-9:
            raise _refuse(f"the pauses add up to more than {MAX_TOTAL_PAUSE_S:g} s")
        if seconds <= 0:
            return
        if self.items and isinstance(self.items[-1], Pause):
            self.items[-1] = Pause(self.items[-1].seconds + seconds)
        else:
            self._add(Pause(seconds))

    def _add(self, item: Say | Pause) -> None:
        if len(self.items) >= MAX_ITEMS:
            raise _refuse(f"more than {MAX_ITEMS} spans and pauses")
        self.items.append(item)

    def script(self) -> Script:
        self.end()
        return Script(tuple(self.items), self.spoken)


def _inline(text: str) -> Script | None:
    """Plain text with `[pause:...]` and `[voice:...]` tags; None if it has none."""
    out = _Builder()
    voice: str | None = None
    at = scan = 0  # the text not yet taken; where to look for the next '['
    found = False
    while True:
        start = text.find("[", scan)
        if start < 0:
            break
        scan = start + 1
        m = _INLINE.match(text, start, min(len(text), start + 420))
        if m is None:
            continue
        kind, value = m.group(1), m.group(2)
        if kind == "pause" and _DURATION.fullmatch(value) is None:
            continue  # not a tag: spoken as text
        if kind == "voice" and _VOICE_NAME.fullmatch(value) is None:
            continue
        found = True
        out.text(text[at:start], voice, 1.0, start - at)
        if kind == "pause":
            out.pause(pause_seconds(value, "pause"))
        else:
            out.end()
            voice = value
        at = scan = m.end()
    if not found:
        return None
    out.text(text[at:], voice, 1.0, len(text) - at)
    return out.script()


@dataclass
class _Open:
    name: str
    voice: str | None
    rate: float
    text_only: bool = False
    """say-as and sub: their content is text, read whole at the close."""
    start: int = 0
    attrs: dict[str, str] | None = None


class _Ssml:
    """One pass over an SSML document (`parse`)."""

    def __init__(self, text: str):
        self.src = text
        self.out = _Builder()
        self.stack: list[_Open] = []
        self.closed_root = False

    def read(self) -> Script:
        src, at, n = self.src, 0, len(self.src)
        while at < n:
            lt = src.find("<", at)
            if lt < 0:
                self._text(src[at:])
                break
            if lt > at:
                self._text(src[at:lt])
            at = self._tag(lt)
        if self.stack:
            raise _refuse(f"<{self.stack[-1].name}> is not closed; close every element, <speak> last")
        if not self.closed_root:
            raise _refuse("the document has no <speak> element")
        return self.out.script()

    def _text(self, raw: str) -> None:
        if not self.stack:
            if raw.strip():
                raise _refuse("text outside <speak>...</speak>; put all text inside it")
            return
        top = self.stack[-1]
        if top.text_only:
            return  # read whole at its close
        text = _unescape(raw)
        self.out.text(text, top.voice, top.rate, len(text))

    def _tag(self, lt: int) -> int:
        """Read the tag at `lt`; returns where the text after it starts."""
        src = self.src
        head = src[lt + 1 : lt + 2]
        if head in ("!", "?"):
            what = "a DTD or declaration" if src.startswith("<!D", lt) or src.startswith("<!E", lt) else (
                "a comment" if src.startswith("<!--", lt) else
                "CDATA" if src.startswith("<![", lt) else
                "a processing instruction" if head == "?" else "a declaration"
            )
            raise _refuse(f"{what} is not accepted; send elements and text only")
        gt = src.find(">", lt, lt + MAX_TAG_CHARS)
        if gt < 0:
            if src.find(">", lt) < 0:
                raise _refuse(f"a tag at character {lt} is not closed with '>'")
            raise _refuse(f"the tag at character {lt} is longer than {MAX_TAG_CHARS} characters")
        inner = src[lt + 1 : gt]
        if "<" in inner:
            raise _refuse(f"a tag at character {lt} is not closed with '>' before the next '<'")
        if inner.startswith("/"):
            self._close(inner[1:].strip(), lt)
            return gt + 1
        closing = inner.endswith("/")
        body = inner[:-1] if closing else inner
        m = _NAME.match(body)
        if m is None:
            raise _refuse(f"{('<' + inner + '>')[:60]!r} is not a tag; write '<' in text as &lt;")
        name = m.group(0)
        attrs = _attributes(name, body[m.end() :])
        self._open(name, attrs, closing, gt + 1)
        return gt + 1

    def _open(self, name: str, attrs: dict[str, str], closing: bool, end: int) -> None:
        if name not in _ALLOWED:
            raise _refuse(f"<{name}> is not supported; the elements read are " + ", ".join(f"<{t}>" for t in _ALLOWED))
        unknown = sorted(set(attrs) - _ALLOWED[name])
        if unknown:
            raise _refuse(f"<{name}> has no attribute {unknown[0]!r}" + (
                f"; it takes {', '.join(sorted(_ALLOWED[name]))}" if _ALLOWED[name] else ""))
        if not self.stack:
            if name != "speak" or self.closed_root:
                raise _refuse(f"<{name}> outside <speak>; the document is one <speak> element")
        elif name == "speak":
            raise _refuse("<speak> inside <speak>")
        elif self.stack[-1].text_only:
            raise _refuse(f"<{name}> inside <{self.stack[-1].name}>, which holds text only")
        top = self.stack[-1] if self.stack else _Open("", None, 1.0)
        if name == "break":
            if not closing:
                raise _refuse("write <break> as an empty element: <break time=\"500ms\"/>")
            self._break(attrs)
            return
        voice, rate = top.voice, top.rate
        if name == "voice":
            value = attrs.get("name", "").strip()
            if not value or _VOICE_NAME.fullmatch(value) is None:
                raise _refuse("<voice> needs a name: a voice, a blend such as af_bella(2)+am_adam(1), or a saved voice")
            voice = value
            self.out.end()
        elif name == "prosody":
            if "rate" not in attrs:
                raise _refuse("<prosody> needs a rate: x-slow, slow, medium, fast, x-fast, a percentage or a number")
            rate = rate * _rate(attrs["rate"])
            if not 0.25 <= rate <= 4.0:
                raise _refuse(f"<prosody rate> makes the rate {rate:g}; keep it within 0.25 to 4 of the normal rate")
        elif name in ("p", "s"):
            self.out.end()
        elif name == "sub" and "alias" not in attrs:
            raise _refuse("<sub> needs an alias: the text to speak in place of its content")
        elif name == "say-as":
            kind = attrs.get("interpret-as", "")
            if kind not in INTERPRETATIONS:
                raise _refuse(f"<say-as interpret-as={kind[:40]!r}> is not supported; use one of: {', '.join(INTERPRETATIONS)}")
        if closing:
            if name in ("sub", "say-as"):
                self._close_text(_Open(name, voice, rate, True, end, attrs), "")
            return
        if len(self.stack) >= MAX_DEPTH:
            raise _refuse(f"elements are nested more than {MAX_DEPTH} deep")
        self.stack.append(_Open(name, voice, rate, name in ("sub", "say-as"), end, attrs))

    def _close(self, name: str, lt: int) -> None:
        if not self.stack:
            raise _refuse(f"</{name[:40]}> closes nothing")
        top = self.stack[-1]
        if name != top.name:
            raise _refuse(f"</{name[:40]}> closes <{top.name}>; close <{top.name}> first")
        self.stack.pop()
        if top.text_only:
            self._close_text(top, self.src[top.start : lt])
        elif name in ("p", "s", "voice"):
            self.out.end()
        elif name == "speak":
            self.closed_root = True

    def _close_text(self, element: _Open, raw: str) -> None:
        content = _SPACE.sub(" ", _unescape(raw)).strip()
        attrs = element.attrs or {}
        if element.name == "sub":
            alias = _unescape(attrs["alias"])
            self.out.text(f" {alias} ", element.voice, element.rate, len(alias))
            return
        spoken = say_as(attrs["interpret-as"], content, attrs.get("format"))
        if spoken is None:
            raise _refuse(
                f"<say-as interpret-as={attrs['interpret-as']!r}> cannot read {content[:40]!r}"
                + ("" if attrs.get("format") is None else f" in format {attrs['format'][:20]!r}")
            )
        self.out.text(f" {spoken} ", element.voice, element.rate, len(content), by_rule=True)

    def _break(self, attrs: dict[str, str]) -> None:
        if "time" in attrs:
            self.out.pause(pause_seconds(attrs["time"], "<break time>"))
            return
        strength = attrs.get("strength", "medium")
        if strength not in BREAK_STRENGTHS:
            raise _refuse(f"<break strength={strength[:20]!r}>: use one of {', '.join(BREAK_STRENGTHS)}")
        self.out.pause(BREAK_STRENGTHS[strength])


def _attributes(name: str, rest: str) -> dict[str, str]:
    """`name="value"` pairs; anything else in a tag is refused."""
    attrs: dict[str, str] = {}
    at = 0
    while at < len(rest):
        m = _ATTR.match(rest, at)
        if m is None:
            if rest[at:].strip():
                raise _refuse(f"<{name}> has a malformed attribute near {rest[at:at + 30].strip()!r}; write name=\"value\"")
            break
        key = m.group(1)
        if key in attrs:
            raise _refuse(f"<{name}> has attribute {key!r} twice")
        attrs[key] = _unescape(m.group(2)[1:-1])
        at = m.end()
    return attrs


def _rate(value: str) -> float:
    value = value.strip()
    if value in RATE_WORDS:
        return RATE_WORDS[value]
    m = _PERCENT.fullmatch(value)
    if m is not None:
        number = float(m.group(2)) / 100.0
        return 1.0 + number if m.group(1) == "+" else 1.0 - number if m.group(1) == "-" else number
    if _NUMBER.fullmatch(value):
        return float(value)
    raise _refuse(f"<prosody rate={value[:20]!r}>: use x-slow, slow, medium, fast, x-fast, a percentage (80%, +20%) or a number")


def _unescape(text: str) -> str:
    """XML's five entities and character references; any other entity is refused."""
    if "&" not in text:
        return text
    out: list[str] = []
    at = 0
    while True:
        amp = text.find("&", at)
        if amp < 0:
            out.append(text[at:])
            return "".join(out)
        out.append(text[at:amp])
        m = _ENTITY.match(text, amp, min(len(text), amp + 40))
        if m is None:
            raise _refuse("'&' must start an entity such as &amp; (write '&' in text as &amp;)")
        ref = m.group(1)
        if ref.startswith("#"):
            code = int("0" + ref[1:], 0) if ref[1:2] == "x" else int(ref[1:])
            if not 0 < code <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise _refuse(f"&{ref}; is not a character")
            out.append(chr(code))
        elif ref in _ENTITIES:
            out.append(_ENTITIES[ref])
        else:
            raise _refuse(f"entity &{ref}; is not accepted: only &amp; &lt; &gt; &quot; &apos; and character references")
        at = m.end()


_TAG_PREFIX = re.compile(r"\[(?:p(?:a(?:u(?:s(?:e(?::[0-9.ms]*)?)?)?)?)?|v(?:o(?:i(?:c(?:e(?::[A-Za-z0-9_.()+:-]*)?)?)?)?)?)?")
"""What the text before an unfinished inline tag's end may be: `[`, `[pau`, `[voice:af_b`."""


class TaggedSegmenter(TextSegmenter):
    """`TextSegmenter` for text with inline tags that arrives in fragments (the speech
    WebSocket): a tag split across fragments is held back until it is whole, so no
    segment ends inside one; a `[voice:]` tag holds for the segments after it (each one
    that follows starts with the voice in force); and a segment with nothing to say but
    its tags (`[pause:1s]` alone) joins the next one. Linear, as its parent."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._held = ""
        """The end of the text fed so far, if it may be the start of a tag."""
        self._voice: str | None = None
        self._waiting = ""
        """Segments of tags alone, spoken with the next segment."""

    @property
    def pending(self) -> str:
        """Text received and not yet cut into a segment, a tag held back included."""
        return super().pending + self._held

    @property
    def pending_chars(self) -> int:
        return super().pending_chars + len(self._held)

    def feed(self, text: str) -> list[str]:
        text = self._held + text
        start = text.rfind("[", max(0, len(text) - 420))
        self._held = ""
        if start >= 0 and _TAG_PREFIX.fullmatch(text, start):
            text, self._held = text[:start], text[start:]
        return self._tagged(super().feed(text))

    def flush(self) -> list[str]:
        held, self._held = self._held, ""
        out = self._tagged(super().feed(held))
        out += self._tagged(super().flush())
        self._waiting = ""  # pauses with nothing after them to speak
        return out

    def _tagged(self, segments: list[str]) -> list[str]:
        out = []
        for segment in segments:
            if self._voice is not None:
                segment = f"[voice:{self._voice}] {segment}"
            script = _quiet_parse(segment)
            if script is not None:
                voices = [item.voice for item in script.items if isinstance(item, Say)]
                last = _last_voice_tag(segment)
                self._voice = last if last is not None else self._voice
                if not voices:
                    self._waiting += segment + " "
                    continue
            segment, self._waiting = self._waiting + segment, ""
            out.append(segment)
        return out


def _quiet_parse(segment: str) -> Script | None:
    """The inline tags of a segment; a segment the engine will refuse reads as plain."""
    try:
        return _inline(segment)
    except InvalidRequest:
        return Script((Say(segment),), len(segment))


def _last_voice_tag(segment: str) -> str | None:
    found = None
    for m in _INLINE.finditer(segment):
        if m.group(1) == "voice" and _VOICE_NAME.fullmatch(m.group(2)):
            found = m.group(2)
    return found

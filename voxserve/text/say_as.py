"""`<say-as>` rules: numbers, dates, telephone numbers and spelled-out characters written
as the English words a voice should read.

English only: the engine refuses a `say-as` span in a voice of another language, whose
reader would need its own number and date rules. Pure: str in, str (or None when the
content does not fit the rule) out, linear in the content.
"""

from __future__ import annotations

import re

__all__ = ["INTERPRETATIONS", "cardinal", "ordinal", "say_as"]

INTERPRETATIONS = ("characters", "cardinal", "ordinal", "date", "telephone")
"""The `interpret-as` values read."""

MAX_DIGITS = 15
"""The longest number read as words (up to the trillions); longer runs are refused."""

_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ("", "thousand", "million", "billion", "trillion")
_ORDINAL_WORDS = {
    "one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
    "nine": "ninth", "twelve": "twelfth",
}  # fmt: skip
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
_DATE_FORMATS = ("ymd", "mdy", "dmy", "md", "dm", "ym", "my", "y", "m", "d")
_NUMBER = re.compile(r"([+-]?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?")
_DATE_PARTS = re.compile(r"[0-9]{1,4}")


def _under_thousand(n: int) -> list[str]:
    words: list[str] = []
    if n >= 100:
        words += [_ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10] + (f"-{_ONES[n % 10]}" if n % 10 else ""))
    elif n or not words:
        words.append(_ONES[n])
    return words


def cardinal(n: int) -> str:
    """`n` (under 10**15) in words: 1234 -> one thousand two hundred thirty-four."""
    if n == 0:
        return "zero"
    groups: list[str] = []
    scale = 0
    while n:
        n, group = divmod(n, 1000)
        if group:
            groups[:0] = [*_under_thousand(group), *([_SCALES[scale]] if scale else [])]
        scale += 1
    return " ".join(groups)


def ordinal(n: int) -> str:
    """`n` as an ordinal in words: 21 -> twenty-first."""
    words = cardinal(n)
    head, sep, last = words.rpartition(" ")
    stem, dash, unit = last.rpartition("-")
    if unit in _ORDINAL_WORDS:
        unit = _ORDINAL_WORDS[unit]
    elif unit.endswith("y"):
        unit = unit[:-1] + "ieth"
    else:
        unit += "th"
    return f"{head}{sep}{stem}{dash}{unit}"


def _number(content: str) -> str | None:
    m = _NUMBER.fullmatch(content.strip())
    if m is None:
        return None
    digits = m.group(2).replace(",", "")
    if len(digits.lstrip("0")) > MAX_DIGITS:
        return None
    words = ("minus " if m.group(1) == "-" else "") + cardinal(int(digits))
    if m.group(3):
        if len(m.group(3)) > MAX_DIGITS:
            return None
        words += " point " + " ".join(_ONES[int(d)] for d in m.group(3))
    return words


def _year(n: int) -> str:
    """A year as it is said: 1984 -> nineteen eighty-four, 2005 -> two thousand five."""
    if n < 1000 or n % 1000 < 10 or n >= 10000:
        return cardinal(n)
    high, low = divmod(n, 100)
    if low == 0:
        return f"{cardinal(high)} hundred"
    return f"{cardinal(high)} {'oh ' + _ONES[low] if low < 10 else cardinal(low)}"


def _date(content: str, fmt: str | None) -> str | None:
    """A date of one to three numbers (`fmt` names their order, ymd by default for a
    four-digit first number, else mdy): 2024-03-05 -> March fifth, twenty twenty-four."""
    text = content.strip()
    if not text or set(_DATE_PARTS.sub("", text)) - set(" -/."):
        return None
    parts = _DATE_PARTS.findall(text)
    if fmt is None:
        fmt = "ymd" if parts and len(parts[0]) == 4 else "mdy"
    if fmt not in _DATE_FORMATS or len(fmt) != len(parts):
        return None
    fields = {key: int(value) for key, value in zip(fmt, parts, strict=True)}
    month, day, year = fields.get("m"), fields.get("d"), fields.get("y")
    if month is not None and not 1 <= month <= 12:
        return None
    if day is not None and not 1 <= day <= 31:
        return None
    words: list[str] = []
    if month is not None:
        words.append(_MONTHS[month - 1])
    if day is not None:
        words.append(ordinal(day) if month is not None else f"the {ordinal(day)}")
    if year is not None:
        if words:
            words[-1] += ","
        words.append(_year(year))
    return " ".join(words)


def _telephone(content: str) -> str | None:
    """Digit by digit, a pause (comma) between groups; 0 read as oh; a leading + as plus."""
    text = content.strip()
    if not text or set(text) - set("0123456789+-() ."):
        return None
    groups = [g for g in re.split(r"[-() .]+", text) if g]
    words: list[str] = []
    for group in groups:
        said = ("plus " if group.startswith("+") else "") + " ".join(
            "oh" if d == "0" else _ONES[int(d)] for d in group.lstrip("+") if d.isdigit()
        )
        if "+" in group.lstrip("+"):
            return None
        words.append(said.strip())
    return ", ".join(w for w in words if w) or None


def _characters(content: str) -> str | None:
    chars = [c for c in content if not c.isspace()]
    if not chars:
        return None
    return " ".join(_ONES[int(c)] if c.isdigit() and c.isascii() else c.upper() for c in chars)


def say_as(kind: str, content: str, fmt: str | None = None) -> str | None:
    """`content` as English words under rule `kind` (`INTERPRETATIONS`); None when it
    does not fit the rule (a date that is no date, a number too long)."""
    if kind == "characters":
        return _characters(content)
    if kind == "cardinal":
        return _number(content)
    if kind == "ordinal":
        digits = content.strip()
        if not digits.isdigit() or not digits.isascii() or len(digits.lstrip("0")) > MAX_DIGITS:
            return None
        return ordinal(int(digits))
    if kind == "date":
        return _date(content, fmt)
    if kind == "telephone":
        return _telephone(content)
    return None

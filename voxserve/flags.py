"""Command-line flags generated from the config dataclasses, so that every field has one.

A flag's name is its field's name in kebab case after a prefix such as `tts-`
(`max_streams` -> `--tts-max-streams`), unit suffix included, so that a flag says what it
takes: `queue_timeout_s` -> `--tts-queue-timeout-s` (seconds), `batch_wait_ms` ->
`--asr-batch-wait-ms`, `max_upload_mb` -> `--asr-max-upload-mb`. Its type comes from the
field's annotation and its help from the docstring under the field. A nested config
dataclass gives flags for its own fields.

- `int`, `float`, `str`, `Path`: one value; `X | None`: the same, absent means the default.
- `bool`: `--x` and `--no-x`.
- `tuple[str, ...]`: a comma-separated list (`--allowed-origins a,b`).

Flags default to "not given", and `ConfigFlags.build` replaces only the fields given on a
default instance, so the dataclasses stay the one place where defaults live.

This module owns the mapping from fields to flags and back. It knows no config class by
name and reads no environment: `voxserve.cli` says which classes get which flags.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import itertools
import re
import sys
import textwrap
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union, get_args, get_origin, get_type_hints

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["ConfigFlags", "Flag", "add_old_spellings", "comma_list", "field_docs", "flag_name"]

C = TypeVar("C", bound="DataclassInstance")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal after it in the class body), with its
    whitespace collapsed; fields without one are left out."""
    source = textwrap.dedent(inspect.getsource(cls))
    klass = ast.parse(source).body[0]
    if not isinstance(klass, ast.ClassDef):
        raise TypeError(f"{cls.__name__}: expected a class definition")
    docs: dict[str, str] = {}
    body = klass.body
    for node, after in itertools.pairwise(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        literal = after.value if isinstance(after, ast.Expr) else None
        text = literal.value if isinstance(literal, ast.Constant) else None
        if isinstance(text, str):
            docs[node.target.id] = " ".join(text.split())
    return docs


def flag_name(field: str, prefix: str = "") -> str:
    """`--` + prefix + the field's name in kebab case, its unit suffix (`_s`, `_ms`) kept."""
    return "--" + prefix + field.replace("_", "-")


def comma_list(value: str) -> tuple[str, ...]:
    """`a, b,,c` -> ("a", "b", "c"); an empty string is an empty list."""
    return tuple(v.strip() for v in value.split(",") if v.strip())


@dataclass(frozen=True)
class Flag:
    """One generated flag and the field it sets."""

    option: str
    """`--tts-max-streams`."""
    dest: str
    """Attribute on the parsed namespace."""
    path: tuple[str, ...]
    """Field names from the root config down: ("chunking", "left_context")."""
    help: str
    """The field's docstring, as shown by `--help` (before the default is added)."""
    kind: str
    """"bool", "int", "float", "str", "path" or "list"."""
    convert: Callable[[str], Any]
    """Turns the flag's text into the field's value."""


class ConfigFlags(Generic[C]):
    """The flags of one config dataclass (and of the dataclasses nested in it).

    `rename` maps a field (a dotted path from this class, such as `chunking.left_context`)
    to its whole flag name without the dashes, prefix included: use it only where an
    existing flag's name differs from its field's. `skip` names fields that get no flag
    here, each with the option that covers it elsewhere (or why it has none), so that
    "every field has a flag" stays checkable. `prefixes` gives nested dataclass fields
    their own prefix (RayConfig's `tts` -> `tts-`); without one they share this class's.
    """

    def __init__(
        self,
        cls: type[C],
        title: str,
        *,
        prefix: str = "",
        rename: Mapping[str, str] | None = None,
        skip: Mapping[str, str] | None = None,
        prefixes: Mapping[str, str] | None = None,
        metavars: Mapping[str, str] | None = None,
    ) -> None:
        self.cls = cls
        self.title = title
        self.default: C = cls()
        self.skip: dict[str, str] = dict(skip or {})
        self._rename = dict(rename or {})
        self._prefixes = dict(prefixes or {})
        self._metavars = dict(metavars or {})
        self.flags: list[Flag] = []
        self._seen: set[str] = set()
        self._walk(cls, self.default, (), prefix)
        named = set(self._rename) | set(self.skip) | set(self._metavars) | set(self._prefixes)
        unknown = named - self._seen
        if unknown:
            raise ValueError(f"{cls.__name__}: no such fields: {', '.join(sorted(unknown))}")

    # -- building the flags ------------------------------------------------------------
    def _walk(self, cls: type, default: Any, path: tuple[str, ...], prefix: str) -> None:
        hints = get_type_hints(cls, vars(sys.modules[cls.__module__]))
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            here = (*path, f.name)
            key = ".".join(here)
            self._seen.add(key)
            if key in self.skip:
                continue
            hint = hints[f.name]
            value = getattr(default, f.name)
            if isinstance(hint, type) and dataclasses.is_dataclass(hint):
                self._walk(hint, value, here, prefix + self._prefixes.get(key, ""))
                continue
            if f.name not in docs:
                raise ValueError(f"{cls.__name__}.{f.name} needs a docstring: it is its flag's help")
            option = "--" + self._rename[key] if key in self._rename else flag_name(f.name, prefix)
            kind, convert = _kind(hint, f"{cls.__name__}.{f.name}")
            self.flags.append(Flag(option, option[2:].replace("-", "_"), here, docs[f.name], kind, convert))

    def add_to(self, parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
        """Add this class's flags to `parser`, as one argument group."""
        group = parser.add_argument_group(self.title)
        for flag in self.flags:
            value = self._value(flag.path)
            shown = "" if value is None or value == () else f" (default: {_show(value)})"
            text = (flag.help + shown).replace("%", "%%")
            if flag.kind == "bool":
                group.add_argument(flag.option, dest=flag.dest, action=argparse.BooleanOptionalAction,
                                   default=None, help=text)  # fmt: skip
                continue
            metavar = self._metavars.get(".".join(flag.path)) or _metavar(flag)
            group.add_argument(flag.option, dest=flag.dest, type=flag.convert, default=None,
                               metavar=metavar, help=text)  # fmt: skip
        return group

    # -- reading them back -------------------------------------------------------------
    def given(self, args: argparse.Namespace) -> dict[tuple[str, ...], Any]:
        """The fields set on the command line, by path."""
        values: dict[tuple[str, ...], Any] = {}
        for flag in self.flags:
            value = getattr(args, flag.dest, None)
            if value is not None:
                values[flag.path] = value
        return values

    def build(self, args: argparse.Namespace, **fields: Any) -> C:
        """The config with the flags given on `args`, then `fields`, replacing defaults.

        Raises ValueError (from the dataclasses' own checks) for values that do not fit."""
        values = self.given(args)
        values.update(((name,), value) for name, value in fields.items())
        return _replace(self.default, values)

    def _value(self, path: tuple[str, ...]) -> Any:
        value: Any = self.default
        for name in path:
            value = getattr(value, name)
        return value


def _replace(obj: C, values: Mapping[tuple[str, ...], Any]) -> C:
    """`obj` with the fields at `values`' paths replaced, nested dataclasses rebuilt."""
    if not values:
        return obj
    direct = {path[0]: v for path, v in values.items() if len(path) == 1}
    nested: dict[str, dict[tuple[str, ...], Any]] = {}
    for path, v in values.items():
        if len(path) > 1:
            nested.setdefault(path[0], {})[path[1:]] = v
    for name, inner in nested.items():
        direct[name] = _replace(direct.get(name, getattr(obj, name)), inner)
    return dataclasses.replace(obj, **direct)


class _Renamed(argparse.Action):
    """An old spelling of a flag whose meaning is unchanged: it sets the new flag's field,
    and says that it is deprecated."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        print(f"warning: {option} is deprecated and goes in the next release; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


class _Refused(argparse.Action):
    """An old spelling whose meaning changed, or a flag that became a constant: refused,
    with a message that says what to write instead."""

    def __init__(self, option_strings: list[str], dest: str, message: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.message = message

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        parser.error(f"{option}: {self.message}")


def add_old_spellings(
    parser: argparse.ArgumentParser, renamed: Mapping[str, str], refused: Mapping[str, str]
) -> None:
    """Accept the old spellings in `renamed` (old option -> the new option, which `parser`
    already has) with a deprecation warning, and refuse those in `refused` (old option ->
    the message). Neither shows in `--help`. A boolean's `--no-` form follows its flag."""
    actions = parser._option_string_actions
    for old, new in renamed.items():
        target = actions[new]
        if isinstance(target, argparse.BooleanOptionalAction):
            for prefix, value in (("--", True), ("--no-", False)):
                parser.add_argument(prefix + old[2:], dest=target.dest, action=_Renamed, nargs=0, const=value,
                                    new=prefix + new[2:], help=argparse.SUPPRESS)  # fmt: skip
            continue
        parser.add_argument(old, dest=target.dest, action=_Renamed, type=target.type or str,
                            metavar=target.metavar, new=new, help=argparse.SUPPRESS)  # fmt: skip
    for old, message in refused.items():
        parser.add_argument(old, dest=argparse.SUPPRESS, action=_Refused, nargs="?", message=message,
                            help=argparse.SUPPRESS)  # fmt: skip


def _kind(hint: Any, where: str) -> tuple[str, Callable[[str], Any]]:
    """("bool" | "int" | ... , the argparse `type`) for a field's annotation."""
    if get_origin(hint) in (Union, types.UnionType):
        inner = [a for a in get_args(hint) if a is not type(None)]
        if len(inner) == 1:
            return _kind(inner[0], where)
    if hint is bool:
        return "bool", bool  # not used: BooleanOptionalAction takes no value
    if hint in (int, float, str, Path):
        return hint.__name__.lower(), hint
    if get_origin(hint) is tuple and get_args(hint) == (str, ...):
        return "list", comma_list
    raise TypeError(f"{where}: no flag type for {hint!r}; teach voxserve.flags._kind")


def _metavar(flag: Flag) -> str:
    kind = flag.kind
    if kind == "list":
        return "A,B"
    if flag.option.endswith("-s") and not flag.option.endswith("-per-s"):
        return "SECONDS"
    if flag.option.endswith("-ms"):
        return "MS"
    if kind in ("int", "float"):
        return "N"
    if kind == "path":
        return "DIR" if flag.path[-1].endswith("_dir") else "PATH"
    return re.sub(r"\W", "_", flag.path[-1]).upper()


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)

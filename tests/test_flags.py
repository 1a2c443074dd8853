"""Flags generated from the config dataclasses: every field has one, its help is the
field's docstring, and a value given on the command line arrives in the config. The
`VOXSERVE_*` variables are read in one place."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any, get_type_hints

import pytest

import voxserve.config
from voxserve.cli import (
    RENAMED,
    build_parser,
    ray_config,
    serve_flags,
    server_config,
    speak_flags,
    transcribe_flags,
)
from voxserve.config import RayConfig, ServerConfig, TTSConfig
from voxserve.env import VARIABLES, Environment
from voxserve.flags import ConfigFlags, Flag, comma_list, field_docs, flag_name

ROOT = Path(__file__).resolve().parent.parent


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub: argparse._SubParsersAction[argparse.ArgumentParser] = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    )
    return sub.choices[command]


def _options(command: str) -> dict[str, argparse.Action]:
    return {o: a for a in _subparser(command)._actions for o in a.option_strings}


def _leaves(
    cls: type, stop: Collection[str] = (), path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], type]]:
    """Every field path of `cls` that is not itself a config dataclass, with its owner;
    the fields named in `stop` count as leaves."""
    hints = get_type_hints(cls)
    out: list[tuple[tuple[str, ...], type]] = []
    for f in dataclasses.fields(cls):
        here = (*path, f.name)
        hint = hints[f.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint) and ".".join(here) not in stop:
            out += _leaves(hint, stop, here)
        else:
            out.append((here, cls))
    return out


def _owner(flags: ConfigFlags[Any], flag: Flag) -> type:
    cls: type = flags.cls
    for name in flag.path[:-1]:
        cls = get_type_hints(cls)[name]
    return cls


def test_every_config_field_has_a_flag() -> None:
    options = _options("serve")
    classes = {flags.cls for flags in serve_flags()}
    for flags in serve_flags():
        flagged = {flag.path for flag in flags.flags}
        for path, owner in _leaves(flags.cls, flags.skip):
            key = ".".join(path)
            if path in flagged:
                continue
            assert key in flags.skip, f"{owner.__name__}.{path[-1]} has no flag"
            covered = flags.skip[key]
            if covered.startswith("--"):
                assert covered in options, (key, covered)
            else:  # a nested config with flags of its own
                hint = get_type_hints(flags.cls)[key]
                assert hint in classes, (key, covered)
        for flag in flags.flags:
            assert flag.option in options, flag.option
    # Every config dataclass is reached, so a new one cannot be left out.
    defined = {
        cls for _, cls in inspect.getmembers(voxserve.config, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == voxserve.config.__name__
    }  # fmt: skip
    reached = {owner for flags in serve_flags() for _, owner in _leaves(flags.cls, flags.skip)}
    assert defined == reached


def test_help_comes_from_the_docstring() -> None:
    options = _options("serve")
    for flags in serve_flags():
        for flag in flags.flags:
            doc = field_docs(_owner(flags, flag))[flag.path[-1]]
            assert doc and flag.help == doc
            help_text = options[flag.option].help
            assert help_text is not None and help_text.replace("%%", "%").startswith(doc), flag.option
    assert field_docs(TTSConfig)["text_workers"] == (
        "Threads for text preprocessing (the phonemizer is serialized anyway)."
    )
    # Multi-line docstrings are joined into one line.
    assert "\n" not in field_docs(ServerConfig)["request_timeout_s"]


_CHOICES = {"device": "cpu", "runtime": "torch", "precision": "bfloat16", "noise_reduction": "far_field"}
"""Fields that take one of a few names: a valid one other than the default."""


def _other_value(flags: ConfigFlags[Any], flag: Flag) -> tuple[list[str], Any]:
    """Arguments that set `flag` to a value unlike its default, and that value."""
    value = flags.default
    for name in flag.path:
        value = getattr(value, name)
    hint = get_type_hints(_owner(flags, flag))[flag.path[-1]]
    if hint is bool:
        return ([f"--no-{flag.option[2:]}"] if value else [flag.option]), not value
    if hint == tuple[str, ...]:
        return [flag.option, " https://a.example, https://b.example:8443 ,"], (
            "https://a.example",
            "https://b.example:8443",
        )
    if flag.path[-1] in _CHOICES:
        return [flag.option, _CHOICES[flag.path[-1]]], _CHOICES[flag.path[-1]]
    if value is None:
        if "Path" in str(hint):
            return [flag.option, "/srv/voices"], Path("/srv/voices")
        number = 2 if "int" in str(hint) else 0.25
        return [flag.option, str(number)], number
    if isinstance(value, Path | str):
        return [flag.option, f"{value}x"], type(value)(f"{value}x")
    if isinstance(value, int):
        return [flag.option, str(value + 1)], value + 1
    return [flag.option, str(value * 2)], value * 2


def _at(config: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        config = getattr(config, name)
    return config


def test_every_flag_round_trips_into_the_config() -> None:
    argv = ["serve", "--ray", "--api-key", "vx-key"]  # --metrics-require-key needs a key
    expected: list[tuple[ConfigFlags[Any], Flag, Any]] = []
    for flags in serve_flags():
        for flag in flags.flags:
            more, value = _other_value(flags, flag)
            argv += more
            expected.append((flags, flag, value))
    args = build_parser().parse_args(argv)
    config, layout = server_config(args, {}), ray_config(args)
    roots: dict[type, Any] = {type(config): config, type(layout): layout}
    roots.update({type(config.tts): config.tts, type(config.asr): config.asr, type(config.ws): config.ws, type(config.realtime): config.realtime})
    for flags, flag, value in expected:
        got = _at(roots[flags.cls], flag.path)
        assert got == value and type(got) is type(value), (flag.option, got, value)
    assert config.api_key == "vx-key" and layout.address is None


def test_unset_flags_keep_the_dataclass_defaults() -> None:
    config = server_config(build_parser().parse_args(["serve"]), {})
    assert config == ServerConfig()
    assert ray_config(build_parser().parse_args(["serve", "--ray", "h:6379"])).address == "h:6379"


def test_speak_and_transcribe_share_the_engine_flags() -> None:
    speak, transcribe = _options("speak"), _options("transcribe")
    for flags in speak_flags():
        assert all(flag.option in speak for flag in flags.flags)
    (asr,) = transcribe_flags()
    assert all(flag.option in transcribe for flag in asr.flags)
    # A local file has no upload, queue or shared budget: those stay `serve` flags.
    assert "--asr-max-upload-mb" not in transcribe and "--asr-max-queue" not in transcribe
    assert {"--asr-workers", "--asr-beam-size", "--asr-max-audio-s", "--asr-audio-workers"} <= set(transcribe)


def _fields(command: str) -> dict[str, tuple[type, tuple[str, ...]]]:
    flags = {"serve": serve_flags, "speak": speak_flags, "transcribe": transcribe_flags}[command]()
    return {flag.option: (f.cls, flag.path) for f in flags for flag in f.flags}


def test_a_flag_means_one_thing_on_every_command() -> None:
    serve, speak, transcribe = _fields("serve"), _fields("speak"), _fields("transcribe")
    for other in (speak, transcribe):
        for option, field in other.items():
            assert serve[option] == field, option
    # Every engine flag names its engine, or the one model family that reads it; the bare
    # --device sets every engine the command runs.
    engines = [o for f in (*speak_flags(), *transcribe_flags()) for o in (flag.option for flag in f.flags)]
    assert all(o.startswith(("--tts-", "--asr-", "--piper-")) or o == "--asr" for o in engines)
    ray = next(f for f in serve_flags() if f.cls is RayConfig)
    assert all(flag.option.startswith("--ray-") for flag in ray.flags)
    parse = build_parser().parse_args
    assert server_config(parse(["serve", "--device", "cpu"]), {}).tts.device == "cpu"
    assert server_config(parse(["serve", "--device", "cpu"]), {}).asr.device == "cpu"
    assert server_config(parse(["serve", "--device", "cpu", "--asr-device", "auto"]), {}).asr.device == "auto"


def test_the_engine_groups_hold_operators_choices_only() -> None:
    """Tuning constants are not flags: the TTS group stays small, and a removed knob says
    where its value lives now."""
    tts = next(f for f in serve_flags() if f.cls is TTSConfig)
    assert len(tts.flags) <= 25
    knobs = ("--credits", "--context-frames", "--first-chunk-frames", "--output-gain", "--asr-max-batch",
             "--asr-even-piece", "--realtime-delta-interval-ms", "--routing-stats-period")  # fmt: skip
    for knob in knobs:
        assert knob not in {flag.option for f in serve_flags() for flag in f.flags}


def test_an_old_spelling_warns_and_keeps_its_meaning(capsys: pytest.CaptureFixture[str]) -> None:
    parse = build_parser().parse_args
    argv = ["serve", "--workers", "3", "--no-tts-fixed-prior", "--max-upload-mb", "5", "--realtime-active", "20",
            "--tts-replicas", "3", "--asr-model", "whisper-base"]  # fmt: skip
    args = parse(argv)
    config, layout = server_config(args, {}), ray_config(args)
    assert (config.tts.workers, config.tts.fixed_prior, config.asr.max_upload_mb) == (3, False, 5.0)
    assert (config.realtime.active_s, layout.tts.count, config.asr.models) == (20.0, 3, ("whisper-base",))
    err = capsys.readouterr().err
    for old, new in (("--workers", "--tts-workers"), ("--no-tts-fixed-prior", "--no-piper-fixed-prior"),
                     ("--max-upload-mb", "--asr-max-upload-mb"), ("--realtime-active", "--realtime-active-s"),
                     ("--tts-replicas", "--ray-tts-replicas"), ("--asr-model", "--asr-models")):  # fmt: skip
        assert f"warning: {old} is deprecated and goes in the next release; use {new}\n" in err, old
    assert parse(["speak", "Hi.", "--runtime", "torch"]).tts_runtime == "torch"
    assert parse(["speak", "Hi.", "--tts-voice-dir", "/v"]).piper_voice_dir == Path("/v")
    assert parse(["voices", "--tts-voice-dir", "/v"]).piper_voice_dir == Path("/v")
    assert parse(["transcribe", "a.wav", "--runtime", "ct2"]).asr_runtime == "ct2"
    assert parse(["transcribe", "a.wav", "--asr-max-audio-seconds", "60"]).asr_max_audio_s == 60.0
    assert "--runtime is deprecated and goes in the next release; use --asr-runtime" in capsys.readouterr().err


def _flag_by_option() -> dict[str, tuple[ConfigFlags[Any], Flag]]:
    return {flag.option: (flags, flag) for flags in serve_flags() for flag in flags.flags}


def test_every_old_spelling_sets_what_its_new_one_sets(capsys: pytest.CaptureFixture[str]) -> None:
    """Each renamed flag, given under its old and its new name, parses to the same
    arguments (so to the same config), and only the old one warns."""
    parse = build_parser().parse_args
    by_option = _flag_by_option()
    for old, new in RENAMED.items():
        more, _ = _other_value(*by_option[new])
        value = more[1:]
        spelled = [f"--no-{old[2:]}"] if more[0].startswith("--no-") else [old]
        assert vars(parse(["serve", *spelled, *value])) == vars(parse(["serve", *more])), old
        err = capsys.readouterr().err
        assert err.count("warning:") == 1 and f"{spelled[0]} is deprecated" in err and more[0] in err, old
    assert set(RENAMED).isdisjoint(by_option), "an old spelling is a flag again"


def test_every_duration_says_its_unit() -> None:
    """A flag that takes a duration ends in its unit: `-s` for seconds, `-ms` for
    milliseconds (the field's own suffix), never `-seconds` or nothing."""
    for option, (flags, flag) in _flag_by_option().items():
        field = flag.path[-1]
        if field.endswith(("_s", "_seconds")) and not field.endswith("_per_s"):
            assert option.endswith("-s"), option
        elif field.endswith("_ms"):
            assert option.endswith("-ms"), option
        assert "-seconds" not in option and not option.endswith("-timeout"), option


# -- the README's tables ---------------------------------------------------------------


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n#", start + len(heading) + 2)
    return text[start:end]


def _rows(section: str) -> list[list[str]]:
    """The cells of every table row below a header row (`|---|` lines dropped)."""
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and not set(cells[0]) <= {"-"} and cells[0] not in ("flag", "old"):
            rows.append(cells)
    return rows


def _options_in(cell: str) -> list[str]:
    """`--x N` / `--no-x`, `--y` -> ["--x", "--y"]: the flags a cell names, `--no-` forms left out."""
    names = [part.split()[0] for part in re.findall(r"`([^`]*)`", cell)]
    return [n for n in names if n.startswith("--") and f"--{n[5:]}" not in names]


def _help_default(action: argparse.Action) -> str | None:
    text = action.help or ""
    return text.rsplit(" (default: ", 1)[1].removesuffix(")") if text.endswith(")") and " (default: " in text else None


def _same(readme: str, shown: str) -> bool:
    readme = readme.strip("`")
    try:
        return float(readme) == float(shown)
    except ValueError:
        return readme == shown


def test_the_readme_flag_tables_match_help() -> None:
    """The README's flag tables list `serve --help`'s flags in its order, one a row, and
    give the defaults it shows, except those that depend on the machine (cores)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = _rows(_section(readme, "### Flags"))
    serve = _subparser("serve")
    shown = [a for a in serve._actions if a.option_strings and a.help != argparse.SUPPRESS and a.dest != "help"]
    assert [o for row in rows for o in _options_in(row[0])] == [a.option_strings[0] for a in shown]
    by_option = _flag_by_option()
    for row, action in zip(rows, shown, strict=True):
        default = _help_default(action)
        option = action.option_strings[0]
        if default is None or option not in by_option:
            continue
        flags, flag = by_option[option]
        field = next(f for f in dataclasses.fields(_owner(flags, flag)) if f.name == flag.path[-1])
        if field.default_factory is dataclasses.MISSING:
            assert _same(row[1], default), (option, row[1], default)


def test_the_readme_lists_every_rename() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = {old: new for cells in _rows(_section(readme, "### Renamed flags"))
              for old in _options_in(cells[0]) for new in _options_in(cells[1])}  # fmt: skip
    assert listed == RENAMED


DOCS = ("README.md", "docs/ARCHITECTURE.md", "docs/ASR.md", "docs/BENCHMARKS.md", "docs/GPU.md", "docs/KOKORO.md",
        "docs/MARKUP.md", "docs/REALTIME.md", "docs/SCALING.md", "docs/SIMULATION.md")  # fmt: skip
"""The documents that name flags in their current spelling only."""


def test_the_docs_use_the_new_spellings() -> None:
    old = re.compile(r"(?<![\w-])--(?:no-)?(" + "|".join(re.escape(o[2:]) for o in RENAMED) + r")(?![\w-])")
    for name in DOCS:
        text = (ROOT / name).read_text(encoding="utf-8")
        if name == "README.md":
            text = text.replace(_section(text, "### Renamed flags"), "")
        assert not old.findall(text), (name, sorted(set(old.findall(text))))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--runtime", "torch"], "--asr-runtime"),
        (["serve", "--credits", "3"], "engine/scheduler.py: CREDITS"),
        (["serve", "--context-frames", "6"], "engine/adapters/piper.py: CHUNKING"),
        (["serve", "--no-asr-fitted-windows"], "engine/asr.py: FITTED_WINDOWS"),
        (["speak", "Hi.", "--max-segment-chars", "100"], "engine/tts.py: MAX_SEGMENT_CHARS"),
        (["transcribe", "a.wav", "--asr-max-batch", "4"], "engine/asr.py: CPU_MAX_BATCH"),
    ],
)
def test_a_changed_or_removed_flag_is_refused_with_what_to_write(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_flag_names() -> None:
    assert flag_name("queue_timeout_s", "tts-") == "--tts-queue-timeout-s"
    assert flag_name("batch_wait_ms", "asr-") == "--asr-batch-wait-ms"
    assert flag_name("messages_per_s", "ws-") == "--ws-messages-per-s"
    assert flag_name("beam_size", "asr-") == "--asr-beam-size"
    assert comma_list(" a, b,,c ,") == ("a", "b", "c") and comma_list("") == ()


def test_a_field_without_a_docstring_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Undocumented:
        documented: int = 1
        """Has help."""
        bare: int = 2

    with pytest.raises(ValueError, match="bare needs a docstring"):
        ConfigFlags(Undocumented, "test")


# -- the environment ----------------------------------------------------------------


def test_host_and_port_come_from_the_environment_unless_flagged() -> None:
    env = {"VOXSERVE_HOST": "0.0.0.0", "VOXSERVE_PORT": "9100"}
    config = server_config(build_parser().parse_args(["serve"]), env)
    assert (config.host, config.port) == ("0.0.0.0", 9100)
    flagged = server_config(build_parser().parse_args(["serve", "--host", "::1", "--port", "9200"]), env)
    assert (flagged.host, flagged.port) == ("::1", 9200)
    with pytest.raises(ValueError, match="VOXSERVE_PORT must be a port number"):
        server_config(build_parser().parse_args(["serve"]), {"VOXSERVE_PORT": "http"})


def test_a_bad_port_variable_is_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from voxserve.cli import main

    monkeypatch.setenv("VOXSERVE_PORT", "eighty")
    assert main(["serve", "--no-asr"]) == 2
    assert "VOXSERVE_PORT" in capsys.readouterr().err


def test_environment_read() -> None:
    assert Environment.read({}) == Environment()
    read = Environment.read({"VOXSERVE_API_KEY": "", "VOXSERVE_API_KEY_FILE": "", "OTHER": "x"})
    assert read.api_key == "" and read.api_key_file is None


ENVIRONMENT_WRITERS = {
    "voxserve/env.py": "reads VOXSERVE_*",
    "voxserve/runners/files.py": "XDG_CACHE_HOME, the user's cache folder convention",
    "voxserve/serving/saved_voices.py": "XDG_DATA_HOME, the user's data folder convention",
    "voxserve/runners/whisper/weights.py": "XDG_CACHE_HOME, the user's cache folder convention",
    "voxserve/ray/environment.py": "sets Ray's and glibc's variables for a local Ray instance",
    "voxserve/bench/asr_offline.py": "sets HF_HUB_OFFLINE for faster-whisper",
    "voxserve/__init__.py": "sets GOMP_SPINCOUNT before CTranslate2 loads GNU OpenMP",
}


def test_the_environment_is_read_in_one_place() -> None:
    for path in sorted((ROOT / "voxserve").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        source = path.read_text(encoding="utf-8")
        if re.search(r"\bos\.environ\b|\bgetenv\(", source):
            assert rel in ENVIRONMENT_WRITERS, f"{rel} touches the environment; read VOXSERVE_* in voxserve.env"
        if rel != "voxserve/env.py":
            assert not re.search(r"environ\w*(\.get)?\(?\[?\s*[\"']VOXSERVE_", source), rel


def test_the_readme_lists_every_variable() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in VARIABLES:
        assert f"`{name}`" in readme, name

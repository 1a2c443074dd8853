"""The import graph of voxserve: no cycles, and each layer imports only the layers below.

Every import counts: at module level, inside functions and under `TYPE_CHECKING`. The
graph is read from the source with `ast`, so nothing is imported to build it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "voxserve"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


@functools.cache
def _trees() -> dict[str, tuple[Path, ast.Module]]:
    """Every module's path and parsed source, read once for all the tests (they only
    read the trees)."""
    return {
        name: (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for name, path in _modules().items()
    }


def _imported(tree: ast.Module, name: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """voxserve modules that `tree` imports, by their full names."""
    found: set[str] = set()
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            while target.startswith("voxserve."):  # importing a module runs its packages too
                if target != name:
                    found.add(target)
                target = target.rpartition(".")[0]
    return found


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    modules = _modules()
    return {
        name: frozenset(_imported(tree, name, path.name == "__init__.py", modules))
        for name, (path, tree) in _trees().items()
    }


def import_graph() -> dict[str, set[str]]:
    """voxserve's import graph: each module and the voxserve modules it imports."""
    return {name: set(edges) for name, edges in _graph().items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_imports_inside_functions_and_under_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from voxserve.api.app import create_app\n"
        "def f():\n    from voxserve.engine import tts\n    import voxserve.errors\n"
        "from . import speech\n"
    )
    found = _imported(ast.parse(source), "voxserve.api.ws", False, _modules())
    assert found == {
        "voxserve.api",
        "voxserve.api.app",
        "voxserve.api.speech",
        "voxserve.engine",
        "voxserve.engine.tts",
        "voxserve.errors",
    }


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_voxserve_has_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 50
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# What each layer may import from the others (besides itself, voxserve.errors and
# voxserve.config). Top-level modules such as voxserve.cli compose everything.
_MAY_IMPORT = {
    "voxserve.audio": {"voxserve.text"},
    "voxserve.text": set(),
    "voxserve.runners": {"voxserve.audio", "voxserve.text"},
    "voxserve.engine": {"voxserve.audio", "voxserve.text", "voxserve.runners"},
    "voxserve.serving": {"voxserve.audio", "voxserve.text", "voxserve.engine"},
    "voxserve.api": {"voxserve.audio", "voxserve.text", "voxserve.engine", "voxserve.serving"},
}


def _layer(module: str) -> str:
    return ".".join(module.split(".")[:2])


@pytest.mark.parametrize("layer", sorted(_MAY_IMPORT))
def test_each_layer_imports_only_the_layers_below(layer: str) -> None:
    allowed = _MAY_IMPORT[layer] | {layer, "voxserve.errors", "voxserve.config"}
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if _layer(module) == layer
        for target in targets
        if _layer(target) not in allowed
    )
    assert not wrong



def _third_party(tree: ast.Module) -> set[str]:
    """Top-level names of the packages a module imports (anywhere in it)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


# The Whisper runtimes: imported only by the runners, so that a machine loads only the one
# it runs (a GPU machine has torch and no ctranslate2; a CPU server never loads torch).
_RUNTIMES = ("ctranslate2", "torch")


@pytest.mark.parametrize("runtime", _RUNTIMES)
def test_only_runners_import_a_runtime(runtime: str) -> None:
    wrong = sorted(
        name
        for name, (_, tree) in _trees().items()
        if runtime in _third_party(tree)
        and not name.startswith("voxserve.runners.")
    )
    assert not wrong


def test_ray_imports_the_http_app_only_where_it_mounts_it() -> None:
    graph = import_graph()
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if _layer(module) == "voxserve.ray" and module != "voxserve.ray.frontend"
        for target in targets
        if _layer(target) == "voxserve.api"
    )
    assert not wrong


# The CLI composes everything, but its offline commands (speak, transcribe, voices) reach
# the engines only through the serving layer (`voxserve.serving.offline`), as every
# channel does. What it imports of the engine layer is process set-up for `serve`.
_CLI_ENGINE_IMPORTS = {"voxserve.engine", "voxserve.engine.memory", "voxserve.engine.threads"}


def test_the_cli_reaches_the_engines_through_the_serving_layer() -> None:
    targets = import_graph()["voxserve.cli"]
    assert "voxserve.serving.offline" in targets
    wrong = sorted(
        t
        for t in targets
        if _layer(t) == "voxserve.runners" or (_layer(t) == "voxserve.engine" and t not in _CLI_ENGINE_IMPORTS)
    )
    assert not wrong


# The load generator speaks HTTP to whatever server it measures. Only the modules that
# measure this machine's offline limit (`voxserve bench offline`, `bench asr-offline`) or
# compare the engine with a peer library in process (`bench kokoro-peer`), or run the
# server's noise filter and VAD on the audio they send (`bench.real_speech --filter`), or
# mark where each clean recording of a diarization conversation speaks (`bench.conversations`)
# run the engines and runners in process.
_BENCH_OFFLINE = {
    "voxserve.bench.conversations",
    "voxserve.bench.offline",
    "voxserve.bench.real_speech",
    "voxserve.bench.offline_kokoro",
    "voxserve.bench.asr_offline",
    "voxserve.bench.kokoro_peer",
    "voxserve.bench.kokoro_prosody",
}


def test_bench_speaks_http_except_where_it_measures_the_offline_limit() -> None:
    graph = import_graph()
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if _layer(module) == "voxserve.bench"
        for target in targets
        if _layer(target) in {"voxserve.api", "voxserve.serving", "voxserve.ray"}
        or (_layer(target) in {"voxserve.engine", "voxserve.runners"} and module not in _BENCH_OFFLINE)
    )
    assert not wrong

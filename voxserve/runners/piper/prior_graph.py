"""Fixed-length copies of a Piper prior graph (stage A's first part) for short items.

The exported prior spends much of a short item's time on shape arithmetic and tiny
tensors: 2394 nodes, most of them Shape/Gather/Unsqueeze/Concat chains of VITS's
relative attention and the boolean indexing of the duration predictor's splines. With
the ids' length fixed, that arithmetic folds away. Each copy here:

1. computes the three reverse spline flows of the duration predictor on every id and
   picks the spline's value with `Where` where the input lies inside the spline's
   interval, instead of gathering the inside ids by `NonZero` (elementwise, so each
   id's value is computed by the same operations: bit-identical); the bin index is
   clamped so that ids outside the interval (whose value is not used) stay in range;
2. fixes the ids to [1, length] and folds the constant shape arithmetic (onnxsim);
3. fuses VITS's layer norms (ReduceMean ... Add, 9 nodes) into `LayerNormalization`
   (opset 17), which rounds differently: z_p moves by ~1e-5.

Shorter items are padded with 0 (the pad id) up to the copy's length, with
`input_lengths` carrying the true length: VITS masks the padding, so the true ids'
outputs are unchanged. A copy is checked against the dynamic graph when it is built
(durations equal, z_p within `MAX_PRIOR_DIFF`) and not used otherwise.

Pure graph code and the on-disk cache; no sessions are kept here, nothing of requests.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from voxserve.runners.files import initializer_array

__all__ = [
    "FIXED_LAYOUT",
    "MAX_PRIOR_DIFF",
    "PRIOR_LENGTHS",
    "SHARED_KEY",
    "build_fixed_prior",
    "fixed_priors",
    "prior_feeds",
    "shared_weights",
]

log = logging.getLogger(__name__)

PRIOR_LENGTHS = (16, 32, 48, 64, 80, 96)
"""The fixed lengths built by default: most first segments of the bench prompts have
27-97 ids. Padding within 16 ids costs little: ONNX Runtime's convolutions compute 16
positions at a time."""
FIXED_LAYOUT = "x2"
"""Names the copies in the split's folder; a copy of another layout is not read."""
MAX_PRIOR_DIFF = 1e-4
"""Largest |z_p| difference to the dynamic graph that a copy may show in its check
(noise scales 0): room for float32's reordering of sums between the two graphs, not for
a different computation."""
SHARED_KEY = "voxserve.shared_weights"
"""A copy's metadata: the JSON list of its weights equal to the prior's (same name)."""
_PRIOR_OUTPUTS = ("/Add_output_0", "/Cast_2_output_0", "/Cast_output_0", "/Ceil_output_0")


def fixed_priors(prior: Path, lengths: Sequence[int] = PRIOR_LENGTHS) -> dict[int, Path]:
    """A fixed-length copy of the `prior` graph per length, built beside it on first use
    and written atomically. A length whose copy cannot be built (onnxsim missing, a
    graph of another shape, a failed check) is left out, with a warning.

    A copy keeps its weights in a file of its own, and names in its metadata
    (`SHARED_KEY`) those equal to the prior's: a session can take them from
    `shared_weights` instead of reading its own. Processes (and threads) that need the
    same copy at the same moment build it once: the others wait on a lock file beside it
    and read it."""
    out: dict[int, Path] = {}
    source = _Source(prior)
    for length in sorted(set(lengths)):
        target = prior.with_name(f"{prior.stem}-{length}-{FIXED_LAYOUT}.onnx")
        if not target.exists():
            with _building(target):  # another process may be building it: wait, then read it
                if not target.exists() and not _build(source, target, length):
                    continue
        out[length] = target
    return out


class _Source:
    """The prior graph and a session of it, loaded once when a first copy is built."""

    def __init__(self, path: Path):
        self.path = path
        self._loaded: tuple[onnx.ModelProto, ort.InferenceSession] | None = None

    def get(self) -> tuple[onnx.ModelProto, ort.InferenceSession]:
        if self._loaded is None:
            self._loaded = onnx.load(str(self.path)), _session(str(self.path))
        return self._loaded


def _build(source: _Source, target: Path, length: int) -> bool:
    """Build, check and write one copy; False (with a warning) if it cannot be built."""
    try:
        loaded, dynamic = source.get()
        originals = {init.name: init for init in loaded.graph.initializer}
        model = onnx.ModelProto()
        model.CopyFrom(loaded)  # the build rewrites its model
        model = build_fixed_prior(model, length)
        _check(dynamic, model, length)
    except Exception as exc:  # noqa: BLE001 - the dynamic graph serves instead
        log.warning("no fixed-length prior of %d ids (%s); the dynamic one serves", length, exc)
        return False
    shared = [
        init.name for init in model.graph.initializer
        if init.name in originals and _same_tensor(init, originals[init.name])
    ]
    helper.set_model_props(model, {SHARED_KEY: json.dumps(shared)})
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    os.close(fd)
    try:
        # The weights' file name is new for each write; the graph's file, which names it,
        # appears last and whole.
        weights = f"{target.stem}-{os.urandom(6).hex()}.weights"
        onnx.save(model, tmp, save_as_external_data=True, all_tensors_to_one_file=True,
                  location=weights, size_threshold=4096)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


@contextlib.contextmanager
def _building(target: Path) -> Iterator[None]:
    """Hold the build of `target` against other processes and threads building it at the
    same moment (a lock file beside it), so that one builds it and the others read it."""
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def prior_feeds(
    items: Sequence[np.ndarray], width: int, scales: tuple[float, float, float], speaker: int | None
) -> dict[str, np.ndarray]:
    """A Piper prior's inputs for `items` (each a 1-D array of phoneme ids), one row each,
    padded with 0 (the pad id) to `width` ids; `scales` are (noise, length, noise_w);
    `speaker`: the speaker id of every row, None for a single-speaker voice (no `sid`)."""
    ids = np.zeros((len(items), width), dtype=np.int64)
    for row, item in enumerate(items):
        ids[row, : len(item)] = item
    feeds: dict[str, np.ndarray] = {
        "input": ids,
        "input_lengths": np.array([len(item) for item in items], dtype=np.int64),
        "scales": np.array(scales, dtype=np.float32),
    }
    if speaker is not None:
        feeds["sid"] = np.full(len(items), speaker, dtype=np.int64)
    return feeds


def shared_weights(prior: Path, copies: Iterable[Path]) -> dict[str, ort.OrtValue]:
    """The prior's weights that the `copies` share with it (see `fixed_priors`), for
    `SessionOptions.add_initializer`: one copy in memory for all their sessions."""
    names: set[str] = set()
    for path in copies:
        props = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        names.update(json.loads(props.get(SHARED_KEY, "[]")))
    if not names:
        return {}
    return {
        init.name: ort.OrtValue.ortvalue_from_numpy(initializer_array(init))
        for init in onnx.load(str(prior)).graph.initializer
        if init.name in names
    }


def _same_tensor(a: onnx.TensorProto, b: onnx.TensorProto) -> bool:
    x, y = numpy_helper.to_array(a), numpy_helper.to_array(b)
    return x.nbytes >= 4096 and x.dtype == y.dtype and x.shape == y.shape and bool(np.array_equal(x, y))


def build_fixed_prior(model: onnx.ModelProto, length: int) -> onnx.ModelProto:
    """The prior `model` for one item of exactly `length` ids (see the module's steps)."""
    import onnxsim

    _rewrite_splines(model.graph)
    for graph_input in model.graph.input:
        dims = graph_input.type.tensor_type.shape.dim
        if graph_input.name == "input":
            dims[0].dim_value, dims[1].dim_value = 1, length
        elif graph_input.name == "input_lengths":
            dims[0].dim_value = 1
    # Stale symbolic shapes would hide the fixed ones from shape inference.
    del model.graph.value_info[:]
    for output in model.graph.output:
        for k, dim in enumerate(output.type.tensor_type.shape.dim):
            dim.Clear()
            dim.dim_param = f"{output.name}_{k}"
    simplified, ok = onnxsim.simplify(model)
    if not ok:
        raise ValueError("onnxsim could not check the simplified graph")
    assert isinstance(simplified, onnx.ModelProto)
    _fuse_layer_norms(simplified)
    return simplified


def _consumers(nodes: Sequence[onnx.NodeProto]) -> dict[str, list[onnx.NodeProto]]:
    out: dict[str, list[onnx.NodeProto]] = collections.defaultdict(list)
    for node in nodes:
        for name in node.input:
            out[name].append(node)
    return out


def _rewrite_splines(graph: onnx.GraphProto) -> int:
    """Step 1 of the module's docstring, on each `/dp/flows.N/` spline; returns how many.
    Raises if a flow with `NonZero` does not have the exported layout."""
    by_name = {node.name: node for node in graph.node}
    producer = {out: node for node in graph.node for out in node.output}
    consumers = _consumers(graph.node)
    flows = sorted({
        node.name.rsplit("/", 1)[0]
        for node in graph.node
        if node.op_type == "NonZero" and node.name.startswith("/dp/flows.")
    })
    graph.initializer.extend([
        numpy_helper.from_array(np.array([-1], np.int64), "fixed/flat"),
        numpy_helper.from_array(np.array(0, np.int64), "fixed/zero"),
        numpy_helper.from_array(np.array(1, np.int64), "fixed/one"),
        numpy_helper.from_array(np.array([3], np.int64), "fixed/bins_axis"),
    ])
    replace: dict[str, list[onnx.NodeProto]] = {}
    for flow in flows:
        replace.update(_spline_replacements(flow, by_name, producer, consumers))
    _keep_live([new for node in graph.node for new in replace.get(node.name, [node])], graph)
    return len(flows)


def _spline_replacements(
    flow: str,
    by_name: dict[str, onnx.NodeProto],
    producer: dict[str, onnx.NodeProto],
    consumers: dict[str, list[onnx.NodeProto]],
) -> dict[str, list[onnx.NodeProto]]:
    """The nodes that replace each gather, scatter and bin lookup of one spline `flow`
    (`_rewrite_splines`), by the name of the node each replaces."""
    replace: dict[str, list[onnx.NodeProto]] = {}

    def find(name: str, op: str) -> onnx.NodeProto:
        found: onnx.NodeProto | None = by_name.get(f"{flow}/{name}")
        if found is None or found.op_type != op:
            raise ValueError(f"{flow}/{name} is not a {op} node")
        return found

    inside = find("NonZero_1", "NonZero").input[0]
    x = find("Split", "Split").output[1]
    if producer[inside].op_type != "And" or find("GatherND_1", "GatherND").input[0] != x:
        raise ValueError(f"{flow}: not the exported spline")
    for k in range(1, 5):
        gather = find(f"GatherND_{k}", "GatherND")
        if k == 1:  # the inputs [B, 1, L] -> [B * L]
            new = helper.make_node("Reshape", [gather.input[0], "fixed/flat"], list(gather.output))
        else:  # the bins' parameters [B, 1, L, bins] -> [B * L, bins]
            new = helper.make_node("Flatten", [gather.input[0]], list(gather.output), axis=3)
        new.name = f"{gather.name}/fixed"
        replace[gather.name] = [new]
    scatter, spline = find("ScatterND_9", "ScatterND"), find("Slice_24", "Slice").input[0]
    replace[scatter.name] = [
        helper.make_node("Shape", [x], [f"{flow}/fixed/x_shape"], name=f"{flow}/fixed/x_shape"),
        helper.make_node("Reshape", [spline, f"{flow}/fixed/x_shape"], [f"{flow}/fixed/spline"],
                         name=f"{flow}/fixed/spline"),
        helper.make_node("Where", [inside, f"{flow}/fixed/spline", x], list(scatter.output),
                         name=f"{scatter.name}/fixed"),
    ]
    bin_index = find("Sub_7", "Sub").output[0]
    (unsqueeze,) = consumers[bin_index]
    widths = find("GatherND_2", "GatherND").input[0]
    replace[unsqueeze.name] = _clipped_bin_index(f"{flow}/fixed", bin_index, widths, unsqueeze)
    return replace


def _clipped_bin_index(p: str, bin_index: str, widths: str, unsqueeze: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The nodes that replace a spline's `unsqueeze` of its `bin_index`, clipping the index
    to the bins `widths` has, under the names `p/...`."""
    return [
        helper.make_node("Shape", [widths], [f"{p}/w_shape"], name=f"{p}/w_shape"),
        helper.make_node("Gather", [f"{p}/w_shape", "fixed/bins_axis"], [f"{p}/bins1"], axis=0,
                         name=f"{p}/bins1"),
        helper.make_node("Squeeze", [f"{p}/bins1"], [f"{p}/bins"], name=f"{p}/bins"),
        helper.make_node("Sub", [f"{p}/bins", "fixed/one"], [f"{p}/last_bin"], name=f"{p}/last_bin"),
        helper.make_node("Clip", [bin_index, "fixed/zero", f"{p}/last_bin"], [f"{p}/bin_index"],
                         name=f"{p}/bin_index"),
        helper.make_node("Unsqueeze", [f"{p}/bin_index", *unsqueeze.input[1:]], list(unsqueeze.output),
                         name=unsqueeze.name),
    ]


def _keep_live(nodes: list[onnx.NodeProto], graph: onnx.GraphProto) -> None:
    """Make `nodes` the graph's, less those no output depends on (what only the gathers by
    `NonZero` used)."""
    live = {output.name for output in graph.output}
    kept: list[onnx.NodeProto] = []
    for node in reversed(nodes):
        if any(out in live for out in node.output):
            kept.append(node)
            live.update(name for name in node.input if name)
    del graph.node[:]
    graph.node.extend(reversed(kept))


def _fuse_layer_norms(model: onnx.ModelProto) -> int:
    """Step 3 of the module's docstring; returns how many were fused."""
    graph = model.graph
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    nodes = list(graph.node)  # held, so that each node keeps one wrapper (and its id)
    consumers = _consumers(nodes)

    def only(name: str, op: str) -> onnx.NodeProto | None:
        found = consumers[name]
        return found[0] if len(found) == 1 and found[0].op_type == op else None

    removed: set[int] = set()
    fused: dict[int, onnx.NodeProto] = {}
    for mean in nodes:
        axes = [helper.get_attribute_value(a) for a in mean.attribute if a.name == "axes"]
        if mean.op_type != "ReduceMean" or axes != [[-1]]:
            continue
        x = mean.input[0]
        centred = only(mean.output[0], "Sub")
        if centred is None or list(centred.input) != [x, mean.output[0]]:
            continue
        users = {n.op_type: n for n in consumers[centred.output[0]]}
        if len(consumers[centred.output[0]]) != 2 or set(users) != {"Pow", "Div"}:
            continue
        square, divide = users["Pow"], users["Div"]
        if square.input[1] not in constants or float(constants[square.input[1]]) != 2.0:
            continue
        variance = only(square.output[0], "ReduceMean")
        plus_eps = None if variance is None else only(variance.output[0], "Add")
        root = None if plus_eps is None else only(plus_eps.output[0], "Sqrt")
        scale = only(divide.output[0], "Mul")
        shift = None if scale is None else only(scale.output[0], "Add")
        if (variance is None or plus_eps is None or root is None or scale is None or shift is None
                or only(root.output[0], "Div") is not divide or divide.input[0] != centred.output[0]
                or plus_eps.input[1] not in constants or scale.input[1] not in constants
                or shift.input[1] not in constants):
            continue
        removed.update(id(n) for n in (mean, centred, square, variance, plus_eps, root, divide, scale))
        fused[id(shift)] = helper.make_node(
            "LayerNormalization", [x, scale.input[1], shift.input[1]], list(shift.output),
            name=f"{shift.name}/fused", axis=-1, epsilon=float(constants[plus_eps.input[1]]),
        )
    kept = [fused.get(id(n), n) for n in nodes if id(n) not in removed]
    del graph.node[:]
    graph.node.extend(kept)
    if fused:
        for opset in model.opset_import:
            if opset.domain in ("", "ai.onnx"):
                opset.version = max(opset.version, 17)
    return len(fused)


def _session(model: str | bytes) -> ort.InferenceSession:
    """A quiet CPU session of a graph file's path or a serialized graph, for the checks."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _check(dynamic: ort.InferenceSession, fixed: onnx.ModelProto, length: int) -> None:
    """Raise unless `fixed` gives the `dynamic` prior's durations and (nearly) its z_p,
    noise scales 0, for a probe of `length` ids and one of `length` - 7."""
    names = [o.name for o in dynamic.get_outputs()]
    if tuple(names) != _PRIOR_OUTPUTS:
        raise ValueError(f"unexpected prior outputs {names}")
    speaker = 0 if "sid" in [i.name for i in dynamic.get_inputs()] else None
    copy = _session(fixed.SerializeToString())
    rng = np.random.default_rng(length)
    for n in sorted({length, max(1, length - 7)}):
        ids = rng.integers(1, 60, size=n).astype(np.int64)
        ids[0] = 1  # BOS
        want = dynamic.run(None, prior_feeds([ids], n, (0.0, 1.0, 0.0), speaker))
        got = copy.run(None, prior_feeds([ids], length, (0.0, 1.0, 0.0), speaker))
        if not np.array_equal(want[3].reshape(-1)[:n], got[3].reshape(-1)[:n]) or want[0].shape != got[0].shape:
            raise ValueError(f"durations differ from the dynamic graph's at {n} ids")
        diff = float(np.abs(want[0] - got[0]).max())
        if diff > MAX_PRIOR_DIFF:
            raise ValueError(f"z_p differs from the dynamic graph's by {diff:.3g} at {n} ids")

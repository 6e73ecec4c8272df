"""Planning with the TensorRT parser as oracle, optionally in a child process: the parser is
native code, and a crash on an untrusted model must not take the caller down with it.

Every model trt_backend plans is loaded here (:func:`load_normalized`), normalised within the IR version
the installed ONNX Runtime accepts; :func:`plan_for` is what a Session does to plan a model."""
from __future__ import annotations

import functools
import logging
import numbers
import os
import pickle
import threading
import time
from dataclasses import replace
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from partitioner import (
    Model,
    PartitionOptions,
    Plan,
    TrtBackendError,
    load_model,
    plan_model,
)
from partitioner.capability import CapabilityOracle, Piece, QueryResult, Verdict
from partitioner.cost import BoundaryCost, dim_names, named_dim_sizes, si_bytes
from partitioner.errors import OptionsError
from partitioner.model import (
    FILE_HANDED_FIXES,
    FIX_INPUT_DIMS,
    ModelSource,
    learn_types,
    serialize,
    shapes_at,
    untie_contradicted_dims,
)
from partitioner.plan import assess_model, build_plan, plan_target, validate_options
from partitioner.qdq import rewrite_qdq
from plugins import default_registry
from trt_backend._lazy import lazy_module
from trt_backend._progress import progress
from trt_backend.errors import ParserCrashError, ProfileError, TensorRTUnavailableError
from trt_backend.ort.probe import ProbeShapes, learn_unknown_types, opt_shapes, probe_key
from trt_backend.ort.sessions import max_ir_version
from trt_backend.tensorrt import early_parse
from trt_backend.tensorrt.flavor import load_flavor
from trt_backend.tensorrt.oracle import ParserOracle

log = logging.getLogger(__name__)
# The profiles' rule for input shapes, read where shapes are given (inspect of a model without them loads none).
_profiles = lazy_module("trt_backend.profiles")
_given = lazy_module("trt_backend.profiles.given")


_oracle_lock = threading.Lock()  # one parser/builder per flavor, shared by every caller: not re-entrant


@functools.lru_cache(maxsize=4)
def parser_oracle(flavor: str) -> ParserOracle:
    """The process's parser oracle for ``flavor``, made once; planners use it through
    :func:`plan_with_parser`, which takes the lock its parser and builder need."""
    return ParserOracle(load_flavor(flavor))


def with_shipped_plugins(options: PartitionOptions | None = None) -> PartitionOptions:
    """``options`` (default: the defaults) as every door of trt_backend plans with them: where
    they leave ``plugins`` unset (None), every plugin trt_backend ships is offered what TensorRT's
    parser rejects; ``plugins=()`` offers none. An op type in ``plugin_ops`` no shipped plugin
    covers is an OptionsError here."""
    options = options if options is not None else PartitionOptions()
    if not isinstance(options, PartitionOptions):
        raise OptionsError(f"partition options must be a PartitionOptions, got {type(options).__name__}")
    if options.plugins is not None:
        return options
    registry = default_registry()
    if options.plugin_ops:
        registry.select(options.plugin_ops)  # (only to name an op type no plugin covers)
    return replace(options, plugins=registry.claims())


def checked_shapes(shapes: Any) -> ProbeShapes:
    """``shapes`` as the planner takes them: input shapes to learn unknown types at, a list of
    ``{input name: shape}`` (one such dict alone is taken as a list of one); OptionsError naming
    what is wrong otherwise."""
    if shapes is None:
        return ()
    runs = [shapes] if isinstance(shapes, Mapping) else shapes
    if isinstance(runs, (str, bytes)) or not isinstance(runs, (list, tuple)):
        raise OptionsError("shapes must be a dict of input name -> shape, or a list of them, got "
                           f"{type(shapes).__name__}")
    for run in runs:
        if not isinstance(run, Mapping):
            raise OptionsError(f"shapes must be a dict of input name -> shape, or a list of them; got an entry of "
                               f"type {type(run).__name__}")
        for name, shape in run.items():
            if isinstance(shape, (str, bytes)) or not isinstance(shape, (list, tuple)) or not all(
                    isinstance(d, numbers.Integral) and not isinstance(d, bool) and int(d) >= 0 for d in shape):
                raise OptionsError(f"shape of '{name}' must be a list of whole numbers >= 0, got {shape!r}")
    return list(runs)


def load_normalized(source: ModelSource | Model, shapes: ProbeShapes = (), qdq_rewrite: str = "exact", *,
                    base_dir: str | None = None, learned: Mapping[str, Mapping[str, onnx.TypeProto]] | None = None
                    ) -> Model:
    """``source`` loaded and normalised for trt_backend: IR versions within what the installed
    ONNX Runtime accepts (the partitioner is handed the cap; it has no runtime of its own), and
    explicit quantization TensorRT refuses only for its form rewritten into nodes it takes
    (:mod:`partitioner.qdq` in the mode ``qdq_rewrite``, recorded in ``Model.rewritten``), and
    dim names the inputs share that ``shapes`` contradict dropped
    (:func:`partitioner.model.untie_contradicted_dims`), and the types shape inference
    left unknown learned by running the model where ONNX Runtime is installed
    (:mod:`trt_backend.ort.probe`), at ``shapes`` (the model-input shapes of the profiles it
    will be built for; none: small made-up dims). A Model already loaded is returned as it is,
    its learned types learned again where they were learned at other shapes. ``base_dir``: the
    folder the model's external data locations are relative to (default: the model file's own).
    ``learned``: the types a probe run at ``shapes`` learned before, by how each was learned (what
    :func:`learned_types` returns of that model): given instead of running the model again."""
    if isinstance(source, Model):
        if shapes and source.learned and probe_key(shapes) != source.probe_shapes and max_ir_version() is not None \
                and _runnable_at(source, shapes):
            learn_unknown_types(source, shapes)
        return source
    if isinstance(source, (str, os.PathLike)) and os.path.isfile(source):
        progress("loading %s (%s)", os.fspath(source), si_bytes(os.path.getsize(source)))
    model = load_model(source, base_dir=base_dir, max_ir_version=max_ir_version())
    if shapes:
        untie_contradicted_dims(model, shapes)
    rewrite_qdq(model, qdq_rewrite)
    if learned is not None:
        for how, types in sorted(learned.items()):
            if any(model.learned.get(name) != how for name in types):  # (declared ones it has already)
                learn_types(model, types, how)
        model.probe_shapes = probe_key(shapes)
    elif max_ir_version() is not None and _runnable_at(model, shapes):  # (None: no onnxruntime here to run it)
        learn_unknown_types(model, shapes)
    return model


def _runnable_at(model: Model, shapes: ProbeShapes) -> bool:
    """Whether ``shapes`` agree with the ranks and fixed dims the model's inputs declare, by the
    profiles' own rule (:func:`~trt_backend.profiles.given.check_against`): a probe run at shapes
    that do not fails with ONNX Runtime's own words (a warning before the profile's error, which
    names the dim, as the caller's profile check then does)."""
    if not shapes:
        return True
    args = {a.name: a for a in _profiles.graph_inputs(model.proto.graph)}
    try:
        for run in shapes:
            for name, shape in run.items():
                if name in args:
                    fixed = tuple(int(d) for d in shape)
                    _given.check_against(args[name], _profiles.TensorProfile(fixed, fixed, fixed), f"input '{name}'")
    except ProfileError:
        return False
    return True


def as_written(source: ModelSource | Model | Plan, loaded: Model, qdq_rewrite: str,
               shapes: ProbeShapes = ()) -> Model | None:
    """``source`` as its author wrote it (Q/DQ rewritten only where ONNX's numerics are kept to the
    bit), where ``loaded`` (``source`` loaded with ``qdq_rewrite``) re-quantized Q/DQ to int8: what
    comparisons measure such a model against. None where nothing was re-quantized, or where
    ``source`` came loaded (there is nothing to load again)."""
    if qdq_rewrite == "exact" or not loaded.rewritten or isinstance(source, (Model, Plan)):
        return None
    return load_normalized(source, shapes, "exact")


def learned_types(model: Model) -> dict[str, dict[str, onnx.TypeProto]]:
    """The types ``model`` was given beyond shape inference (by a probe run, or by its own
    value_info alone), by how each was learned: what :func:`load_normalized` takes as ``learned``."""
    out: dict[str, dict[str, onnx.TypeProto]] = {}
    graph = model.proto.graph  # (a learned graph output's type is on the output, not in value_info)
    types = {vi.name: vi.type for vi in list(graph.output) + list(graph.value_info)}
    for name, how in model.learned.items():
        if name in types:
            out.setdefault(how, {})[name] = types[name]
    return out


def _qdq_rewrite(options: Any) -> str:
    """``options.qdq_rewrite``, once ``options`` is known to be a PartitionOptions."""
    if not isinstance(options, PartitionOptions):
        raise OptionsError(f"partition options must be a PartitionOptions, got {type(options).__name__}")
    return options.qdq_rewrite


def sized_cost(cost: BoundaryCost | None, model: Model, shapes: ProbeShapes) -> BoundaryCost:
    """``cost`` (None: the default constants) with the named dims of the model's inputs sized at
    the shapes it runs at, where ``shapes`` are given and ``cost`` sizes none otherwise itself: the
    first profile's opt shapes (:func:`~trt_backend.ort.probe.opt_shapes`), and its tensors' dims
    there (:func:`with_tensor_dims`)."""
    cost = cost if cost is not None else BoundaryCost()
    if not shapes:
        return cost
    opt = opt_shapes(shapes)[0]
    if cost.dims and cost.dims != named_dim_sizes(model.index, opt):
        return cost  # (sizes of the caller's own)
    return with_tensor_dims(cost.at_shapes(model.index, opt), model, opt)


def with_tensor_dims(cost: BoundaryCost, model: Model, shapes: Mapping[str, Sequence[int]]) -> BoundaryCost:
    """``cost`` (sized at ``shapes``, see :meth:`BoundaryCost.at_shapes`) with the dims shape
    inference gives the model's tensors at ``shapes`` (:func:`partitioner.model.shapes_at`), where
    some tensor's type leaves a dim the named sizes do not fix (a detector's feature maps, whose
    sizes follow its image's: each counted as ``unknown_dim`` otherwise, NudeNet's boundaries
    estimated at 1.37 GB for 3.6 MB)."""
    sizes, index = cost.sizes, model.index
    for name in index.types:
        dims = index.dims_of(name)
        if dims is None or min(dims, default=0) >= 0:
            continue
        names = dim_names(index, name)
        if any(d == -2 or names is None or (names[k] or "") not in sizes for k, d in enumerate(dims) if d < 0):
            break
    else:
        return cost
    return replace(cost, tensor_dims=shapes_at(model, shapes))


def priced(plan: Plan, cost: BoundaryCost | None, shapes: ProbeShapes) -> Plan:
    """``plan``, its boundaries priced as planning with the boundary cost ``cost`` at ``shapes``
    prices them (:func:`sized_cost`; where ``cost`` is None, the partition priced none and its
    report prices with the defaults so sized): ``plan.cost``, which its report uses."""
    if plan.model is not None:
        plan.cost = sized_cost(cost, plan.model, shapes)
    return plan


def sized_options(options: PartitionOptions, model: Model, shapes: ProbeShapes) -> PartitionOptions:
    """``options`` with their boundary cost sized at ``shapes`` (see :func:`sized_cost`)."""
    if options.boundary_cost is None:
        return options
    cost = sized_cost(options.boundary_cost, model, shapes)
    return options if cost is options.boundary_cost else replace(options, boundary_cost=cost)


def plan_with_parser(model: ModelSource | Model, flavor: str, options: PartitionOptions,
                     shapes: ProbeShapes = ()) -> Plan:
    """``plan_model`` with the shared parser oracle of ``flavor``, one caller at a time."""
    options = with_shipped_plugins(options)
    loaded = load_normalized(model, shapes, _qdq_rewrite(options))
    options = sized_options(options, loaded, shapes)
    oracle = _oracle_for(loaded, flavor)
    progress("planning %s: %d node(s)", loaded.source, len(loaded.proto.graph.node))
    with _oracle_lock:
        plan = plan_model(loaded, oracle, options)
    progress("planned %s: %d segment(s) (%d TensorRT) after %d parser call(s)", loaded.source, len(plan.segments),
             len(plan.tensorrt_segments()), plan.oracle_calls)
    return plan


def _oracle_for(model: Model, flavor: str) -> CapabilityOracle:
    """The parser oracle of ``flavor`` that plans ``model``: the shared one, unless the CLI asked
    TensorRT's parser about the model's file early (:mod:`trt_backend.tensorrt.early_parse`; a
    build's head start asks the same question before it builds, :mod:`trt_backend.engines.head_start`) and
    that answer holds for this model: the parser took the file whole, and loading changed nothing
    the parser reads (no fix but of node names, the IR version, weights listed as inputs too,
    unknown dims the parser reads as dynamic too or output shapes, no Q/DQ rewrite) in a file
    unchanged since, or only the inputs' dims the child asked about as loading leaves them too
    (FIX_INPUT_DIMS, see :func:`~trt_backend.tensorrt.questions.asked_of`). The oracle then
    answers a question about the whole model with it (:class:`_FileAnswered`)."""
    early = early_parse.take(model.source, flavor)
    if early is None:
        return parser_oracle(flavor)
    if model.rewritten or not model.fix_kinds <= FILE_HANDED_FIXES:
        early.discard()
        return parser_oracle(flavor)
    answer = early.answer()
    if answer is None or not answer["supported"] or not early.unchanged(answer):
        return parser_oracle(flavor)
    if bool(answer.get("untied")) != (FIX_INPUT_DIMS in model.fix_kinds):  # (asked of other input dims)
        early.discard()
        return parser_oracle(flavor)
    return _FileAnswered(answer, model, flavor)


class _FileAnswered:
    """The parser oracle of ``flavor`` for ``model``, whose first question, where it holds every
    node of ``model`` in order with its inputs and outputs, is answered by ``answer``: the
    parser's, about the model's file as it is (see :func:`_oracle_for`). Any other question goes
    to the shared oracle."""

    takes_stand_ins = True

    def __init__(self, answer: dict[str, Any], model: Model, flavor: str) -> None:
        self._answer: dict[str, Any] | None = answer
        self._model, self._flavor = model, flavor
        self.target = str(answer["target"])
        self.weights_dir: str | None = None

    def query(self, model: onnx.ModelProto) -> QueryResult:
        answer, self._answer = self._answer, None
        if answer is not None and _whole(model.graph, self._model.proto.graph):
            log.debug("the TensorRT parser's answer about %s came from its early parse (asked of the file as it is%s)",
                      self._model.source, ", its inputs' unknown dims as loading leaves them" if answer.get("untied")
                      else "")
            return QueryResult(True, tuple(Piece(tuple(nodes), bool(verified)) for nodes, verified in answer["pieces"]))
        oracle = parser_oracle(self._flavor)
        oracle.weights_dir = self.weights_dir
        return oracle.query(model)


def _whole(question: onnx.GraphProto, graph: onnx.GraphProto) -> bool:
    """Whether ``question`` holds the nodes of ``graph`` in the same order, with its inputs and
    outputs (in any order: a question lists the outputs in the order their nodes write them, and
    what the parser takes does not depend on it; GPT-2 lists its logits before its cache)."""
    return (len(question.node) == len(graph.node)
            and all(a.op_type == b.op_type and a.domain == b.domain and a.input == b.input and a.output == b.output
                    for a, b in zip(question.node, graph.node))
            and sorted(v.name for v in question.input) == sorted(v.name for v in graph.input)
            and sorted(v.name for v in question.output) == sorted(v.name for v in graph.output))


def plan_for(source: ModelSource | Model, options: PartitionOptions | None = None, *, flavor: str = "auto",
             oracle: CapabilityOracle | None = None, isolate: bool = False, shapes: ProbeShapes = ()) -> Plan:
    """Plan ``source`` as a Session does: with ``oracle`` when given, else the TensorRT parser of
    ``flavor`` (in a child process with ``isolate``). ``flavor="none"`` puts every node on ONNX
    Runtime; so does ``"auto"`` when no TensorRT is importable (with a warning), where a named
    flavor that is missing is a TensorRTUnavailableError. ``shapes``: the model-input shapes
    of the profiles (see :func:`load_normalized`). ``options.plugins`` left unset: the shipped
    plugins (:func:`with_shipped_plugins`)."""
    options = with_shipped_plugins(options)
    shapes = checked_shapes(shapes)
    if oracle is not None:
        loaded = load_normalized(source, shapes, _qdq_rewrite(options))
        return plan_model(loaded, oracle, sized_options(options, loaded, shapes))
    if flavor != "none":
        if isolate:
            return make_plan(source, options, flavor=flavor, isolate=True, shapes=shapes)
        try:  # Only a missing TensorRT falls back; planning errors propagate.
            load_flavor(flavor)  # (its parser is made where a question needs it: see _oracle_for)
        except TensorRTUnavailableError as e:
            if flavor != "auto":
                raise
            log.warning("no TensorRT parser to decide capability (%s); every node runs on ONNX Runtime", e)
        else:
            return plan_with_parser(source, flavor, options, shapes)
    loaded = load_normalized(source, shapes, _qdq_rewrite(options))
    reason = "flavor 'none' chosen" if flavor == "none" else "no TensorRT flavor importable"
    return build_plan(loaded, [Verdict("onnxruntime", reason)] * len(loaded.proto.graph.node), None)


def make_plan(source: ModelSource | Model, options: PartitionOptions | None = None, *, flavor: str = "auto",
              isolate: bool = False, shapes: ProbeShapes = ()) -> Plan:
    """Load and plan ``source`` with the parser of ``flavor`` (``auto``: tensorrt, else tensorrt_rtx).

    With ``isolate`` the capability queries run in a child process and only the plan comes back;
    a native crash there becomes a :class:`ParserCrashError`."""
    options = with_shipped_plugins(options)
    shapes = checked_shapes(shapes)
    start = time.perf_counter()
    model = load_normalized(source, shapes, _qdq_rewrite(options))
    cost = options.boundary_cost
    options = sized_options(options, model, shapes)
    if not isolate:
        plan = plan_with_parser(model, flavor, options)
        plan.seconds = time.perf_counter() - start
        return priced(plan, cost, shapes)
    validate_options(model, options)
    try:  # plugins travel to the child by pickle (registry records hold module-level functions)
        pickle.dumps(options)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise TrtBackendError(f"these plugins cannot be sent to an isolated planner ({e}); "
                              "plan without isolation") from None
    progress("planning %s: %d node(s), the TensorRT parser in a child process", model.source,
             len(model.proto.graph.node))
    result, how = _run_isolated((serialize(model.proto, model.source), model.source, flavor, options,
                                 model.max_ir_version, model.base_dir))
    if "error" in result:
        raise result["error"]
    if "verdicts" not in result:
        raise ParserCrashError(f"{model.source}: the TensorRT parser crashed ({how}) while checking capability")
    verdicts = [Verdict(b, r) for b, r in result["verdicts"]]
    plan = build_plan(model, verdicts, result["target"], options.min_segment_size, target=result["plan_target"],
                      cost=options.boundary_cost)
    plan.oracle_calls = result["oracle_calls"]
    plan.seconds = time.perf_counter() - start
    return priced(plan, cost, shapes)


# The isolated planner: a fresh interpreter (not multiprocessing, whose spawned children import the
# caller's main module again, which without an ``if __name__ == "__main__"`` guard fails in the
# child and left the caller waiting forever) reads its arguments from stdin, the caller's import
# path first so that plugins defined anywhere unpickle, and writes its answer to a file.
_CHILD = "import trt_backend.planning as p; p.isolated_child()"


def _run_isolated(args: tuple[Any, ...]) -> tuple[dict[str, Any], str]:
    """(the child's answer, how it ended in words) for :func:`isolated_child` run on ``args``."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="trt-backend-isolated-") as tmp:
        answer = os.path.join(tmp, "answer.pickle")
        proc = subprocess.run([sys.executable, "-c", _CHILD, answer],
                              input=pickle.dumps(list(sys.path)) + pickle.dumps(args), capture_output=True)
        code = proc.returncode
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        if proc.stderr:
            log.debug("isolated planner: %s", proc.stderr.decode(errors="replace").strip())
        try:
            with open(answer, "rb") as f:
                return pickle.load(f), how
        except (OSError, EOFError, pickle.UnpicklingError):
            return {}, how


def isolated_child() -> None:
    """The child of :func:`make_plan` with ``isolate``: the caller's import path, then (model
    bytes, name, flavor, options, IR cap, weights folder) on stdin; verdicts, or our error, pickled
    to the file named by its one argument."""
    import sys

    stdin = sys.stdin.buffer
    sys.path[:0] = [p for p in pickle.load(stdin) if p not in sys.path]
    data, name, flavor, options, ir_cap, base_dir = pickle.load(stdin)
    try:
        oracle = ParserOracle(load_flavor(flavor))
        verdicts, stats = assess_model(load_model(data, base_dir=base_dir, max_ir_version=ir_cap), oracle, options)
        result: dict[str, Any] = {"verdicts": [(v.backend, v.reason) for v in verdicts], "target": oracle.target,
                                  "plan_target": plan_target(options, oracle), "oracle_calls": stats.oracle_calls}
    except TrtBackendError as e:
        result = {"error": type(e)(str(e).replace("<bytes>", name))}
    with open(sys.argv[1], "wb") as f:
        pickle.dump(result, f)
    sys.stdout.flush()
    os._exit(0)

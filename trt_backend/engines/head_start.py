"""An engine built from the model file as it is, started before the model is loaded and planned.

When a model's plan turns out to be one TensorRT segment over the whole model as its file holds
it, the engine the compile path builds for it is the one TensorRT builds from the model's file
itself.
A build can therefore hand the file to TensorRT first, and build while the model is loaded, checked
and planned in Python: the TensorRT parser and builder release the GIL, so the two run side by
side. The ``build`` command starts one from its command line before it loads onnx, numpy or the
planner (:func:`launch`); ``trt_backend.build`` starts one for a model file once its options are
known. It asks TensorRT's parser the planner's question about the file as it is
(``supports_model_v2``, whose network is then built) and leaves the answer to the planner
(:func:`trt_backend.tensorrt.early_parse.offer`), which takes it as it takes an early parse's: the
planner does not parse the model again.

Nothing is decided here. The compile path plans the model as always, and its engine build takes
the head start's engine (:func:`claim`) only where what it would build is exactly what was built:
the plan is one TensorRT segment holding every node of the model's file, which loading changed in
nothing TensorRT's parser reads otherwise (node names, the IR version and weights also listed as
inputs aside: the compile path builds such a segment from the file too, see
:func:`trt_backend.engines.builder.file_as_is`; input dims loading takes as unknown where the parser
would read them otherwise are handed to it as loading leaves them, here and there alike, see
:func:`trt_backend.tensorrt.questions.asked_of`), its inputs and outputs the file's own, built as
it is (fp32 or tf32, no plugin, no quantization) with the same build options and TensorRT
flavor, and the profiles it would give TensorRT's dynamic inputs the ones the head start gave.
Anything else, or a head start that failed, and the compile path builds as it would have without
one, and the head start's engine is removed once its build ends (:func:`discard`). A head start
takes model files of at most :data:`MAX_BYTES` with the external data files they name (and a
quarter of the memory available), built in fp32 or tf32."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from trt_backend._files import new_folder, write_hashed
from trt_backend._forked import Forked, Send
from trt_backend._lazy import lazy_module
from trt_backend.ort.sizes import WHOLE_FILE_MAX_BYTES, room_beside
from trt_backend.tensorrt import early_parse

if TYPE_CHECKING:
    from trt_backend.tensorrt.flavor import Flavor

log = logging.getLogger(__name__)

# Loaded only where asked: the memory module imports numpy, and profiles other than
# (min, opt, max) shapes are read by trt_backend.profiles (the Python door, where those are loaded).
_memory = lazy_module("trt_backend.engines.memory")
_profiles = lazy_module("trt_backend.profiles")
# Loaded by the build itself, in the child or thread where it runs: a head start begins before
# the command loads them (the build's way to TensorRT, the file's reader; the build options
# are read in this process too, once the child's account comes).
_config = lazy_module("trt_backend.engines.config")
_options = lazy_module("trt_backend.engines.options")
_flavor = lazy_module("trt_backend.tensorrt.flavor")
_questions = lazy_module("trt_backend.tensorrt.questions")
_wire = lazy_module("partitioner.wire")

ProfileSettings = list[dict[str, tuple[Any, ...]]]  # per profile: dynamic input -> (min, opt, max, values)


class HeadStart:
    """One engine build from the model file at ``path`` (see the module's description).
    ``profiles``: as the build is given them (input name -> (min, opt, max) shapes, or a
    TensorProfile); ``options``: a BuildOptions, or None for the defaults (made in the thread)."""

    def __init__(self, path: str, flavor: str, profiles: Sequence[Mapping[str, Any]], options: Any,
                 scratch: str) -> None:
        self.path = os.path.abspath(path)
        self.flavor_name = flavor
        self.profiles = [dict(p) for p in profiles]
        self.options = options
        self.scratch = scratch
        self.flavor: Flavor | None = None
        self.target: str | None = None  # the flavor's target, once imported
        self.settings: ProfileSettings | None = None
        self.inputs: tuple[str, ...] = ()
        self.outputs: tuple[str, ...] = ()
        self.dynamic: list[tuple[str, tuple[int, ...], bool]] = []  # inputs a profile covers
        self.engine: tuple[str, str, int] | None = None  # its file, SHA-256 and size, once built
        self.layers = 0
        self.seconds = 0.0
        self.started: float | None = None  # time.perf_counter() when it began
        self.problem: str | None = None  # why there is no engine
        self.crash: str | None = None  # how TensorRT's builder crashed on the file (in a child), where it did
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name="head-start-build", daemon=True)
        self._child: Forked | None = None  # the child process building it, where one was forked
        self._collected = False
        self._send: Send | None = None  # in the child: its messages to this process
        self._answered = threading.Event()  # (a thread's) the parser's answer, or its failure, is in
        self._answer: dict[str, Any] | None = None  # the parser's answer about the file (early_parse's form)

    def begin(self) -> None:
        """Start the build: in a forked child where this process may fork one (the ``build``
        command at its start: the child builds on another CPU without waiting for the GIL while
        this process imports and plans, see :mod:`trt_backend._forked`) for a file of at most
        :data:`FORK_MAX_BYTES`, else in a thread."""
        self.started = time.perf_counter()
        if os.path.getsize(self.path) <= FORK_MAX_BYTES:
            self._child = Forked.start(self._in_child, f"head start of {self.path}")
        if self._child is not None:
            return
        previous = threading.stack_size(STACK_BYTES)  # (for the threads made meanwhile: this one)
        try:
            self._thread.start()
        except RuntimeError:  # (no thread to be had: the compile path builds as it would without one)
            self.problem = "no thread to be had for it"
            self._answered.set()
        finally:
            threading.stack_size(previous)

    def _in_child(self, send: Send) -> dict[str, Any]:
        """The child's work: the parser's answer about the file as its first message, then the
        build, and what the parent needs of it (see :meth:`_collect`) as its last."""
        self._send = send
        self._run()
        return {"problem": self.problem, "target": self.target, "inputs": self.inputs, "outputs": self.outputs,
                "dynamic": self.dynamic, "settings": self.settings, "engine": self.engine, "layers": self.layers,
                "seconds": self.seconds}

    def _collect(self, done: dict[str, Any] | None) -> None:
        """The child's account of its build (JSON: lists where the build made tuples)."""
        if done is None or "failed" in done:
            self.problem = done["failed"] if done is not None else "its process ended without an engine"
            return
        self.problem, self.target, self.layers, self.seconds = done["problem"], done["target"], done["layers"], \
            done["seconds"]
        self.inputs, self.outputs = tuple(done["inputs"]), tuple(done["outputs"])
        self.dynamic = [(str(name), tuple(shape), bool(shape_tensor)) for name, shape, shape_tensor in done["dynamic"]]
        self.settings = [{name: _tuples(v) for name, v in profile.items()} for profile in done["settings"]] \
            if done["settings"] is not None else None
        self.engine = tuple(done["engine"]) if done["engine"] is not None else None  # type: ignore[assignment]
        if self.options is None:
            self.options = _options.BuildOptions()  # (as the child made them)

    def _run(self) -> None:
        start = time.perf_counter()
        try:
            self._build()
        except Exception as e:  # noqa: BLE001 - a head start that fails leaves the build to the compile path
            self.problem = f"{type(e).__name__}: {e}"
        finally:
            self._answered.set()  # (none came: the planner asks TensorRT itself)
        self.seconds = time.perf_counter() - start
        if self.problem is not None:
            log.debug("head start of %s: %s", self.path, self.problem)

    def _build(self) -> None:
        flavor = _flavor.load_flavor(self.flavor_name)
        self.flavor, self.target = flavor, flavor.target
        trt = flavor.module
        with open(self.path, "rb") as f:
            info = os.fstat(f.fileno())
            data, untied = _questions.asked_of(f.read())
        external = _wire.external_bytes(data, os.path.dirname(self.path))
        if external is None:
            self.problem = "the model's external data files cannot be told (or its file is not read here)"
            return
        if external and not room_beside(len(data) + external, MAX_BYTES):
            self.problem = f"{len(data) + external} bytes with its external data: more than a head start takes"
            return
        nodes = _wire.main_graph_nodes(data)
        if nodes is None or nodes > MAX_NODES:
            self.problem = f"{nodes} nodes: more than a head start takes ({MAX_NODES})"
            return
        # One thread in TensorRT at a time (see tensorrt_lock), but for the build itself where it
        # cannot wait for the GIL: with this native logger, built into memory (a Python stream
        # writer or progress monitor would call into Python at every step), and before this process
        # gave TensorRT a Python logger (its first logger is TensorRT's global one). The planner's
        # parser questions then go on beside it.
        with _flavor.tensorrt_lock:
            # (all but internal errors kept to itself; a failure is said by the compile path's own build)
            logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
            builder = _flavor.create_builder(flavor, logger)
            network = builder.create_network(_flavor.network_flags(flavor))
            config: Any = None
            parser: Any = None
            try:
                # (the planner's question about the file as it is, whose answer it takes: the network
                # holds the model as parse would make it where the parser takes every node; with its
                # inputs' unknown dims as loading leaves them, where the parser would read them
                # otherwise, as the compile path hands TensorRT the file, see builder.file_as_is)
                asked, parser = _questions.supports_into(flavor, network, logger, data, self.path)
                del data
                # (with this TensorRT's description: the parent then need not import it, see adopt_flavor)
                self._give_answer({**early_parse.answer_of(flavor.target, asked, info, untied),
                                   "flavor": _flavor.described(flavor)})
                parsed = asked[0]
                if not parsed or self._cancelled.is_set():
                    self.problem = "TensorRT's parser did not take the file as it is" if not parsed else "cancelled"
                    del config, parser, network, builder, logger
                    return
                self.inputs = tuple(network.get_input(i).name for i in range(network.num_inputs))
                self.outputs = tuple(network.get_output(i).name for i in range(network.num_outputs))
                self.dynamic = _config.dynamic_inputs(network)
                options = self.options if self.options is not None else _options.BuildOptions()
                self.options = options
                ranges = [{n: _shape_range(v, f"profile {k} for '{n}'") for n, v in p.items()}
                          for k, p in enumerate(self.profiles)]
                config = builder.create_builder_config()
                _config.configure(config, options, flavor)
                self.settings = _config.add_profiles(builder, config, network, ranges)
            except BaseException:
                del config, parser, network, builder, logger
                raise
        try:
            lock = _flavor.tensorrt_lock if _flavor.python_logger_made() else contextlib.nullcontext()
            with lock, _flavor.native_stderr():
                # (Myelin prints its internal errors to stderr; the compile path reports a failure)
                serialized = builder.build_serialized_network(network, config)
            with _flavor.tensorrt_lock:
                if serialized is None:
                    self.problem = "TensorRT's builder made no engine"
                    return
                path = os.path.join(self.scratch, "engine")
                engine = (path, write_hashed(path, serialized), serialized.nbytes)
                del serialized
                self.engine, self.layers = engine, int(network.num_layers)
        finally:
            with _flavor.tensorrt_lock:
                del config, parser, network, builder, logger

    def _give_answer(self, answer: dict[str, Any]) -> None:
        """Hand the parser's answer about the file to the planner: to the parent, where this is
        a child (its first message), else for :meth:`answer`."""
        if self._send is not None:
            self._send({"answer": answer})
        self._answer = answer
        self._answered.set()

    def answer(self) -> dict[str, Any] | None:
        """The parser's answer about the file as it is (see
        :meth:`trt_backend.tensorrt.early_parse.EarlyParse.answer`), waiting for the parse (not the
        build); None where the head start ended without one."""
        if self._child is None:
            self._answered.wait()
            return self._answer
        first = self._child.message(0)
        return first.get("answer") if first is not None else None

    def wait(self) -> None:
        if self._child is None:
            if self._thread.ident is not None:  # (a Ctrl-C as it started may have stopped it starting)
                self._thread.join()
        elif not self._collected:
            self._collected = True
            first = self._child.message(0)
            self._collect(self._child.message(1) if first is not None and "answer" in first else first)
            answer = first.get("answer") if first is not None else None
            died = self._child.died_of() if self.engine is None else None
            if died is not None and isinstance(answer, dict) and answer.get("supported"):
                # (after the parser took the file whole: in its build)
                self.crash = ("TensorRT's builder was killed (SIGKILL, as the kernel ends a process when memory runs "
                              "out) building the file in a child process" if died == signal.SIGKILL else
                              f"TensorRT's builder crashed ({_signal_name(died)}) building the file in a child process")
                self.problem = self.crash
            log.debug("head start of %s: built in child process %d (%s)", self.path, self._child.pid,
                      self.problem or "an engine")

    def cancel(self) -> None:
        self._cancelled.set()
        if self._child is not None:
            self._child.kill()  # (a build in a process can be stopped)

    def fits(self, model: Any, segment: Any, segment_model: Any, ranges: Sequence[Mapping[str, Any]],
             options: Any, flavor: Flavor, model_file: str | None) -> str | None:
        """Why the engine of ``segment`` (of the plan of ``model``; built from ``segment_model`` at
        ``ranges`` with ``options``, with no plugin rewrite or quantization) is not this head
        start's, or None when it is. ``model_file``: the file the segment is the whole of (see
        :func:`trt_backend.engines.builder.file_as_is`). Waits for the build."""
        if model.source is None or not isinstance(model.source, str) or os.path.abspath(model.source) != self.path:
            return "another model"
        if getattr(options, "precision", None) not in ("fp32", "tf32"):
            return "the segment is transformed before it is built"
        if len(segment.nodes) != len(model.proto.graph.node) or model_file != self.path:
            return "the segment is not the whole model as its file holds it"
        answer = self.answer()
        if answer is None or list(answer.get("file", ())) != list(model.file_status):
            return "the file is not the one loaded"
        self.wait()
        if self.engine is None or self.target is None or self.settings is None:
            return self.problem or "no engine"
        if flavor.target != self.target:
            return "another TensorRT"
        if options != self.options:
            return "other build options"
        if (tuple(v.name for v in segment_model.graph.input) != self.inputs
                or tuple(v.name for v in segment_model.graph.output) != self.outputs):
            return "other inputs or outputs"
        try:
            settings = _config.profile_settings(self.dynamic, ranges)
        except Exception as e:  # noqa: BLE001 - the compile path's own build says it
            return f"profiles: {e}"
        if settings != self.settings:
            return "other profiles"
        return None

    def take(self, engine_path: str | None) -> Any:
        """The engine: moved to ``engine_path`` (an EngineFile), or its bytes without one."""
        assert self.engine is not None
        path, sha256, nbytes = self.engine
        self.engine = None
        try:
            if engine_path is None:
                with open(path, "rb") as f:
                    return f.read()
            shutil.move(path, engine_path)
            return _memory.EngineFile(engine_path, sha256, nbytes)
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def remove(self) -> None:
        """Cancel, wait for the thread, remove the scratch folder."""
        self.cancel()
        self.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


# The largest model file a head start takes: where the plan is not one segment over the whole
# model, its build runs beside the compile path's own builds until it ends (TensorRT builds cannot
# be stopped without a progress monitor, which would slow them, see HeadStart._build).
MAX_BYTES = WHOLE_FILE_MAX_BYTES
# The most nodes a head start's model may have: TensorRT's parser recurses along the graph, and a
# chain of 20,000 nodes overflowed an 8 MiB thread stack (a native crash), which the thread's
# larger stack also only pushes further out. Planning such a model takes long enough that the
# head start would save little.
MAX_NODES = 5000
# The largest model file whose head start is forked (above it, a thread): measured on a 2-CPU
# machine, 5 or 6 alternating builds each, a forked head start took BERT-small (2 MiB) from 0.92 s to
# 0.87 s and MobileNet-v3 (10 MiB) from 0.98 s to 0.89 s, but ResNet-50 (97 MiB) from 1.76 s to
# 1.91 s: its build in the child ran 0.15 s slower beside the parent's load of the same weights.
# Later, 20 alternating pairs each: ResNet-18 (45 MiB) 0.06 s faster forked (paired medians -0.04
# and -0.09 s), ResNet-50 again slower (+0.13 s). (A model whose weights are in external data
# files is forked by its own file's size: this process does not read those weights.)
FORK_MAX_BYTES = 64 * 2**20
STACK_BYTES = 64 * 2**20  # the head start thread's stack (reserved, used only as deep as it goes)


class _ShapeRange(NamedTuple):
    """A dynamic input's range as the build configuration reads it (a TensorProfile's fields)."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]
    values: tuple[tuple[int, ...], ...] | None = None


def _tuples(value: Any) -> Any:
    """``value`` read from JSON with its lists as the tuples they were."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _shape_range(value: Any, what: str) -> Any:
    """``(min, opt, max)`` shapes as a range without loading trt_backend.profiles (numpy); any
    other form of a profile entry through it (see :func:`trt_backend.profiles.tensor_profile`)."""
    if isinstance(value, (tuple, list)) and len(value) == 3 and all(
            isinstance(s, (tuple, list)) and all(type(d) is int for d in s) for s in value):
        lo, opt, hi = (tuple(s) for s in value)
        return _ShapeRange(lo, opt, hi)
    return _profiles.tensor_profile(value, what)


class _Answer:
    """A head start's parser answer about its file, offered to the planner (see
    :class:`trt_backend.tensorrt.early_parse.FileAnswer`): the question it asked before it built
    is the one the planner would ask about the whole model."""

    def __init__(self, head: HeadStart) -> None:
        self.head, self.path, self.flavor = head, head.path, head.flavor_name

    def tensorrt(self) -> tuple[str, str, str] | None:
        """The TensorRT the head start imported (name, version, parser version), where its
        answer has come (a build may not import it here: see :func:`adopt_flavor`)."""
        answer = self.head.answer()
        described = answer.get("flavor") if answer is not None else None
        if not isinstance(described, list) or len(described) != 4:
            return None
        return str(described[0]), str(described[1]), str(described[2])

    def answer(self) -> dict[str, Any] | None:
        return self.head.answer()

    def unchanged(self, answer: dict[str, Any]) -> bool:
        return early_parse.file_unchanged(self.path, answer)

    def discard(self) -> None:
        """Nothing to stop: the build goes on for :func:`claim` to take or :func:`discard` to end."""


_lock = threading.Lock()
_pending: HeadStart | None = None
_offered: _Answer | None = None


def launch(path: str, out_dir: str, flavor: str, profiles: Sequence[Mapping[str, Any]], options: Any = None
          ) -> HeadStart | None:
    """Start building ``path`` as it is, for a build into ``out_dir`` (its scratch files go beside
    it); None where one cannot start (the file is not there, the folder beside it not writable):
    the build goes the usual way and meets the problem there."""
    global _pending
    if not os.path.isfile(path) or getattr(options, "precision", "fp32") not in ("fp32", "tf32") \
            or getattr(options, "max_build_memory", None) is not None:  # (its memory is not in the budget)
        return None
    if not room_beside(os.path.getsize(path), MAX_BYTES):
        return None  # A build beside the planner's would hold too much at once.
    if isinstance(profiles, (str, bytes)) or not isinstance(profiles, (list, tuple)) or \
            not all(isinstance(p, Mapping) for p in profiles):
        return None  # (profiles of another form: the usual path reads or refuses them)
    try:
        scratch = new_folder(os.path.dirname(os.path.abspath(out_dir)), ".head-start-")
    except OSError:
        return None
    global _offered
    head = HeadStart(path, flavor, profiles, options, scratch)
    with _lock:
        previous, _pending = _pending, head
    if previous is not None:
        previous.remove()
    try:
        head.begin()
    except BaseException:  # (a Ctrl-C as it starts: nothing of it is left)
        with _lock:
            if _pending is head:
                _pending = None
        head.remove()
        raise
    with _lock:
        if _offered is not None:
            early_parse.withdraw(_offered)
        _offered = _Answer(head)
        early_parse.offer(_offered)
    return head


def pending_for(path: str) -> bool:
    """Whether a head start of the file ``path`` is pending."""
    with _lock:
        return _pending is not None and _pending.path == os.path.abspath(path)


def adopt_flavor(path: str, choice: str) -> None:
    """Where the pending head start of ``path`` runs in a child that has answered already, take the
    TensorRT it imported for ``choice`` as its answer describes it, instead of importing it in this
    process too (:func:`trt_backend.tensorrt.flavor.adopt`): beside the child's build, the import
    was time the build waited. Nothing where the answer is not here yet (it is not waited for)."""
    with _lock:
        head = _pending if _pending is not None and _pending.path == os.path.abspath(path) else None
    child = head._child if head is not None else None
    if child is None or not child.arrived(0):
        return
    first = child.message(0) or {}
    answer: dict[str, Any] = first["answer"] if isinstance(first.get("answer"), dict) else {}
    if _flavor.adopt(choice, answer.get("flavor")):
        log.debug("TensorRT %s as the head start of %s describes it (not imported here)", answer["flavor"][1],
                  path)


def started_for(path: str) -> float | None:
    """When (``time.perf_counter()``) the pending head start of the file ``path`` began; None
    without one. A build's own time counts from there: its engine may be built by then."""
    with _lock:
        head = _pending if _pending is not None and _pending.path == os.path.abspath(path) else None
    return head.started if head is not None else None


def claim(model: Any, segment: Any, segment_model: Any, ranges: Sequence[Mapping[str, Any]], options: Any,
          flavor: Flavor, model_file: str | None) -> HeadStart | None:
    """The pending head start if its engine is the one this segment, built as it is (no plugin
    rewrite or quantization), would be built into (see :meth:`HeadStart.fits`), taken off the
    pending slot; else None (the pending one is left for :func:`discard`)."""
    global _pending
    with _lock:
        head = _pending
    if head is None:
        return None
    why = head.fits(model, segment, segment_model, ranges, options, flavor, model_file)
    if why is not None:
        log.debug("head start of %s not used: %s", head.path, why)
        return None
    with _lock:
        if _pending is not head:
            return None
        _pending = None
    return head


def crash_of(model: Any) -> str | None:
    """How TensorRT's builder crashed building the file of ``model`` (a Model) in the pending head
    start's child, where it did: the compile path's build of that file would end this process the
    same way. Waits for the head start; None where there is none for that file or it did not crash."""
    with _lock:
        head = _pending
    if head is None or not isinstance(model.source, str) or os.path.abspath(model.source) != head.path:
        return None
    head.wait()
    return head.crash


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def discard() -> None:
    """Cancel and remove the pending head start, if any (the build is over or went another way)."""
    global _pending, _offered
    with _lock:
        head, _pending = _pending, None
        if _offered is not None:
            early_parse.withdraw(_offered)
            _offered = None
    if head is not None:
        head.remove()

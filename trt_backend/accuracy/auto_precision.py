"""``--precision auto``: the lowest precision per TensorRT segment, and within a segment per node,
that keeps every model output within (atol, rtol) of fp32 ONNX Runtime on validation inputs.

Every TensorRT segment starts at the lowest allowed precision (int8 < bf16 < fp16; int8 only with
calibration data; int8 is int8 with fp16 for everything not quantized). Each round runs the emulated session (each
segment in the precision its engine
would be built in: :mod:`trt_backend.engines.emulation`) on the validation inputs; while an output
exceeds the tolerance, the first diverging segment is found with compare's localisation
(:mod:`trt_backend.accuracy.localize`), and inside it the nodes where the divergence starts:
those whose outputs exceed the tolerance while their inputs, tapped on the same run, are within
it. They are pinned to fp32 (left out of the quantization and of the fp16 remainder). A round that
pins without improving the worst error doubles the group pinned next. A segment whose pins would
pass half its nodes moves up one precision (pins cleared). Past the highest allowed, before it
goes to fp32, a bounded bisection looks for the shortest tail of the segment (its last nodes in
topological order) that, pinned, brings every output within tolerance: where the error is made
everywhere but grows with the activations (a random-weight ResNet-50's last stages), no handful
of nodes holds it, and a reduced head with an fp32 tail still beats an all-fp32 segment. The
number of rounds is bounded; every round's measurement and decision is logged and kept in the plan.

A model that cannot meet the tolerance even in fp32 (nondeterministic ops, a reference that does
not repeat itself) is a :class:`PrecisionSearchError` naming the output."""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from partitioner import Model, Plan
from partitioner.errors import OptionsError
from partitioner.model import ModelSource
from partitioner.options_check import keyword_checked, number_option
from trt_backend._progress import progress
from trt_backend.accuracy.localize import boundary_names, reference_with_boundaries
from trt_backend.accuracy.numeric import tolerance_ratio
from trt_backend.accuracy.options import (
    AUTO_PRECISIONS,
    DEFAULT_TOLERANCE,
    tolerance_value,
)
from trt_backend.accuracy.polygraphy_glue import generate_feeds, host, profile_points, side_numbers
from trt_backend.engines.builder import (
    BuildOptions,
    refused_in_precision,
    weights_for_transform,
)
from trt_backend.engines.emulation import emulation_ort_options, segment_emulation
from trt_backend.engines.precision import apply_precision
from trt_backend.engines.precision_plan import (
    PinnedNode,
    PrecisionPlan,
    SegmentPrecision,
)
from trt_backend.engines.quantize import COMPUTE_OPS
from trt_backend.errors import (
    PrecisionError,
    PrecisionSearchError,
    SegmentLoadError,
    TensorRTUnavailableError,
)
from trt_backend.ort.sessions import ort_session
from trt_backend.runners.base import SegmentRunner
from trt_backend.runners.ort import EmulatedTensorRTRunner
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session
from trt_backend.tensorrt.flavor import Flavor, load_flavor

log = logging.getLogger(__name__)

ORDER = AUTO_PRECISIONS  # lowest first
MAX_PINNED_SHARE = 0.5  # pins beyond this share of a segment's nodes: the segment moves up a precision
IMPROVES = 0.95  # a round improves when the worst error drops below this share of the best so far...
MAX_STALLS = 2  # ...and after this many rounds that did not, pinning gives way to the next precision
PINNABLE = 16.0  # a precision whose worst error, unpinned, exceeds this many tolerances is not searched


@keyword_checked
@dataclass(frozen=True)
class AutoOptions:
    """How the search runs: tolerances, allowed precisions, bounded rounds, validation inputs
    (``iterations`` feeds: the calibration data's first batches, else seeded random inputs at the
    profiles' opt shapes)."""

    atol: float = DEFAULT_TOLERANCE
    rtol: float = DEFAULT_TOLERANCE
    allow: tuple[str, ...] = ("fp16", "bf16", "int8")
    max_rounds: int = 12
    iterations: int = 2
    seed: int = 0
    atol_of_range: float | None = None  # each output's atol at least this x its largest |value| on the reference

    def __post_init__(self) -> None:
        object.__setattr__(self, "atol", tolerance_value(self.atol, "atol"))
        if self.atol_of_range is not None:
            object.__setattr__(self, "atol_of_range", tolerance_value(self.atol_of_range, "atol_of_range"))
        object.__setattr__(self, "rtol", tolerance_value(self.rtol, "rtol"))
        allow = (self.allow,) if isinstance(self.allow, str) else tuple(self.allow)
        unknown = [p for p in allow if p not in ORDER]
        if unknown or not allow:
            raise OptionsError(f"--allow takes some of {', '.join(ORDER)}, got {', '.join(allow) or 'nothing'}")
        object.__setattr__(self, "allow", allow)
        for name, low in (("max_rounds", 1), ("iterations", 1), ("seed", 0)):  # (the CLI hands over text)
            object.__setattr__(self, name, number_option(getattr(self, name), name, whole=True, low=low, text=True))


@dataclass
class _SegmentState:
    level: int  # index into the allowed precisions, lowest first; len(allowed): fp32
    pinned: dict[str, PinnedNode]
    stall: int = 0  # rounds whose pins did not improve the worst error


def search_precision(model: ModelSource | Model | Plan, profiles: Sequence[Mapping[str, Any]] | None = None,
                     session_options: SessionOptions | None = None, options: AutoOptions | None = None,
                     feeds: Sequence[Mapping[str, Any]] | None = None) -> PrecisionPlan:
    """Search the precision plan of ``model`` (see the module doc); build with it through
    ``BuildOptions(precision="auto", precision_plan=plan)``."""
    opts = options or AutoOptions()
    start = time.perf_counter()
    so = session_options if session_options is not None else SessionOptions()
    base_build = dataclasses.replace(so.build, precision="fp32", precision_plan=None)
    so = dataclasses.replace(so, emulate=True, build=base_build)
    allowed = [p for p in ORDER if p in opts.allow]
    if "int8" in allowed and not so.build.calibration_data:
        # Asked for by name (an allow list other than the default): said where it is seen.
        say = log.info if opts.allow == AutoOptions().allow else log.warning
        say("int8 left out of the precision search: it needs calibration data (--calibration-data FILE)")
        allowed.remove("int8")
    if not allowed:
        raise OptionsError("--precision auto has no precision to try: allow fp16 or bf16, or give calibration data "
                           "for int8")
    with Session(model, profiles, so) as sess:
        return _Search(sess, opts, tuple(allowed), feeds).run(start)


class _Search:
    def __init__(self, sess: Session, opts: AutoOptions, allowed: tuple[str, ...],
                 feeds: Sequence[Mapping[str, Any]] | None) -> None:
        self.sess, self.opts, self.allowed = sess, opts, allowed
        self.fp32_runners: list[SegmentRunner] = list(sess.runners)
        self.trt = [i for i, r in enumerate(sess.runners) if r.segment.backend == "tensorrt"]
        self.protos = {i: sess.plan.extract(sess.runners[i].segment.id) for i in self.trt}
        # (segment, level) -> the other segments' states when a tail search there found none: the
        # same search again would run the same trials to the same end
        self.no_tail: dict[tuple[int, int], tuple[Any, ...]] = {}
        self.feeds = self._feeds(feeds)
        ort_opts = sess.options.ort_for(len(sess.runners) + 1)
        reference = reference_with_boundaries(sess.model, boundary_names(sess.runners), ort_opts)
        self.refs = [reference(f) for f in self.feeds]
        self.outputs = [a.name for a in sess.get_outputs()]
        self.log: list[str] = []
        self._measures_something()
        self.atols = self._output_atols()
        self.repeat = reference(self.feeds[0])  # a reference that does not repeat itself cannot be met
        self.flavor = _flavor(sess)

    def _output_atols(self) -> dict[str, float]:
        """Each output's atol: the global one, raised to ``atol_of_range`` x its largest finite
        magnitude on the validation references (compare's ``--atol-of-range`` does the same)."""
        atols = dict.fromkeys(self.outputs, self.opts.atol)
        if not self.opts.atol_of_range:
            return atols
        for name in self.outputs:
            values = [host(ref[name]) for ref in self.refs if name in ref]
            finite = [np.abs(v[np.isfinite(v)]) for v in values if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
            peak = max((float(f.max()) for f in finite if f.size), default=0.0)
            atols[name] = max(self.opts.atol, self.opts.atol_of_range * peak)
        return atols

    def _measures_something(self) -> None:
        """A search on outputs that are empty on every validation input would choose from a
        measurement of nothing (every precision "passes"): refuse it, naming the outputs."""
        def size(value: Any) -> int:
            v = host(value)
            return int(v.size) if isinstance(v, np.ndarray) else (len(v) if isinstance(v, (list, tuple, dict)) else 1)

        empty = [n for n in self.outputs if all(size(ref[n]) == 0 for ref in self.refs if n in ref)]
        if empty and len(empty) == len(self.outputs):
            raise PrecisionSearchError(f"every output ({', '.join(empty)}) is empty on all {len(self.feeds)} "
                                       "validation input(s): nothing to measure a precision by; give inputs that "
                                       "produce some (--inputs real.npz, or calibration data)")
        for name in empty:
            self.note(f"output {name} is empty on every validation input: it does not constrain the search")

    def _feeds(self, given: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
        if given:
            return [dict(f) for f in given]
        build = self.sess.options.build
        if build.calibration_data and build.calibration_data != "random":
            batches = self.sess.quantizer(build).data.batches
            return [dict(b) for b in batches[:self.opts.iterations]]
        points = profile_points(self.sess.input_profiles, None, False)
        return generate_feeds(self.sess.get_inputs(), points, self.opts.seed, self.opts.iterations)

    def weighted(self, i: int) -> onnx.ModelProto:
        """Segment ``i`` with its external weights read in from the model's folder, for a
        precision transform; PrecisionError where they cannot be (it stays fp32, as in a build)."""
        proto, kept = weights_for_transform(self.protos[i], self.sess.model.base_dir, self.sess.runners[i].label)
        if kept is not None:
            raise PrecisionError(kept)
        return proto

    def reduced(self, i: int, precision: str, pinned: Mapping[str, Any]) -> int:
        """:func:`reduced_nodes` of segment ``i``, its weights read in where the transform needs them."""
        if precision not in ("fp16", "bf16", "int8"):
            return 0
        try:
            return reduced_nodes(self.weighted(i), precision, pinned)
        except PrecisionError:
            return 0

    # ---------------------------------------------------------------- measuring

    def ratio(self, ours: Any, ref: Any, name: str | None = None) -> float:
        """Worst element error in units of the tolerance (> 1: beyond it), by the rule compare
        applies (:func:`~trt_backend.accuracy.numeric.tolerance_ratio`): a plan the search keeps
        passes ``compare`` at the same atol and rtol by construction."""
        x, y = host(ours), host(ref)
        if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray):  # sequences, maps, optionals
            flat = side_numbers(x, y)
            if flat is None or isinstance(flat, str):
                return 0.0 if flat is None else float("inf")
            x, y = flat
        return tolerance_ratio(x, y, self.atols.get(name, self.opts.atol) if name else self.opts.atol, self.opts.rtol)

    def output_errors(self) -> tuple[dict[str, float], int]:
        """Each output's worst error / tolerance over the validation feeds, and the first feed
        where some output exceeds it (-1: none)."""
        worst = dict.fromkeys(self.outputs, 0.0)
        first_bad = -1
        for k, (feed, ref) in enumerate(zip(self.feeds, self.refs)):
            for name, value in zip(self.outputs, self.sess.run(None, feed)):
                r = self.ratio(value, ref[name], name)
                worst[name] = max(worst[name], r)
                if r > 1 and first_bad < 0:
                    first_bad = k
        return worst, first_bad

    # ---------------------------------------------------------------- one configuration

    def build_for(self, i: int, state: _SegmentState) -> BuildOptions:
        base = self.sess.options.build
        precision = self.allowed[state.level] if state.level < len(self.allowed) else "fp32"
        entry = SegmentPrecision(precision, tuple(n.name for n in self.protos[i].graph.node),
                                 tuple(state.pinned.values()))
        plan = PrecisionPlan((entry,), self.opts.atol, self.opts.rtol, self.allowed)
        return dataclasses.replace(base, precision="auto", precision_plan=plan)

    def refused(self, i: int, state: _SegmentState, rnd: int) -> None:
        """Pin what the TensorRT parser refuses in the segment's precision (as the builder will)."""
        if self.flavor is None or state.level >= len(self.allowed):
            return
        build = self.build_for(i, state)
        quantizer = self.sess.quantizer(build) if self.allowed[state.level] == "int8" else None
        try:
            refused = refused_in_precision(self.weighted(i), build, self.flavor, quantizer)
        except PrecisionError:
            return
        nodes = {n.name: n for n in self.protos[i].graph.node}
        for name in refused:
            state.pinned[name] = PinnedNode(name, nodes[name].op_type,
                                            f"(TensorRT refuses it in {self.allowed[state.level]})", 0.0, rnd)
        if refused:
            self.note(f"round {rnd}: segment {self.sess.runners[i].segment.id}: TensorRT refuses "
                      f"{', '.join(refused[:3])}{f' and {len(refused) - 3} more' if len(refused) > 3 else ''} "
                      f"in {self.allowed[state.level]}: pinned")

    def install(self, states: dict[int, _SegmentState], rnd: int = 0) -> None:
        for i in self.trt:
            state = states[i]
            runner = self.fp32_runners[i]
            if state.level < len(self.allowed):
                self.refused(i, state, rnd)
                build = self.build_for(i, state)
                quantizer = self.sess.quantizer(build) if self.allowed[state.level] == "int8" else None
                try:
                    emulated = segment_emulation(self.weighted(i), build, quantizer)
                    runner = EmulatedTensorRTRunner(runner.segment, emulated.model,
                                                    emulation_ort_options(self.sess.options.ort_for(len(self.trt))),
                                                    runner.profiles, runner.shape_tensors,
                                                    weights_dir=self.sess.model.base_dir)
                except (PrecisionError, SegmentLoadError) as e:
                    self.note(f"round {rnd}: {runner.label} cannot be emulated in {self._name(state)} ({e}); "
                              "it moves up a precision")
                    states[i] = _SegmentState(state.level + 1, {})
                    runner = self.fp32_runners[i]
            old = self.sess.replace_runner(i, runner)
            if old not in self.fp32_runners:
                old.close()

    # ---------------------------------------------------------------- localising

    def diverging_segment(self, feed: int) -> int:
        """Runner index of the first TensorRT segment whose stitched outputs exceed the tolerance
        (else the one with the largest own error)."""
        ref = self.refs[feed]
        env: dict[str, Any] = dict(self.feeds[feed])
        own: dict[int, float] = {}
        for i, r in enumerate(self.sess.runners):
            stitched = r.run([env[n] if n in env else ref[n] for n in r.input_names])
            env.update(zip(r.output_names, stitched))
            if i in self.trt:
                if max((self.ratio(v, ref.get(n)) for n, v in zip(r.output_names, stitched)), default=0.0) > 1:
                    return i
                alone = r.run([ref[n] for n in r.input_names])
                own[i] = max((self.ratio(v, ref.get(n)) for n, v in zip(r.output_names, alone)), default=0.0)
        return max(own, key=lambda i: own[i])

    def divergence_points(self, i: int, state: _SegmentState,
                          feed: int) -> list[tuple[bool, float, onnx.NodeProto, str]]:
        """(divergence starts here, error / tolerance, node, tensor) of the segment's pinnable nodes
        whose outputs exceed the tolerance, on the reference's segment inputs: those whose inputs
        are within it first, then by how much they add to their inputs' error."""
        proto = self.protos[i]
        runner = self.sess.runners[i]
        feeds = {n: host(self.refs[feed][n]) for n in runner.input_names}
        names = [o for n in proto.graph.node for o in n.output if o]
        low = _tapped(runner_model(runner), names, self.sess.options)
        full = _tapped(proto, names, self.sess.options, self.sess.model.base_dir)
        ours, ref = low(feeds), full(feeds)
        ratio = {n: self.ratio(ours[n], ref[n]) for n in names if n in ours and n in ref}
        found = []
        kept = set(self.sess.options.build.keep_fp32_ops)  # in fp32 already: pinning them changes nothing
        maker = {o: n for n in proto.graph.node for o in n.output}
        for node in proto.graph.node:
            if node.name in state.pinned:
                continue
            out = max((ratio.get(o, 0.0) for o in node.output), default=0.0)
            inp = max((ratio.get(n, 0.0) for n in node.input), default=0.0)
            if out <= 1:
                continue
            tensor = max(node.output, key=lambda o: ratio.get(o, 0.0))
            if node.op_type in kept:
                # a kept op (LayerNorm) amplifying its inputs' rounding: what makes its inputs is to blame
                for name in node.input:
                    producer = maker.get(name)
                    if producer is not None and producer.name not in state.pinned and producer.op_type not in kept:
                        found.append((inp > 1, -(out - inp), producer, f"{tensor} (through {node.name})", out))
                continue
            found.append((inp > 1, -(out - inp), node, tensor, out))
        found.sort(key=lambda t: (t[0], t[1]))
        return [(not later, out, node, tensor) for later, _, node, tensor, out in found]

    def pinnable(self, i: int, state: _SegmentState) -> int:
        """How many of the segment's nodes a pin could return to fp32 in its precision."""
        kept = set(self.sess.options.build.keep_fp32_ops)
        return sum(n.op_type not in kept for n in self.protos[i].graph.node)

    def with_producers(self, i: int, state: _SegmentState, points: list[tuple[bool, float, onnx.NodeProto, str]]
                       ) -> list[tuple[bool, float, onnx.NodeProto, str]]:
        """The smallest group around each offender: it and the nodes making its inputs in the
        segment (its inputs' own rounding is part of its error: (x + 1000) - 1000 in fp16)."""
        if not points:
            return points
        maker = {o: n for n in self.protos[i].graph.node for o in n.output}
        kept = set(self.sess.options.build.keep_fp32_ops)
        group = list(points)
        seen = {p[2].name for p in points} | set(state.pinned)
        for _, out, node, tensor in points:
            for name in node.input:
                producer = maker.get(name)
                if producer is not None and producer.name not in seen and producer.op_type not in kept:
                    seen.add(producer.name)
                    group.append((False, out, producer, f"{tensor} (input {name})"))
        return group

    # ---------------------------------------------------------------- the search

    def note(self, line: str) -> None:
        self.log.append(line)
        progress("precision search: %s", line)

    def run(self, start: float) -> PrecisionPlan:
        worst, _ = self.output_errors()  # fp32 (the session's own fp32 runners)
        for name in self.outputs:
            worst[name] = max(worst[name], self.ratio(self.repeat[name], self.refs[0][name], name))
        bad = {n: r for n, r in worst.items() if r > 1}
        if bad:
            name, r = max(bad.items(), key=lambda kv: kv[1])
            raise PrecisionSearchError(f"output '{name}' differs from the reference by {r:.3g} x the tolerance "
                                       f"(atol {self.atols.get(name, self.opts.atol):g}, rtol {self.opts.rtol:g}) "
                                       "even with every segment "
                                       "in fp32 (nondeterministic ops?): no precision can meet it; loosen the "
                                       "tolerance or drop that output from the comparison")
        self.note(f"fp32: worst output error {max(worst.values(), default=0.0):.3g} x tolerance")
        first = self.first_level() if self.trt else 0
        states = {i: _SegmentState(first, {}) for i in self.trt}
        best = float("inf")
        passed = not self.trt
        for rnd in range(1, self.opts.max_rounds + 1):
            if passed:
                break
            self.install(states, rnd)
            worst, first_bad = self.output_errors()
            top = max(worst.values(), default=0.0)
            config = ", ".join(f"segment {self.sess.runners[i].segment.id} {self._name(states[i])}"
                               f"{f' ({len(states[i].pinned)} pinned)' if states[i].pinned else ''}" for i in self.trt)
            if first_bad < 0:
                self.note(f"round {rnd}: {config}: every output within tolerance (worst {top:.3g} x)")
                passed = True
                break
            i = self.diverging_segment(first_bad)
            state = states[i]
            seg_id = self.sess.runners[i].segment.id
            if state.level >= len(self.allowed):
                self.note(f"round {rnd}: {config}: worst {top:.3g} x tolerance; segment {seg_id} is already fp32")
                break
            if top > IMPROVES * best:
                state.stall += 1
            best = min(best, top)
            points = self.divergence_points(i, state, first_bad) if state.stall < MAX_STALLS else []
            starts = sum(p[0] for p in points)
            chosen = self.with_producers(i, state, points[:max(2 ** state.stall, min(4, starts))])
            limit = MAX_PINNED_SHARE * self.pinnable(i, state)
            if chosen and len(state.pinned) + len(chosen) <= limit:
                for _, out, node, tensor in chosen:
                    state.pinned[node.name] = PinnedNode(node.name, node.op_type, tensor, round(out, 4), rnd)
                self.note(f"round {rnd}: {config}: worst {top:.3g} x tolerance; segment {seg_id} diverges first: "
                          f"pin {', '.join(f'{n.name} ({n.op_type}, {o:.3g} x)' for _, o, n, _ in chosen[:4])}"
                          + (f" and {len(chosen) - 4} more" if len(chosen) > 4 else ""))
            else:
                was = self._name(state)
                tail = self.tail_pins(i, states, rnd) if state.level == len(self.allowed) - 1 else None
                if tail is not None:
                    states[i] = _SegmentState(state.level, tail, MAX_STALLS)
                    passed = True
                    break
                states[i] = _SegmentState(state.level + 1, {})
                why = (" (pins would exceed half of what it computes in reduced precision)" if chosen else
                       f" (pins stopped helping: {state.stall} rounds without a {1 - IMPROVES:.0%} gain)"
                       if state.stall >= MAX_STALLS else " (nothing left to pin)")
                self.note(f"round {rnd}: {config}: worst {top:.3g} x tolerance; segment {seg_id} {was} -> "
                          f"{self._name(states[i])}{why}")
                best = float("inf")
        if not passed:  # bounded: what still diverges moves up a precision, pins cleared, until it passes
            for _ in range(len(self.trt) * (len(self.allowed) + 1)):
                self.install(states)
                worst, first_bad = self.output_errors()
                if first_bad < 0:
                    passed = True
                    break
                i = self.diverging_segment(first_bad)
                if states[i].level >= len(self.allowed):
                    i = next((j for j in self.trt if states[j].level < len(self.allowed)), i)
                was = self._name(states[i])
                states[i] = _SegmentState(min(states[i].level + 1, len(self.allowed)), {})
                self.note(f"rounds spent: worst {max(worst.values(), default=0.0):.3g} x tolerance; segment "
                          f"{self.sess.runners[i].segment.id} {was} -> {self._name(states[i])}")
        if passed and (len(self.trt) > 1 or any(states[i].level >= len(self.allowed) for i in self.trt)):
            self.descend(states)
        self.install(states)
        worst, _ = self.output_errors()
        self.note(f"result: worst output error {max(worst.values(), default=0.0):.3g} x tolerance")
        for i in self.trt:  # the session leaves with its own runners
            old = self.sess.replace_runner(i, self.fp32_runners[i])
            if old is not self.fp32_runners[i]:
                old.close()
        segments = tuple(self._entry(i, states[i]) for i in self.trt)
        return PrecisionPlan(segments, self.opts.atol, self.opts.rtol, self.allowed, tuple(self.log),
                             time.perf_counter() - start, worst, atol_of_range=self.opts.atol_of_range,
                             atols=dict(self.atols) if self.opts.atol_of_range else {})

    def descend(self, states: dict[int, _SegmentState]) -> None:
        """Segments moved up while another segment was to blame come back down: each segment above
        the lowest allowed precision tries the lower ones (unpinned, the others as found), lowest
        first, and keeps the first with which every output stays within tolerance (at most one run
        per segment and lower precision); a segment still in fp32 then tries a bisected tail in the
        highest allowed precision (rounds may have run out before its own tail search)."""
        for i in self.trt:
            if states[i].level >= len(self.allowed) and not any(self._descend_to(i, states, level)
                                                                 for level in range(len(self.allowed))):
                top = len(self.allowed) - 1
                tail = self.tail_pins(i, states, self.opts.max_rounds + 1, top)
                if tail is not None:
                    states[i] = _SegmentState(top, tail, MAX_STALLS)
                continue
            any(self._descend_to(i, states, level) for level in range(states[i].level))

    def _descend_to(self, i: int, states: dict[int, _SegmentState], level: int) -> bool:
        trial = {**states, i: _SegmentState(level, {})}
        self.install(trial)
        worst, first_bad = self.output_errors()
        if first_bad < 0:
            self.note(f"descent: segment {self.sess.runners[i].segment.id} {self._name(states[i])} -> "
                      f"{self.allowed[level]}: every output within tolerance (worst "
                      f"{max(worst.values(), default=0.0):.3g} x)")
            states[i] = trial[i]
        return first_bad < 0

    def tail_pins(self, i: int, states: dict[int, _SegmentState], rnd: int, level: int | None = None
                  ) -> dict[str, PinnedNode] | None:
        """The shortest tail of segment ``i`` (its last pinnable nodes, topological order) that,
        pinned to fp32, brings every output within tolerance, by bisection (about log2(n) + 1
        runs); None when even the whole segment pinned does not (another segment is to blame)."""
        kept = set(self.sess.options.build.keep_fp32_ops)
        order = [n for n in self.protos[i].graph.node if n.op_type not in kept]
        level = states[i].level if level is None else level
        seg_id = self.sess.runners[i].segment.id
        when = f"round {rnd}" if rnd <= self.opts.max_rounds else "descent"  # (the descent's search is no round)
        others = tuple((j, states[j].level, tuple(sorted(states[j].pinned))) for j in self.trt if j != i)
        if self.no_tail.get((i, level)) == others:
            self.note(f"{when}: segment {seg_id} {self.allowed[level]}: no tail search (the one before, with the "
                      "other segments as they are now, found none)")
            return None

        def trial(k: int) -> tuple[bool, float]:
            pins = {n.name: PinnedNode(n.name, n.op_type, f"(the last {k} node(s) of the segment, pinned by "
                                       "bisection)", 0.0, rnd) for n in order[len(order) - k:]}
            self.install({**states, i: _SegmentState(level, pins)})
            worst, first_bad = self.output_errors()
            return first_bad < 0, max(worst.values(), default=0.0)

        ok, top = trial(len(order))
        if not ok:
            self.note(f"{when}: segment {seg_id}: even all {len(order)} node(s) pinned leave {top:.3g} x "
                      "tolerance: no tail search")
            self.no_tail[(i, level)] = others
            return None
        low, high, tried = 0, len(order), []  # low fails (the caller saw it fail), high passes
        while high - low > 1:
            mid = (low + high) // 2
            ok, top = trial(mid)
            tried.append(f"{mid}: {top:.3g} x")
            low, high = (low, mid) if ok else (mid, high)
        pins = {n.name: None for n in order[len(order) - high:]}
        if high == len(order) or not self.reduced(i, self.allowed[level], pins):
            # only the whole segment pinned passes (or all the head left computes nothing in 16 bits): that is fp32
            self.note(f"{when}: segment {seg_id} {self.allowed[level]}: tail bisection ({', '.join(tried)}): "
                      f"the last {high} of {len(order)} pinned pass, which leaves nothing reduced: fp32")
            self.no_tail[(i, level)] = others
            return None
        self.note(f"{when}: segment {seg_id} {self.allowed[level]}: pins stop helping; tail bisection "
                  f"({', '.join(tried)}): the last {high} of {len(order)} node(s) pinned pass")
        _, top = trial(high)
        return {n.name: PinnedNode(n.name, n.op_type, f"(the last {high} node(s) of the segment, pinned by bisection)",
                                   round(top, 4), rnd) for n in order[len(order) - high:]}

    def first_level(self) -> int:
        """The lowest precision worth pinning in: every segment in each allowed precision once,
        unpinned; the lowest whose worst error is within PINNABLE x the tolerance (pins fix
        errors that start at a few nodes, not a precision that is wrong everywhere)."""
        for level in range(len(self.allowed)):
            self.install({i: _SegmentState(level, {}) for i in self.trt})
            top = max(self.output_errors()[0].values(), default=0.0)
            if top <= PINNABLE:
                self.note(f"start: every segment {self.allowed[level]}: worst {top:.3g} x tolerance")
                return level
            self.note(f"start: every segment {self.allowed[level]}: worst {top:.3g} x tolerance, beyond what pins fix "
                      f"({PINNABLE:g} x): skipped")
        return len(self.allowed) - 1

    def _name(self, state: _SegmentState) -> str:
        return self.allowed[state.level] if state.level < len(self.allowed) else "fp32"

    def _entry(self, i: int, state: _SegmentState) -> SegmentPrecision:
        proto = self.protos[i]
        precision = self._name(state)
        names = tuple(n.name for n in proto.graph.node)
        reduced = self.reduced(i, precision, state.pinned)
        if precision != "fp32" and not reduced:  # (a model stored in fp16: nothing of it computes lower in bf16)
            self.note(f"segment {self.sess.runners[i].segment.id}: {precision} reduces none of its nodes; "
                      "recorded as fp32")
            return SegmentPrecision("fp32", names, (), 0, self.sess.runners[i].segment.id)
        return SegmentPrecision(precision, names, tuple(state.pinned.values()), reduced,
                                self.sess.runners[i].segment.id)


def _flavor(sess: Session) -> Flavor | None:
    """The TensorRT whose parser the plan was made with (None: no TensorRT here)."""
    target = sess.plan.tensorrt
    try:
        return load_flavor(target if target in ("tensorrt", "tensorrt_rtx") else "auto")
    except TensorRTUnavailableError:
        return None


def reduced_nodes(proto: onnx.ModelProto, precision: str, pinned: Mapping[str, Any]) -> int:
    """Nodes of the segment that compute in reduced precision: lowered by the fp16/bf16
    transform (int8: the fp16 remainder), or compute ops reading Q/DQ (int8)."""
    if precision in ("fp16", "bf16", "int8"):
        try:
            lowered = apply_precision(proto, "fp16" if precision == "int8" else precision,
                                      keep_fp32_nodes=tuple(pinned)).lowered
            if precision == "int8":  # compute ops read Q/DQ even where fp16 keeps them fp32
                lowered = max(lowered, sum(n.op_type in COMPUTE_OPS and n.name not in pinned for n in proto.graph.node))
            return lowered
        except PrecisionError:
            return 0
    return 0


def runner_model(runner: SegmentRunner) -> onnx.ModelProto:
    model = getattr(runner, "model", None)
    if not isinstance(model, onnx.ModelProto):
        raise OptionsError(f"{runner.label} keeps no model to localise in")
    return model


def _tapped(model: onnx.ModelProto, names: Sequence[str], options: SessionOptions,
            weights_dir: str | None = None) -> Any:
    """ONNX Runtime on ``model`` with every tensor of ``names`` it holds as an output (its
    external data in ``weights_dir``)."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    inferred = onnx.shape_inference.infer_shapes(proto).graph
    types = {v.name: v for v in (*inferred.value_info, *inferred.output, *inferred.input)}
    have = {o.name for o in proto.graph.output}
    for name in names:
        if name not in have and name in types and types[name].type.tensor_type.elem_type:
            proto.graph.output.append(types[name])
            have.add(name)
    sess = ort_session(proto, emulation_ort_options(options.ort_for(1)), "a segment with its tensors tapped",
                       weights_dir=weights_dir)
    fetch = [o.name for o in proto.graph.output]

    def run(feeds: Mapping[str, Any]) -> dict[str, Any]:
        return dict(zip(fetch, sess.run(fetch, dict(feeds))))

    return run

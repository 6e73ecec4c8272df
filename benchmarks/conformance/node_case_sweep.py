"""Sweep of the ONNX backend node test cases through the planner: plan each case with the
TensorRT parser oracle (``min_segment_size=1`` unless told, so both backends get segments),
extract every segment, run the full ONNX checker on it (``partitioner.model.check_model(full=True)``: the
checker minus its unknown-rank graph input/output rule, plus strict shape inference) and load it
in ONNX Runtime (CPU). Also records whether ONNX Runtime loads the original model.

Target: every case whose original model ONNX Runtime loads has all its segments pass the
checker and load in ONNX Runtime. A report: it exits 0 even when the target fails.

    python benchmarks/conformance/node_case_sweep.py [--limit N] [--pattern SUBSTR] [--json OUT] [--isolate]
                                         [--min-segment-size K]

A native crash (parser or ONNX Runtime) kills the process; ``--isolate`` runs the cases in
spawned worker processes and records a crash or a time-out against the case that caused it.
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

TOP_EXCEPTIONS = 15
TOP_FAILURES = 40


@dataclass
class SegmentResult:
    id: int
    backend: str
    nodes: int
    checker_ok: bool = False
    checker_error: str | None = None
    ort_ok: bool = False
    ort_error: str | None = None


@dataclass
class CaseResult:
    name: str
    ort_original: bool = False
    ort_original_error: str | None = None
    checker_original: bool = False  # the original passes the same full check the segments get
    planned: bool = False
    error_type: str | None = None  # planning exception
    error: str | None = None
    user_error: bool = False  # a TrtBackendError: the planner refused the model on purpose
    segments: list[SegmentResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def all_segments_ok(self) -> bool:
        return self.planned and all(s.checker_ok and s.ort_ok for s in self.segments)

    def first_error(self) -> str:
        if not self.planned:
            return f"plan: {self.error_type}: {self.error}"
        for s in self.segments:
            if not s.checker_ok:
                return f"segment {s.id} ({s.backend}) checker: {s.checker_error}"
            if not s.ort_ok:
                return f"segment {s.id} ({s.backend}) ORT load: {s.ort_error}"
        return ""


def first_line(e: BaseException | str, limit: int = 300) -> str:
    text = str(e).strip()
    line = text.splitlines()[0] if text else (type(e).__name__ if isinstance(e, BaseException) else "")
    return line[:limit]


def load_cases(pattern: str | None, limit: int | None) -> list[Any]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators overflow casts on purpose
        cases = collect_testcases("")
    if pattern:
        cases = [c for c in cases if pattern in c.name]
    return cases[:limit] if limit is not None else cases


def ort_load(proto: Any) -> str | None:
    """None when ONNX Runtime (CPU) builds a session for ``proto``, else the first error line."""
    import onnxruntime as ort

    try:
        ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - any refusal is the result we record
        return f"{type(e).__name__}: {first_line(e)}"
    return None


def run_case(case: Any, oracle: Any, min_segment_size: int = 1) -> CaseResult:
    from partitioner import PartitionOptions, TrtBackendError, plan_model
    from partitioner.model import check_model

    start = time.perf_counter()
    result = CaseResult(case.name)
    err = ort_load(case.model)
    result.ort_original, result.ort_original_error = err is None, err
    try:
        check_model(case.model, where=case.name, full=True)
        result.checker_original = True
    except Exception:  # noqa: BLE001 - context for a failing segment, not a result of its own
        pass
    try:
        plan = plan_model(case.model, oracle, PartitionOptions(min_segment_size=min_segment_size))
    except Exception as e:  # noqa: BLE001 - one bad case must not stop the sweep
        result.error_type, result.error = type(e).__name__, first_line(e)
        result.user_error = isinstance(e, TrtBackendError)
        result.seconds = time.perf_counter() - start
        return result
    result.planned = True
    for seg in plan.segments:
        sr = SegmentResult(seg.id, seg.backend, len(seg.nodes))
        result.segments.append(sr)
        try:
            proto = plan.extract(seg.id)
        except Exception as e:  # noqa: BLE001
            sr.checker_error = sr.ort_error = f"extract: {type(e).__name__}: {first_line(e)}"
            continue
        try:
            check_model(proto, where=f"{case.name}/segment_{seg.id}", full=True)
            sr.checker_ok = True
        except Exception as e:  # noqa: BLE001
            sr.checker_error = f"{type(e).__name__}: {first_line(e)}"
        sr.ort_error = ort_load(proto)
        sr.ort_ok = sr.ort_error is None
    result.seconds = time.perf_counter() - start
    return result


class _QuietOracle:
    """The parser oracle with native stderr muted per query: the parser prints lines such as
    "Unsupported ONNX data type: INT16 (5)" straight to file descriptor 2."""

    def __init__(self, oracle: Any) -> None:
        self._oracle = oracle
        self._null = os.open(os.devnull, os.O_WRONLY)

    @property
    def target(self) -> str:
        return str(self._oracle.target)

    def query(self, model: Any) -> Any:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(self._null, 2)
        try:
            return self._oracle.query(model)
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def make_oracle(mute: bool = True) -> Any:
    from trt_backend.tensorrt.oracle import ParserOracle

    oracle = ParserOracle()
    return _QuietOracle(oracle) if mute else oracle


def quiet() -> None:
    logging.disable(logging.WARNING)  # shape-inference and parser warnings per case are noise here
    warnings.simplefilter("ignore")
    try:
        import onnxruntime as ort

        ort.set_default_logger_severity(4)  # fatal only
    except ImportError:
        pass


def sweep_in_process(cases: list[Any], min_segment_size: int) -> list[CaseResult]:
    oracle = make_oracle()
    results = []
    for k, case in enumerate(cases):
        results.append(run_case(case, oracle, min_segment_size))
        progress(k + 1, len(cases))
    return results


def progress(done: int, total: int) -> None:
    if done % 100 == 0 or done == total:
        print(f"  {done}/{total} cases", file=sys.stderr, flush=True)


# --- isolated mode: one case at a time per spawned worker; a dead worker names its case ---

def _worker(conn: Any, pattern: str | None, limit: int | None, min_segment_size: int) -> None:
    quiet()
    cases = load_cases(pattern, limit)
    oracle = make_oracle()
    conn.send("ready")
    while True:
        k = conn.recv()
        if k is None:
            return
        conn.send((k, asdict(run_case(cases[k], oracle, min_segment_size))))


class _Slot:
    def __init__(self, ctx: Any, pattern: str | None, limit: int | None, min_segment_size: int) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, pattern, limit, min_segment_size), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.case: int | None = None
        self.since = 0.0

    def give(self, k: int) -> None:
        self.case, self.since = k, time.perf_counter()
        self.conn.send(k)

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()


def sweep_isolated(cases: list[Any], pattern: str | None, limit: int | None, jobs: int,
                   timeout: float, min_segment_size: int) -> list[CaseResult]:
    ctx = multiprocessing.get_context("spawn")
    results: dict[int, CaseResult] = {}
    todo = collections.deque(range(len(cases)))
    slots = [_Slot(ctx, pattern, limit, min_segment_size) for _ in range(max(1, min(jobs, len(cases))))]
    while len(results) < len(cases):
        for slot in slots:
            if slot.ready and slot.case is None and todo:
                slot.give(todo.popleft())
        ready = multiprocessing.connection.wait([s.conn for s in slots] + [s.proc.sentinel for s in slots],
                                                timeout=1.0)
        for i, slot in enumerate(slots):
            lost: str | None = None
            if slot.conn in ready or slot.conn.poll():
                try:
                    msg = slot.conn.recv()
                except EOFError:
                    msg = None
                if msg == "ready":
                    slot.ready = True
                elif msg is not None:
                    k, data = msg
                    results[k] = _from_dict(data)
                    slot.case = None
                    progress(len(results), len(cases))
                    continue
            if not slot.proc.is_alive():
                lost = f"worker died (exit code {slot.proc.exitcode})"
            elif slot.case is not None and time.perf_counter() - slot.since > timeout:
                lost = f"timed out after {timeout:.0f} s"
            if lost is None:
                continue
            if slot.case is not None:
                results[slot.case] = CaseResult(cases[slot.case].name, planned=False, error_type="WorkerLost",
                                                error=lost)
                progress(len(results), len(cases))
            elif not slot.ready:
                raise RuntimeError(f"a sweep worker failed to start: {lost}")
            slot.stop()
            slots[i] = _Slot(ctx, pattern, limit, min_segment_size)
    for slot in slots:
        if slot.proc.is_alive():
            slot.conn.send(None)
        slot.proc.join(timeout=5)
        slot.stop()
    return [results[k] for k in range(len(cases))]


def _from_dict(data: dict[str, Any]) -> CaseResult:
    segs = [SegmentResult(**s) for s in data.pop("segments")]
    return CaseResult(**data, segments=segs)


# --- report ---

def report(results: list[CaseResult], seconds: float) -> dict[str, Any]:
    planned = [r for r in results if r.planned]
    failed = [r for r in results if not r.planned]
    segs = [s for r in planned for s in r.segments]
    # a case whose worker died is counted in: whether ORT loads it is unknown, and a crash matters
    ort_cases = [r for r in results if r.ort_original or r.error_type == "WorkerLost"]
    bad = [r for r in ort_cases if not r.all_segments_ok]
    print(f"\ncases: {len(results)} in {seconds:.1f} s")
    print(f"ONNX Runtime loads the original model: {sum(r.ort_original for r in results)}")
    print(f"planned (no exception): {len(planned)}")
    print(f"planning exceptions: {len(failed)} ({sum(r.user_error for r in failed)} TrtBackendError, "
          f"{sum(not r.user_error for r in failed)} other)")
    groups = collections.Counter(f"{r.error_type}: {_shape_of(r.error or '')}" for r in failed)
    for text, count in groups.most_common(TOP_EXCEPTIONS):
        names = [r.name for r in failed if f"{r.error_type}: {_shape_of(r.error or '')}" == text]
        print(f"  {count:4d}  {text[:160]}  e.g. {', '.join(names[:3])}")
    backends = collections.Counter(s.backend for s in segs)
    print(f"segments: {len(segs)} (" + ", ".join(f"{b} {n}" for b, n in sorted(backends.items())) + ")")
    print(f"  passed full checker: {sum(s.checker_ok for s in segs)}")
    print(f"  loaded in ONNX Runtime: {sum(s.ort_ok for s in segs)}")
    print(f"  both: {sum(s.checker_ok and s.ort_ok for s in segs)}")
    ok = len(ort_cases) - len(bad)
    verdict = "PASS" if not bad else "FAIL"
    print(f"\n{verdict}  cases whose original ONNX Runtime loads with ALL segments passing checker + ORT load: "
          f"{ok}/{len(ort_cases)}")
    for r in bad[:TOP_FAILURES]:
        mark = "" if r.checker_original else " [the original fails the full checker too]"
        print(f"  {r.name}{mark}: {r.first_error()[:220]}")
    if len(bad) > TOP_FAILURES:
        print(f"  ... and {len(bad) - TOP_FAILURES} more")
    others = [r for r in results if not r.ort_original and r.planned and not r.all_segments_ok]
    inherited = [r for r in bad if not r.checker_original]
    print(f"  of which the original model fails the same full check: {len(inherited)}; "
          f"new failures made by the partitioner: {len(bad) - len(inherited)}")
    print(f"(cases ONNX Runtime refuses itself, planned, with a failing segment: {len(others)})")
    slowest = sorted(results, key=lambda r: r.seconds, reverse=True)[:5]
    print("slowest cases: " + ", ".join(f"{r.name} {r.seconds:.2f} s" for r in slowest))
    return {"cases": len(results), "ort_loads_original": sum(r.ort_original for r in results), "planned": len(planned),
            "exceptions": len(failed), "segments": len(segs), "target_ok": ok, "target_total": len(ort_cases),
            "target_pass": not bad, "inherited_failures": len(inherited), "failing_cases": [r.name for r in bad]}


def _shape_of(message: str) -> str:
    """The message with case-specific parts (quoted names, the model source) blurred for grouping."""
    import re

    text = re.sub(r"'[^']*'", "'…'", message)
    text = re.sub(r"\b\d+\b", "N", text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, help="first N cases (after --pattern)")
    ap.add_argument("--pattern", help="only cases whose name contains SUBSTR")
    ap.add_argument("--json", metavar="OUT", help="write per-case results and the summary as JSON")
    ap.add_argument("--isolate", action="store_true", help="run cases in spawned worker processes")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="workers with --isolate")
    ap.add_argument("--min-segment-size", type=int, default=1,
                    help="PartitionOptions.min_segment_size (1: every TensorRT-capable node stays on TensorRT)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case with --isolate")
    args = ap.parse_args(argv)
    quiet()
    cases = load_cases(args.pattern, args.limit)
    start = time.perf_counter()
    if args.isolate:
        results = sweep_isolated(cases, args.pattern, args.limit, args.jobs, args.timeout, args.min_segment_size)
    else:
        results = sweep_in_process(cases, args.min_segment_size)
    summary = report(results, time.perf_counter() - start)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "cases": [asdict(r) for r in results]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

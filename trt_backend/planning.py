"""Planning with the TensorRT parser as oracle, optionally in a child process: the parser is
native code, and a crash on an untrusted model must not take the caller down with it."""
from __future__ import annotations

import functools
import logging
import multiprocessing as mp
import os
import pickle
import threading
import time
from typing import Any

from partitioner import (
    Model,
    PartitionOptions,
    Plan,
    TrtBackendError,
    load_model,
    plan_model,
)
from partitioner.capability import Verdict
from partitioner.model import ModelSource, serialize
from partitioner.plan import assess_model, build_plan, plan_target, validate_options
from trt_backend.errors import ParserCrashError
from trt_backend.tensorrt.flavor import load_flavor
from trt_backend.tensorrt.oracle import ParserOracle

log = logging.getLogger(__name__)


_oracle_lock = threading.Lock()  # one parser/builder per flavor, shared by every caller: not re-entrant


@functools.lru_cache(maxsize=4)
def parser_oracle(flavor: str) -> ParserOracle:
    """The process's parser oracle for ``flavor``, made once; planners use it through
    :func:`plan_with_parser`, which takes the lock its parser and builder need."""
    return ParserOracle(load_flavor(flavor))


def plan_with_parser(model: ModelSource | Model, flavor: str, options: PartitionOptions) -> Plan:
    """``plan_model`` with the shared parser oracle of ``flavor``, one caller at a time."""
    oracle = parser_oracle(flavor)
    with _oracle_lock:
        return plan_model(model, oracle, options)


def make_plan(source: ModelSource | Model, options: PartitionOptions | None = None, *, flavor: str = "auto",
              isolate: bool = False) -> Plan:
    """Load and plan ``source`` with the parser of ``flavor`` (``auto``: tensorrt, else tensorrt_rtx).

    With ``isolate`` the capability queries run in a child process and only the plan comes back;
    a native crash there becomes a :class:`ParserCrashError`."""
    options = options or PartitionOptions()
    start = time.perf_counter()
    model = load_model(source)
    if not isolate:
        plan = plan_with_parser(model, flavor, options)
        plan.seconds = time.perf_counter() - start
        return plan
    validate_options(model, options)
    try:  # plugins travel to the child by pickle (registry records hold module-level functions)
        pickle.dumps(options)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise TrtBackendError(f"these plugins cannot be sent to an isolated planner ({e}); "
                              "plan without isolation") from None
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, serialize(model.proto, model.source), model.source, flavor, options))
    proc.start()
    child.close()
    try:
        result: dict[str, Any] = parent.recv()
    except EOFError:
        result = {}
    proc.join()
    if "error" in result:
        raise result["error"]
    if "verdicts" not in result:
        code = proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        raise ParserCrashError(f"{model.source}: the TensorRT parser crashed ({how}) while checking capability")
    verdicts = [Verdict(b, r) for b, r in result["verdicts"]]
    plan = build_plan(model, verdicts, result["target"], options.min_segment_size, target=result["plan_target"])
    plan.oracle_calls = result["oracle_calls"]
    plan.seconds = time.perf_counter() - start
    return plan


def _child(conn: Any, data: bytes, name: str, flavor: str, options: PartitionOptions) -> None:
    try:
        oracle = ParserOracle(load_flavor(flavor))
        verdicts, stats = assess_model(load_model(data), oracle, options)
        conn.send({"verdicts": [(v.backend, v.reason) for v in verdicts], "target": oracle.target,
                   "plan_target": plan_target(options, oracle), "oracle_calls": stats.oracle_calls})
    except TrtBackendError as e:
        conn.send({"error": type(e)(str(e).replace("<bytes>", name))})
    finally:
        conn.close()
        os._exit(0)

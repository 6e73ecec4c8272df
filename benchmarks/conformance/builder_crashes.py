"""Which ONNX ops crash the installed TensorRT's builder in native code, measured on ONNX's backend
node test cases, each parsed and built in a process of its own.

    python benchmarks/conformance/builder_crashes.py                 # every case, then the shared-input variants
    python benchmarks/conformance/builder_crashes.py --pattern attention --jobs 2

For every case of ``onnx.backend.test.case.node.collect_testcases()`` with a model: TensorRT's
parser is asked about it (``supports_model_v2``) and, where it takes the model, the network is
built (static shapes as the case gives them; a dynamic dim at 1) in a child process. Then the
cases of one node with two inputs or more of one type and shape are built again with those inputs
made one tensor (a crash seen first that way: TensorRT-RTX 1.7's Attention with query = key). Each
child ends as: built, no engine (the builder said no: the compile path already falls back from
that), refused by the parser, or a signal (a native crash), or a time-out.

Target: every case that crashes is of an op ``trt_backend.tensorrt.questions.BUILDER_CRASHES``
lists for this TensorRT, so that the parser's answer keeps it from the builder. A report: it
prints PASS or FAIL and exits 0."""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import onnx

# Run in the child: parse, build, say which (the flavor the project would load).
CHILD = """
import sys
from trt_backend.tensorrt.flavor import load_flavor
trt = load_flavor("auto").module
path = sys.argv[1]
logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
builder = trt.Builder(logger)
network = builder.create_network(0)
parser = trt.OnnxParser(network, logger)
with open(path, "rb") as f:
    data = f.read()
if not parser.supports_model_v2(data, path):
    print("refused")
    sys.exit(0)
config = builder.create_builder_config()
inputs = [network.get_input(i) for i in range(network.num_inputs)]
if any(d < 0 for t in inputs for d in t.shape):
    profile = builder.create_optimization_profile()
    for t in inputs:
        if not t.is_shape_tensor:
            shape = tuple(1 if d < 0 else d for d in t.shape)
            profile.set_shape(t.name, shape, shape, shape)
    config.add_optimization_profile(profile)
print("built" if builder.build_serialized_network(network, config) is not None else "no engine")
"""


def shared_inputs(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """``model`` (one node) with its graph inputs of one type and shape made one tensor; None where
    no two are alike."""
    graph = model.graph
    if len(graph.node) != 1:
        return None
    weights = {t.name for t in graph.initializer}
    alike: dict[bytes, list[str]] = collections.defaultdict(list)
    for vi in graph.input:
        if vi.name not in weights:
            alike[vi.type.SerializeToString()].append(vi.name)
    renamed = {name: names[0] for names in alike.values() for name in names[1:]}
    if not renamed:
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    node = out.graph.node[0]
    for k, name in enumerate(node.input):
        node.input[k] = renamed.get(name, name)
    kept = [vi for vi in out.graph.input if vi.name not in renamed]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    return out


def run_case(path: str, timeout: float) -> str:
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "time-out"
    if proc.returncode < 0:
        return f"signal {-proc.returncode}"
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if proc.returncode == 0 and lines else f"exit {proc.returncode}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pattern", default="", help="only cases whose name holds this")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    args = p.parse_args(argv)

    from onnx.backend.test.case import node

    from trt_backend.tensorrt.flavor import load_flavor
    from trt_backend.tensorrt.questions import BUILDER_CRASHES

    flavor = load_flavor("auto")
    listed = {op for (name, version), ops in BUILDER_CRASHES.items()
              if flavor.name == name and flavor.version.startswith(version) for _, op in ops}
    with warnings.catch_warnings():  # (the cases' expected outputs divide by zero on purpose)
        warnings.simplefilter("ignore")
        cases = {c.name: c.model for c in node.collect_testcases() if c.model is not None and args.pattern in c.name}
    with tempfile.TemporaryDirectory(prefix="builder_crashes_") as tmp:
        jobs: list[tuple[str, str, str]] = []  # (sweep, case, path)
        for name, case in cases.items():
            for sweep, model in (("as given", case), ("inputs shared", shared_inputs(case))):
                if model is None:
                    continue
                path = os.path.join(tmp, f"{name}.{len(jobs)}.onnx")
                onnx.save(model, path)
                jobs.append((sweep, name, path))
        ops = {name: sorted({n.op_type for n in case.graph.node}) for name, case in cases.items()}
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            outcomes = list(pool.map(lambda job: run_case(job[2], args.timeout), jobs))
    print(f"{flavor.name} {flavor.version}: {len(cases)} ONNX backend node cases, built in a process each")
    for sweep in ("as given", "inputs shared"):
        counts = collections.Counter(o for (s, _, _), o in zip(jobs, outcomes) if s == sweep)
        print(f"  {sweep:<14} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    crashes = [(s, name, o) for (s, name, _), o in zip(jobs, outcomes) if o.startswith(("signal", "time-out"))]
    for sweep, name, outcome in crashes:
        print(f"  {outcome:<10} {name} ({sweep}; ops {', '.join(ops[name])})")
    unlisted = sorted({op for _, name, _ in crashes for op in ops[name]} - listed) if crashes else []
    covered = all(set(ops[name]) & listed for _, name, _ in crashes)
    print(f"{'PASS' if covered else 'FAIL'}  every crash is of an op BUILDER_CRASHES lists for this TensorRT "
          f"({', '.join(sorted(listed)) or 'none'})" + ("" if covered else f"; not listed: {', '.join(unlisted)}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

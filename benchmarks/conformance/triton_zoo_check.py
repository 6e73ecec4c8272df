"""export-triton on the model zoo (``benchmarks/conformance/model_zoo.py``'s exported models): each model is
built (TensorRT-RTX ahead of time) and exported as a Triton repository, then the test suite's
independent checker (``tests/support/triton_checker.py``: Triton's schema, its ensemble
load rules, step-by-step execution on CPU) runs the ensemble on the zoo's seeded inputs and the
outputs are compared with whole-model ONNX Runtime. One line per model; a report, exits 0.

    python benchmarks/conformance/triton_zoo_check.py [NAME ...]      # default: every model in the zoo cache
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.conformance.model_zoo import input_specs, make_inputs, shapes_arg
from tests.support.triton_checker import RepoInvalid, run_ensemble
from trt_backend.ort.sessions import ort_errors

ZOO = os.path.expanduser("~/.cache/trt-backend-zoo/models")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ATOL = 1e-4


def check(name: str, work: str) -> str:
    import onnxruntime as ort

    path = os.path.join(ZOO, name + ".onnx")
    specs = input_specs(path)
    repo = os.path.join(work, name)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "export-triton", path, "-o", repo,
                           *shapes_arg(specs)], capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if proc.returncode:
        return f"REFUSED  {name}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    models = proc.stdout.splitlines()[0].split("|")[1].strip()
    feeds = make_inputs(specs)
    try:  # a scalar travels as [1] through Triton
        got = run_ensemble(repo, {n: v.reshape(1) if v.ndim == 0 else v for n, v in feeds.items()})
    except RepoInvalid as e:
        return f"FAIL     {name}: {models}; checker: {e}"
    except ort_errors() as e:  # a step ONNX Runtime cannot run on these inputs
        return f"ERROR    {name}: {models}; a step failed in ONNX Runtime: {str(e).splitlines()[0][:300]}"
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in ref.get_outputs()]
    worst = 0.0
    for n, want in zip(names, ref.run(names, feeds)):
        g = got[n].reshape(()) if want.shape == () and got[n].shape == (1,) else got[n]
        if g.shape != want.shape or (want.dtype.kind not in "fc" and not np.array_equal(g, want)):
            return f"FAIL     {name}: {models}; output {n} differs ({g.shape} vs {want.shape})"
        if want.dtype.kind in "fc":
            worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - want.astype(np.float64)), initial=0.0)))
    verdict = "PASS" if worst <= ATOL else "FAIL"
    return f"{verdict:<8} {name}: {models}; max abs diff {worst:.2e} (atol {ATOL}); {time.perf_counter() - start:.0f} s"


def main() -> int:
    names = sys.argv[1:] or sorted(f[:-5] for f in os.listdir(ZOO) if f.endswith(".onnx"))
    with tempfile.TemporaryDirectory(prefix="triton-zoo-") as work:
        for name in names:
            print(check(name, work), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

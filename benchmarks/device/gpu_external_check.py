"""On a machine with a GPU: a model whose weights are external data, built into a folder (RTX
engines from segments that reference the data file), moved, loaded and run on TensorRT, against
whole-model ONNX Runtime from the path. Prints PASS/FAIL; exits 0 either way (a report).

    python benchmarks/device/gpu_external_check.py [--hidden 1024] [--blocks 8]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support.external_mlp import write_mlp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--blocks", type=int, default=8)
    args = ap.parse_args()
    import onnxruntime as ort

    from trt_backend.artifacts.write import build as build_folder_build
    from trt_backend.session.options import SessionOptions
    from trt_backend.session.session import Session

    h = args.hidden
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m", "mlp.onnx")
        os.makedirs(os.path.dirname(model))
        weights = write_mlp(model, h, args.blocks)
        out = os.path.join(tmp, "built")
        build_folder_build(model, out, [{"x": ((1, h), (4, h), (8, h))}], SessionOptions(flavor="tensorrt_rtx"))
        moved = os.path.join(tmp, "elsewhere")
        shutil.move(out, moved)
        x = np.random.default_rng(0).standard_normal((3, h)).astype(np.float32)
        ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        sess = Session.load(moved, SessionOptions(emulate=False))
        got = sess.run(None, {"x": x})[0]
        err = float(np.max(np.abs(got - ref)))
        print(f"weights {weights / 2**20:.1f} MiB; executors {sess.segment_executors}; max abs error {err:.3g}")
        ok = "tensorrt" in sess.segment_executors and err <= 1e-2
        print(f"{'PASS' if ok else 'FAIL'}  TensorRT segments built from external-data references run and match "
              "ONNX Runtime (atol 1e-2: TF32 may be on)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

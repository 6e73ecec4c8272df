"""Write the export-triton test cases into a folder, for ``triton_serve_check.py`` to load in a
real tritonserver: the demo (with and without batching), a dynamic-length transformer block, a
NonZero detection graph, an NMS + Loop detection graph (scalars across boundaries), a conv chain with external
weights, and the demo as full-TensorRT plans
(stand-in engine bytes: full TensorRT does not install here). Prints the check commands.

    python benchmarks/conformance/triton_cases.py /tmp/triton_cases     # project venv, repository root
"""
from __future__ import annotations

import os
import sys

import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support.graphs import (
    conv_chain,
    detection_model,
    nonzero_detection_model,
    transformer_model,
)
from trt_backend.cli import main as cli
from trt_backend.data.demo import DEMO_PATH
from trt_backend.export.repo import TritonOptions, triton_repo
from trt_backend.export.source import from_build_folders
from trt_backend.export.write import write_repo


def main() -> int:
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "triton_cases")
    os.makedirs(out, exist_ok=True)
    p = lambda name: os.path.join(out, name)  # noqa: E731
    onnx.save(transformer_model(), p("transformer.onnx"))
    onnx.save(nonzero_detection_model(), p("det.onnx"))
    onnx.save(detection_model(), p("nms.onnx"))
    onnx.save_model(conv_chain(blocks=2), p("convs.onnx"), save_as_external_data=True, location="convs.onnx.weights",
                    size_threshold=0)
    demo = ["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:4x3x32x32", "--max-shapes", "image:8x3x32x32"]
    cli(["build", DEMO_PATH, "-o", p("demo_build"), *demo])
    runs = [
        (["export-triton", p("demo_build"), "-o", p("demo_repo")], DEMO_PATH, "image:3x3x32x32"),
        (["export-triton", p("demo_build"), "-o", p("demo_batched_repo"), "--max-batch-size", "8"], DEMO_PATH,
         "image:2x3x32x32"),
        (["export-triton", p("transformer.onnx"), "-o", p("transformer_repo"), "--exclude-ops",
          "Softmax,LayerNormalization", "--min-segment-size", "1", "--min-shapes", "x:1x1x32", "--opt-shapes",
          "x:2x8x32", "--max-shapes", "x:2x16x32"], p("transformer.onnx"), "x:2x7x32"),
        (["export-triton", p("det.onnx"), "-o", p("det_repo"), "--exclude-ops", "NonZero", "--min-segment-size", "1",
          "--min-shapes", "feats:1x4x8", "--opt-shapes", "feats:2x16x8", "--max-shapes", "feats:2x32x8"],
         p("det.onnx"), "feats:2x16x8"),
        (["export-triton", p("nms.onnx"), "-o", p("nms_repo"), "--exclude-ops", "NonMaxSuppression,Loop",
          "--min-segment-size", "1", "--min-shapes", "feats:1x4x8", "--opt-shapes", "feats:2x16x8", "--max-shapes",
          "feats:2x32x8"], p("nms.onnx"), "feats:2x16x8"),
        (["export-triton", p("convs.onnx"), "-o", p("convs_repo"), "--min-shapes", "x:1x8x16x16", "--opt-shapes",
          "x:2x8x16x16", "--max-shapes", "x:4x8x16x16"], p("convs.onnx"), "x:3x8x16x16"),
    ]
    checks = []
    for argv, model, shape in runs:
        cli([*argv, "--force"])
        checks.append((argv[3], model, shape))
    source = from_build_folders([p("demo_build")])
    source.runtime = "tensorrt 10.13.0.35"  # stand-in: the RTX engine bytes play full-TensorRT engines
    source.engines = {seg: {"8.6": e[""], "9.0": e[""]} for seg, e in source.engines.items()}
    write_repo(triton_repo(source, TritonOptions(max_batch_size=8)), p("plan_repo"), force=True)
    checks.append((p("plan_repo"), DEMO_PATH, "image:2x3x32x32"))
    print("\ncheck each in PyTriton's venv:")
    for repo, model, shape in checks:
        print(f"  python benchmarks/conformance/triton_serve_check.py {repo} {model} --shape {shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Other tools' answers to "which nodes can run in fp16", run in the interpreter that has them:
NVIDIA ModelOpt's ONNX AutoCast and onnxconverter-common's ``auto_convert_mixed_precision``.

    TOOLS_PYTHON benchmarks/conformance/precision_tools.py TOOL MODEL.onnx FEEDS_DIR OUT.onnx [--atol 1e-3 --rtol 1e-3]

TOOL is ``autocast`` or ``onnxconverter``. FEEDS_DIR holds the validation feeds as
``feed_000.npz``, ... (the same ones ``--precision auto`` searches on). Writes OUT.onnx (fp32
inputs and outputs kept) and prints one JSON line: ``{"seconds": ..., "version": ...}`` or
``{"error": ...}``. Needs only numpy, onnx, onnxruntime and the tool: ``precision_head_to_head.py``
runs it in a separate virtual environment, because ModelOpt pins onnx and onnxruntime versions
of its own.

- autocast: ``modelopt.onnx.autocast.convert_to_mixed_precision(low_precision_type="fp16",
  calibration_data=FEEDS_DIR, keep_io_types=True)`` with its defaults otherwise: a node stays
  fp32 when a value it reads or writes on the calibration data exceeds ``data_max`` (512) or an
  initializer exceeds ``init_max`` (the fp16 maximum). It never measures the converted model.
- onnxconverter: ``onnxconverter_common.auto_mixed_precision.auto_convert_mixed_precision`` with
  ``keep_io_types=True`` and, as its check, the elementwise rule at (atol, rtol) that
  ``trt_backend.accuracy.numeric.tolerance_ratio`` states (``tests/support/elementwise.py``,
  which needs only numpy, since this runs outside the project's environment). It takes one feed:
  the validation feeds stacked along the batch axis. It bisects the node list, running the real fp16 model in ONNX
  Runtime CPU."""
from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import sys
import time
from importlib.metadata import version
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support.elementwise import within


def feeds_of(folder: str) -> list[dict[str, np.ndarray]]:
    return [dict(np.load(p)) for p in sorted(glob.glob(os.path.join(folder, "feed_*.npz")))]


def autocast(model_path: str, feeds_dir: str, atol: float, rtol: float) -> tuple[Any, str]:
    from modelopt.onnx.autocast import convert_to_mixed_precision

    model = convert_to_mixed_precision(model_path, low_precision_type="fp16", calibration_data=feeds_dir,
                                       keep_io_types=True)
    return model, "nvidia-modelopt " + version("nvidia-modelopt")


def onnxconverter(model_path: str, feeds_dir: str, atol: float, rtol: float) -> tuple[Any, str]:
    import onnx
    from onnxconverter_common.auto_mixed_precision import auto_convert_mixed_precision

    feeds = feeds_of(feeds_dir)
    one = {k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]}

    def check(ref: list[np.ndarray], ours: list[np.ndarray]) -> bool:
        return all(within(o, r, atol, rtol) for o, r in zip(ours, ref))

    model = auto_convert_mixed_precision(onnx.load(model_path), one, validate_fn=check, keep_io_types=True)
    return model, "onnxconverter-common " + version("onnxconverter-common")


TOOLS = {"autocast": autocast, "onnxconverter": onnxconverter}


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tool", choices=sorted(TOOLS))
    p.add_argument("model")
    p.add_argument("feeds")
    p.add_argument("out")
    p.add_argument("--atol", type=float, default=1e-3)
    p.add_argument("--rtol", type=float, default=1e-3)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    chatter = io.StringIO()  # onnxconverter-common prints every attempt
    try:
        with contextlib.redirect_stdout(chatter):
            model, name = TOOLS[args.tool](args.model, args.feeds, args.atol, args.rtol)
    except Exception as e:  # noqa: BLE001 - the report names the tool's own failure and goes on
        first = (str(e).strip().splitlines() or [""])[0][:200]
        print(json.dumps({"error": f"{type(e).__name__}: {first}", "seconds": time.perf_counter() - t0}))
        return 0
    seconds = time.perf_counter() - t0
    import onnx

    onnx.save(model, args.out)
    print(json.dumps({"seconds": seconds, "version": name}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

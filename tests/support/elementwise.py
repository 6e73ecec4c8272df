"""The elementwise tolerance check written with numpy alone, for code that runs outside the
project's environment (``benchmarks/conformance/precision_tools.py`` runs in the tools'
interpreter). It agrees with ``trt_backend.accuracy.numeric.tolerance_ratio`` (a test holds that)."""
from __future__ import annotations

import numpy as np


def within(ours: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> bool:
    """Polygraphy's elementwise check: each element within atol, or within rtol of the reference
    (zeros nudged by machine epsilon); NaN against NaN passes, any other NaN fails."""
    a, b = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    if a.shape != b.shape:
        return False
    absdiff = np.abs(a - b)
    rel = absdiff / np.where(b == 0, 2.220446049250313e-16, np.abs(b))
    ok = (absdiff <= atol) | (rel <= rtol) | (a == b) | (np.isnan(a) & np.isnan(b))
    return bool(np.all(ok))

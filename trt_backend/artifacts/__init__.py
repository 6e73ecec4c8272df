"""Build artifacts: the build folder (:mod:`~trt_backend.artifacts.write` writes what was built,
:mod:`~trt_backend.artifacts.read` is the one loader every door uses), the build cache of whole
folders, the manifest's seal and signature, and the saved plan (derived profiles reused).

Names load on first use (``build``, ``open_build``): the compile path imports the saved plan from
here, and the folder's write side imports the compile path."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {"build": "trt_backend.artifacts.write",
         "open_build": "trt_backend.artifacts.read",
         "OpenedBuild": "trt_backend.artifacts.read", "is_build_folder": "trt_backend.artifacts.read",
         "SessionPlan": "trt_backend.artifacts.saved"})

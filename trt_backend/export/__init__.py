"""Export: a Triton Inference Server model repository from build folders, a model file or a Session."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {
    "ExportSource": "trt_backend.export.source",
    "from_build_folders": "trt_backend.export.source",
    "from_model": "trt_backend.export.source",
    "from_session": "trt_backend.export.source",
    "TritonOptions": "trt_backend.export.repo",
    "TritonRepo": "trt_backend.export.repo",
    "triton_repo": "trt_backend.export.repo",
    "write_repo": "trt_backend.export.write",
})

"""Pure-ONNX planning: load/normalize, capability, partition, extract, plan.

Imports nothing at load: each public name loads its module (onnx and numpy) on first use, so
that ``partitioner.errors`` is cheap to import; a TensorRT parser enters through a
:class:`CapabilityOracle` passed in by the caller."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from partitioner.capability import (
        CapabilityOracle,
        Claim,
        Piece,
        PluginClaim,
        QueryResult,
        Verdict,
        assess,
    )
    from partitioner.cost import BoundaryCost
    from partitioner.errors import (
        InvalidModelError,
        ModelLoadError,
        ModelTooLargeError,
        OptionsError,
        TrtBackendError,
    )
    from partitioner.extract import boundary, extract
    from partitioner.model import Model, load_model
    from partitioner.partition import DEFAULT_MIN_SEGMENT_SIZE
    from partitioner.plan import (
        NodeInfo,
        PartitionOptions,
        Plan,
        Segment,
        build_plan,
        plan_model,
    )
    from partitioner.rules import Rules

# public name -> module holding it (imported on first use)
_PUBLIC = {
    "CapabilityOracle": "partitioner.capability",
    "Claim": "partitioner.capability",
    "Piece": "partitioner.capability",
    "PluginClaim": "partitioner.capability",
    "QueryResult": "partitioner.capability",
    "Verdict": "partitioner.capability",
    "assess": "partitioner.capability",
    "BoundaryCost": "partitioner.cost",
    "InvalidModelError": "partitioner.errors",
    "ModelLoadError": "partitioner.errors",
    "ModelTooLargeError": "partitioner.errors",
    "OptionsError": "partitioner.errors",
    "TrtBackendError": "partitioner.errors",
    "boundary": "partitioner.extract",
    "extract": "partitioner.extract",
    "Model": "partitioner.model",
    "load_model": "partitioner.model",
    "DEFAULT_MIN_SEGMENT_SIZE": "partitioner.partition",
    "NodeInfo": "partitioner.plan",
    "PartitionOptions": "partitioner.plan",
    "Plan": "partitioner.plan",
    "Segment": "partitioner.plan",
    "build_plan": "partitioner.plan",
    "plan_model": "partitioner.plan",
    "Rules": "partitioner.rules",
}

__all__ = [
    "BoundaryCost", "DEFAULT_MIN_SEGMENT_SIZE", "CapabilityOracle", "Claim", "InvalidModelError", "Model",
    "ModelLoadError",
    "ModelTooLargeError",
    "NodeInfo", "OptionsError", "PartitionOptions", "Piece", "Plan", "PluginClaim", "QueryResult", "Rules",
    "Segment", "TrtBackendError", "Verdict", "assess", "boundary", "build_plan", "extract", "load_model",
    "plan_model",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'partitioner' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))

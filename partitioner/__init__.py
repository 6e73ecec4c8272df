"""Pure-ONNX planning: load/normalize, capability, partition, extract, plan.

Imports nothing at load: each public name loads its module (onnx and numpy) on first use, so
that ``partitioner.errors`` is cheap to import; a TensorRT parser enters through a
:class:`CapabilityOracle` passed in by the caller."""
from __future__ import annotations

from typing import TYPE_CHECKING

from partitioner._facade import facade

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

__getattr__, __dir__, _names = facade(__name__, _PUBLIC)

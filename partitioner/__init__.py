"""Pure-ONNX planning: load/normalize, capability, partition, extract, plan.

Imports only onnx and numpy at load; a TensorRT parser enters through a
:class:`CapabilityOracle` passed in by the caller."""
from __future__ import annotations

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

__all__ = [
    "BoundaryCost", "DEFAULT_MIN_SEGMENT_SIZE", "CapabilityOracle", "Claim", "InvalidModelError", "Model", "ModelLoadError",
    "ModelTooLargeError",
    "NodeInfo", "OptionsError", "PartitionOptions", "Piece", "Plan", "PluginClaim", "QueryResult", "Rules",
    "Segment", "TrtBackendError", "Verdict", "assess", "boundary", "build_plan", "extract", "load_model",
    "plan_model",
]

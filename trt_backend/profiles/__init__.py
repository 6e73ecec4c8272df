"""Optimisation profiles: the profile type (per tensor min/opt/max shapes, and values for shape
tensors), the profiles a user gives for model inputs (checked against the model), and the
profiles derived for every TensorRT segment input (graph bounds, symbolic shapes, calibration).

- :mod:`~trt_backend.profiles.profile`: ``TensorProfile`` and ``Profile`` (tensor name ->
  TensorProfile), JSON form; a leaf that knows no model or runtime.
- :mod:`~trt_backend.profiles.node_arg`: model inputs and outputs as onnxruntime describes them.
- :mod:`~trt_backend.profiles.given`: the user's profiles, checked and completed.
- :mod:`~trt_backend.profiles.bounds` (its rules per op in :mod:`~trt_backend.profiles.bound_rules`)
  and :mod:`~trt_backend.profiles.derive`: segment profiles."""
from __future__ import annotations

from trt_backend.profiles.derive import derive_profiles, shape_tensor_inputs
from trt_backend.profiles.given import (
    check_profile_names,
    complete_profiles,
    normalize_profiles,
)
from trt_backend.profiles.node_arg import NodeArg, graph_inputs, node_arg
from trt_backend.profiles.profile import (
    CALIBRATED,
    STATIC,
    SYMBOLIC,
    USER,
    Profile,
    Shape,
    TensorProfile,
    covering_profile,
    describe_profile,
    profiles_from_json,
    profiles_to_json,
    tensor_profile,
)

__all__ = ["CALIBRATED", "STATIC", "SYMBOLIC", "USER", "NodeArg", "Profile", "Shape", "TensorProfile",
           "check_profile_names", "complete_profiles", "covering_profile", "derive_profiles", "describe_profile",
           "graph_inputs", "node_arg", "normalize_profiles", "profiles_from_json", "profiles_to_json",
           "shape_tensor_inputs", "tensor_profile"]

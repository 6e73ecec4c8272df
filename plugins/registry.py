"""Plugin records and the registry that holds them (an instance, never module state).

A :class:`PluginRecord` says which ONNX op it covers (domain, op type, opset range), decides
per node with a reason (:meth:`PluginRecord.claim`, the partitioner's ``PluginClaim``), maps
the node's attributes to plugin fields, gives the output shape and dtype, a native stand-in
for capability checks, its kernel source, a host reference and its TensorRT registration.
Records hold module-level functions only, so a registry pickles (isolated planning)."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import onnx

from partitioner.capability import Claim
from partitioner.errors import OptionsError
from partitioner.model import Model
from partitioner.standin import Replacement

Dim = int | str | None


@dataclass(frozen=True)
class PluginRecord:
    """One plugin. ``name`` appears in verdicts as ``plugin:<name>``; ``plugin_op`` in
    ``plugin_namespace`` is the op type the engine build rewrites claimed nodes to (and the
    TensorRT plugin's name)."""

    name: str
    domain: str  # ONNX domain covered; "" is ai.onnx
    op_type: str
    opsets: tuple[int, int]  # inclusive range of the domain's opset
    plugin_op: str
    plugin_namespace: str
    check: Callable[[onnx.NodeProto, Model], str | None]  # None: the plugin runs it; else why not
    params: Callable[[onnx.NodeProto, Model], Any]  # node -> plugin parameters (with to_attributes())
    output_shape: Callable[[Any, Sequence[Dim]], list[Dim]]  # (params, input shape) -> output shape
    output_dtype: Callable[[int], int]  # ONNX elem type of input 0 -> of output 0
    kernel_source: Callable[[], str]
    host_reference: Callable[[Any, np.ndarray], np.ndarray]  # (params, input) -> output, on the CPU
    make_stand_in: Callable[[onnx.NodeProto, Model], Replacement | None] | None = None
    register: Callable[[ModuleType], None] | None = None  # TensorRT registration; takes the module
    targets: tuple[str, ...] = ("tensorrt",)
    target_notes: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def covers(self, node: onnx.NodeProto, model: Model) -> bool:
        """The node is this record's op, in a covered opset."""
        domains = {self.domain, "ai.onnx"} if not self.domain else {self.domain}
        if node.op_type != self.op_type or node.domain not in domains:
            return False
        version = next((o.version for o in model.proto.opset_import
                        if o.domain == self.domain or (not self.domain and o.domain == "ai.onnx")), None)
        return version is not None and self.opsets[0] <= version <= self.opsets[1]

    def claim(self, node: onnx.NodeProto, model: Model) -> Claim:
        """The partitioner's question: will this plugin run ``node``? (no, with a reason)"""
        if not self.covers(node, model):
            return Claim(False)
        reason = self.check(node, model)
        return Claim(reason is None, reason)

    def stand_in(self, node: onnx.NodeProto, model: Model) -> Replacement | None:
        """A native stand-in of the same output shape and dtype, or None (then cut out)."""
        return self.make_stand_in(node, model) if self.make_stand_in is not None else None

    def target_problem(self, target: str) -> str | None:
        """Why ``target`` cannot run this plugin, or None when it can."""
        if target in self.targets:
            return None
        note = self.target_notes.get(target, "it has no plugin support")
        return f"target {target} cannot run it: {note}"


class Registry:
    """The plugins one planning or build uses. Pass it around; nothing registers globally."""

    def __init__(self, records: Iterable[PluginRecord] = ()) -> None:
        self._records: dict[str, PluginRecord] = {}
        for r in records:
            self.add(r)

    def add(self, record: PluginRecord) -> None:
        if record.name in self._records:
            raise ValueError(f"a plugin named '{record.name}' is already in this registry")
        self._records[record.name] = record

    @property
    def records(self) -> tuple[PluginRecord, ...]:
        return tuple(self._records.values())

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def get(self, name: str) -> PluginRecord:
        try:
            return self._records[name]
        except KeyError:
            raise OptionsError(f"no plugin named '{name}' (have: {', '.join(self._records) or 'none'})") from None

    def for_node(self, node: onnx.NodeProto, model: Model) -> PluginRecord | None:
        """The first record that claims ``node``."""
        return next((r for r in self._records.values() if r.claim(node, model).claimed), None)

    @property
    def op_types(self) -> frozenset[str]:
        return frozenset(r.op_type for r in self._records.values())

    @property
    def plugin_ops(self) -> frozenset[str]:
        """Op types of rewritten nodes: never to be handed to a parser that may know them."""
        return frozenset(r.plugin_op for r in self._records.values())

    def claims(self) -> tuple[PluginRecord, ...]:
        """The records as ``PartitionOptions.plugins``."""
        return self.records

    def select(self, op_types: Iterable[str]) -> Registry:
        """A registry with only the records covering ``op_types``."""
        wanted = set(op_types)
        unknown = wanted - self.op_types
        if unknown:
            raise OptionsError(f"no plugin covers op type(s) {', '.join(sorted(unknown))} "
                               f"(plugins cover: {', '.join(sorted(self.op_types)) or 'none'})")
        return Registry(r for r in self._records.values() if r.op_type in wanted)

    def register_with(self, trt: ModuleType) -> list[str]:
        """Register every plugin with the TensorRT module ``trt`` (full TensorRT with
        ``tensorrt.plugin``); returns the plugin ids registered."""
        done = []
        for r in self._records.values():
            if r.register is not None:
                r.register(trt)
                done.append(f"{r.plugin_namespace}::{r.plugin_op}")
        return done

"""One question to TensorRT's ONNX parser about a model's bytes (``OnnxParser.supports_model_v2``),
answered in plain values. The capability oracle asks it in this process, the early parse of a
model file in a child process (:mod:`trt_backend.tensorrt.early_parse`); neither needs onnx here.

The answer leaves out the nodes of ops the parser takes but whose build crashes TensorRT's builder
(:data:`BUILDER_CRASHES`, measured): a native crash cannot be caught in the process that builds,
so such a node is answered as refused, and runs on ONNX Runtime."""
from __future__ import annotations

import re
from typing import Any

from partitioner.wire import main_graph_ops, untied_inputs
from trt_backend.tensorrt.flavor import Flavor, native_stderr, network_flags

# (whether the parser takes every node, its pieces as (node indices, verified), node index -> why not)
Answer = tuple[bool, tuple[tuple[tuple[int, ...], bool], ...], dict[int, str]]


def asked_of(data: bytes) -> tuple[bytes, bool]:
    """The bytes of a model file (``data``) that TensorRT's parser is handed for it, and whether
    they are the file's with its inputs' unknown dims as loading leaves them
    (:func:`partitioner.wire.untied_inputs`: where the file declares a 0 or a "?" on two dims of
    its inputs, which the parser would read as an empty dim or as dims held equal). The early
    parse, a build's head start and the compile path's build from the file all hand it these."""
    untied = untied_inputs(data)
    return (untied, True) if untied is not None else (data, False)


def supports(flavor: Flavor, builder: Any, logger: Any, data: bytes, path: str | None) -> Answer:
    """The parser's answer about the model ``data`` (external data relative to ``path``), on a
    fresh network of ``builder``; the caller holds :data:`~trt_backend.tensorrt.flavor.tensorrt_lock`
    where other threads may use TensorRT."""
    network = builder.create_network(network_flags(flavor))
    answer, parser = supports_into(flavor, network, logger, data, path)
    del parser, network
    return answer


def supports_into(flavor: Flavor, network: Any, logger: Any, data: bytes, path: str | None) -> tuple[Answer, Any]:
    """The parser's answer about the model ``data``, asked on ``network``, and the parser (keep it
    while ``network`` is used). Where the parser takes every node, ``network`` holds the model as
    ``parse`` would have made it, ready to build (``supports_model_v2``'s documented contract)."""
    parser: Any = flavor.module.OnnxParser(network, logger)  # ``network`` stays referenced while ``parser`` lives
    with native_stderr():
        supported = bool(parser.supports_model_v2(data, path))
    pieces = tuple((tuple(int(k) for k in parser.get_subgraph_nodes(i)), bool(parser.is_subgraph_supported(i)))
                   for i in range(parser.num_subgraphs))
    return _without_builder_crashes(flavor, data, (supported, pieces, parser_errors(parser))), parser


UNNAMED = -1  # the key of an error the parser gave without naming its node, in an answer's errors


def parser_errors(parser: Any) -> dict[int, str]:
    """The first error ``parser`` gives of each node it names, by node index, and under
    :data:`UNNAMED` the first it gives without naming one (an op's importer failing where the parser
    has lost track of the node: TensorRT-RTX 1.7's ScatterElements with a reduction), its message
    ending with the importer's function in brackets (see :func:`importer_op`)."""
    errors: dict[int, str] = {}
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        node = int(err.node())
        if node >= 0 and node not in errors:
            errors[node] = describe_parser_error(err)
        elif node < 0 and UNNAMED not in errors:
            func = str(err.func()).strip()
            errors[UNNAMED] = describe_parser_error(err) + (f" [{func}]" if func else "")
    return errors


_IMPORTER = re.compile(r"\[import([A-Za-z0-9_]+)\]$")


def importer_op(message: str) -> str | None:
    """The op type whose importer gave the error ``message`` (an :data:`UNNAMED` one), where its
    function is named as the ONNX parser names its importers (``importScatterElements``)."""
    match = _IMPORTER.search(message)
    return match.group(1) if match else None


# Ops TensorRT's parser takes whose build can crash the builder (a segmentation fault), by flavor
# name and version prefix, (domain, op type) -> why. Measured: TensorRT-RTX 1.7.1 building on a
# machine without a GPU, ONNX's Attention (opset 23: what PyTorch's exporter makes of
# scaled_dot_product_attention) crashes wherever the builder's own optimizations make its query
# and key one tensor: the same input, an Identity, a Cast to the same type or a Transpose that keeps
# the order in between, or two nodes it merges (Relu of one input, Add of constants of equal values
# under two names), in fp32, fp16 and bf16, 3-D and 4-D, for SM86, SM89 and SM120 alike; with a
# query and key it keeps apart (two MatMuls) it builds. Which nodes the builder merges cannot be
# told from the graph, so every Attention node runs on ONNX Runtime under that version.
BUILDER_CRASHES: dict[tuple[str, str], dict[tuple[str, str], str]] = {
    ("tensorrt_rtx", "1.7."): {("", "Attention"): "TensorRT-RTX 1.7's builder crashes on Attention where its query "
                                                  "and key become one tensor (a segmentation fault, measured building "
                                                  "without a GPU): it runs on ONNX Runtime"},
}


def _without_builder_crashes(flavor: Flavor, data: bytes, answer: Answer) -> Answer:
    """``answer`` with the nodes of ops whose build crashes ``flavor``'s builder answered as
    refused (see :data:`BUILDER_CRASHES`): their reason as the parser's error, and every piece
    holding one unverified, so that the planner asks about the rest again."""
    crashes = next((ops for (name, version), ops in BUILDER_CRASHES.items()
                    if flavor.name == name and flavor.version.startswith(version)), None)
    if not crashes or not any(op.encode() in data for _, op in crashes):  # (a scan of the bytes, before the reader)
        return answer
    ops = main_graph_ops(data)
    found = {k: crashes[op] for k, op in enumerate(ops or ()) if op in crashes}
    if not found:
        return answer
    supported, pieces, errors = answer
    return (False, tuple((nodes, verified and not found.keys() & set(nodes)) for nodes, verified in pieces),
            {**errors, **found})


_ASSERT_MESSAGE = re.compile(r'&&\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\s*$')


def describe_parser_error(err: Any) -> str:
    code = str(err.code()).rsplit(".", 1)[-1]
    desc = str(err.desc()).strip()
    match = _ASSERT_MESSAGE.search(desc)  # "(cond) && "message"": the message says it better
    if match:
        desc = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1))).strip()
    func = str(err.func()).strip()
    if desc in ("", "false", "true"):
        return f"{code} in {func}" if func else code
    return f"{code}: {desc}"

"""``export-triton --max-batch-size``: the batch is the leading dim the profiles give every boundary
tensor as the batch range, whatever the exporter named it (different names per input, as BERT
exports have, or none, as skl2onnx writes); the repository is checked by Triton's schema and run
step by step against whole-model ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests.helpers import const
from tests.support.triton_checker import check_repo, run_ensemble
from tests.support.graphs import assert_same, ort_reference
from trt_backend.cli import main
from trt_backend.errors import ExportError
from trt_backend.export.repo import TritonOptions, triton_repo
from trt_backend.export.source import from_model
from trt_backend.session.options import SessionOptions

pytestmark = pytest.mark.usefixtures("flavor")


def bert_like(hidden: int = 16, vocab: int = 50) -> onnx.ModelProto:
    """Token ids and an attention mask whose leading dims the exporter named differently
    ('batch_size', 'batch'), embedded, masked, attended (a Softmax, run in ONNX Runtime) and pooled."""
    rng = np.random.default_rng(3)
    nodes = [
        h.make_node("Gather", ["emb", "input_ids"], ["e"], name="embed"),
        h.make_node("Cast", ["attention_mask"], ["mf"], name="mask_float", to=T.FLOAT),
        h.make_node("Unsqueeze", ["mf", "axis2"], ["m3"], name="mask_3d"),
        h.make_node("Mul", ["e", "m3"], ["masked"], name="masked"),
        h.make_node("MatMul", ["masked", "wq"], ["q"], name="query"),
        h.make_node("MatMul", ["masked", "wk"], ["k"], name="key"),
        h.make_node("Transpose", ["k"], ["kt"], name="key_t", perm=[0, 2, 1]),
        h.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
        h.make_node("Softmax", ["scores"], ["attn"], name="softmax", axis=-1),
        h.make_node("MatMul", ["attn", "masked"], ["ctx"], name="context"),
        h.make_node("ReduceMean", ["ctx"], ["pooled"], name="pool", axes=[1], keepdims=0),
        h.make_node("Gemm", ["pooled", "wo", "bo"], ["logits"], name="classifier", transB=1),
    ]
    inits = [const("emb", rng.standard_normal((vocab, hidden)).astype(np.float32)),
             const("wq", rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.2),
             const("wk", rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.2),
             const("wo", rng.standard_normal((3, hidden)).astype(np.float32)),
             const("bo", np.zeros(3, np.float32)),
             const("axis2", np.array([2], np.int64))]
    graph = h.make_graph(nodes, "bert_like",
                         [h.make_tensor_value_info("input_ids", T.INT64, ["batch_size", "sequence"]),
                          h.make_tensor_value_info("attention_mask", T.INT64, ["batch", "sequence"])],
                         [h.make_tensor_value_info("logits", T.FLOAT, ["batch_size", 3])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _feeds(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq // 2:] = rng.integers(0, 2, (batch, seq - seq // 2))
    return {"input_ids": rng.integers(0, 50, (batch, seq)).astype(np.int64), "attention_mask": mask}


def test_differently_named_batch_dims_batch_by_their_profiles(tmp_path, capsys) -> None:
    m = bert_like()
    path = str(tmp_path / "bert_like.onnx")
    onnx.save(m, path)
    repo = str(tmp_path / "repo")
    shapes = ["--min-shapes", "input_ids:1x4,attention_mask:1x4", "--opt-shapes", "input_ids:4x8,attention_mask:4x8",
              "--max-shapes", "input_ids:8x16,attention_mask:8x16"]
    assert main(["export-triton", path, "-o", repo, "--exclude-ops", "Softmax", "--max-batch-size", "8", *shapes]) == 0
    assert "max_batch_size 8" in capsys.readouterr().out
    models, ens = check_repo(repo)
    assert ens.config.max_batch_size == 8 and len(models) >= 3
    assert {io.name: list(io.dims) for io in ens.config.input} == {"input_ids": [-1], "attention_mask": [-1]}
    for batch, seq, seed in ((1, 4, 0), (3, 9, 1), (8, 16, 2)):
        feeds = _feeds(batch, seq, seed)
        got = run_ensemble(repo, feeds)
        assert_same([got["logits"]], ort_reference(m, feeds), atol=1e-4)
    # the profiles decide: a batch range that differs between the inputs is the error, named
    uneven = ["--min-shapes", "input_ids:1x4,attention_mask:2x4", "--opt-shapes", "input_ids:4x8,attention_mask:4x8",
              "--max-shapes", "input_ids:8x16,attention_mask:8x16"]
    assert main(["export-triton", path, "-o", str(tmp_path / "r2"), "--exclude-ops", "Softmax",
                 "--max-batch-size", "8", *uneven]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "profile 0 gives the inputs different batch ranges" in err


def test_an_unnamed_batch_dim_of_an_skl2onnx_model_batches_by_its_profile(tmp_path) -> None:
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(10)
    X = rng.standard_normal((80, 5)).astype(np.float32)
    y = X[:, 0] * 2 - X[:, 1] + 0.5 * X[:, 2] * X[:, 3]
    pipe = make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=(16,), max_iter=200, random_state=0))
    pipe.fit(X, y)
    m = skl2onnx.convert_sklearn(pipe, initial_types=[("X", FloatTensorType([None, 5]))], target_opset=17)
    assert not m.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # (the exporter leaves it unnamed)
    path = str(tmp_path / "mlp.onnx")
    onnx.save(m, path)
    source = from_model(path, [{"X": ((1, 5), (4, 5), (16, 5))}], SessionOptions(min_segment_size=1))
    repo = str(tmp_path / "repo")
    assert main(["export-triton", path, "-o", repo, "--min-shapes", "X:1x5", "--opt-shapes", "X:4x5",
                 "--max-shapes", "X:16x5", "--min-segment-size", "1", "--max-batch-size", "16"]) == 0
    models, ens = check_repo(repo)
    assert ens.config.max_batch_size == 16
    for n in (1, 7, 16):
        feeds = {"X": rng.standard_normal((n, 5)).astype(np.float32)}
        got = run_ensemble(repo, feeds)
        assert_same([got[o.name] for o in m.graph.output], ort_reference(m, feeds), atol=1e-4)
    with pytest.raises(ExportError, match=r"profile 0 of model input 'X' takes batches 1\.\.16, but Triton sends any "
                                          r"batch from 1 to 32"):
        triton_repo(source, TritonOptions(max_batch_size=32))

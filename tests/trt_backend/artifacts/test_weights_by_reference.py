"""Build folders that refer to the model's weights instead of copying them
(``build --weights-by-reference``): real TensorRT-RTX builds, real ONNX Runtime sessions on the
folder's models reading the user's data file, or the user's .onnx itself at the offsets protobuf
put each weight at; every door that reads a folder; one clear error when the weights moved, went
or changed; the build cache keeping such folders apart from copying ones."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.support.external_mlp import write_mlp
from partitioner import PartitionOptions
from partitioner.errors import OptionsError
from partitioner.weights import INLINE_MAX_BYTES, inline_payloads, is_external
from plugins import default_registry
from trt_backend.artifacts.read import open_folder
from trt_backend.artifacts.references import refer
from trt_backend.artifacts.write import build
from trt_backend.cli import main
from trt_backend.data.demo import DEMO_PATH
from trt_backend.engines.builder import build_segment
from trt_backend.errors import ArtifactError, WeightsReferenceError
from trt_backend.planning import load_normalized
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session
from trt_backend.tensorrt.flavor import network_flags, shared_logger

HIDDEN, BLOCKS = 256, 6
WEIGHT_BYTES = BLOCKS * (HIDDEN * HIDDEN + HIDDEN) * 4  # 1,579,008: six 256x256 MatMul weights and their biases
PROFILES = [{"x": ((1, HIDDEN), (4, HIDDEN), (8, HIDDEN))}]
SHAPES = ["--min-shapes", f"x:1x{HIDDEN}", "--opt-shapes", f"x:4x{HIDDEN}", "--max-shapes", f"x:8x{HIDDEN}"]
BY_REFERENCE = SessionOptions(weights_by_reference=True)
pytestmark = pytest.mark.usefixtures("flavor")


def write_models(folder: str) -> dict[str, str]:
    """The MLP (3 segments: TensorRT, ONNX Runtime for its Det, TensorRT) twice: weights in an
    external data file, and the same weights inside the .onnx."""
    os.makedirs(folder, exist_ok=True)
    external = os.path.join(folder, "mlp.onnx")
    assert write_mlp(external, HIDDEN, BLOCKS) == WEIGHT_BYTES
    inline = os.path.join(folder, "inline.onnx")
    onnx.save(onnx.load(external), inline)
    return {"external": external, "inline": inline}


def feeds(batch: int = 3) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(5).standard_normal((batch, HIDDEN)).astype(np.float32)}


def folder_bytes(folder: str, engines: bool = False) -> int:
    """Bytes of the folder's files, its engines left out unless asked (they carry the weights too)."""
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder)
               if engines or not n.endswith(".engine"))


def emulated(folder: str) -> np.ndarray:
    return Session.load(folder, SessionOptions(emulate=True)).run(None, feeds())[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, dict[str, str]]:
    """Per kind of model: its path, a by-reference folder and a copying folder of it."""
    root = str(tmp_path_factory.mktemp("refs"))
    out: dict[str, dict[str, str]] = {}
    for kind, model in write_models(os.path.join(root, "models")).items():
        ref, copy = os.path.join(root, f"{kind}_ref"), os.path.join(root, f"{kind}_copy")
        build(model, ref, PROFILES, BY_REFERENCE)
        build(model, copy, PROFILES)
        out[kind] = {"model": model, "ref": ref, "copy": copy}
    return out


def same_files(folder: str) -> dict[str, object]:
    """Every file's bytes; the manifest without its timings and digest."""
    out: dict[str, object] = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        if name == "manifest.json":
            manifest = json.loads(data)
            for key in ("build_seconds", "digest"):
                manifest.pop(key, None)
            for seg in manifest["segments"]:
                seg.pop("build_seconds", None)
            out[name] = manifest
        else:
            out[name] = data
    return out


@pytest.mark.parametrize("kind", ["external", "inline"])
def test_the_command_line_builds_the_python_doors_folder_by_reference(built, kind, tmp_path) -> None:
    """``trt-backend build --weights-by-reference`` and ``build(..., SessionOptions(weights_by_reference=True))``
    given the same partition options (the command line's default offers Resize to the plugin
    registry; ``PartitionOptions()`` offers it to none) write the same folder: models,
    references, engines and manifest (timings aside)."""
    cli, api = str(tmp_path / "cli"), str(tmp_path / "api")
    assert main(["build", built[kind]["model"], "-o", cli, *SHAPES, "--weights-by-reference"]) == 0
    options = SessionOptions(weights_by_reference=True, partition=PartitionOptions(plugins=default_registry().claims()))
    build(built[kind]["model"], api, PROFILES, options)
    assert same_files(cli) == same_files(api)


@pytest.mark.parametrize("kind", ["external", "inline"])
def test_a_folder_by_reference_holds_no_copy_and_runs_as_the_copying_one(built, kind) -> None:
    model, ref, copy = built[kind]["model"], built[kind]["ref"], built[kind]["copy"]
    assert folder_bytes(copy) > WEIGHT_BYTES  # the copy: its weights file, or weights.data for the inline model
    assert folder_bytes(ref) < WEIGHT_BYTES // 40  # manifest and weightless models: ~30 KB
    assert folder_bytes(ref, engines=True) < folder_bytes(copy, engines=True) - WEIGHT_BYTES * 0.99
    assert sorted(os.listdir(ref)) == ["manifest.json", "model.onnx", "segment_0.engine", "segment_0.onnx",
                                       "segment_1.onnx", "segment_2.engine", "segment_2.onnx"]
    manifest = json.load(open(os.path.join(ref, "manifest.json")))
    record = manifest["weights"]
    assert record["mode"] == "reference" and record["dir"] == os.path.dirname(model)
    (entry,) = record["files"]
    st = os.stat(model if kind == "inline" else model + ".data")
    assert entry["file"] == os.path.basename(model if kind == "inline" else model + ".data")
    assert (entry["kind"], entry["bytes"], entry["mtime_ns"]) == ("model" if kind == "inline" else "data",
                                                                  st.st_size, st.st_mtime_ns)
    assert "data_files" not in manifest and "weights" not in json.load(open(os.path.join(copy, "manifest.json")))
    ours, theirs = emulated(ref), emulated(copy)
    whole = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds())[0]
    assert np.array_equal(ours, theirs)
    np.testing.assert_allclose(ours, whole, rtol=0, atol=1e-5)


def test_references_into_the_model_file_are_read_by_onnx_runtime_and_tensorrt_rtx(built, flavor) -> None:
    """The inline model's folder names each large weight by its offset in the user's .onnx: ONNX
    Runtime and TensorRT-RTX's parser read the very bytes the model holds there (offsets are where
    protobuf put them, not page-aligned), and the engine built from them is the copying build's."""
    model, ref, copy = built["inline"]["model"], built["inline"]["ref"], built["inline"]["copy"]
    seg = onnx.load(os.path.join(ref, "segment_0.onnx"), load_external_data=False)
    large = [t for t in seg.graph.initializer if is_external(t)]
    payloads = inline_payloads(model)
    assert len(large) == 3  # segment 0 holds blocks 0..2
    for t in large:
        keys = {e.key: e.value for e in t.external_data}
        assert keys == {"location": "inline.onnx", "offset": str(payloads[t.name].offset),
                        "length": str(HIDDEN * HIDDEN * 4)}
    assert any(int(e.value) % 4096 for t in large for e in t.external_data if e.key == "offset")
    arrays = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
    so = ort.SessionOptions()
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", os.path.dirname(model))
    sess = ort.InferenceSession(seg.SerializeToString(), so, providers=["CPUExecutionProvider"])
    with_weights = onnx.load(os.path.join(copy, "segment_0.onnx"))  # its weights read from the copy's weights.data
    theirs = ort.InferenceSession(with_weights.SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.array_equal(sess.run(None, feeds())[0], theirs.run(None, feeds())[0])
    trt = flavor.module
    logger = shared_logger(flavor)
    network = trt.Builder(logger).create_network(network_flags(flavor))
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(seg.SerializeToString(), os.path.join(os.path.dirname(model), "segment.onnx"))
    constants = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if layer.type == trt.LayerType.CONSTANT:
            layer.__class__ = trt.IConstantLayer
            constants.append(np.array(layer.weights).reshape(-1))
    for t in large:  # each large weight is in the network, as the model holds it
        assert sum(np.array_equal(c, arrays[t.name].reshape(-1)) for c in constants) == 1, t.name
    engine = build_segment(seg, PROFILES, flavor=flavor, weights_dir=os.path.dirname(model))
    assert len(engine) > 3 * HIDDEN * HIDDEN * 4
    manifest = json.load(open(os.path.join(copy, "manifest.json")))
    assert len(engine) == manifest["segments"][0]["engine_bytes"]


@pytest.mark.parametrize("kind", ["external", "inline"])
def test_every_door_reads_a_folder_by_reference(built, kind, tmp_path, capsys) -> None:
    ref = built[kind]["ref"]
    assert main(["run", ref]) == 0
    out = capsys.readouterr().out
    assert "executors: emulated x2, onnxruntime x1" in out and "y: shape (" in out
    assert main(["compare", ref]) == 0
    out = capsys.readouterr().out
    assert "PASSED" in out and "FAILED" not in out
    assert main(["inspect", ref]) == 0
    out = capsys.readouterr().out
    assert f"weights: referred to in {os.path.dirname(built[kind]['model'])}, not copied: " in out
    assert main(["bench", ref, "--iterations", "3", "--duration-s", "0.01", "--warmup-ms", "1"]) == 0
    assert "trt-backend" in capsys.readouterr().out
    repo = str(tmp_path / "repo")
    assert main(["export-triton", ref, "-o", repo]) == 0
    capsys.readouterr()
    # the repository holds the weights it needs: copied in, not referred to
    data = [os.path.join(d, n) for d, _, names in os.walk(repo) for n in names if n.endswith(".data")]
    assert sum(os.path.getsize(p) for p in data) >= WEIGHT_BYTES - BLOCKS * HIDDEN * 4  # biases may stay inline
    for d, _, names in os.walk(repo):
        for n in names:
            if n == "model.onnx":
                proto = onnx.load(os.path.join(d, n), load_external_data=False)
                assert all(e.value == "model.onnx.data" for t in proto.graph.initializer for e in t.external_data
                           if e.key == "location")


def test_an_exported_repository_stands_without_the_users_weights(tmp_path, capsys) -> None:
    model = write_models(str(tmp_path / "models"))["external"]
    ref, repo = str(tmp_path / "ref"), str(tmp_path / "repo")
    build(model, ref, PROFILES, BY_REFERENCE)
    assert main(["export-triton", ref, "-o", repo]) == 0
    capsys.readouterr()
    whole = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds())[0]
    shutil.rmtree(str(tmp_path / "models"))
    env = dict(feeds())
    for name in ("mlp_0_trt", "mlp_1_ort", "mlp_2_trt"):  # the three steps of the ensemble, in order
        path = os.path.join(repo, name, "1", "model.onnx")
        path = os.path.join(path, "model.onnx") if os.path.isdir(path) else path
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        outs = sess.run(None, {i.name: env[i.name] for i in sess.get_inputs()})
        env.update(zip([o.name for o in sess.get_outputs()], outs))
    np.testing.assert_allclose(env["y"], whole, rtol=0, atol=1e-5)


def _mutations(path: str) -> list[tuple[str, object, str]]:
    """(what, a change of ``path``, the words the error must say); each undone by restoring it."""
    def move() -> None:
        os.replace(path, path + ".moved")

    def remove() -> None:
        os.remove(path)

    def truncate() -> None:
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 4096)

    def touch() -> None:
        os.utime(path)

    def same_size_and_time() -> None:  # a byte of the structure (model file) or of the first 64 KiB (data file)
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.seek(10)
            byte = f.read(1)
            f.seek(10)
            f.write(bytes([byte[0] ^ 0xFF]))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    return [("moved", move, "is missing (moved or removed)"), ("removed", remove, "is missing (moved or removed)"),
            ("truncated", truncate, "the folder was built with"), ("touched", touch, "was modified at"),
            ("rewritten", same_size_and_time, "differs from the file the folder was built with")]


@pytest.mark.parametrize("kind", ["external", "inline"])
def test_moved_removed_truncated_touched_or_changed_weights_are_one_clear_error(kind, tmp_path, capsys) -> None:
    model = write_models(str(tmp_path / "models"))[kind]
    ref = str(tmp_path / "ref")
    build(model, ref, PROFILES, BY_REFERENCE)
    target = model if kind == "inline" else model + ".data"
    keep = str(tmp_path / "keep")
    shutil.copy2(target, keep)  # the file as it was, its time too
    good = emulated(ref)
    for what, change, words in _mutations(target):
        change()  # type: ignore[operator]
        with pytest.raises(WeightsReferenceError) as e:
            Session.load(ref, SessionOptions(emulate=True))
        message = str(e.value)
        assert isinstance(e.value, ArtifactError) and target in message and words in message, (what, message)
        assert "\n" not in message
        for argv in (["run", ref], ["inspect", ref], ["export-triton", ref, "-o", str(tmp_path / "repo")]):
            assert main(argv) == 1, (what, argv)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith("trt-backend: error: ") and words in err, (what, err)
            assert "Traceback" not in err
        assert main(["compare", ref]) == 2  # compare's exit for a tool error
        assert words in capsys.readouterr().err
        assert not os.path.exists(str(tmp_path / "repo"))
        if os.path.exists(target + ".moved"):
            os.remove(target + ".moved")
        shutil.copy2(keep, target)
        assert np.array_equal(emulated(ref), good), what  # put back as it was: the folder loads again


def test_a_by_reference_build_needs_a_file_and_a_failed_one_leaves_nothing(tmp_path, capsys) -> None:
    model = write_models(str(tmp_path / "models"))["inline"]
    with pytest.raises(OptionsError, match="weights_by_reference needs the model as a file path: a bytes"):
        build(open(model, "rb").read(), str(tmp_path / "a"), PROFILES, BY_REFERENCE)
    with pytest.raises(OptionsError, match="weights_by_reference must be True or False"):
        SessionOptions(weights_by_reference="yes")  # type: ignore[arg-type]
    out = str(tmp_path / "out" / "built")
    os.makedirs(os.path.dirname(out))
    argv = ["build", model, "-o", out, "--weights-by-reference", "--shapes", "x:2x7"]  # not the model's width
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trt-backend: error: ") and "Traceback" not in err
    assert os.listdir(os.path.dirname(out)) == []  # no folder, no temp folder, no lock
    assert main(["build", str(tmp_path / "missing.onnx"), "-o", out, "--weights-by-reference"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.onnx: no such file" in err
    assert os.listdir(os.path.dirname(out)) == []


def test_a_weight_not_in_the_file_as_it_is_stays_in_the_folders_models(tmp_path) -> None:
    """What loading rewrote (as --qdq-rewrite dequantizes weights) is not the file's: the folder
    keeps it inside its own models; everything else is referred to."""
    model = write_models(str(tmp_path / "models"))["inline"]
    loaded = load_normalized(model)
    w1 = next(t for t in loaded.proto.graph.initializer if t.name == "w1")
    w1.raw_data = (onnx.numpy_helper.to_array(w1) * np.float32(2)).tobytes()
    referenced = refer(loaded, model)
    large = {t.name for t in loaded.proto.graph.initializer if len(t.raw_data) > INLINE_MAX_BYTES}
    assert sorted(referenced.refs) == sorted(large - {"w1"}) and len(large) == BLOCKS
    assert [f["file"] for f in referenced.record["files"]] == ["inline.onnx"]


def test_the_build_cache_keeps_referring_and_copying_folders_apart(tmp_path, capsys) -> None:
    model = write_models(str(tmp_path / "models"))["inline"]
    cache = str(tmp_path / "cache")

    def cached(out: str, *extra: str) -> dict:
        assert main(["build", model, "-o", str(tmp_path / out), "--cache-dir", cache, *SHAPES, *extra]) == 0
        capsys.readouterr()
        return json.load(open(tmp_path / out / "manifest.json"))

    first = cached("ref1", "--weights-by-reference")
    copying = cached("copy1")
    assert first["build_cache"]["hit"] is False and copying["build_cache"]["hit"] is False
    assert first["build_cache"]["key"] != copying["build_cache"]["key"]
    assert "weights" not in copying and folder_bytes(str(tmp_path / "copy1")) > WEIGHT_BYTES
    again = cached("ref2", "--weights-by-reference")
    assert again["build_cache"] == {"key": first["build_cache"]["key"], "hit": True}
    assert again["weights"] == first["weights"] and folder_bytes(str(tmp_path / "ref2")) < WEIGHT_BYTES // 40
    copy_again = cached("copy2")
    assert copy_again["build_cache"] == {"key": copying["build_cache"]["key"], "hit": True}
    assert "weights" not in copy_again and folder_bytes(str(tmp_path / "copy2")) > WEIGHT_BYTES
    good = emulated(str(tmp_path / "ref2"))
    assert np.array_equal(good, emulated(str(tmp_path / "copy2")))
    os.utime(model)  # the same bytes, touched: the earlier folder no longer refers to it as it is
    with pytest.raises(WeightsReferenceError):
        open_folder(str(tmp_path / "ref2"), executes=False)
    touched = cached("ref3", "--weights-by-reference")
    assert touched["build_cache"]["hit"] is False and touched["build_cache"]["key"] != first["build_cache"]["key"]
    assert touched["weights"]["files"][0]["mtime_ns"] == os.stat(model).st_mtime_ns
    assert np.array_equal(emulated(str(tmp_path / "ref3")), good)
    assert cached("copy3")["build_cache"]["hit"] is True  # the copying folder's key is the content's: still a hit


def test_a_model_without_large_weights_leaves_nothing_to_refer_to(tmp_path) -> None:
    """Weights of at most 64 KiB stay inside the folder's models either way: a by-reference folder
    of such a model refers to no file, and loads with the model gone."""
    model = str(tmp_path / "demo.onnx")
    shutil.copyfile(DEMO_PATH, model)
    manifest = build(model, str(tmp_path / "ref"), [{"image": ((1, 3, 32, 32),) * 3}], BY_REFERENCE)
    assert manifest["weights"] == {"mode": "reference", "dir": str(tmp_path), "files": []}
    os.remove(model)
    x = np.random.default_rng(0).random((1, 3, 32, 32), np.float32)
    ours = Session.load(str(tmp_path / "ref"), SessionOptions(emulate=True)).run(None, {"image": x})[0]
    whole = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    np.testing.assert_allclose(ours, whole, rtol=0, atol=1e-5)


def test_the_folder_moves_and_loads_from_anywhere_the_model_given_relative(tmp_path, monkeypatch) -> None:
    models = str(tmp_path / "models")
    write_models(models)
    monkeypatch.chdir(models)
    manifest = build("inline.onnx", "../ref", PROFILES, BY_REFERENCE)  # relative: recorded absolute
    assert manifest["weights"]["dir"] == models
    os.replace(str(tmp_path / "ref"), str(tmp_path / "moved"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    whole = ort.InferenceSession(os.path.join(models, "inline.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(emulated("../moved"), whole.run(None, feeds())[0], rtol=0, atol=1e-5)

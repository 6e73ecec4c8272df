"""Every door gives the same answer. The same settings given through the CLI ``build``,
``trt_backend.build()`` and ``Session(MODEL, options)`` make the same plan, the same precision per
segment and the same segment models (what was, or would be, built); and ``run``, ``compare`` and
``Session.load`` of the folder give the outputs and errors that ``compare MODEL`` and
``Session(MODEL, options)`` give on the same inputs. Over fp32, fp16, bf16, int8 (calibrated) and
auto, on a small CNN and a small transformer block; everything real: TensorRT-RTX parses and
builds on CPU, ONNX Runtime emulates the built forms."""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import trt_backend
from partitioner import PartitionOptions
from tests.support.graphs import cnn, transformer_model
from tests.support.resize_models import crop_cnn
from trt_backend.accuracy.auto_precision import AutoOptions
from trt_backend.cli import main
from trt_backend.engines.builder import BuildOptions
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("flavor")

MODELS = {
    "cnn": (cnn, "x", (2, 3, 16, 16), [{"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}]),
    "transformer": (transformer_model, "x", (2, 8, 32), [{"x": ((1, 8, 32), (2, 8, 32), (2, 8, 32))}]),
}
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "auto")


def _shape_flags(profile) -> list[str]:
    (name, (lo, opt, hi)), = profile[0].items()
    text = {k: f"{name}:" + "x".join(map(str, s)) for k, s in (("min", lo), ("opt", opt), ("max", hi))}
    return ["--min-shapes", text["min"], "--opt-shapes", text["opt"], "--max-shapes", text["max"]]


@pytest.fixture(scope="module", params=sorted(MODELS))
def material(request, tmp_path_factory):
    make, name, shape, profile = MODELS[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    path = str(folder / "model.onnx")
    onnx.save(make(), path)
    rng = np.random.default_rng(11)
    cal = str(folder / "cal.npz")
    np.savez(cal, **{name: rng.standard_normal((16, *shape[1:])).astype(np.float32)})
    x = {name: rng.standard_normal(shape).astype(np.float32)}
    inputs = str(folder / "in.npz")
    np.savez(inputs, **x)
    base = SessionOptions(emulate=True, build=BuildOptions(calibration_data=cal))
    plan = trt_backend.search_precision(path, profile, base, AutoOptions(atol=0.05, rtol=0.05, allow=("fp16", "int8")))
    plan_path = str(folder / "plan.json")
    with open(plan_path, "w") as f:
        json.dump(plan.to_dict(), f)
    return {"name": request.param, "path": path, "profile": profile, "cal": cal, "x": x, "inputs": inputs,
            "plan": plan, "plan_path": plan_path, "folder": folder}
KEEP = "fp16, Conv and Softmax kept fp32"  # --keep-fp32-ops through every door


def _build_options(m, precision: str) -> BuildOptions:
    if precision == "auto":
        return BuildOptions(precision="auto", precision_plan=m["plan"], calibration_data=m["cal"])
    if precision == "int8":
        return BuildOptions(precision="int8", calibration_data=m["cal"])
    if precision == KEEP:
        return BuildOptions(precision="fp16", keep_fp32_ops=("Conv", "Softmax"))
    return BuildOptions(precision=precision)


def _cli_precision(m, precision: str) -> list[str]:
    if precision == KEEP:
        return ["--precision", "fp16", "--keep-fp32-ops", "Conv,Softmax"]
    flags = ["--precision", precision]
    if precision in ("int8", "auto"):
        flags += ["--calibration-data", m["cal"]]
    if precision == "auto":
        flags += ["--precision-plan", m["plan_path"]]
    return flags


def _signature(model: onnx.ModelProto, base_dir: str | None = None) -> tuple:
    """Nodes (op, name, inputs, outputs, attributes) and every initializer's values: two models
    with equal signatures compute the same thing."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    if base_dir is not None:
        onnx.external_data_helper.load_external_data_for_model(model, base_dir)
    nodes = tuple((n.op_type, n.name, tuple(n.input), tuple(n.output),
                   tuple(sorted(a.SerializeToString() for a in n.attribute))) for n in model.graph.node)
    inits = tuple(sorted((t.name, t.data_type, numpy_helper.to_array(t).tobytes()) for t in model.graph.initializer))
    return nodes, inits


def _folder_forms(folder: str) -> dict[int, tuple[str, tuple]]:
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    out = {}
    for seg in manifest["segments"]:
        if seg["backend"] == "tensorrt":
            proto = onnx.load(os.path.join(folder, seg["model"]), load_external_data=False)
            out[seg["id"]] = (seg["precision"], _signature(proto, folder))
    return out


def _max_abs(report) -> float:
    return max(o.error.max_abs_error for o in report.outputs)


@pytest.mark.parametrize("precision", (*PRECISIONS, KEEP))
def test_every_door_builds_and_runs_the_same(material, precision, tmp_path, capsys) -> None:
    m = material
    options = SessionOptions(emulate=True, build=_build_options(m, precision))
    cli_dir, api_dir = str(tmp_path / "cli"), str(tmp_path / "api")
    assert main(["build", m["path"], "-o", cli_dir, *_shape_flags(m["profile"]), *_cli_precision(m, precision)]) == 0
    trt_backend.build(m["path"], api_dir, m["profile"], options)
    sess = Session(m["path"], m["profile"], options)

    # the same plan, the same precision per segment, the same segment models
    manifests = [json.load(open(os.path.join(d, "manifest.json"))) for d in (cli_dir, api_dir)]
    plans = [[(s["id"], s["backend"], s["nodes"]) for s in mf["plan"]["segments"]] for mf in manifests]
    assert manifests[0]["build"]["partition"] == manifests[1]["build"]["partition"]  # (plugins offered too)
    assert plans[0] == plans[1] == [(s.id, s.backend, list(s.nodes)) for s in sess.plan.segments]
    cli_forms, api_forms = _folder_forms(cli_dir), _folder_forms(api_dir)
    session_forms = {k: (b.precision, _signature(b.model, sess.model.base_dir))
                     for k, b in sess.compiled.segments.items()}
    assert cli_forms == api_forms == session_forms
    precisions = {p for p, _ in session_forms.values()}
    if precision in ("fp16", "bf16", "int8"):
        assert precisions == {precision}
    if precision == "auto":
        assert precisions == {s.precision for s in m["plan"].segments}
    if "int8" in precisions:  # the folder holds what was built: Q/DQ
        ops = {op for _, (nodes, _) in api_forms.values() for op, *_ in nodes}
        assert {"QuantizeLinear", "DequantizeLinear"} <= ops

    # the same outputs from the model and from the folder, by every door
    want = sess.run(None, m["x"])
    loaded = Session.load(api_dir, SessionOptions(emulate=True))
    assert loaded.emulated_precisions == sess.emulated_precisions
    for a, b in zip(loaded.run(None, m["x"]), want):
        np.testing.assert_array_equal(a, b)
    out = str(tmp_path / "out.npz")
    capsys.readouterr()
    assert main(["run", cli_dir, "--inputs", m["inputs"], "--outputs", out, "--emulate"]) == 0
    with np.load(out) as saved:
        for a, b in zip([saved[o.name] for o in sess.get_outputs()], want):
            np.testing.assert_array_equal(a, b)
    from_model = trt_backend.compare(m["path"], profiles=m["profile"], session_options=options, feeds=[m["x"]])
    from_folder = trt_backend.compare(api_dir, session_options=SessionOptions(emulate=True), feeds=[m["x"]])
    assert _max_abs(from_model) == _max_abs(from_folder)
    assert from_model.precision == from_folder.precision == sess.compiled.precision_summary()
    if precision in ("fp16", "bf16", "int8"):
        assert _max_abs(from_folder) > 0  # (reduced precision computed, not fp32 again)

    # the CLI compare of the model file and of the folder: the same numbers on the same inputs
    reports: list[dict[str, Any]] = []
    for target, extra in ((m["path"], [*_shape_flags(m["profile"]), *_cli_precision(m, precision)]), (cli_dir, [])):
        path = str(tmp_path / f"cmp{len(reports)}.json")
        main(["compare", target, "--emulate", "--atol", "10", "--rtol", "10", "--json", path, *extra])
        with open(path) as f:
            reports.append(json.load(f))
    assert reports[0]["outputs"] == reports[1]["outputs"]
    assert reports[0]["precision"] == reports[1]["precision"] == sess.compiled.precision_summary()


@pytest.mark.parametrize("precision", ("int8", "auto"))
def test_export_triton_of_a_folder_carries_the_built_precision(material, precision, tmp_path, capsys) -> None:
    """The repository's TensorRT segment models are the built forms (Q/DQ for int8, casts for
    fp16) and the TensorRT accelerator is told the same precision; from any working directory."""
    m = material
    folder = str(tmp_path / "built")
    assert main(["build", m["path"], "-o", folder, *_shape_flags(m["profile"]), *_cli_precision(m, precision)]) == 0
    built = _folder_forms(folder)
    repo = str(tmp_path / "repo")
    os.chdir(tmp_path.parent)
    assert main(["export-triton", folder, "-o", repo]) == 0
    found: dict[int, set[str]] = {}
    configs: dict[int, str] = {}
    for root, _, files in os.walk(repo):
        name = os.path.basename(os.path.dirname(root)) if os.path.basename(root) == "1" else os.path.basename(root)
        if not name.endswith("_trt"):
            continue
        seg = int(name.rsplit("_", 2)[-2])
        for f in files:
            if f.endswith(".onnx"):
                found[seg] = {n.op_type for n in onnx.load(os.path.join(root, f)).graph.node}
            if f == "config.pbtxt":
                configs[seg] = open(os.path.join(root, f)).read()
    assert set(found) == set(built)
    with open(os.path.join(folder, "manifest.json")) as manifest:
        pinned = {s["id"]: s.get("pinned") for s in json.load(manifest)["segments"]}
    for seg, (built_precision, _) in built.items():
        qdq = {"QuantizeLinear", "DequantizeLinear"} <= found[seg]
        assert qdq == (built_precision == "int8"), (seg, built_precision)
        mode = {"int8": "INT8", "fp16": "FP16"}.get(built_precision)
        if mode == "FP16" and pinned.get(seg):  # (FP16 would let TensorRT lower the pinned nodes: the casts carry it)
            assert '"precision_mode"' not in configs[seg], (seg, pinned[seg])
        elif mode is not None:
            assert '"precision_mode"' in configs[seg] and f'"{mode}"' in configs[seg]


def test_build_options_are_refused_on_a_folder_in_one_line(material, tmp_path, capsys) -> None:
    """A folder runs, compares, benches and exports as it was built: every flag that would change
    that is refused with one line naming it, by every command and by the Python door."""
    m = material
    folder = str(tmp_path / "built")
    assert main(["build", m["path"], "-o", folder, *_shape_flags(m["profile"])]) == 0
    refused = [["--precision", "fp16"], ["--calibration-data", m["cal"]], ["--exclude-ops", "Relu"],
               ["--min-segment-size", "1"], ["--no-boundary-cost"], ["--flavor", "tensorrt"],
               ["--qdq-rewrite", "int8"], ["--isolate"], ["--max-build-memory", "1G"],
               ["--min-shapes", "x:1x1", "--opt-shapes", "x:1x1", "--max-shapes", "x:1x1"]]
    for command in ("run", "compare", "bench"):
        for flags in refused:
            capsys.readouterr()
            assert main([command, folder, *flags]) == (2 if command == "compare" else 1), (command, flags)
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and flags[0] in err and "would change what was built" in err, err
    for flags in (["--precision", "fp16"], ["--exclude-ops", "Relu"]):
        capsys.readouterr()
        assert main(["export-triton", folder, "-o", str(tmp_path / "repo"), *flags]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "would change" in err, err
    # the Python door by the same rule, in the same words (the command line's flag named)
    for options, flag in ((SessionOptions(precision="fp16"), "--precision"),
                          (SessionOptions(exclude_ops=("Relu",)), "--exclude-ops"),
                          (SessionOptions(build=BuildOptions(workspace_bytes=1 << 20)), "--workspace-mb"),
                          (SessionOptions(qdq_rewrite="int8"), "--qdq-rewrite"),
                          (SessionOptions(flavor="tensorrt"), "--flavor"),
                          (SessionOptions(isolate_parser=True), "--isolate"),
                          (SessionOptions(max_build_memory="1G"), "--max-build-memory")):
        with pytest.raises(trt_backend.errors.OptionsError, match=f"{flag}.* would change what was built"):
            Session.load(folder, options)
    # run-time options are taken: threads, seeds, shapes inside the folder's profiles
    assert main(["run", folder, "--seed", "3", "--max-memory", "1G", "--emulate"]) == 0
    # the flavor the folder's engines were built with is its own: taken by both doors
    assert main(["run", folder, "--flavor", "tensorrt_rtx", "--emulate"]) == 0
    Session.load(folder, SessionOptions(flavor="tensorrt_rtx", emulate=True)).close()
    shape = "x".join(map(str, m["x"][next(iter(m["x"]))].shape))
    assert main(["compare", folder, "--shapes", f"{next(iter(m['x']))}:{shape}", "--emulate", "--atol", "1"]) == 0
    # a build setting equal to the folder's own changes nothing: taken by every command, as by the
    # Python door (the command line refused it while Session.load took it)
    fp16 = str(tmp_path / "fp16")
    assert main(["build", m["path"], "-o", fp16, "--precision", "fp16", "--exclude-ops", "Relu",
                 *_shape_flags(m["profile"])]) == 0
    Session.load(fp16, SessionOptions(precision="fp16", exclude_ops=("Relu",), emulate=True)).close()
    with pytest.raises(trt_backend.errors.OptionsError, match="--exclude-ops would change"):
        Session.load(fp16, SessionOptions(precision="fp16", exclude_ops=("Relu", "Conv"), emulate=True))
    for command in ("run", "compare", "bench"):
        extra = ["--atol", "1"] if command == "compare" else ["--iterations", "1", "--duration-s", "0.01",
                                                               "--warmup-ms", "0", "--no-progress",
                                                               "--baselines", "none"] if command == "bench" else []
        capsys.readouterr()
        assert main([command, fp16, "--precision", "fp16", "--exclude-ops", "Relu", "--emulate", *extra]) == 0, \
            capsys.readouterr().err
        assert main([command, fp16, "--exclude-ops", "Relu,Conv", "--emulate", *extra]) == \
            (2 if command == "compare" else 1)
        assert "--exclude-ops would change what was built" in capsys.readouterr().err
        assert main([command, fp16, "--precision", "bf16", "--emulate", *extra]) == (2 if command == "compare" else 1)
        assert "--precision would change what was built" in capsys.readouterr().err
        # fp32 given is fp32 asked, though it is the default: the folder ran in fp16 and said so after
        assert main([command, fp16, "--precision", "fp32", "--emulate", *extra]) == (2 if command == "compare" else 1)
        assert "--precision would change what was built" in capsys.readouterr().err
    assert main(["export-triton", fp16, "-o", str(tmp_path / "repo16"), "--precision", "fp32"]) == 1
    assert "--precision would change what was built" in capsys.readouterr().err
    with pytest.raises(trt_backend.errors.OptionsError, match="--precision would change what was built"):
        Session.load(fp16, SessionOptions(precision="fp32", emulate=True))  # (given, at its default: asked)
    import dataclasses

    with pytest.raises(trt_backend.errors.OptionsError, match="--precision would change what was built"):
        # (options remade by dataclasses.replace, as a signed load and serve replicas remake them)
        Session.load(fp16, dataclasses.replace(SessionOptions(precision="fp32"), emulate=True))
    Session.load(fp16, SessionOptions(emulate=True)).close()  # (not given: the folder's own)


def test_build_reads_every_setting_from_its_options(material, tmp_path) -> None:
    """trt_backend.build has one home for its settings: the SessionOptions it is given (precision,
    engine and build cache, flavor); a second build of the same file is a build cache hit."""
    m = material
    cache = str(tmp_path / "cache")
    options = SessionOptions(precision="fp16", cache_dir=cache, flavor="tensorrt_rtx")
    first = trt_backend.build(m["path"], str(tmp_path / "a"), m["profile"], options)
    assert {s["precision"] for s in first["segments"] if s["engine"]} == {"fp16"}
    assert first["build"]["precision"] == "fp16" and first["build_cache"]["hit"] is False
    assert os.path.isdir(os.path.join(cache, "builds"))
    again = trt_backend.build(m["path"], str(tmp_path / "b"), m["profile"], options)
    assert again["build_cache"]["hit"] is True
    assert _folder_forms(str(tmp_path / "a")) == _folder_forms(str(tmp_path / "b"))
    with pytest.raises(TypeError):
        trt_backend.build(m["path"], str(tmp_path / "c"), m["profile"], options, BuildOptions())  # (no second home)


@pytest.mark.parametrize("no_plugins", [False, True])
def test_every_door_offers_the_same_plugins(no_plugins, tmp_path, capsys) -> None:
    """A Resize TensorRT's parser rejects goes to the shipped Resize plugin by default, whichever
    door plans it (``PartitionOptions()`` leaves ``plugins`` to trt_backend, which offers what it
    ships, as the command line does), and to ONNX Runtime by every door with ``--no-plugins`` /
    ``plugins=()``. Planned for full TensorRT (``--target tensorrt``): TensorRT-RTX takes no plugin."""
    path = str(tmp_path / "crop.onnx")
    onnx.save(crop_cnn(), path)
    flags = ["--target", "tensorrt"] + (["--no-plugins"] if no_plugins else [])
    options = PartitionOptions(target="tensorrt", plugins=() if no_plugins else None)
    js = str(tmp_path / "plan.json")
    assert main(["inspect", path, *flags, "--json", js]) == 0
    with open(js) as f:
        cli = json.load(f)
    api = json.loads(trt_backend.make_plan(path, options).to_json())
    session = json.loads(trt_backend.make_plan(path, SessionOptions(partition=options).partition).to_json())
    assert cli["segments"] == api["segments"] == session["segments"]
    assert cli["nodes"] == api["nodes"] == session["nodes"]
    verdicts = [n["verdict"] for n in api["nodes"] if n["op_type"] == "Resize"]
    assert verdicts == (["onnxruntime"] if no_plugins else ["plugin:resize"])
    assert len(api["segments"]) == (3 if no_plugins else 1)


def test_a_precision_plan_for_another_model_is_refused(material, tmp_path, capsys) -> None:
    """A precision plan searched on one model, given to a build of another: one error naming the
    nodes it has and the model does not, from the CLI and from Python (it built in fp32 and stored
    the foreign plan in the manifest)."""
    from trt_backend.data.demo import DEMO_PATH

    out = str(tmp_path / "b")
    assert main(["build", DEMO_PATH, "-o", out, "--shapes", "image:1x3x32x32", "--precision", "auto",
                 "--precision-plan", material["plan_path"], "--calibration-data", "random"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the precision plan names" in err and "this model does not have" in err and not os.path.exists(out)
    options = SessionOptions(build=BuildOptions(precision="auto", precision_plan=material["plan"],
                                                calibration_data="random"))
    with pytest.raises(trt_backend.errors.OptionsError, match="the precision plan names .* this model does not have"):
        trt_backend.build(DEMO_PATH, out, [{"image": ((1, 3, 32, 32),) * 3}], options)


def test_auto_flags_beside_another_precision_are_refused(material, tmp_path, capsys) -> None:
    """``--precision-plan`` or ``--allow`` beside a precision other than auto: one line each, the
    plan's in the words the Python door's BuildOptions gives (both were ignored: an fp16 or fp32
    build, exit 0)."""
    m, out = material, str(tmp_path / "b")
    for flags, message in ((["--precision", "fp16", "--precision-plan", m["plan_path"]],
                            "a precision plan applies to precision 'auto', not 'fp16'"),
                           (["--precision-plan", m["plan_path"]], "a precision plan applies to precision 'auto', not "
                                                                  "'fp32'"),
                           (["--precision", "fp16", "--allow", "int8"], "--allow chooses among precisions for "
                                                                        "--precision auto")):
        assert main(["build", m["path"], "-o", out, *_shape_flags(m["profile"]), *flags]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("trt-backend: error: ") and message in err and "\n" not in err and not os.path.exists(out)
    refused = "a precision plan applies to precision 'auto', not 'fp16'"
    with pytest.raises(trt_backend.errors.OptionsError, match=refused):
        BuildOptions(precision="fp16", precision_plan=m["plan"])


def test_a_folder_takes_its_exclusions_in_any_order(tmp_path, capsys) -> None:
    """Exclusions name sets of ops or nodes: a folder built with --exclude-ops Relu,Softmax refused
    Softmax,Relu at every door, and the plan cache missed on it."""
    from trt_backend.data.demo import DEMO_PATH

    folder = str(tmp_path / "b")
    shapes = ["--shapes", "image:2x3x32x32"]
    assert main(["build", DEMO_PATH, "-o", folder, *shapes, "--exclude-ops", "Relu,Softmax", "-q"]) == 0
    assert PartitionOptions(exclude_ops=("Softmax", "Relu", "Relu")) == \
        PartitionOptions(exclude_ops=("Relu", "Softmax"))
    Session.load(folder, SessionOptions(exclude_ops=("Softmax", "Relu"), emulate=True)).close()
    capsys.readouterr()
    assert main(["run", folder, "--exclude-ops", "Softmax,Relu", "--emulate"]) == 0
    assert main(["compare", folder, "--exclude-ops", "Softmax,Relu", "--emulate"]) == 0
    assert main(["run", folder, "--exclude-ops", "Softmax", "--emulate"]) == 1
    assert "--exclude-ops would change what was built" in capsys.readouterr().err
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert main(["inspect", DEMO_PATH, *shapes, "--exclude-ops", "Relu,Softmax", *cache]) == 0
    assert main(["inspect", DEMO_PATH, *shapes, "--exclude-ops", "Softmax,Relu", *cache]) == 0
    assert "plan from the plan cache" in capsys.readouterr().out

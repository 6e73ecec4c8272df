"""``trt-backend bench`` end to end on small models with short durations: the JSON schema, the
per-segment breakdown, baselines listed with reasons, build times, the plot, bad input."""
from __future__ import annotations

import io
import json
import re
import os

import pytest

from tests.support.graphs import conv_chain
from trt_backend.bench.stats import STAT_KEYS
from trt_backend.bench.timing import ProgressEvent
from trt_backend.cli import main
from trt_backend.commands.bench import ProgressPrinter
from trt_backend.data.demo import DEMO_PATH
from trt_backend.gpu.device import cuda_device_count

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser

FAST = ["--warmup-ms", "20", "--duration-s", "0.15", "--iterations", "5", "--no-progress"]


def bench_json(tmp_path, *args: str) -> dict:
    out = tmp_path / "bench.json"
    assert main(["bench", *args, *FAST, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def check_schema(doc: dict) -> None:
    assert isinstance(doc["model"], str) and isinstance(doc["shapes"], dict)
    for r in doc["runners"]:
        assert {"name", "available", "reason", "latency_ms", "throughput_qps", "iterations", "segments"} <= set(r)
        assert r["name"] in ("trt-backend", "ort-cpu", "ort-cuda", "ort-trt", "trt-whole")
        if not r["available"]:
            assert isinstance(r["reason"], str) and r["reason"] and r["latency_ms"] is None
            continue
        st = r["latency_ms"]
        assert set(st) == set(STAT_KEYS) and all(isinstance(st[k], float) for k in STAT_KEYS)
        assert 0 < st["min"] <= st["median"] <= st["max"] and st["min"] <= st["mean"] <= st["max"]
        assert st["min"] <= st["p90"] <= st["p95"] <= st["p99"] <= st["max"]
        assert r["reason"] is None and isinstance(r["iterations"], int) and r["throughput_qps"] > 0
        for seg in r["segments"]:
            assert {"id", "backend", "executor", "mean_ms", "share"} <= set(seg)
            assert seg["backend"] in ("tensorrt", "onnxruntime") and 0 <= seg["share"] <= 1


def test_emulated_bench_with_ort_cpu_baseline(tmp_path, capsys) -> None:
    doc = bench_json(tmp_path, DEMO_PATH, "--shapes", "image:2x3x32x32", "--emulate", "--baselines", "ort-cpu",
                     "--no-build")
    check_schema(doc)
    assert doc["shapes"] == {"image": [2, 3, 32, 32]}
    ours, cpu = doc["runners"]
    assert (ours["name"], cpu["name"]) == ("trt-backend", "ort-cpu") and ours["available"] and cpu["available"]
    assert ours["iterations"] >= 5 and cpu["iterations"] >= 5 and ours["wall_s"] >= 0.15
    assert [(s["id"], s["backend"], s["executor"]) for s in ours["segments"]] == [
        (0, "tensorrt", "emulated"), (1, "onnxruntime", "onnxruntime"), (2, "tensorrt", "emulated")]
    assert all(s["runs"] == ours["iterations"] for s in ours["segments"])
    assert sum(s["share"] for s in ours["segments"]) <= 1.0 + 1e-9
    mean = ours["latency_ms"]["mean"]
    assert sum(s["mean_ms"] for s in ours["segments"]) + ours["overhead_ms"] == pytest.approx(mean)
    assert ours["ours_ratio"] == 1.0
    assert cpu["ours_ratio"] == pytest.approx(ours["latency_ms"]["median"] / cpu["latency_ms"]["median"])
    assert cpu["max_abs_diff"] < 1e-4 and cpu["segments"] == []
    assert ours["build"] == {"skipped": "--no-build"}
    assert "nearest rank" in doc["percentile_definition"] and doc["settings"]["iterations"] == 5
    assert (doc["settings"]["thread_pool"], doc["settings"]["share_arena"]) == ("session", False)
    out = capsys.readouterr().out
    assert "trt-backend" in out and "ort-cpu" in out and "ours/this" in out and "segments of trt-backend" in out


def test_bench_precision_goes_to_the_session(tmp_path) -> None:
    """``bench --precision`` sets the session's precision; the settings report what it computes."""
    doc = bench_json(tmp_path, DEMO_PATH, "--shapes", "image:1x3x32x32", "--emulate", "--baselines", "none",
                     "--no-build", "--precision", "fp16")
    assert doc["settings"]["precision"] == "fp16"


def test_bench_precision_auto_searches_as_run_and_compare_do(tmp_path, capsys) -> None:
    """``bench MODEL --precision auto`` said "precision 'auto' builds from a precision plan" where
    ``run`` and ``compare`` search one: it searches too, and times the session built with it."""
    doc = bench_json(tmp_path, DEMO_PATH, "--shapes", "image:1x3x32x32", "--emulate", "--baselines", "none",
                     "--no-build", "--precision", "auto", "--allow", "fp16")
    err = capsys.readouterr().err
    assert "precision search (" in err and "round 1: segment 0 fp16" in err
    assert doc["settings"]["precision"] not in ("auto", "fp32") and doc["runners"][0]["available"]
    # (the plan build searches with the same settings: one search, whichever door)
    assert main(["build", DEMO_PATH, "-o", str(tmp_path / "b"), "--shapes", "image:1x3x32x32", "--precision", "auto",
                 "--allow", "fp16"]) == 0
    rounds = [[ln for ln in text.splitlines() if ln.startswith("  round ")] for text in (err, capsys.readouterr().err)]
    assert rounds[0] and rounds[0] == rounds[1]


def test_every_baseline_is_listed_with_a_reason_when_unavailable(tmp_path) -> None:
    doc = bench_json(tmp_path, DEMO_PATH, "--shapes", "image:1x3x32x32", "--emulate", "--no-build")
    check_schema(doc)
    by = {r["name"]: r for r in doc["runners"]}
    assert list(by) == ["trt-backend", "ort-cpu", "ort-cuda", "ort-trt", "trt-whole"]
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert by["ort-cuda"]["reason"].startswith("CUDAExecutionProvider not available in this onnxruntime build")
    if "TensorrtExecutionProvider" not in ort.get_available_providers():
        assert by["ort-trt"]["reason"].startswith("TensorrtExecutionProvider not available")
    # the demo's Resize runs on ONNX Runtime: no single engine can hold it
    assert "the whole model is not TensorRT-supported" in by["trt-whole"]["reason"]


def test_single_segment_model_reports_build_and_cache_load_times(tmp_path, capsys) -> None:
    """The build line says what was built and what the timed reload from the engine cache took
    (it read "1 engine(s) in 0.3 s; from the engine cache in 0.012 s" of engines just built, which
    the JSON's segments record as not cached)."""
    import onnx

    path = tmp_path / "conv.onnx"
    onnx.save(conv_chain(1, 4, 8), path)
    doc = bench_json(tmp_path, str(path), "--shapes", "x:2x4x8x8", "--emulate", "--baselines", "ort-cpu,trt-whole",
                     "--cache-dir", str(tmp_path / "cache"))
    check_schema(doc)
    ours, cpu, whole = doc["runners"]
    assert [s["backend"] for s in ours["segments"]] == ["tensorrt"]
    build = ours["build"]
    assert build["seconds"] > 0 and build["cached_load_seconds"] >= 0 and build["all_cache_hits"]
    assert [s["cached"] for s in build["segments"]] == [False] and build["segments"][0]["engine_bytes"] > 0
    assert whole["build"]["seconds"] == build["seconds"]
    if cuda_device_count() == 0:
        assert not whole["available"] and whole["reason"].startswith("no CUDA device")
    assert os.listdir(tmp_path / "cache")  # built through the cache asked for
    text = capsys.readouterr().out
    assert re.search(r"build of trt-backend \(tensorrt_rtx [^,]+, fp32\): 1 engine\(s\) in [0-9.]+ s; loaded "
                     r"again from the engine cache in [0-9.]+ s \(built, or taken", text), text
    bench_json(tmp_path, str(path), "--shapes", "x:2x4x8x8", "--emulate", "--baselines", "none", "--cache-dir",
               str(tmp_path / "cache"))  # (its engine now in the cache)
    assert re.search(r"1 engine\(s\) in [0-9.]+ s \(1 of them taken from the engine cache\); loaded again",
                     capsys.readouterr().out)


def test_plot_is_a_png(tmp_path) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI must install matplotlib (test extra) for the bench plot test")
        pytest.skip("matplotlib not installed")
    png = tmp_path / "lat.png"
    assert main(["bench", DEMO_PATH, "--shapes", "image:1x3x32x32", "--emulate", "--baselines", "ort-cpu,ort-cuda",
                 "--no-build", *FAST, "--plot", str(png)]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize("args, message", [
    (["--shapes", "image:1x3x31x32"], "input 'image': dim 2 is fixed at 32 in the model"),
    (["--shapes", "image:1x3x32"], "expected rank 4"),
    (["--shapes", "pixels:1x3x32x32"], "'pixels' is not a model input"),
    (["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32", "--max-shapes", "image:4x3x32x32",
      "--shapes", "image:8x3x32x32"], "shape (8, 3, 32, 32) is outside every profile"),
    (["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32", "--max-shapes", "image:4x3x32x32",
      "--shapes", "image:2x3x32x32,extra:1x2"], "--shapes names 'extra', not input(s) of the model"),
    (["--shapes", "image:1x3x32x32", "--baselines", "ort-cpu,ort-gpu"], "unknown baseline(s) 'ort-gpu'"),
    (["--shapes", "image:1x3x32x32", "--duration-s", "0"], "--duration-s must be a finite number > 0"),
    (["--shapes", "image:1x3x32x32", "--duration-s", "-2"], "--duration-s must be a finite number > 0"),
    (["--shapes", "image:1x3x32x32", "--warmup-ms", "-5"], "--warmup-ms must be a finite number >= 0"),
    (["--shapes", "image:1x3x32x32", "--warmup-ms", "nan"], "--warmup-ms must be a finite number, got 'nan'"),
    (["--shapes", "image:1x3x32x32", "--iterations", "0"], "--iterations must be a whole number >= 1"),
    (["--shapes", "image:1x3x32x32", "--duration-s", "soon"], "--duration-s must be a finite number, got 'soon'"),
    (["--shapes", "image:1x3x32x32", "--precision", "int3"],
     "unknown precision 'int3'; choose one of fp32, tf32, fp16, bf16, int8, auto"),
    (["--shapes", "image:1x3x32x32", "--json", "/no/such/dir/b.json"], "folder /no/such/dir does not exist"),
])
def test_bad_input_is_one_line_and_exit_1(args, message, capsys) -> None:
    assert main(["bench", DEMO_PATH, "--emulate", "--no-build", "--baselines", "none", *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("trt-backend: error: ") and message in err[-1], err
    assert "Traceback" not in "\n".join(err)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_waits_then_reports() -> None:
    ev = ProgressEvent("ort-cpu", "timed", 0, 2, 1.5, 40, 3.0, 10)
    plain = io.StringIO()
    printer = ProgressPrinter(plain)
    printer(ev)
    assert plain.getvalue() == ""  # short runs print nothing
    printer.start -= 10
    printer(ProgressEvent("ort-cpu", "done", 0, 2, 3.0, 80, 3.0, 10))
    assert plain.getvalue() == "bench: ort-cpu round 1/2: 80 timed runs done\n"
    tty = Tty()
    live = ProgressPrinter(tty)
    live.start -= 10
    live(ev)
    live.finish()
    assert tty.getvalue() == "\r\033[Kbench: ort-cpu round 1/2: 1.5/3 s, 40/10+ runs\r\033[K"


def test_library_rounds_alternate_and_progress_reports_builds(tmp_path) -> None:
    from trt_backend.bench.loop import BenchOptions, run_bench
    from trt_backend.bench.timing import TimingConfig
    from trt_backend.session.options import SessionOptions

    events: list[ProgressEvent] = []
    options = BenchOptions(shapes={"x": (1, 4, 8, 8)}, baselines=("ort-cpu",),
                           timing=TimingConfig(0.01, 0.04, 3, rounds=2, pause_s=0.0))
    result = run_bench(conv_chain(1, 4, 8), options, SessionOptions(emulate=True, cache_dir=str(tmp_path)),
                       events.append)
    done = [(e.runner, e.round) for e in events if e.phase == "done"]
    assert done == [("trt-backend", 0), ("ort-cpu", 0), ("trt-backend", 1), ("ort-cpu", 1)]
    assert [(e.runner, e.iterations, e.target_iterations) for e in events if e.phase == "build"] == [
        ("trt-backend", 1, 1)]
    assert result.runner("ort-cpu").iterations >= 4  # ceil(3 / 2) per round, two rounds
    assert result.to_dict()["settings"]["rounds"] == 2
    assert result.to_dict()["settings"]["precision"] == "fp32"  # the session's precision summary
    assert os.listdir(tmp_path)  # the engine cache is the session's cache_dir


def test_build_times_of_a_session_that_built_its_own_engines(tmp_path, flavor) -> None:
    """The GPU path: the session built through the cache; the bench times only the cache load."""
    from trt_backend.bench.candidates import build_info
    from trt_backend.engines.builder import BuildOptions
    from trt_backend.engines.cache import EngineCache
    from trt_backend.engines.fallback import build_engines
    from trt_backend.session.options import SessionOptions
    from trt_backend.session.session import Session

    sess = Session(conv_chain(1, 4, 8), [{"x": (1, 4, 8, 8)}], SessionOptions(emulate=True))
    built = build_engines(sess.plan, sess.segment_profiles, BuildOptions(), EngineCache(str(tmp_path)), flavor=flavor)
    info = build_info(sess.plan, sess.segment_profiles, BuildOptions(), str(tmp_path), flavor, built=built.report)
    assert info["seconds"] == built.report.seconds and info["all_cache_hits"] is True
    assert info["cached_load_seconds"] > 0 and info["engines"] == built.engines  # loaded from the cache, timed
    no_cache = build_info(sess.plan, sess.segment_profiles, BuildOptions(), None, flavor, built=built.report)
    assert no_cache["cached_load_seconds"] is None and no_cache["engines"] == {}


def test_cpu_session_flags_reach_the_session_options() -> None:
    from trt_backend.cli import build_parser
    from trt_backend.commands.bench import options_from_args

    args = build_parser().parse_args(["bench", DEMO_PATH, "--thread-pool", "global", "--share-arena", "--threads", "2"])
    _, so = options_from_args(args)  # (options only: no ONNX Runtime session is made, nothing is switched)
    assert (so.ort.thread_pool, so.ort.share_arena, so.ort.intra_op_threads) == ("global", True, 2)
    _, so = options_from_args(build_parser().parse_args(["bench", DEMO_PATH]))
    assert (so.ort.thread_pool, so.ort.share_arena, so.ort.intra_op_threads) == ("session", False, 0)


def test_quiet_prints_no_progress_lines(monkeypatch, capsys) -> None:
    """``-q`` means only results and errors: bench's progress lines go with it (they printed before)."""
    import trt_backend.commands.bench as bench_command

    monkeypatch.setattr(bench_command, "PROGRESS_AFTER_S", 0.0)  # (progress from the first event)
    args = ["bench", DEMO_PATH, "--shapes", "image:1x3x32x32", "--emulate", "--baselines", "ort-cpu", "--no-build",
            "--warmup-ms", "10", "--duration-s", "0.05", "--iterations", "2", "--rounds", "1"]
    assert main(args) == 0
    assert "bench: trt-backend" in capsys.readouterr().err
    assert main(["-q", *args]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "trt-backend" in captured.out

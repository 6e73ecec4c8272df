"""``benchmarks/conformance/fuzz.py`` in CI: a fixed seeded set of mutants (byte-level and protobuf-valid
edits of five seed models) through ``inspect``, ``run`` and the Python API ends cleanly every time
(success or one error line), and the harness itself tells a traceback, a native crash and a hang
apart."""
from __future__ import annotations

import os
import signal
import time

import pytest

import tests.support.fuzzing as fz
from tests.support.mutants import MUTATIONS, make_mutant, seed_models

SEED = 16
MUTANTS = range(96)


def test_seeded_mutants_end_cleanly_through_inspect_run_and_the_api(flavor, tmp_path) -> None:
    commands = ("inspect", "run", "api")
    results = fz.fuzz(MUTANTS, SEED, commands, timeout=60, jobs=2, workdir=str(tmp_path))
    assert len(results) == len(commands) * len(MUTANTS)
    bad = fz.problems(results)
    assert not bad, fz.table(results, commands) + "\n" + "\n".join(
        f"mutant {r.mutant.id} {r.command} {r.cls} [{r.mutant.seed}: {r.mutant.mutation}: {r.mutant.detail}] "
        f"{r.first_line}" for r in bad)
    # the set reaches past loading (some run to the end) and covers every seed model
    for command in ("run", "api"):
        by_class = {c: sum(r.cls == c for r in results if r.command == command) for c in fz.CLASSES}
        assert by_class["success"] >= 5 and by_class["error"] >= 40, (command, by_class)
    assert {r.mutant.seed for r in results} == {"demo", "external", "subgraphs", "ml", "cnn"}
    assert len({r.mutant.mutation for r in results}) >= len(MUTATIONS) * 2 // 3
    assert os.listdir(tmp_path) == []  # every mutant's files removed


def test_mutants_are_a_function_of_seed_and_id_only() -> None:
    seeds = seed_models()
    a, b = make_mutant(seeds, 7, SEED), make_mutant(seeds, 7, SEED)
    assert (a.mutation, a.detail, a.files) == (b.mutation, b.detail, b.files)
    assert make_mutant(seeds, 7, SEED + 1).files != a.files


def _crash(model: str, shapes: str | None) -> int:
    os.kill(os.getpid(), signal.SIGSEGV)
    return 0


def _raise(model: str, shapes: str | None) -> int:
    raise ValueError("escaped on purpose")


def _sleep(model: str, shapes: str | None) -> int:
    time.sleep(60)
    return 0


def _our_error(model: str, shapes: str | None) -> int:
    print("trt-backend: error: a clear line", flush=True, file=__import__("sys").stderr)
    return 1


@pytest.mark.parametrize("api, cls, first", [
    (_crash, "signal", "died on SIGSEGV"),
    (_raise, "traceback", "ValueError: escaped on purpose"),
    (_sleep, "hang", "killed: hang"),
    (_our_error, "error", "a clear line"),
])
def test_the_harness_classifies_what_the_child_did(monkeypatch, tmp_path, api, cls, first) -> None:
    """The forked child runs whatever ``_api`` is in the parent (the fork copies it)."""
    monkeypatch.setattr(fz, "_api", api)
    monkeypatch.setattr(fz, "_preload", lambda: None)
    [result] = fz.fuzz([0], SEED, ("api",), timeout=3, jobs=1, workdir=str(tmp_path))
    assert (result.cls, result.first_line) == (cls, first)


def test_compare_errors_are_told_by_its_own_exit_status() -> None:
    """compare exits 2 on a user error (1 says the outputs differ), every other command 1."""
    line = "trt-backend: error: model.onnx: not an ONNX model"
    assert fz.classify("compare", 2 << 8, None, "", line) == ("error", "model.onnx: not an ONNX model")
    assert fz.classify("run", 1 << 8, None, "", line) == ("error", "model.onnx: not an ONNX model")
    assert fz.classify("run", 2 << 8, None, "", line)[0] == "other"
    assert fz.classify("compare", 1 << 8, None, "FAILED (1 of 1 output(s))", "")[0] == "mismatch"
    assert fz.classify("compare", 1 << 8, None, "NOTHING COMPARED (every output was NaN/inf)", "")[0] == "mismatch"

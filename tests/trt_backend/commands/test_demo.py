"""``trt-backend demo`` writes to the user's cache folder or to --out, never into the current folder."""
from __future__ import annotations

import os

from trt_backend.cli import main
from trt_backend.commands.demo import default_out

WRITTEN = ["build", "partition.html", "plan.json"]


def test_the_default_folder_is_in_the_user_cache(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_out() == os.path.join(str(tmp_path / "xdg"), "trt-backend", "demo")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_out() == os.path.join(str(tmp_path / "home"), ".cache", "trt-backend", "demo")


def test_demo_writes_to_the_cache_folder_and_says_where(monkeypatch, tmp_path, capsys) -> None:
    cwd, cache = tmp_path / "cwd", tmp_path / "cache"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert main(["demo"]) == 0
    out = cache / "trt-backend" / "demo"
    text = capsys.readouterr().out
    assert text.startswith(f"writing to {out}\n")
    assert "max |probs difference| 0.00e+00, same top classes: True" in text
    assert sorted(os.listdir(out)) == WRITTEN and (out / "build" / "manifest.json").is_file()
    assert os.listdir(cwd) == []


def test_demo_out_writes_there_only(monkeypatch, tmp_path, capsys) -> None:
    cwd, cache, out = tmp_path / "cwd", tmp_path / "cache", tmp_path / "chosen" / "demo"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert main(["demo", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"writing to {out}\n")
    assert sorted(os.listdir(out)) == WRITTEN
    assert os.listdir(cwd) == [] and not cache.exists()


def test_a_default_folder_that_cannot_be_made_is_one_line(monkeypatch, tmp_path, capsys) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert main(["demo"]) == 1
    err = capsys.readouterr().err.strip()
    want = (f"trt-backend: error: cannot write the demo's folder {blocker}/trt-backend/demo "
            "(--out DIR chooses another): ")
    assert err.startswith(want) and len(err.splitlines()) == 1, err

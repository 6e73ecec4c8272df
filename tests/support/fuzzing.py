"""The seeded mutation fuzzer's harness: malformed models (``tests.support.mutants``) through
every subcommand and the Python API, each in a child process, each result classified. The CLI
that runs it is ``benchmarks/conformance/fuzz.py``; the tests run a fixed seeded set.

Each mutant (byte-level and protobuf-valid semantic edits of five seed models) goes through each
command in a child process, forked from this process after it has imported everything
(interpreter start-up is paid once, not 6000 times). The child calls the CLI's ``main``
in-process with stdout and stderr sent to files, and exits with its status. Each result is
classified:

  success    exit 0
  mismatch   compare only: exit 1 with its report (outputs differ), no error line
  error      our error: exit 1, stderr ends in one ``trt-backend: error: ...`` line
  traceback  "Traceback" on stderr, or an exception escaped ``main``
  signal     the child died on a signal (a native crash)
  hang       still running after the timeout (killed)
  oom        resident memory passed the limit (killed), a MemoryError, or a SIGKILL we did not send
  other      anything else (another exit status, an error message of several lines, ...)"""
from __future__ import annotations

import faulthandler
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.mutants import Mutant, make_mutant, seed_models  # noqa: E402

COMMANDS = ("inspect", "run", "build", "compare", "bench", "api")
CLASSES = ("success", "mismatch", "error", "traceback", "signal", "hang", "oom", "other")
CLEAN = frozenset({"success", "mismatch", "error"})
BENCH_ARGS = ["--duration-s", "0.02", "--warmup-ms", "5", "--iterations", "2", "--rounds", "1",
              "--baselines", "ort-cpu", "--no-progress"]


@dataclass
class Result:
    mutant: Mutant
    command: str
    cls: str
    first_line: str
    seconds: float


def argv_for(command: str, model: str, shapes: str | None, scratch: str) -> list[str]:
    """The CLI arguments that run ``command`` on ``model`` (tiny durations for bench)."""
    argv = [command, model] + (["--shapes", shapes] if shapes and command != "inspect" else [])
    if command == "build":  # (through the engine and build caches: their keys read the mutant too)
        argv += ["-o", os.path.join(scratch, "build"), "--cache-dir", os.path.join(scratch, "cache")]
    if command == "bench":
        argv += BENCH_ARGS
    return argv


def _api(model: str, shapes: str | None) -> int:
    """``Session(path).run(None, feeds)`` with seeded random feeds; our errors are one line."""
    from trt_backend import Session
    from trt_backend.errors import TrtBackendError
    from trt_backend.commands._shapes import parse_shapes
    from trt_backend.session.feeds import random_feeds

    try:
        given = parse_shapes(shapes) if shapes else {}
        sess = Session(model, [{n: (s, s, s) for n, s in given.items()}] if given else None)
        sess.run(None, random_feeds(sess.get_inputs(), given, 0))
    except TrtBackendError as e:
        print(f"trt-backend: error: {e}", file=sys.stderr)
        return 1
    return 0


def _child(command: str, model: str, shapes: str | None, scratch: str) -> None:
    """In the forked child: run, report through the exit status and the two files; never return."""
    os.setpgid(0, 0)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(os.path.join(scratch, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    # the parent's streams and log handlers may not be fds 1 and 2 (pytest captures both)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
    logging.root.handlers.clear()
    faulthandler.enable(sys.stderr)  # a native crash leaves its Python stack in the child's stderr
    os.chdir(scratch)
    rc = 70
    try:
        if command == "api":
            rc = _api(model, shapes)
        else:
            from trt_backend.cli import main

            rc = main(argv_for(command, model, shapes, scratch))
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException:  # noqa: BLE001 - what escapes main is exactly what we look for
        sys.stderr.write("fuzz: exception escaped main\n")
        traceback.print_exc()
        rc = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc)


def classify(command: str, status: int | None, killed: str | None, stdout: str, stderr: str) -> tuple[str, str]:
    """(class, first line) of one finished child."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if killed:
        return killed, f"killed: {killed}"
    assert status is not None
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return ("oom" if sig == signal.SIGKILL else "signal"), f"died on {name}"
    rc = os.WEXITSTATUS(status)
    if "Traceback" in stderr:
        last = next((line for line in reversed(lines) if not line.startswith(" ")), "?")
        return ("oom" if "MemoryError" in last else "traceback"), last.strip()
    errors = [k for k, line in enumerate(lines) if line.startswith("trt-backend: error:")]
    if rc == 0:
        return "success", ""
    error_exit = 2 if command == "compare" else 1  # (compare's 1 says the outputs differ)
    if rc == error_exit and errors and errors[-1] == len(lines) - 1:
        return "error", lines[-1][len("trt-backend: error: "):]
    if rc == 1 and command == "compare" and not errors and ("FAILED" in stdout or "NOTHING COMPARED" in stdout):
        return "mismatch", stdout.strip().splitlines()[-1]
    return "other", f"exit {rc}: " + (lines[-1] if lines else "(no stderr)")


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Runner:
    """Up to ``jobs`` children at once, each watched for time and resident memory."""

    def __init__(self, jobs: int, timeout: float, max_rss_mb: float, spawn: bool) -> None:
        self.jobs, self.timeout, self.max_rss_mb, self.spawn = jobs, timeout, max_rss_mb, spawn
        self.running: dict[int, tuple[Mutant, str, str, float, list[str]]] = {}
        self.results: list[Result] = []

    def start(self, mutant: Mutant, command: str, model: str, scratch: str) -> None:
        while len(self.running) >= self.jobs:
            self.poll()
        if self.spawn:
            pid = self._spawn(command, model, mutant.shapes, scratch)
        else:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(command, model, mutant.shapes, scratch)
        self.running[pid] = (mutant, command, scratch, time.monotonic(), [])

    def _spawn(self, command: str, model: str, shapes: str | None, scratch: str) -> int:
        with open(os.path.join(scratch, "stdout"), "wb") as out, open(os.path.join(scratch, "stderr"), "wb") as err:
            if command == "api":
                code = (f"import sys; sys.path.insert(0, {ROOT!r}); from tests.support.fuzzing import _api; "
                        f"sys.exit(_api({model!r}, {shapes!r}))")
                cmd = [sys.executable, "-c", code]
            else:
                cmd = [sys.executable, "-m", "trt_backend", *argv_for(command, model, shapes, scratch)]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
            return subprocess.Popen(cmd, stdout=out, stderr=err, cwd=scratch, env=env, start_new_session=True).pid

    def poll(self) -> None:
        time.sleep(0.01)
        for pid, (mutant, command, scratch, started, killed) in list(self.running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0:
                if time.monotonic() - started > self.timeout:
                    killed.append("hang")
                    _kill(pid)
                elif _rss_mb(pid) > self.max_rss_mb:
                    killed.append("oom")
                    _kill(pid)
                continue
            _kill(pid)  # anything the child left behind in its group
            del self.running[pid]
            stdout, stderr = (_read(os.path.join(scratch, n)) for n in ("stdout", "stderr"))
            cls, first = classify(command, status, killed[0] if killed else None, stdout, stderr)
            self.results.append(Result(mutant, command, cls, first, time.monotonic() - started))

    def drain(self) -> None:
        while self.running:
            self.poll()


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _preload() -> None:
    """Import what the commands use, once, before forking (the children inherit it)."""
    import onnxruntime  # noqa: F401
    import polygraphy.comparator  # noqa: F401

    import trt_backend.cli
    from trt_backend.tensorrt.flavor import load_flavor

    for name in ("inspect", "run", "build", "compare", "bench"):
        trt_backend.cli.build_parser(name)
    load_flavor("auto")
    import trt_backend.session.session


def fuzz(ids: Iterable[int], seed: int, commands: Sequence[str], *, timeout: float = 60.0, jobs: int = 2,
         max_rss_mb: float = 3000.0, spawn: bool = False, workdir: str | None = None,
         save: str | None = None) -> list[Result]:
    """Every mutant of ``ids`` through every command; the results, in completion order."""
    bad = [c for c in commands if c not in COMMANDS]
    if bad:
        raise SystemExit(f"fuzz: unknown command(s) {', '.join(bad)}; choose from {', '.join(COMMANDS)}")
    if not spawn:
        _preload()
    seeds = seed_models()
    runner = Runner(jobs, timeout, max_rss_mb, spawn)
    top = os.path.abspath(tempfile.mkdtemp(prefix="trt-fuzz-", dir=workdir))
    pending: list[str] = []
    mutants = [make_mutant(seeds, mid, seed) for mid in ids]  # all made first: a fuzzer bug shows at once
    try:
        for k, mutant in enumerate(mutants):
            mid = mutant.id
            if k and k % 100 == 0:
                print(f"fuzz: {k}/{len(mutants)} mutants started", file=sys.stderr, flush=True)
            folder = os.path.join(top, f"m{mid}")
            model = mutant.write(os.path.join(folder, "model"))
            if save:
                shutil.copytree(os.path.join(folder, "model"), os.path.join(save, f"m{mid}"), dirs_exist_ok=True)
            for command in commands:
                scratch = os.path.join(folder, command)
                os.makedirs(scratch)
                runner.start(mutant, command, model, scratch)
            pending.append(folder)
            # folders whose children are all done are removed as we go (disk stays small)
            busy = {os.path.dirname(s) for (_, _, s, _, _) in runner.running.values()}
            for f in [f for f in pending if f not in busy]:
                shutil.rmtree(f, ignore_errors=True)
                pending.remove(f)
        runner.drain()
    finally:
        for pid in list(runner.running):
            _kill(pid)
            os.waitpid(pid, 0)
        shutil.rmtree(top, ignore_errors=True)
    return runner.results


def table(results: Sequence[Result], commands: Sequence[str]) -> str:
    rows = [f"{'command':<9}" + "".join(f"{c:>10}" for c in CLASSES) + f"{'total':>8}"]
    for command in commands:
        got = [r.cls for r in results if r.command == command]
        rows.append(f"{command:<9}" + "".join(f"{got.count(c):>10}" for c in CLASSES) + f"{len(got):>8}")
    return "\n".join(rows)


def problems(results: Sequence[Result]) -> list[Result]:
    return sorted((r for r in results if r.cls not in CLEAN), key=lambda r: (r.mutant.id, COMMANDS.index(r.command)))

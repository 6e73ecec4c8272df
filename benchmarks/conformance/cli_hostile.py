"""Every trt-backend command against a hostile environment, on any models: output paths that cannot
be written, a closed stdout, a busy port and no profiles for ``serve``, two builds into one ``-o``.
Each case must end in one ``trt-backend: error:`` line (or, for a closed stdout, quietly with exit
141) and the right exit code, with nothing written and no traceback. CI runs the same cases on the
demo model (tests/trt_backend/commands/test_cli_hostile.py); this runs them on yours:

    python benchmarks/conformance/cli_hostile.py [MODEL --shapes x:1x3x224x224 ...] [--only REGEX]

Prints one PASS/FAIL line per case and a count; exits 0 either way (a report, not a test)."""
from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "trt_backend", "data", "demo.onnx")
FAST_BENCH = ["--warmup-ms", "10", "--duration-s", "0.05", "--iterations", "2", "--rounds", "1", "--no-progress"]
UNWRITABLE = "/sys"  # (sysfs takes no new files, even from root)


def cli(args: Sequence[str], cwd: str, stdout: int | None = subprocess.PIPE, timeout: float = 900
        ) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, seconds) of ``python -m trt_backend ARGS``."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "trt_backend", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, env=env, cwd=cwd, timeout=timeout)
    return proc.returncode, proc.stdout or "", proc.stderr, time.perf_counter() - start


def one_error(rc: int, want_rc: int, out: str, err: str, starts: str) -> str | None:
    """What is wrong with a refused run (None: nothing)."""
    lines = err.strip().splitlines()
    if rc != want_rc:
        return f"exit {rc}, expected {want_rc}: {err.strip()[-300:]}"
    if "Traceback" in err:
        return "a traceback"
    if len(lines) != 1 or not lines[0].startswith("trt-backend: error: " + starts):
        return f"not one error line starting {starts!r}: {err.strip()[-300:]}"
    if out:
        return f"work was done before the refusal (stdout: {out[:120]!r})"
    return None


def cases(model: str, shapes: list[str], tmp: str) -> list[tuple[str, list[str], str, str]]:
    """(name, argv with PATH, flag, kind of output) for every output flag of every command."""
    return [
        ("inspect --json", ["inspect", model, "--json", "PATH"], "--json", "file"),
        ("inspect --picture", ["inspect", model, "--picture", "PATH"], "--picture", "file"),
        ("inspect --annotated", ["inspect", model, "--annotated", "PATH"], "--annotated", "file"),
        ("inspect --export-segments", ["inspect", model, "--export-segments", "PATH"], "--export-segments", "folder"),
        ("run --outputs", ["run", model, *shapes, "--emulate", "--outputs", "PATH"], "--outputs", "file"),
        ("run --plan-json", ["run", model, *shapes, "--emulate", "--plan-json", "PATH"], "--plan-json", "file"),
        ("build -o", ["build", model, *shapes, "-o", "PATH"], "-o", "folder"),
        ("build --report", ["build", model, *shapes, "-o", os.path.join(tmp, "ok"), "--report", "PATH"],
         "--report", "file"),
        ("bench --json", ["bench", model, *shapes, "--emulate", *FAST_BENCH, "--json", "PATH"], "--json", "file"),
        ("bench --plot", ["bench", model, *shapes, "--emulate", *FAST_BENCH, "--plot", "PATH"], "--plot", "file"),
        ("compare --json", ["compare", model, *shapes, "--emulate", "--json", "PATH"], "--json", "file"),
        ("export-triton -o", ["export-triton", model, *shapes, "-o", "PATH"], "-o", "folder"),
    ]


def bad_paths(tmp: str, kind: str) -> list[tuple[str, str]]:
    os.makedirs(os.path.join(tmp, "a_folder"), exist_ok=True)
    with open(os.path.join(tmp, "a_file"), "w") as f:
        f.write("x")
    wrong = (os.path.join(tmp, "a_folder"), "is a folder") if kind == "file" else \
        (os.path.join(tmp, "a_file"), "exists and is not a folder")
    return [(f"{UNWRITABLE}/out.x", f"cannot create files in folder {UNWRITABLE}"), wrong,
            (os.path.join(tmp, "missing", "out.x"), f"folder {os.path.join(tmp, 'missing')} does not exist")]


def run_all(model: str, shapes: list[str], only: str | None) -> list[tuple[str, str | None, float]]:
    results: list[tuple[str, str | None, float]] = []
    keep = re.compile(only) if only else None

    def record(name: str, problem: str | None, seconds: float) -> None:
        results.append((name, problem, seconds))
        print(f"{'PASS' if problem is None else 'FAIL'} {os.path.basename(model)}: {name} ({seconds:.1f} s)"
              + (f": {problem}" if problem else ""), flush=True)

    with tempfile.TemporaryDirectory(prefix="cli-hostile-") as tmp:
        for name, argv, flag, kind in cases(model, shapes, tmp):
            for path, why in bad_paths(tmp, kind):
                label = f"{name} {path.replace(tmp, 'TMP')}"
                if keep and not keep.search(label):
                    continue
                before = sorted(os.listdir(tmp))
                rc, out, err, took = cli([path if a == "PATH" else a for a in argv], tmp)
                problem = one_error(rc, 2 if argv[0] == "compare" else 1, out, err,
                                    f"cannot write {flag} {path}: {why}")
                if problem is None and sorted(os.listdir(tmp)) != before:
                    problem = f"files left behind: {sorted(set(os.listdir(tmp)) - set(before))}"
                record(label, problem, took)
        built = os.path.join(tmp, "built")
        rc, _, err, took = cli(["build", model, *shapes, "-o", built], tmp)
        record("build (for the folder cases)", None if rc == 0 else err.strip()[-300:], took)
        closed = [["inspect", model], ["run", model, *shapes, "--emulate"], ["compare", model, *shapes, "--emulate"],
                  ["export-triton", model, *shapes, "-o", os.path.join(tmp, "repo"), "--dry-run"]]
        if rc == 0:
            closed += [["inspect", built], ["run", built], ["bench", built, *FAST_BENCH]]
        for argv in closed:
            label = f"closed stdout: {argv[0]} {'DIR' if built in argv else 'MODEL'}"
            if keep and not keep.search(label):
                continue
            reader, writer = os.pipe()
            os.close(reader)
            try:
                code, _, err, took = cli(argv, tmp, stdout=writer)
            finally:
                os.close(writer)
            bad = code != 141 or "Traceback" in err or "Exception ignored" in err
            record(label, f"exit {code}: {err.strip()[-300:]}" if bad else None, took)
        if rc == 0 and not (keep and not keep.search("serve busy port")):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:  # (loopback only)
                holder.bind(("127.0.0.1", 0))
                holder.listen(1)
                port = holder.getsockname()[1]
                code, out, err, took = cli(["serve", built, "--port", str(port)], tmp, timeout=300)
            record("serve busy port", one_error(code, 1, out, err, f"port {port} on 127.0.0.1 is already in use"), took)
        if not (keep and not keep.search("concurrent -o")):
            target = os.path.join(tmp, "same")
            env = {**os.environ, "PYTHONPATH": ROOT}
            start = time.perf_counter()
            procs = [subprocess.Popen([sys.executable, "-m", "trt_backend", "build", model, *shapes, "-o", target],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
                     for _ in range(2)]
            outs = [(p.wait(900), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
            ok = [o for code, o, _ in outs if code == 0]
            refused = [e for code, _, e in outs if code != 0]
            problem = None
            if not ok:
                problem = "neither build succeeded: " + refused[0].strip()[-300:]
            elif any("another trt-backend process" not in e for e in refused):
                problem = "a build failed otherwise: " + refused[0].strip()[-300:]
            else:
                final = open(os.path.join(target, "manifest.json")).read()
                digests = [re.search(r"\(digest (sha256:[0-9a-f]+)\.\.\.", o) for o in ok]
                if not any(d and d.group(1) in final for d in digests):
                    problem = "the folder is not what a build that reported success wrote"
            record(f"concurrent -o ({len(refused)} refused)", problem, time.perf_counter() - start)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=[DEMO], help="ONNX models (default: the demo model)")
    ap.add_argument("--shapes", action="append", default=[], metavar="x:1x3x224x224,...",
                    help="--shapes of each model, in order (the demo's default: image:2x3x32x32)")
    ap.add_argument("--only", default=None, metavar="REGEX", help="only the cases whose name matches")
    args = ap.parse_args()
    results = []
    for k, model in enumerate(args.models):
        shapes = args.shapes[k] if k < len(args.shapes) else ("image:2x3x32x32" if model == DEMO else None)
        results += run_all(os.path.abspath(model), ["--shapes", shapes] if shapes else [], args.only)
    failed = [r for r in results if r[1] is not None]
    print(f"{len(results) - len(failed)} of {len(results)} case(s) passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

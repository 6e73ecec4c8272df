"""TensorRT's parser asked about a model file by a child process, while this one loads onnx, numpy
and the model.

An ``inspect`` of a small model spends most of its time importing: onnx and numpy (about 0.28 s on
a 2-core machine), then TensorRT and its builder (about 0.06 s); the parser's question itself takes
milliseconds. The question needs neither onnx nor numpy, so the CLI forks a child before it imports
either (:func:`fork_question`): the child imports TensorRT and asks its parser about the file as it
is, on another CPU, while this process loads and normalises the model; the answer waits in a pipe.

The planner takes the answer (:func:`take`, :meth:`EarlyParse.answer`) only for a question that is
about the file unchanged: the parser took the file whole, loading changed nothing the parser reads
(it may name unnamed nodes, fit the IR version, and take weights an old exporter also listed as
inputs as the constants the parser takes them for; no other fix, no Q/DQ rewrite), the file is the
one the child read, and the question holds every node of it in the file's order, with the file's
inputs and outputs (see ``trt_backend.planning``). Anything else, and the planner asks TensorRT
in this process as it always does; the child's answer is dropped.

A child is forked only from a process running one thread (the CLI at its start: a fork copies no
other thread, and without one no lock is held by a thread the child lacks), with at least two CPUs
to run on, for a regular file of at most :data:`MAX_BYTES` and a quarter of the memory available.
It writes nothing to the terminal (what it logs comes back with its answer and is logged here), a
Ctrl-C ends it, and one still running when this process exits is killed."""
from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import stat
import sys
import threading
from typing import Any, NoReturn

from trt_backend.ort.sizes import available_memory
from trt_backend.tensorrt.flavor import load_flavor
from trt_backend.tensorrt.questions import supports

log = logging.getLogger(__name__)

MAX_BYTES = 256 * 2**20  # a larger file's own loading outlasts what the child saves


class EarlyParse:
    """One child asking TensorRT's parser about the model file ``path`` with flavor ``flavor``.
    It writes two lines of JSON: the TensorRT it imported, as soon as it has, then its answer."""

    def __init__(self, pid: int, fd: int, path: str, flavor: str) -> None:
        self.pid, self._fd, self.path, self.flavor = pid, fd, path, flavor
        self._lines: list[dict[str, Any] | None] = []
        self._pending = b""
        self._ended = False

    def tensorrt(self) -> tuple[str, str, str] | None:
        """The name, version and parser version of the TensorRT the child imported, waiting only
        for its import; None where it failed."""
        first = self._line(0)
        found = first.get("tensorrt") if first is not None else None
        return (str(found[0]), str(found[1]), str(found[2])) if isinstance(found, list) and len(found) == 3 else None

    def answer(self) -> dict[str, Any] | None:
        """The child's answer, waiting for it: ``target`` (the TensorRT it asked), ``supported``,
        ``pieces`` ([node indices, verified] each), ``errors`` (node index -> why) and ``file``
        (the size, modification time, inode and device of the file it read); None where the
        child failed or died."""
        answer = self._line(1)
        return answer if answer is not None and "problem" not in answer else None

    def _line(self, k: int) -> dict[str, Any] | None:
        """Message ``k`` of the child, read when first asked for (None where it never came whole).
        What the child logged comes with its answer and is logged here, with why it failed."""
        while len(self._lines) <= k and not self._ended:
            line, newline, rest = self._pending.partition(b"\n")
            if not newline:
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:  # (the child ended: a message without its newline came cut short)
                    self._end()
                self._pending += chunk
                continue
            self._pending = rest
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                message = None
            else:
                for name, level, text in message.pop("log", ()):
                    logging.getLogger(name).log(level, "%s", text)
                if "problem" in message:
                    log.debug("early parse of %s: %s", self.path, message["problem"])
            self._lines.append(message)
        return self._lines[k] if k < len(self._lines) else None

    def unchanged(self, answer: dict[str, Any]) -> bool:
        """Whether the file is still the one the child read."""
        try:
            info = os.stat(self.path)
        except OSError:
            return False
        return list(answer.get("file", ())) == [info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev]

    def discard(self) -> None:
        """End the child where it still runs (its answer not wanted)."""
        if not self._ended:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self._end()

    def _end(self) -> None:
        self._ended = True
        os.close(self._fd)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


_current: EarlyParse | None = None


def fork_question(path: str, flavor: str = "auto") -> EarlyParse | None:
    """Fork a child asking ``flavor``'s parser about the model file ``path``, where this process
    may fork (see the module's description); None where it does not."""
    global _current
    if _current is not None or flavor == "none" or not hasattr(os, "fork") or not _one_thread():
        return None
    try:
        info = os.stat(path)
        cpus = len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return None
    available = available_memory()
    if (not stat.S_ISREG(info.st_mode) or not 0 < info.st_size <= MAX_BYTES or cpus < 2
            or (available is not None and 4 * info.st_size > available)):
        return None
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:
        os.close(read_end)
        _child(os.path.abspath(path), flavor, write_end)
    os.close(write_end)
    _current = EarlyParse(pid, read_end, os.path.abspath(path), flavor)
    atexit.register(_current.discard)
    return _current


def pending(path: Any, flavor: str) -> EarlyParse | None:
    """The early parse of the model file ``path`` with ``flavor``, left for :func:`take`."""
    early = _current
    if early is None or early.flavor != flavor or not isinstance(path, (str, os.PathLike)):
        return None
    try:
        return early if os.path.samefile(path, early.path) else None
    except OSError:
        return None


def take(path: Any, flavor: str) -> EarlyParse | None:
    """The early parse of the model file ``path`` with ``flavor``, once (the next call gets None)."""
    global _current
    early = pending(path, flavor)
    if early is not None:
        _current = None
    return early


def _one_thread() -> bool:
    """Whether this process runs one thread, native ones counted (Linux); False where unknown."""
    if threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelno, record.getMessage()))


def _child(path: str, flavor_name: str, fd: int) -> NoReturn:
    """The child: the parser's answer about ``path``, as JSON into ``fd``; never returns."""
    kept = _Kept()
    said = False  # whether the first message went
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        sys.stdout = sys.stderr = open(null, "w", closefd=False)  # (the CLI's own streams write elsewhere)
        ours = logging.getLogger("trt_backend")
        ours.addHandler(kept)
        ours.setLevel(logging.DEBUG)
        ours.propagate = False
        flavor = load_flavor(flavor_name)
        _write(fd, {"tensorrt": [flavor.name, flavor.version, flavor.parser_version]})
        said = True
        trt = flavor.module
        logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
        builder = trt.Builder(logger)
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            data = f.read()
        supported, pieces, errors = supports(flavor, builder, logger, data, path)
        answer: dict[str, Any] = {
            "target": flavor.target, "supported": supported, "pieces": [[list(n), v] for n, v in pieces],
            "errors": {str(k): v for k, v in errors.items()},
            "file": [info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev]}
    except BaseException as e:  # noqa: BLE001 - the parent asks TensorRT itself
        answer = {"problem": f"{type(e).__name__}: {e}"}
    answer["log"] = kept.records
    try:
        if not said:
            _write(fd, {})
        _write(fd, answer)
    finally:
        os._exit(0)


def _write(fd: int, message: dict[str, Any]) -> None:
    """``message`` as one line of JSON into ``fd``."""
    view = memoryview(json.dumps(message).encode() + b"\n")
    while view:
        view = view[os.write(fd, view):]

"""Work run in a forked child process while this one goes on, its results coming back as lines of
JSON through a pipe.

The CLI forks such a child at its start, before it imports onnx and numpy, for work that needs
neither (TensorRT's parser and builder): on a machine with a second CPU the two run side by side,
where a thread would wait for the GIL while this process imports and plans. A child is forked only
from a process running one thread, native ones counted (a fork copies the calling thread alone, and
a lock another thread held would stay locked in the child), on Linux, with at least two CPUs to run
on. The child writes nothing to the terminal: what it logs comes back with its last message and is
logged here. A Ctrl-C ends it, and so does this process's end, however it ends."""
from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

log = logging.getLogger(__name__)

Send = Callable[[dict[str, Any]], None]


def can_fork() -> bool:
    """Whether this process may fork a child here (see the module's description)."""
    if not hasattr(os, "fork") or threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1 and len(os.sched_getaffinity(0)) >= 2
    except (OSError, AttributeError):
        return False


class Forked:
    """A child running ``work(send)``: each ``send(message)`` is one message, and what ``work``
    returns is the last, with what the child logged (``{"failed": why}`` where it raised)."""

    def __init__(self, pid: int, fd: int, what: str) -> None:
        self.pid, self._fd, self.what = pid, fd, what
        self._messages: list[dict[str, Any] | None] = []
        self._pending = b""
        self._ended = False
        self._killed = False  # (by this process: a signal it sent ends the child)
        self._status: int | None = None  # its wait status, once ended

    @classmethod
    def start(cls, work: Callable[[Send], dict[str, Any]], what: str) -> Forked | None:
        """Fork a child running ``work``; None where :func:`can_fork` says no or the fork failed.
        ``what``: the work in words, for the debug log."""
        for reaper in list(_reapers):  # (a child killed just before, its memory still being taken back)
            reaper.join(REAPED_WITHIN)
            if not reaper.is_alive():
                _reapers.remove(reaper)
        if not can_fork():
            return None
        read_end, write_end = os.pipe()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return None
        if pid == 0:
            os.close(read_end)
            _child(work, write_end, parent)
        os.close(write_end)
        child = cls(pid, read_end, what)
        atexit.register(child.kill)
        return child

    def message(self, k: int) -> dict[str, Any] | None:
        """Message ``k`` of the child, waiting for it; None where it never came whole (the child
        died, or ended before). What the child logged is logged here as its last message comes."""
        while len(self._messages) <= k and not self._ended:
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
            if isinstance(message, dict):
                for name, level, text in message.pop("log", ()):
                    logging.getLogger(name).log(level, "%s", text)
                if "failed" in message:
                    log.debug("%s: %s", self.what, message["failed"])
            self._messages.append(message if isinstance(message, dict) else None)
        return self._messages[k] if k < len(self._messages) else None

    def arrived(self, k: int) -> bool:
        """Whether message ``k`` of the child is here, read without waiting for one not begun."""
        while len(self._messages) <= k and not self._ended:
            if b"\n" not in self._pending and not select.select([self._fd], [], [], 0)[0]:
                return False
            self.message(len(self._messages))  # (a line begun is read whole: it is being written)
        return k < len(self._messages) and self._messages[k] is not None

    def kill(self) -> None:
        """End the child where it still runs (what it would say is not wanted), without waiting
        for the kernel to take its memory back (~10 ms for a child that built an engine, more for
        a large one): a thread of its own reaps it once that is done (at the end of a command
        line's process, the system does); the next fork waits for that thread."""
        if not self._ended:
            self._killed = True
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self._end(wait=False)

    def died_of(self) -> int | None:
        """The signal that ended the child, where it ended of one this process did not send (a
        native crash: SIGSEGV, SIGABRT, or a kill from outside); None otherwise. Waits for it to end."""
        while not self._ended:
            self.message(len(self._messages))
        status = self._status
        return os.WTERMSIG(status) if status is not None and not self._killed and os.WIFSIGNALED(status) else None

    def _end(self, wait: bool = True) -> None:
        self._ended = True
        os.close(self._fd)
        try:
            pid, status = os.waitpid(self.pid, 0 if wait else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == self.pid:
            self._status = status
            return
        reaper = threading.Thread(target=_reap, args=(self.pid,), name=f"reaper of {self.pid}", daemon=True)
        try:
            reaper.start()
        except RuntimeError:  # (no thread to be had: the system reaps it once this process ends)
            return
        _reapers.append(reaper)


_reapers: list[threading.Thread] = []  # reaping children killed before (see Forked.kill)
REAPED_WITHIN = 5.0  # seconds a fork waits for them: a process running them may not fork


def _reap(pid: int) -> None:
    """Wait for the child ``pid`` to end (it was killed), so that it leaves no zombie behind."""
    try:
        os.waitpid(pid, 0)
    except (ChildProcessError, InterruptedError):
        pass


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelno, record.getMessage()))


def _child(work: Callable[[Send], dict[str, Any]], fd: int, parent: int) -> NoReturn:
    """The child: ``work``'s messages into ``fd``; never returns."""
    kept = _Kept()
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (the CLI's handler raises in Python: not the child's to run)
        _end_with_parent(parent)
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        sys.stdout = sys.stderr = open(null, "w", closefd=False)  # (the CLI's own streams write elsewhere)
        ours = logging.getLogger("trt_backend")
        ours.addHandler(kept)
        ours.setLevel(logging.DEBUG)
        ours.propagate = False
        last = work(lambda message: _write(fd, message))
    except BaseException as e:  # noqa: BLE001 - said to the parent, which goes on without it
        last = {"failed": f"{type(e).__name__}: {e}"}
    try:
        _write(fd, {**last, "log": kept.records})
    finally:
        os._exit(0)


def _end_with_parent(parent: int) -> None:
    """Have Linux kill this child when its parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so
    that a parent killed outright leaves no child working on; end now where it died already."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
    except (OSError, AttributeError):  # (no prctl: the parent's exit still kills it)
        pass
    if os.getppid() != parent:
        os._exit(0)


def _write(fd: int, message: dict[str, Any]) -> None:
    """``message`` as one line of JSON into ``fd``."""
    view = memoryview(json.dumps(message).encode() + b"\n")
    while view:
        view = view[os.write(fd, view):]

"""Progress of the long steps (planning, calibration, the precision search, engine builds) as
INFO records of one logger, :data:`PROGRESS`: a library user sees them through ``logging``, and the
CLI shows them on stderr with :class:`ProgressHandler` (one rewritten line on a terminal)."""
from __future__ import annotations

import logging
import re
import shutil
import threading
import time
from typing import IO, Any

PROGRESS = "trt_backend.progress"
AFTER_S = 5.0  # off a terminal, progress lines start this long into a command (a terminal shows them at once)
REPEAT_S = 2.0  # off a terminal, a line differing from the last one only in its numbers waits this long
_DIGITS = re.compile(r"\d+(\.\d+)?")

log = logging.getLogger(PROGRESS)


def settle() -> None:
    """Say no more of steps begun: the command waits now (``serve`` once it serves)."""
    for handler in log.handlers:
        if isinstance(handler, ProgressHandler):
            handler.settle()


def progress(message: str, *args: Any) -> None:
    """Report a step of a long job (``message % args``, as logging formats it)."""
    log.info(message, *args)


class ProgressHandler(logging.Handler):
    """Progress records on ``stream``. On a terminal, one line rewritten in place and cleared
    (:meth:`clear`) before anything else is written there. Elsewhere (a log file, CI), one line
    per record with the seconds since the handler was made, for records from :data:`AFTER_S` on
    (a quicker command prints none: its output stays as it was), and at :data:`AFTER_S` the step
    still running then, with the second it began (an int8 build's calibration that ran from 1 s
    to 11 s printed nothing before it ended); a line that differs from the one before it only in
    its numbers is left out within :data:`REPEAT_S`."""

    def __init__(self, stream: IO[str], after_s: float = AFTER_S) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.after_s = after_s
        self.dirty = False
        self._last_kind = ""
        self._last_at = 0.0
        self._guard = threading.Lock()
        self._pending: tuple[float, str] | None = None  # the step running before after_s: (began, text)
        self._timer: threading.Timer | None = None
        if not self.tty and after_s > 0:
            self._timer = threading.Timer(after_s, self._running_step)
            self._timer.daemon = True
            self._timer.start()

    def _running_step(self) -> None:
        """At ``after_s``: the step that began before and runs on, with the second it began."""
        with self._guard:
            pending, self._pending = self._pending, None
            if pending is not None:
                began, text = pending
                self._last_kind, self._last_at = _DIGITS.sub("#", text), time.perf_counter()
                self._write(f"[{began:6.1f} s] {text} (the last step begun, at {self.after_s:g} s)\n")

    def settle(self) -> None:
        """The command's long work is over (it waits now, as serve does): no step is running to
        be said."""
        if self._timer is not None:
            self._timer.cancel()
        with self._guard:
            self._pending = None

    def emit(self, record: logging.LogRecord) -> None:
        text = " ".join(record.getMessage().split())
        now = time.perf_counter()
        with self._guard:
            if self.tty:
                width = max(shutil.get_terminal_size((100, 24)).columns - 1, 20)
                line = f"[{now - self.start:.0f} s] {text}"
                if len(line) > width:
                    line = line[: width - 1] + "…"
                self._write("\r\033[K" + line)
                self.dirty = True
                return
            kind = _DIGITS.sub("#", text)
            if now - self.start < self.after_s:
                self._pending = (now - self.start, text)  # (said at after_s if it still runs then)
                return  # A quick command prints nothing.
            self._pending = None
            if kind == self._last_kind and now - self._last_at < REPEAT_S:
                return  # The same step again but for its numbers, moments later.
            self._last_kind, self._last_at = kind, now
            self._write(f"[{now - self.start:6.1f} s] {text}\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # A closed stderr: progress is not worth an error.
            pass

    def clear(self) -> None:
        """Erase the progress line of a terminal (before other output, and at the end)."""
        with self._guard:
            if self.dirty:
                self.dirty = False
                self._write("\r\033[K")

    def close(self) -> None:
        """Stop: the terminal's progress line is erased (and a running step no longer said)."""
        self.settle()
        self.clear()
        super().close()


class ClearingStream:
    """A text stream (stdout, stderr) that first clears ``handler``'s progress line, so results
    and messages never share a line with it on a terminal."""

    def __init__(self, stream: IO[str], handler: ProgressHandler) -> None:
        self._stream = stream
        self._handler = handler

    def write(self, text: str) -> int:
        if self._handler.dirty and text:
            self._handler.clear()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

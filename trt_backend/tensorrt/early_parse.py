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
inputs and outputs (see ``trt_backend.planning``). One fix the child makes too: where the file's
inputs declare a 0, or "?" on two dims or more, which loading takes as unknown dims and the parser
would read as an empty dim or as dims held equal (Paddle2ONNX's ``[-1, 3, "?", "?"]``), the child
asks about the file with those dims as loading leaves them
(:func:`trt_backend.tensorrt.questions.asked_of`). Anything else, and the planner asks TensorRT in
this process as it always does; the child's answer is dropped. A build's head start
(``trt_backend.engines.head_start``) asks the same question before it builds and offers its answer
the same way (:func:`offer`, :class:`FileAnswer`).

A child is forked where :mod:`trt_backend._forked` may fork one (a process running one thread, a
second CPU), for a regular file of at most :data:`MAX_BYTES` and a quarter of the memory
available."""
from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any, Protocol

from trt_backend._forked import Forked, Send
from trt_backend._lazy import lazy_module
from trt_backend.ort.sizes import room_beside

if TYPE_CHECKING:
    from trt_backend.tensorrt.questions import Answer

# Loaded in the child, after the fork: the parent goes on at once.
_flavor = lazy_module("trt_backend.tensorrt.flavor")
_questions = lazy_module("trt_backend.tensorrt.questions")
_wire = lazy_module("partitioner.wire")  # (what an answer records of its file)

MAX_BYTES = 256 * 2**20  # a larger file's own loading outlasts what the child saves


class EarlyParse:
    """One child asking TensorRT's parser about the model file ``path`` with flavor ``flavor``. It
    says which TensorRT it imported as soon as it has, then its answer."""

    def __init__(self, child: Forked, path: str, flavor: str) -> None:
        self.child, self.path, self.flavor = child, path, flavor

    def tensorrt(self) -> tuple[str, str, str] | None:
        """The name, version and parser version of the TensorRT the child imported, waiting only
        for its import; None where it failed."""
        first = self.child.message(0)
        found = first.get("tensorrt") if first is not None else None
        return (str(found[0]), str(found[1]), str(found[2])) if isinstance(found, list) and len(found) == 3 else None

    def answer(self) -> dict[str, Any] | None:
        """The child's answer, waiting for it: ``target`` (the TensorRT it asked), ``supported``,
        ``pieces`` ([node indices, verified] each), ``errors`` (node index -> why), ``file`` (the
        size, modification time, inode and device of the file it read) and ``untied`` (whether
        it asked about the file with its inputs' unknown dims as loading leaves them, see
        :func:`~trt_backend.tensorrt.questions.asked_of`); None where the child failed or died."""
        answer = self.child.message(1)
        return answer if answer is not None and "failed" not in answer else None

    def unchanged(self, answer: dict[str, Any]) -> bool:
        """Whether the file is still the one the child read."""
        return file_unchanged(self.path, answer)

    def discard(self) -> None:
        """End the child where it still runs (its answer not wanted)."""
        self.child.kill()


class FileAnswer(Protocol):
    """An answer of TensorRT's parser about a model file as it is, left for the planner: an early
    parse's, or a build's head start's (``trt_backend.engines.head_start``), which asked the same
    question before it built."""

    path: str
    flavor: str

    def tensorrt(self) -> tuple[str, str, str] | None:
        """See :meth:`EarlyParse.tensorrt` (None: the caller imports TensorRT to tell)."""

    def answer(self) -> dict[str, Any] | None:
        """See :meth:`EarlyParse.answer`."""

    def unchanged(self, answer: dict[str, Any]) -> bool:
        """Whether the file is still the one the answer is about."""

    def discard(self) -> None:
        """The answer is not wanted (what asked it may stop)."""


def file_unchanged(path: str, answer: dict[str, Any]) -> bool:
    """Whether the file ``path`` is still the one ``answer`` is about (size, modification time,
    inode, device)."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    return list(answer.get("file", ())) == list(_wire.file_status(info))


def answer_of(target: str, asked: Answer, info: os.stat_result, untied: bool) -> dict[str, Any]:
    """The parser's answer ``asked`` (see :func:`~trt_backend.tensorrt.questions.supports`) about
    a file as JSON-able values, as :meth:`EarlyParse.answer` gives it; ``untied``: asked of the
    file with its inputs' unknown dims as loading leaves them (see
    :func:`~trt_backend.tensorrt.questions.asked_of`)."""
    supported, pieces, errors = asked
    return {"target": target, "supported": supported, "pieces": [[list(n), v] for n, v in pieces],
            "errors": {str(k): v for k, v in errors.items()}, "file": list(_wire.file_status(info)),
            "untied": untied}


_current: FileAnswer | None = None


def offer(answer: FileAnswer) -> None:
    """Leave ``answer`` for the planner (see :func:`take`), where no other is pending."""
    global _current
    if _current is None:
        _current = answer


def withdraw(answer: FileAnswer) -> None:
    """Take ``answer`` back where the planner did not take it."""
    global _current
    if _current is answer:
        _current = None


def fork_question(path: str, flavor: str = "auto") -> EarlyParse | None:
    """Fork a child asking ``flavor``'s parser about the model file ``path``, where this process
    may fork (see the module's description); None where it does not."""
    global _current
    if _current is not None or flavor == "none":
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or not room_beside(info.st_size, MAX_BYTES):
        return None
    path = os.path.abspath(path)
    child = Forked.start(lambda send: _ask(path, flavor, send), f"early parse of {path}")
    if child is None:
        return None
    early = EarlyParse(child, path, flavor)
    _current = early
    return early


def pending(path: Any, flavor: str) -> FileAnswer | None:
    """The early parse of the model file ``path`` with ``flavor``, left for :func:`take`."""
    early = _current
    if early is None or early.flavor != flavor or not isinstance(path, (str, os.PathLike)):
        return None
    try:
        return early if os.path.samefile(path, early.path) else None
    except OSError:
        return None


def take(path: Any, flavor: str) -> FileAnswer | None:
    """The early parse of the model file ``path`` with ``flavor``, once (the next call gets None)."""
    global _current
    early = pending(path, flavor)
    if early is not None:
        _current = None
    return early


def _ask(path: str, flavor_name: str, send: Send) -> dict[str, Any]:
    """The child's work: which TensorRT it imported, then the parser's answer about ``path``."""
    flavor = _flavor.load_flavor(flavor_name)
    send({"tensorrt": [flavor.name, flavor.version, flavor.parser_version]})
    trt = flavor.module
    logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
    builder = trt.Builder(logger)
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        data, untied = _questions.asked_of(f.read())
    return answer_of(flavor.target, _questions.supports(flavor, builder, logger, data, path), info, untied)

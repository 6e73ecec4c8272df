"""The methods dataclasses generate (``__init__``, ``__repr__``, ``__eq__``, ...), compiled once
and kept between runs of the command line, as Python keeps modules' bytecode.

A dataclass compiles the source text of its methods when its class is made (an ``exec`` per
method, ~0.7 ms a class on a 2-CPU machine): the ``build`` command makes some 60 classes as it
loads, ~45 ms of its 0.1 s of our imports. :func:`use` has the ``dataclasses`` module compile
through :func:`_exec`, which takes the code of a text compiled before from a file beside this
module's bytecode (``__pycache__/_class_code.<python tag>.marshal``, where ``sys.pycache_prefix``
puts bytecode, if it does); :func:`save` adds what was compiled anew, once the command is done.
The code is what compiling the same text gives (the text is its key); a file that cannot be read
or written, or a damaged one, costs only the time. Only the command line uses it: a program that
imports trt_backend makes its classes as Python does."""
from __future__ import annotations

import builtins
import importlib.util
import marshal
import os
import sys
from types import CodeType
from typing import Any

MAX_ENTRIES = 4096  # past this, a file starts again from what one run compiled

_kept: dict[str, CodeType] = {}  # read from the file
_new: dict[str, CodeType] = {}  # compiled in this process
_taken = 0  # texts whose code came from the file
_in_use = False


def path() -> str | None:
    """The file the code is kept in, or None where this Python keeps no bytecode."""
    try:
        pyc = importlib.util.cache_from_source(__file__)
    except (NotImplementedError, ValueError):
        return None
    return os.path.splitext(pyc)[0] + ".marshal"


def use() -> None:
    """Have the dataclasses made from now on take their methods' code from the file (and compile
    and keep what it does not hold). Once per process."""
    global _in_use
    import dataclasses

    if _in_use:
        return
    file = path()
    if file is None:
        return
    try:
        with open(file, "rb") as f:
            kept = marshal.loads(f.read())
    except (OSError, EOFError, ValueError, TypeError):
        kept = {}
    if isinstance(kept, dict):
        _kept.update((k, v) for k, v in kept.items() if isinstance(k, str) and isinstance(v, CodeType))
    dataclasses.exec = _exec  # type: ignore[attr-defined]  # (found before the builtin: the module's global)
    _in_use = True


def _exec(source: Any, globals: Any = None, locals: Any = None, **kwargs: Any) -> None:
    """``exec``, for ``dataclasses``: a source text compiled before is not compiled again."""
    global _taken
    if isinstance(source, str):
        code = _kept.get(source)
        if code is not None:
            _taken += 1
        else:
            code = _new.get(source) or compile(source, "<string>", "exec")
            _new[source] = code
        source = code
    builtins.exec(source, globals, locals, **kwargs)


def save() -> None:
    """Add the code compiled anew in this process to the file (written whole, then renamed);
    nothing where none was, or where Python is told to write no bytecode."""
    file = path()
    if not _new or file is None or sys.dont_write_bytecode:
        return
    kept = {**_kept, **_new} if len(_kept) + len(_new) <= MAX_ENTRIES else dict(_new)
    tmp = f"{file}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(file), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(marshal.dumps(kept))
        os.replace(tmp, file)
    except (OSError, ValueError):
        try:
            os.remove(tmp)
        except OSError:
            pass
        return
    _kept.update(_new)
    _new.clear()


def counts() -> tuple[int, int]:
    """(texts whose code was taken from the file, texts compiled and not yet saved) so far."""
    return _taken, len(_new)

"""The methods dataclasses generate (``__init__``, ``__repr__``, ``__eq__``, ...), compiled once
and kept between runs of the command line, as Python keeps modules' bytecode.

A dataclass compiles the source text of its methods when its class is made (an ``exec`` per
method, ~0.7 ms a class on a 2-CPU machine): the ``build`` command makes some 60 classes as it
loads, ~45 ms of its 0.1 s of our imports. :func:`use` has the ``dataclasses`` module compile
through :func:`_exec`, which takes the code of a text compiled before from a file beside this
module's bytecode (``__pycache__/_class_code.<python tag>.marshal``, where ``sys.pycache_prefix``
puts bytecode, if it does); :func:`save` adds what was compiled anew, once the command is done.

The code is what ``exec`` in ``dataclasses`` compiles from the same text (the text is its key;
compiled without this module's ``__future__`` imports, as ``dataclasses`` has none): the classes
are the same, ours and other libraries' alike. The file starts with this format's mark,
Python's bytecode magic number and the CRC-32 of the rest (zlib's: the command line loads no
hashlib where it needs none): a file of another format or Python, or a damaged one, is not read
(it costs only the time, and is written again), nor is anything but a regular file of at most
:data:`MAX_BYTES`. Only the command line uses it: a program that imports trt_backend makes its
classes as Python does."""
from __future__ import annotations

import builtins
import importlib.util
import marshal
import os
import stat
import sys
import zlib
from types import CodeType
from typing import Any

MAX_ENTRIES = 4096  # past this, a file starts again from what one run compiled
MAX_BYTES = 16 << 20  # a larger file is not read (~600 kB once every command has run)
_MARK = b"trt-backend dataclass code 2\n"

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
    _kept.update(_read(file))
    dataclasses.exec = _exec  # type: ignore[attr-defined]  # (found before the builtin: the module's global)
    _in_use = True


def _head() -> bytes:
    return _MARK + importlib.util.MAGIC_NUMBER


def _read(file: str) -> dict[str, CodeType]:
    """The code the file keeps; nothing where it is no regular file of at most MAX_BYTES, or not
    of this format and Python, or its CRC-32 does not match."""
    try:
        info = os.stat(file)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return {}
        with open(file, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError:
        return {}
    head = _head()
    check, payload = data[len(head):len(head) + 4], data[len(head) + 4:]
    if not data.startswith(head) or zlib.crc32(payload).to_bytes(4, "little") != check:
        return {}
    try:
        kept = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(kept, dict):
        return {}
    return {k: v for k, v in kept.items() if isinstance(k, str) and isinstance(v, CodeType)}


def _exec(source: Any, globals: Any = None, locals: Any = None, **kwargs: Any) -> None:
    """``exec``, for ``dataclasses``: a source text compiled before is not compiled again."""
    global _taken
    if isinstance(source, str):
        code = _kept.get(source)
        if code is not None:
            _taken += 1
        else:  # (not inheriting this module's ``from __future__ import annotations``)
            code = _new.get(source) or compile(source, "<string>", "exec", dont_inherit=True)
            _new[source] = code
        source = code
    builtins.exec(source, globals, locals, **kwargs)


def save() -> None:
    """Add the code compiled anew in this process to the file (written whole, then renamed);
    nothing where none was, or where Python is told to write no bytecode. A failure, or a
    Ctrl-C meanwhile (the command's work is done), leaves the file as it was."""
    file = path()
    if not _new or file is None or sys.dont_write_bytecode:
        return
    kept = {**_kept, **_new} if len(_kept) + len(_new) <= MAX_ENTRIES else dict(_new)
    tmp = f"{file}.{os.getpid()}.tmp"
    done = False
    try:
        payload = marshal.dumps(kept)
        os.makedirs(os.path.dirname(file), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(_head() + zlib.crc32(payload).to_bytes(4, "little") + payload)
        os.replace(tmp, file)
        done = True
    except (OSError, ValueError, KeyboardInterrupt):
        pass
    finally:
        if not done:
            try:
                os.remove(tmp)
            except (OSError, KeyboardInterrupt):
                pass
    if done:
        _kept.update(_new)
        _new.clear()


def counts() -> tuple[int, int]:
    """(texts whose code was taken from the file, texts compiled and not yet saved) so far."""
    return _taken, len(_new)

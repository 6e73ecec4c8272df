"""Files written whole or not at all: a temporary file in the same folder, then ``os.replace``."""
from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import secrets
import shutil
import stat
import sys
import tempfile

import onnx

from partitioner import Plan
from partitioner.weights import data_files, place_data_files
from trt_backend._lazy import lazy_module

log = logging.getLogger(__name__)
_picture = lazy_module("partitioner.picture")  # (only the commands that draw load it)


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, durable: bool = True) -> None:
    """Write ``data`` (str as UTF-8) to ``path`` through a temporary file in the same folder and
    ``os.replace``: readers see the old file or the whole new one, never a partial one, and a
    failure leaves no temporary file behind. ``durable``: flushed to disk before the rename
    (``fsync``); without it a crash of the machine may leave the new name with lost content, for
    files whose readers check a hash anyway (engine cache entries)."""
    target = os.fspath(path)
    if not isinstance(data, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"write_atomic takes str or bytes, not {type(data).__name__}")
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    folder = os.path.dirname(os.path.abspath(target))
    tmp = os.path.join(folder, f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
    mode = _existing_mode(target)
    done = False
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
        done = True
    finally:
        if not done:
            _remove_quietly(tmp)
    log.debug("wrote %s (%d bytes)", target, len(payload))


def save_model_atomic(proto: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
    """Serialize ``proto`` and write it with :func:`write_atomic` (nothing written on failure)."""
    write_atomic(path, proto.SerializeToString())


def save_model_with_data(proto: onnx.ModelProto, path: str | os.PathLike[str], weights_dir: str | None) -> None:
    """:func:`save_model_atomic`, and the external data files ``proto`` names made available beside
    ``path`` (copies, see :func:`partitioner.weights.place_data_files`; ``weights_dir`` is the folder
    its locations are relative to now). The weights are never read into a protobuf."""
    save_model_atomic(proto, path)
    locations = data_files(proto)
    if locations and weights_dir is not None:
        place_data_files(locations, weights_dir, os.path.dirname(os.path.abspath(os.fspath(path))))


def missing_parent(out_dir: str) -> str | None:
    """Why no folder can be made at ``out_dir`` because of its parent (None: the parent exists
    and is writable, as far as ``os.access`` tells)."""
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        return f"folder {parent} does not exist"
    if not os.access(parent, os.W_OK):
        return f"folder {parent} is not writable"
    return None


def swap_in_folder(tmp: str, out_dir: str) -> None:
    """Put the finished folder ``tmp`` (made beside ``out_dir``) in ``out_dir``'s place. An
    existing ``out_dir`` is exchanged with ``tmp`` in one step where the system can (Linux
    ``renameat2(RENAME_EXCHANGE)``: a reader, or a kill, sees the old folder or the new one,
    never none), then removed; elsewhere it is moved aside first. OSError on failure (``tmp`` is
    the caller's to remove)."""
    if os.path.isdir(out_dir) and not os.path.islink(out_dir) and _exchange(tmp, out_dir):
        shutil.rmtree(tmp, ignore_errors=True)  # (``tmp`` holds the old folder now)
        return
    old = None
    if os.path.exists(out_dir):
        old = tempfile.mkdtemp(prefix=".old-", dir=os.path.dirname(os.path.abspath(out_dir)))
        os.rmdir(old)
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old:
        shutil.rmtree(old, ignore_errors=True)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchange(a: str, b: str) -> bool:
    """Swap paths ``a`` and ``b`` atomically; False where the system cannot (not Linux, a libc
    without ``renameat2``, a file system without RENAME_EXCHANGE), OSError for other failures."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def _existing_mode(path: str) -> int | None:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("could not remove temporary file %s: %s", path, e)


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data`` (file hashes of build folders and engine caches)."""
    return hashlib.sha256(data).hexdigest()


def write_picture(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write the plan's picture as SVG (``.svg``) or HTML (``.html``/``.htm``), atomically."""
    write_atomic(path, _picture.render_picture(plan, path))
    log.info("wrote partition picture %s", os.fspath(path))

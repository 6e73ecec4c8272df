"""Files written whole or not at all: a temporary file in the same folder, then ``os.replace``;
output paths checked before any work; one writer per output folder at a time (a lock file)."""
from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import logging
import os
import shutil
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from trt_backend._lazy import lazy_module
from trt_backend.errors import OptionsError, OutputError

if TYPE_CHECKING:
    import onnx

    from partitioner import Plan

log = logging.getLogger(__name__)
_picture = lazy_module("partitioner.picture")  # Only the commands that draw load it.
_weights = lazy_module("partitioner.weights")  # onnx loads with the first model saved.


def path_text(value: Any, what: str) -> str:
    """``value`` (a str or an ``os.PathLike`` of str) as a str; OptionsError naming ``what`` for
    anything else (an int, bytes, None), which would otherwise fail deep inside as Python's
    TypeError."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str):
            return text
    raise OptionsError(f"{what} must be a path (a str or os.PathLike), got {type(value).__name__}")


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
    if os.path.islink(target):  # the file it names is written, not the link replaced by a file
        target = os.path.realpath(target)
    if _not_a_file(target):  # /dev/stdout, /dev/null, a pipe: written through, never replaced
        _write_through(target, payload)
        return
    folder = os.path.dirname(os.path.abspath(target))
    tmp = os.path.join(folder, f".{os.path.basename(target)}.{_token()}.tmp")
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


def _not_a_file(path: str) -> bool:
    """Whether ``path`` exists as something other than a regular file or a folder (a device, a
    pipe, a socket): what an atomic replace would destroy (as root, /dev/null itself)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode))


def _write_through(path: str, payload: bytes) -> None:
    """``payload`` written into the device or pipe at ``path``; OutputError naming it where it
    cannot take it (a full device, a pipe nobody reads: not waited for)."""
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) if stat.S_ISFIFO(os.stat(path).st_mode)
                     else os.O_WRONLY)
    except OSError as e:
        raise OutputError(f"{path}: cannot write to it ({e.strerror or e})") from None
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        raise OutputError(f"{path}: cannot write to it ({e.strerror or e})") from None
    finally:
        os.close(fd)
    log.debug("wrote %s (%d bytes, not a regular file: written through)", path, len(payload))


def save_model_atomic(proto: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
    """Serialize ``proto`` and write it with :func:`write_atomic` (nothing written on failure)."""
    write_atomic(path, proto.SerializeToString())


def save_model_with_data(proto: onnx.ModelProto, path: str | os.PathLike[str], weights_dir: str | None) -> None:
    """:func:`save_model_atomic`, and the external data files ``proto`` names made available beside
    ``path`` (copies, see :func:`partitioner.weights.place_data_files`; ``weights_dir`` is the folder
    its locations are relative to now). The weights are never read into a protobuf."""
    save_model_atomic(proto, path)
    locations = _weights.data_files(proto)
    if locations and weights_dir is not None:
        _weights.place_data_files(locations, weights_dir, os.path.dirname(os.path.abspath(os.fspath(path))))


def missing_parent(out_dir: str) -> str | None:
    """Why no folder can be made at ``out_dir`` because of its parent (None: the parent exists
    and is writable, as far as ``os.access`` tells)."""
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        return f"folder {parent} does not exist"
    if not os.access(parent, os.W_OK):
        return f"folder {parent} is not writable"
    return None


def output_problem(path: str, *, folder: bool = False, make_parents: bool = False) -> str | None:
    """Why ``path`` cannot be written as an output file (``folder``: an output folder, replaced
    whole), or None. The folder it goes in must exist (``make_parents``: its nearest existing
    ancestor, the rest is made) and take new files (tried, not asked: ``os.access`` says yes to
    root, also on read-only file systems); a file output must not be a folder, a folder output
    must not be a file."""
    target = os.path.abspath(path)
    parent = os.path.dirname(target)
    if os.path.isdir(target) and not folder:
        return "is a folder"
    if os.path.exists(target) and not os.path.isdir(target) and folder:
        return "exists and is not a folder"
    while make_parents and not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.exists(parent):
        return f"folder {parent} does not exist"
    if not os.path.isdir(parent):
        return f"{parent} is not a folder"
    probe = os.path.join(parent, f".{os.path.basename(target)}.{_token()}.probe")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        return f"cannot create files in folder {parent} ({e.strerror or e})"
    _remove_quietly(probe)
    return None


def new_folder(parent: str, prefix: str) -> str:
    """A new, empty folder with a unique name in ``parent``, made with the mode the user's umask
    gives (``tempfile.mkdtemp`` makes 0700, which would stay with a folder renamed into place).
    Its name carries this machine's token and this process's id (``PREFIX<machine>.<pid>-<token>``):
    folders of the same prefix that a process of this machine left behind when it was killed
    (SIGKILL, the kernel's out-of-memory killer: nothing of it ran to remove them) are removed
    here first (:func:`remove_stale`)."""
    remove_stale(parent, prefix)
    for _ in range(100):
        path = os.path.join(parent, f"{prefix}{_machine()}.{os.getpid()}-{_token()}")
        try:
            os.mkdir(path, 0o777)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(errno.EEXIST, "no unused temporary name", os.path.join(parent, prefix))


def remove_stale(parent: str, prefix: str) -> list[str]:
    """Remove the folders ``new_folder`` made in ``parent`` with ``prefix`` whose process is gone:
    made on this machine (its token: another host or container sharing the folder is left alone)
    by a process id no process holds now. Returns what was removed; nothing it cannot list or
    remove stops the caller."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    mine, removed = f"{prefix}{_machine()}.", []
    for name in names:
        if not name.startswith(mine):
            continue
        pid = name[len(mine):].partition("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        path = os.path.join(parent, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                removed.append(path)
                log.info("removed %s, left by process %s, which is gone", path, pid)
    return removed


def _alive(pid: int) -> bool:
    """Whether a process of this id exists (one of another user's counts). Elsewhere than on
    POSIX (where signal 0 only asks), every process counts as alive: nothing is swept."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # (EPERM: it exists, another user's)
    return True


@functools.lru_cache(maxsize=1)
def _machine() -> str:
    """A short token of this machine, boot and process-id namespace (the hostname, Linux's boot id
    and the namespace's id: containers of one host may share the first two): process ids are only
    told apart within one."""
    boot = ""
    with contextlib.suppress(OSError):
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
    with contextlib.suppress(OSError):
        boot += "|" + os.readlink("/proc/self/ns/pid")
    import hashlib  # (here: once per process, as below)

    host = os.uname().nodename if hasattr(os, "uname") else os.environ.get("COMPUTERNAME", "")
    return hashlib.sha256(f"{host}|{boot}".encode()).hexdigest()[:8]


def umask() -> int:
    """The process's umask, read without changing it (``os.umask`` can only be read by setting
    it, which other threads creating files at that moment would see): Linux tells it in
    /proc/self/status; elsewhere it is set and put back."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def follow_umask(path: str) -> None:
    """Give ``path`` (a file another library made with a fixed mode, e.g. ONNX's external data
    files, 0600) the mode a new file gets under the user's umask."""
    os.chmod(path, 0o666 & ~umask())


@contextlib.contextmanager
def output_lock(out_dir: str) -> Iterator[None]:
    """Hold the lock of output folder ``out_dir`` (``.<name>.lock`` beside it, an advisory
    ``flock`` the system drops with the process) while writing it: a second writer of the same
    folder gets an :class:`OutputError` at once instead of replacing the first one's result
    unseen. Where ``flock`` is missing (not POSIX), nothing is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    target = os.path.abspath(out_dir)
    lock = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.lock")
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise OutputError(f"{out_dir}: cannot create its lock file {lock} ({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_pid(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                who = f" (process {holder})" if holder else ""
                raise OutputError(f"{out_dir}: another trt-backend process{who} is writing this folder; wait for it "
                                  "to finish or write elsewhere") from None
            # A file system without locks: write as before, unguarded.
            log.warning("%s: cannot lock %s (%s); another writer of this folder would go unnoticed", out_dir, lock,
                        e.strerror or e)
            _remove_quietly(lock)
            yield
            return
        try:  # The file may have been removed by the holder that just let go: lock the one in place.
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        _remove_quietly(lock)  # Removed while held: a waiting writer then locks a fresh file.
        os.close(fd)


def _read_pid(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""


def swap_in_folder(tmp: str, out_dir: str) -> None:
    """Put the finished folder ``tmp`` (made beside ``out_dir``) in ``out_dir``'s place. An
    existing ``out_dir`` is exchanged with ``tmp`` in one step where the system can (Linux
    ``renameat2(RENAME_EXCHANGE)``: a reader, or a kill, sees the old folder or the new one,
    never none), then removed; elsewhere it is moved aside first. OSError on failure (``tmp`` is
    the caller's to remove)."""
    if os.path.isdir(out_dir) and not os.path.islink(out_dir) and _exchange(tmp, out_dir):
        shutil.rmtree(tmp, ignore_errors=True)  # ``tmp`` holds the old folder now.
        return
    old = None
    if os.path.exists(out_dir):
        old = new_folder(os.path.dirname(os.path.abspath(out_dir)), ".old-")
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


def link_or_copy(src: str, dst: str, *, link: bool = True) -> None:
    """``dst`` as the file ``src``: a hard link where ``link`` and the file system allow (for files
    never rewritten in place: every writer replaces files by rename), else a copy by the kernel;
    through a temporary name and ``os.replace``, so a reader sees the old ``dst`` or the whole new
    one, and a failure leaves no temporary file behind."""
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    tmp = os.path.join(os.path.dirname(os.path.abspath(dst)), f".{os.path.basename(dst)}.{_token()}.tmp")
    try:
        linked = False
        if link:
            try:
                os.link(src, tmp)
                linked = True
            except OSError:  # Another file system, or links not allowed: copy.
                pass
        if not linked:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        _remove_quietly(tmp)
        raise


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data`` (file hashes of build folders and engine caches)."""
    import hashlib  # (here: commands that hash nothing, as inspect, need not load it, ~3 ms)

    return hashlib.sha256(data).hexdigest()


def write_hashed(path: str, data: Any) -> str:
    """Write ``data`` (bytes or any buffer: a serialized engine) into the file ``path`` (made or
    truncated; not atomic: for a file of a folder being staged) and return its hex SHA-256,
    computed in a thread beside the write for data of more than a few MiB (both let go of the GIL:
    on a 100 MiB engine the hash no longer follows the write). Where either fails, the file is
    removed and the failure raised."""
    import hashlib

    view = memoryview(data).cast("B")
    digest: list[str] = []
    failed: list[BaseException] = []

    def hash_it() -> None:
        try:
            digest.append(hashlib.sha256(view).hexdigest())
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread below
            failed.append(e)

    hasher = threading.Thread(target=hash_it, name="hash") if view.nbytes > 4 << 20 else None
    if hasher is not None:
        hasher.start()
    try:
        try:
            with open(path, "wb") as out:
                out.write(view)
        finally:
            if hasher is not None:
                hasher.join()
        if hasher is None:
            hash_it()
        if failed:
            raise failed[0]
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return digest[0]


def _token() -> str:
    """12 random hex digits for a temporary name (``secrets.token_hex(6)``, without loading
    secrets and the hashlib it imports)."""
    return os.urandom(6).hex()


def canonical_json(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """``value`` as canonical JSON: sorted keys, no spaces, ASCII only. ``default`` turns values
    JSON has no form for into ones it has (None: such values are a TypeError)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=default).encode("ascii")


def json_sha256(value: Any, default: Callable[[Any], Any] | None = None) -> str:
    """Hex SHA-256 of ``value``'s :func:`canonical_json`: the one hash of keys and manifests."""
    return sha256_bytes(canonical_json(value, default))


def write_picture(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write the plan's picture as SVG (``.svg``) or HTML (``.html``/``.htm``), atomically."""
    write_atomic(path, _picture.render_picture(plan, path))
    log.info("wrote partition picture %s", os.fspath(path))


_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


@contextmanager
def file_lock(lock_path: str) -> Iterator[None]:
    """Exclusive across the threads of this process and, with POSIX ``flock`` on ``lock_path``
    (created if missing), across processes; elsewhere across threads only. OSError when the lock
    file cannot be created."""
    with _thread_locks_guard:
        lock = _thread_locks.setdefault(os.path.abspath(lock_path), threading.Lock())
    with lock:
        try:
            import fcntl
        except ImportError:  # Not POSIX: this process only.
            yield
            return
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


NPZ_HOW = "an .npz of arrays by input name, as numpy.savez(path, name=array) writes"


def npz_problem(path: str) -> str | None:
    """What the file at ``path`` is where it is no .npz, read from its first bytes (a single
    .npy array, or no zip archive at all), in words that end in what to give instead; None where
    it starts as an .npz (reading it may still fail). OSError where it cannot be read."""
    with open(path, "rb") as f:
        head = f.read(6)
    if head == b"\x93NUMPY":
        return f"a single .npy array, which names no input; give {NPZ_HOW}"
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")):  # (a zip archive's first bytes; an empty one's)
        return f"not an .npz file; give {NPZ_HOW}"
    return None

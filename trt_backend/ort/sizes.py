"""Sizes as users write them (``"8G"``, ``"512M"``, ``"1.5GiB"``), and the memory available now,
read without loading numpy or ONNX Runtime (build options are made before either loads)."""
from __future__ import annotations

import functools
import os
import re
import resource

from partitioner.errors import OptionsError

# The largest model (its file and the external data files it names) read whole a second time: by a
# head start's build beside the compile path, or by a build that hands TensorRT the file as it is
# (see trt_backend.engines.builder.file_as_is, trt_backend.engines.head_start).
WHOLE_FILE_MAX_BYTES = 512 * 2**20

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)


def parse_size(value: int | str | None, what: str = "max_memory") -> int | None:
    """Bytes from ``value``: a whole number of bytes, or text such as ``"8G"``, ``"512M"``,
    ``"1.5GiB"``, ``"4096"`` (K, M, G, T are powers of 1024). None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise OptionsError(f"{what} must be a number of bytes or a size such as 8G or 512M, got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.fullmatch(value)
        if m is None:
            raise OptionsError(f"{what}: cannot read size {value!r}; write bytes or a size such as 8G, 512M, 1.5GiB")
        n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n <= 0:
        raise OptionsError(f"{what} must be more than 0 bytes, got {value!r}")
    return n


def proc_bytes(path: str, field: str) -> int | None:
    """The size a Linux ``/proc`` status file gives in kB for ``field`` (``"MemAvailable"`` in
    ``/proc/meminfo``, ``"VmRSS"`` in ``/proc/self/status``), in bytes; None where unknown."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_memory() -> int | None:
    """Bytes of memory available to allocate now, None where unknown: the machine's
    (MemAvailable), or less where this process's memory cgroup (a container's ``--memory``, v1
    or v2) or its address-space limit (``ulimit -v``) leaves less, as the kernel's out-of-memory
    killer and a failing allocation count it."""
    found = [n for n in (proc_bytes("/proc/meminfo", "MemAvailable"), _cgroup_room(), _address_room())
             if n is not None]
    return max(0, min(found)) if found else None


_UNLIMITED = 1 << 60  # cgroup limits from here on mean none (v1 writes 2^63 rounded to pages)


def _cgroup_room() -> int | None:
    """The memory this process's cgroup may still take: its limit less its use; None where it
    has no limit or none can be read."""
    files = _cgroup_files()
    if files is None:
        return None
    limit, used = _read_int(files[0]), _read_int(files[1])
    return limit - (used or 0) if limit is not None and limit < _UNLIMITED else None


@functools.lru_cache(maxsize=1)
def _cgroup_files() -> tuple[str, str] | None:
    """(limit, use) files of this process's memory cgroup (v2's memory.max and memory.current, v1's
    memory.limit_in_bytes and memory.usage_in_bytes), found once per process (a check of every
    tensor's size reads them); None where /proc/self/cgroup names none."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for parts in lines:
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # v2: one unified hierarchy
            base, limit_file, use_file = "/sys/fs/cgroup", "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base, limit_file, use_file = "/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        folder = os.path.join(base, path.lstrip("/"))
        if os.path.isfile(os.path.join(folder, limit_file)):
            return os.path.join(folder, limit_file), os.path.join(folder, use_file)
    return None


def _address_room() -> int | None:
    """What ``ulimit -v`` (RLIMIT_AS) leaves this process beside what it maps now; None without one."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    return soft - (proc_bytes("/proc/self/status", "VmSize") or 0)


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # ("max": no limit)


def room_beside(size: int, limit: int) -> bool:
    """Whether a model file of ``size`` bytes may be worked on a second time beside this process's
    own work on it (a head start's build, an early parse): at most ``limit`` bytes, and a quarter of
    the memory available where that is known (the two copies and what each makes of them)."""
    available = available_memory()
    return 0 < size <= limit and (available is None or 4 * size <= available)

"""Sizes as users write them (``"8G"``, ``"512M"``, ``"1.5GiB"``), and the memory available now,
read without loading numpy or ONNX Runtime (build options are made before either loads)."""
from __future__ import annotations

import re

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
    """Bytes of memory available to allocate now (Linux: MemAvailable), None where unknown."""
    return proc_bytes("/proc/meminfo", "MemAvailable")


def room_beside(size: int, limit: int) -> bool:
    """Whether a model file of ``size`` bytes may be worked on a second time beside this process's
    own work on it (a head start's build, an early parse): at most ``limit`` bytes, and a quarter of
    the memory available where that is known (the two copies and what each makes of them)."""
    available = available_memory()
    return 0 < size <= limit and (available is None or 4 * size <= available)

"""Sizes as users write them, and the rule for whether a model file may be worked on twice at once
(read from this machine's /proc/meminfo)."""
from __future__ import annotations

import pytest

from partitioner.errors import OptionsError
from trt_backend.ort import sizes


def test_sizes_read_as_powers_of_1024() -> None:
    assert sizes.parse_size("512M") == 512 << 20
    assert sizes.parse_size("1.5GiB") == 3 << 29
    assert sizes.parse_size(4096) == 4096
    assert sizes.parse_size(None) is None
    with pytest.raises(OptionsError, match="cannot read size 'lots'"):
        sizes.parse_size("lots")


def test_a_file_is_worked_on_twice_only_within_the_limit_and_a_quarter_of_free_memory() -> None:
    available = sizes.available_memory()
    assert available is not None and available > 0  # (Linux: /proc/meminfo)
    assert sizes.room_beside(1 << 20, 32 << 20)
    assert not sizes.room_beside(33 << 20, 32 << 20)
    assert not sizes.room_beside(0, 32 << 20)  # (an empty file is no model)
    assert sizes.room_beside(available // 8, available)  # (with room for what others take meanwhile)
    assert not sizes.room_beside(available // 2, available)

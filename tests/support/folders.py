"""A build folder as comparable data: every file's bytes, the manifest without its timings."""
from __future__ import annotations

import json
import os
from typing import Any

TIMINGS = ("build_seconds", "digest", "seconds")


def folder(path: str, *, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every file's bytes, the manifest without its timings and its digest (and the top-level
    manifest entries named in ``drop``)."""
    out: dict[str, Any] = {}
    for name in sorted(os.listdir(path)):
        if name == "manifest.json":
            with open(os.path.join(path, name)) as f:
                manifest = json.load(f)
            out[name] = _untimed({k: v for k, v in manifest.items() if k not in drop})
        else:
            with open(os.path.join(path, name), "rb") as f:
                out[name] = f.read()
    return out


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value

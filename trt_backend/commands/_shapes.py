"""Input shapes as the command line gives them (``--shapes``, ``--min/--opt/--max-shapes``), read
without loading anything heavy: the build command reads them before it loads onnx or TensorRT
(:mod:`trt_backend.engines.head_start`)."""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from partitioner.errors import OptionsError

Shape = tuple[int, ...]

_SPEC = re.compile(r"\s*(?P<name>[^,\[]+?):(?P<shape>\[[^\]]*\]|[0-9x]*)\s*(?:,|$)")


def parse_shapes(text: str) -> dict[str, Shape]:
    """``"x:1x3x224x224,y:[2,5],s:[]"`` -> {"x": (1, 3, 224, 224), "y": (2, 5), "s": ()}."""
    out: dict[str, Shape] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _SPEC.match(text, pos)
        if not m or m.end() == pos:
            raise OptionsError(f"cannot read shapes {text!r}: {_what_is_wrong(text[pos:])}; "
                               "write name:1x3x224x224 or name:[1,3,224,224], separated by commas")
        shape = m.group("shape")
        try:
            if shape.startswith("["):
                dims = tuple(int(d) for d in shape[1:-1].split(",") if d.strip())
            else:
                dims = tuple(int(d) for d in shape.split("x")) if shape else ()
        except ValueError:
            dims = (-1,)
        if any(d < 0 for d in dims):
            raise OptionsError(f"cannot read shapes {text!r}: {_what_is_wrong(m.group(0).rstrip(', '))}; "
                               "write name:1x3x224x224 or name:[1,3,224,224], separated by commas")
        name = m.group("name").strip()
        if name in out and out[name] != dims:
            raise OptionsError(f"shapes {text!r} give input '{name}' twice, as {'x'.join(map(str, out[name]))} and "
                               f"{'x'.join(map(str, dims))}; give each input one shape")
        out[name] = dims
        pos = m.end()
    return out


def _what_is_wrong(rest: str) -> str:
    """What is wrong with the first entry of ``rest``, which the shape syntax did not match."""
    entry = rest.split(",")[0].strip() if not rest.lstrip().split(":", 1)[-1].startswith("[") else rest.strip()
    name, colon, dims = entry.rpartition(":")
    if not colon or not name.strip():
        return f"{entry!r} has no 'name:' before its dims"
    tokens = [t.strip() for t in re.split(r"[x,]", dims.strip().strip("[]"))]
    bad = next((t for t in tokens if not t.isdigit()), None)
    if bad is not None:
        return f"dim {bad!r} of '{name.strip()}' is not a whole number of 0 or more"
    return f"{entry!r} is not name:dims"


def cli_profiles(min_shapes: Sequence[str], opt_shapes: Sequence[str], max_shapes: Sequence[str],
                 shapes: str | None = None) -> list[dict[str, Any]]:
    """Profiles from repeated --min/--opt/--max-shapes (the n-th of each make profile n); with
    none of them, ``--shapes`` gives one fixed profile."""
    if not (min_shapes or opt_shapes or max_shapes):
        return [{n: (s, s, s) for n, s in parse_shapes(shapes).items()}] if shapes else []
    if not (len(min_shapes) == len(opt_shapes) == len(max_shapes)):
        raise OptionsError(f"give --min-shapes, --opt-shapes and --max-shapes together (got {len(min_shapes)}, "
                           f"{len(opt_shapes)} and {len(max_shapes)})")
    profiles: list[dict[str, Any]] = []
    for k, (lo, mid, hi) in enumerate(zip(min_shapes, opt_shapes, max_shapes)):
        a, b, c = parse_shapes(lo), parse_shapes(mid), parse_shapes(hi)
        if not (a.keys() == b.keys() == c.keys()):
            raise OptionsError(f"profile {k}: --min-shapes, --opt-shapes and --max-shapes name different inputs "
                               f"({sorted(a)}, {sorted(b)}, {sorted(c)})")
        profiles.append({n: (a[n], b[n], c[n]) for n in a})
    return profiles

"""``trt-backend build``'s head start: for a command line that builds a model as it is, the engine
build from the model file begins before the command loads onnx, numpy and the planner
(:mod:`trt_backend.engines.head_start`, which also says when its engine is used)."""
from __future__ import annotations

from collections.abc import Sequence

from partitioner.errors import OptionsError
from trt_backend.commands._argv import parse
from trt_backend.commands._shapes import cli_profiles
from trt_backend.engines import head_start

# the options a command line may give for a head start: the rest change the plan or the build
_OPTIONS = frozenset({"--shapes", "--min-shapes", "--opt-shapes", "--max-shapes", "--flavor", "--cache-dir",
                      "--precision", "--weights-by-reference"})


def start_from_argv(argv: Sequence[str]) -> bool:
    """Start the head start of the build command line ``argv`` (as the CLI got it) where it builds
    a model file in fp32 with nothing but shapes, a flavor, a cache and where the folder's weights go
    given; whether one started."""
    call = parse(argv, need_cache=False)
    if call is None or not call.options() <= _OPTIONS or call.values("--precision")[-1:] not in ([], ["fp32"]):
        return False
    flavor = (call.values("--flavor") or ["auto"])[-1]
    if flavor == "none":
        return False
    shapes = call.values("--shapes")
    try:
        profiles = cli_profiles(call.values("--min-shapes"), call.values("--opt-shapes"), call.values("--max-shapes"),
                                shapes[-1] if shapes else None)
    except OptionsError:
        return False  # The usual path says it.
    return head_start.launch(call.model, call.output, flavor, profiles) is not None


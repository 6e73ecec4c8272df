"""Profiles the user gives for model inputs: checked against the model, completed with static inputs."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from trt_backend.errors import FeedError, MissingProfileError, ProfileError
from trt_backend.profiles.node_arg import NodeArg
from trt_backend.profiles.profile import (
    SAMPLES,
    STATIC,
    Profile,
    Shape,
    TensorProfile,
    describe_profile,
    tensor_profile,
)


def check_profile_names(user: Sequence[Mapping[str, Any]] | None, graph: Any) -> None:
    """Before planning (which can take seconds on a big model): every name a profile gives is a
    model input or at least a tensor of the model (it may be a TensorRT segment's input, which
    only the plan tells); ProfileError naming the first that is neither."""
    if not user or isinstance(user, (str, bytes)) or not isinstance(user, (Sequence, Mapping)):
        return  # The shape of the argument is checked by normalize_profiles.
    inputs = [vi.name for vi in graph.input]
    tensors = set(inputs) | {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    for k, raw in enumerate([user] if isinstance(user, Mapping) else user):
        if not isinstance(raw, Mapping):
            continue
        for name in raw:
            if name not in tensors:
                raise ProfileError(f"profile {k}: '{name}' is not a model input (inputs: {', '.join(inputs)}) "
                                   "nor a tensor of the model")


def profile_shapes(user: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None) -> list[dict[str, Shape]]:
    """The shapes the user's profiles run the model at: each profile's min, opt and max shapes of
    the tensors it names (what a probe run of the model should use; names that are not model
    inputs are for segment inputs, and a probe passes them by). Malformed profiles give none:
    :func:`normalize_profiles` names what is wrong with them."""
    if not user or isinstance(user, (str, bytes)) or not isinstance(user, (Sequence, Mapping)):
        return []
    out: list[dict[str, Shape]] = []
    for k, raw in enumerate([user] if isinstance(user, Mapping) else user):
        if not isinstance(raw, Mapping):
            return []
        try:
            given = {n: tensor_profile(v, f"profile {k}, input '{n}'") for n, v in raw.items()}
        except ProfileError:
            return []
        for which in ("min", "opt", "max"):
            out.append({n: getattr(tp, which) for n, tp in given.items()})
    return out


def normalize_profiles(user: Sequence[Mapping[str, Any]] | None, inputs: Sequence[NodeArg],
                       extra: Iterable[str] = ()) -> tuple[list[Profile], list[Profile]]:
    """Validate user profiles. Returns (model-input profiles, overrides for ``extra`` tensors,
    i.e. TensorRT segment inputs the user chose to give a profile to)."""
    if user is None:
        return [], []
    if isinstance(user, Mapping):
        user = [user]
    if isinstance(user, (str, bytes)) or not isinstance(user, Sequence):
        raise ProfileError("profiles must be a list of dicts (input name -> (min, opt, max)), got "
                           f"{type(user).__name__}")
    by_name = {a.name: a for a in inputs}
    extra_set = set(extra)
    out: list[Profile] = []
    overrides: list[Profile] = []
    for k, raw in enumerate(user):
        where = f"profile {k}"
        if not isinstance(raw, Mapping):
            raise ProfileError(f"{where}: expected a dict of input name -> (min, opt, max), got {type(raw).__name__}")
        prof: Profile = {}
        over: Profile = {}
        for name, value in raw.items():
            if name in by_name:
                tp = tensor_profile(value, f"{where}, input '{name}'")
                check_against(by_name[name], tp, where)
                prof[name] = tp
            elif name in extra_set:
                over[name] = tensor_profile(value, f"{where}, input '{name}'")
            else:
                raise ProfileError(f"{where}: '{name}' is not a model input (inputs: "
                                   f"{', '.join(a.name for a in inputs)}) nor an input of a TensorRT segment")
        _check_shared_dims(prof, by_name, where)
        out.append(prof)
        overrides.append(over)
    return out, overrides


def _check_shared_dims(prof: Profile, by_name: Mapping[str, NodeArg], where: str) -> None:
    """Dims the model names alike are one size (ONNX: a dim_param names one value throughout the
    graph): a profile giving them different ranges (a token sequence to 128 beside a mask to 64)
    is one error naming both, as feeds that do are (the engine would be built for sizes the model
    never takes together)."""
    seen: dict[str, tuple[str, int, tuple[int, int, int]]] = {}
    for name, tp in prof.items():
        arg = by_name.get(name)
        if arg is None or arg.rank is None or len(arg.shape) != len(tp.min):
            continue
        for axis, dim in arg.named_dims():
            span = (tp.min[axis], tp.opt[axis], tp.max[axis])
            first = seen.setdefault(dim, (name, axis, span))
            if first[2] != span:
                raise ProfileError(f"{where}: inputs '{first[0]}' and '{name}' share the dim '{dim}' (dim {first[1]} "
                                   f"of '{first[0]}', dim {axis} of '{name}'), given as min/opt/max {first[2]} and "
                                   f"{span}")


def check_against(arg: NodeArg, tp: TensorProfile, where: str) -> None:
    """ProfileError unless ``tp`` fits the input ``arg`` declares: a tensor, its rank, its fixed dims."""
    if arg.kind != "tensor":
        raise ProfileError(f"{where}: input '{arg.name}' is {arg.type}; profiles are for tensors")
    if arg.rank is None:
        return
    if len(tp.min) != arg.rank:
        raise ProfileError(f"{where}, input '{arg.name}': expected rank {arg.rank} (shape {list(arg.shape)}), "
                           f"got {describe_profile(tp)}")
    for axis, want in enumerate(arg.shape):
        if isinstance(want, int) and not (tp.min[axis] == tp.opt[axis] == tp.max[axis] == want):
            raise ProfileError(f"{where}, input '{arg.name}': dim {axis} is fixed at {want} in the model "
                               f"(shape {list(arg.shape)}), got {describe_profile(tp)}")


def complete_profiles(profiles: list[Profile], inputs: Sequence[NodeArg], *, required: bool) -> list[Profile]:
    """Add static inputs to every profile; when ``required``, every dynamic tensor input must
    have an entry in every profile (else a ProfileError saying what to pass)."""
    static = {a.name: TensorProfile(tuple(a.shape), tuple(a.shape), tuple(a.shape), STATIC)  # type: ignore[arg-type]
              for a in inputs if a.kind == "tensor" and not a.is_dynamic}
    dynamic = [a for a in inputs if a.is_dynamic]
    if not profiles:
        if not dynamic or not required:
            return [dict(static)] if static and required else []
        profiles = [{}]
    done: list[Profile] = []
    for k, prof in enumerate(profiles):
        full = dict(static)
        full.update(prof)
        missing = [arg for arg in dynamic if arg.name not in full] if required else []
        if missing:
            given = {n: tp.opt for n, tp in prof.items() if isinstance(tp, TensorProfile)}
            example = example_shapes(missing, inputs, given)
            raise MissingProfileError(_missing_message(missing, k, len(profiles), example))
        done.append(full)
    return done


def example_shapes(missing: Sequence[NodeArg], inputs: Sequence[NodeArg] = (),
                   given: Mapping[str, Sequence[int]] | None = None) -> str:
    """A ``--shapes`` value for the inputs ``missing``, to paste: a dim the model names takes the
    size the shapes ``given`` (of other ``inputs``) give that name, so that inputs sharing a dim
    agree; any other dim the model leaves open is 1."""
    by_name = {a.name: a for a in inputs}
    sizes: dict[str, int] = {}
    for name, shape in (given or {}).items():
        arg = by_name.get(name)
        if arg is not None and arg.rank is not None and len(arg.shape) == len(shape):
            for axis, dim in arg.named_dims():
                sizes.setdefault(dim, int(shape[axis]))

    def dims(arg: NodeArg) -> list[int]:
        if arg.rank is None:
            return [1]
        return [d if isinstance(d, int) else sizes.get(d, 1) if isinstance(d, str) else 1 for d in arg.shape]

    return ",".join(f"{a.name}:{'x'.join(str(d) for d in dims(a)) or '1'}" for a in missing)


def _missing_message(missing: Sequence[NodeArg], k: int, count: int, cli: str) -> str:
    """Every dynamic input a profile lacks, in one message, with a ``--shapes`` line to paste (``cli``)."""
    def shape(arg: NodeArg) -> str:
        return str(list(arg.shape)) if arg.rank is not None else "(unknown rank)"

    where = "no profile gives one" if count <= 1 else f"profile {k} gives none"
    python = ", ".join(f"'{a.name}': (min_shape, opt_shape, max_shape)" for a in missing)
    if len(missing) == 1:
        arg = missing[0]
        return (f"input '{arg.name}' has dynamic shape {shape(arg)} and {where}; CLI: --shapes {cli} (dims the model "
                f"leaves open set to 1; a range with --min-shapes/--opt-shapes/--max-shapes); Python: "
                f"profiles=[{{{python}}}]")
    listed = ", ".join(f"'{a.name}' {shape(a)}" for a in missing)
    return (f"{len(missing)} inputs have dynamic shapes and {where}: {listed}; CLI: --shapes {cli} (dims the model "
            f"leaves open set to 1; a range with --min-shapes/--opt-shapes/--max-shapes); Python: "
            f"profiles=[{{{python}}}]")


def profiles_from_feeds(feeds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One profile spanning the shapes of the given samples (per dim their least and greatest;
    opt: the first sample's; its source "samples"), for feeds given without a profile. A small
    integer input (rank 0 or 1, at most :data:`VALUES_KEPT` elements, the same count in every
    sample) also gets the span of its values: where TensorRT takes it as a shape tensor (a Range's limits, a Reshape's
    shape), its profile must hold them; elsewhere they are not used."""
    shapes: dict[str, list[tuple[int, ...]]] = {}
    values: dict[str, list[tuple[int, ...]]] = {}
    for feed in feeds:
        for name, value in feed.items():
            shape = getattr(value, "shape", None)
            if shape is not None:
                shapes.setdefault(name, []).append(tuple(int(d) for d in shape))
                if isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim <= 1 \
                        and value.size <= VALUES_KEPT:
                    values.setdefault(name, []).append(tuple(int(v) for v in value.reshape(-1)))
    profile: dict[str, Any] = {}
    for name, seen in shapes.items():
        if len({len(s) for s in seen}) != 1:
            raise FeedError(f"input '{name}' comes with different ranks {sorted({len(s) for s in seen})}")
        low = tuple(min(d) for d in zip(*seen))
        high = tuple(max(d) for d in zip(*seen))
        profile[name] = {"min": low, "opt": seen[0], "max": high, "source": SAMPLES}
        contents = values.get(name, [])
        if len(contents) == len(seen) and len({len(v) for v in contents}) == 1:
            profile[name]["values"] = (tuple(min(v) for v in zip(*contents)), contents[0],
                                       tuple(max(v) for v in zip(*contents)))
    return [profile] if profile else []


VALUES_KEPT = 8  # the most elements of an integer sample whose values a profile from samples keeps

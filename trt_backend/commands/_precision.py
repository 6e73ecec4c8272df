"""``--precision auto`` for the commands that build or run: search a precision plan (or read one
made earlier) and turn it into BuildOptions fields; print what it decided."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from partitioner.errors import OptionsError
from trt_backend._lazy import lazy_module
from trt_backend.accuracy.options import AUTO_PRECISIONS, DEFAULT_TOLERANCE
from trt_backend.commands._args import precision_fields, split_list
from trt_backend.engines.precision_plan import PrecisionPlan, read_precision_plan
from trt_backend.session.options import SessionOptions

_auto = lazy_module("trt_backend.accuracy.auto_precision")  # The search loads only for --precision auto.


DEFAULT_ALLOW = ("fp16", "bf16", "int8")  # what --precision auto may choose unless --allow says otherwise


def add_auto_arguments(p: argparse.ArgumentParser, tolerances: bool = True) -> None:
    """``--allow``, ``--precision-plan`` (and ``--atol``/``--rtol`` where the command has none)."""
    if tolerances:
        p.add_argument("--atol", default=str(DEFAULT_TOLERANCE), metavar="A",
                       help="--precision auto: absolute tolerance every output must keep (default "
                            f"{DEFAULT_TOLERANCE:g})")
        p.add_argument("--rtol", default=str(DEFAULT_TOLERANCE), metavar="R",
                       help=f"--precision auto: relative tolerance (default {DEFAULT_TOLERANCE:g})")
        p.add_argument("--atol-of-range", default=None, metavar="F",
                       help="--precision auto: each output's atol at least F x its largest |value| on the reference")
    p.add_argument("--allow", type=split_list, default=DEFAULT_ALLOW,
                   metavar=",".join(AUTO_PRECISIONS[::-1]),
                   help="--precision auto: precisions it may choose (int8 needs --calibration-data)")
    p.add_argument("--precision-plan", metavar="PLAN.json|DIR", default=None,
                   help="--precision auto: use this precision plan (its JSON, or a build folder made with auto) "
                        "instead of searching")


def build_fields(args: argparse.Namespace, model: Any, profiles: Sequence[Mapping[str, Any]] | None,
                 options: SessionOptions, feeds: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """BuildOptions fields for the command's precision; for auto, the plan searched (or read), on
    ``feeds`` (real inputs, ``--inputs``) where given."""
    fields = precision_fields(args)
    if args.precision != "auto":
        if tuple(args.allow) != DEFAULT_ALLOW:
            raise OptionsError(f"--allow chooses among precisions for --precision auto; with --precision "
                               f"{args.precision} it would do nothing")
        if args.precision_plan:  # (BuildOptions refuses it, in the words the Python door gets)
            return {**fields, "precision_plan": read_precision_plan(args.precision_plan)}
        return fields
    if args.precision_plan:
        plan = read_precision_plan(args.precision_plan)
        print(f"precision plan from {args.precision_plan} (not searched again):", file=sys.stderr)
    else:
        auto = _auto.AutoOptions(atol=args.atol, rtol=args.rtol, allow=tuple(args.allow),
                                 seed=getattr(args, "seed", 0) or 0,
                                 atol_of_range=getattr(args, "atol_of_range", None))
        calibration = {k: v for k, v in fields.items() if k.startswith("calibration")}
        plan = _auto.search_precision(model, profiles, options_with(options, calibration), auto, feeds=feeds or None)
        print(f"precision search ({plan.seconds:.1f} s, {plan.tolerance_words()}):", file=sys.stderr)
        for line in plan.rounds:
            print(f"  {line}", file=sys.stderr)
    print_plan(plan)
    return {**fields, "precision_plan": plan}


def options_with(options: SessionOptions, fields: Mapping[str, Any]) -> SessionOptions:
    """``options`` with the build fields ``fields`` (precision, calibration data, plan)."""
    return dataclasses.replace(options, build=dataclasses.replace(options.build, **fields)) if fields else options


def print_plan(plan: PrecisionPlan) -> None:
    for line in plan.lines():
        print(f"  {line}")

"""``trt-backend export-triton``: a Triton Inference Server model repository from build folders
(one per GPU target) or from a model (built first): one composing model per segment and an
ensemble named after the model."""
from __future__ import annotations

import argparse
import os
from typing import Any

from partitioner import OptionsError
from trt_backend.commands._args import (
    Explicit,
    add_partition_arguments,
    add_shape_arguments,
    add_sign_key_argument,
    positive_int,
    refuse_build_flags,
    session_options,
)
from trt_backend.commands._shapes import cli_profiles
from trt_backend.commands._precision import options_with
from trt_backend.export.repo import (
    INSTANCE_KINDS,
    TRT_FORMATS,
    TritonOptions,
    TritonRepo,
    triton_repo,
)
from trt_backend.export.source import ExportSource, from_build_folders, from_model
from trt_backend.export.write import check_out_dir, write_repo


def register(p: argparse.ArgumentParser) -> None:
    """Arguments of `trt-backend export-triton`."""
    p.description = ("Write a Triton Inference Server model repository: one model per segment (TensorRT plans, "
                     "ONNX Runtime models) and an ensemble that runs them in plan order. SOURCE is a trt-backend "
                     "build folder (several: one per GPU target, same model) or a model file (built first).")
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="build folder(s), or one ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="REPO", help="repository folder to write (atomically)")
    p.add_argument("--force", action="store_true", help="replace REPO if it exists and is not empty")
    p.add_argument("--dry-run", action="store_true", help="print the repository tree and configs; write nothing")
    p.add_argument("--name", default=None, help="ensemble model name (default: the model's file name)")
    p.add_argument("--max-batch-size", type=int, default=0, metavar="N",
                   help="let Triton batch up to N requests (needs the batch as every boundary tensor's leading "
                        "dynamic dim; default 0: no batching, full shapes)")
    p.add_argument("--trt-instances", type=positive_int, default=1, metavar="N",
                   help="instances (KIND_GPU) of each TensorRT segment's model")
    p.add_argument("--ort-instances", type=positive_int, default=1, metavar="N",
                   help="instances of each ONNX Runtime segment's model")
    p.add_argument("--ort-kind", choices=INSTANCE_KINDS, default="gpu",
                   help="where ONNX Runtime segments run in Triton (default gpu: CUDA execution provider)")
    p.add_argument("--trt-format", choices=TRT_FORMATS, default=None,
                   help="TensorRT segments as plans or as ONNX with Triton's TensorRT accelerator (default: plans "
                        "when Triton's TensorRT backend can load the engines, else ONNX)")
    add_sign_key_argument(p)
    g = p.add_argument_group("building a model first (SOURCE is a model file)")
    add_shape_arguments(g, "build for")  # type: ignore[arg-type]
    g.add_argument("--precision", choices=("fp32", "tf32", "fp16", "bf16"), default="fp32", action=Explicit,
                   help="precision of TensorRT segments (default fp32)")
    g.add_argument("--compute-capabilities", default=None, metavar="SM80,SM86",
                   help="TensorRT-RTX: GPUs to build for ahead of time")
    add_partition_arguments(g)  # type: ignore[arg-type]
    p.set_defaults(func=handle)


def _source(args: argparse.Namespace) -> ExportSource:
    sources = list(args.sources)
    models = [s for s in sources if not os.path.isdir(s)]
    if models and len(sources) > 1:
        raise OptionsError(f"give one model file, or build folders only (got {', '.join(sources)})")
    if not models:
        for folder in sources:  # A folder exports as it was built: flags that would change that are refused.
            refuse_build_flags(args, folder)
            if args.shapes:
                raise OptionsError(f"{folder}: --shapes would change what was built; a build folder exports with "
                                   "the profiles it was built with")
        return from_build_folders(sources, name=args.name, sign_key=args.sign_key)
    profiles = cli_profiles(args.min_shapes, args.opt_shapes, args.max_shapes, args.shapes)
    kw: dict[str, Any] = {"precision": args.precision}
    if args.compute_capabilities:
        kw["compute_capabilities"] = tuple(c.strip() for c in args.compute_capabilities.split(",") if c.strip())
    options = options_with(session_options(args), kw)
    scratch = os.path.dirname(os.path.abspath(args.output))
    return from_model(models[0], profiles or None, options, scratch_dir=scratch if os.path.isdir(scratch) else None,
                      name=args.name)


def _summary(repo: TritonRepo, out: str, wrote: bool) -> list[str]:
    lines = [f"ensemble {repo.ensemble.name} | {len(repo.models)} composing model(s) | "
             f"max_batch_size {repo.ensemble.max_batch_size}"]
    for m in repo.models:
        c = m.config
        kind = c.platform or c.backend
        if c.tensorrt_accelerator is not None:
            kind = f"{kind} + TensorRT accelerator"
        lines.append(f"  step {m.segment}: {c.name:<24} {kind:<36} {c.instance_count} x {c.instance_kind}  "
                     f"{', '.join(m.tensors.get(t.name, t.name) for t in c.inputs)} -> "
                     f"{', '.join(m.tensors.get(t.name, t.name) for t in c.outputs)}")
    lines += [f"note: {n}" for n in repo.notes]
    if wrote:
        lines.append(f"wrote {out}")
    return lines


def handle(args: argparse.Namespace) -> int:
    options = TritonOptions(name=args.name, max_batch_size=args.max_batch_size, trt_instances=args.trt_instances,
                            ort_instances=args.ort_instances, ort_kind=args.ort_kind, trt_format=args.trt_format)
    if not args.dry_run:
        check_out_dir(args.output, args.force)  # before any build: refuse early
    repo = triton_repo(_source(args), options)
    if args.dry_run:
        print("\n".join(repo.tree(args.output)))
        for name, text in repo.configs().items():
            print(f"\n--- {name}/config.pbtxt")
            print(text, end="")
        print()
    else:
        write_repo(repo, args.output, force=args.force)
    print("\n".join(_summary(repo, args.output, not args.dry_run)))
    return 0

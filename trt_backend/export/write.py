"""Writing a decided :class:`~trt_backend.export.repo.TritonRepo`: into a temporary folder beside
the target, then renamed into place, so a reader sees the old repository or the whole new one."""
from __future__ import annotations

import os
import shutil

from trt_backend._files import missing_parent, new_folder, output_lock, path_text, swap_in_folder
from trt_backend.errors import ExportError
from trt_backend.export.repo import TritonRepo, triton_repo
from trt_backend.export.source import ExportSource


def check_out_dir(out_dir: str, force: bool) -> None:
    """``out_dir`` may be written: absent, empty, or (with ``force``) a folder to replace."""
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            raise ExportError(f"{out_dir}: exists and is not a folder")
        if os.listdir(out_dir) and not force:
            raise ExportError(f"{out_dir}: folder is not empty; --force replaces it")
    problem = missing_parent(out_dir)
    if problem:
        raise ExportError(f"{out_dir}: {problem}")


def write_repo(repo: TritonRepo | ExportSource, out_dir: str, *, force: bool = False) -> None:
    """Write ``repo`` (a :class:`TritonRepo` that :func:`~trt_backend.export.repo.triton_repo`
    decided with its options, or an :class:`ExportSource` from ``from_build_folders``,
    ``from_model`` or ``from_session``, exported with the default options) into a temporary folder
    beside ``out_dir``, then rename it into place: never half a repository. A non-empty ``out_dir``
    is replaced only with ``force``."""
    if isinstance(repo, ExportSource):
        repo = triton_repo(repo)
    elif not isinstance(repo, TritonRepo):
        raise ExportError(f"write_repo takes a TritonRepo (triton_repo(source, TritonOptions(...))) or an "
                          f"ExportSource (from_build_folders, from_model, from_session), got {type(repo).__name__}")
    out_dir = path_text(out_dir, "the repository folder")
    check_out_dir(out_dir, force)
    parent = os.path.dirname(os.path.abspath(out_dir))
    with output_lock(out_dir):
        try:
            tmp = new_folder(parent, ".triton-")
        except OSError as e:
            raise ExportError(f"cannot write {out_dir}: {e.strerror or e}") from None
        try:
            for f in repo.files():
                f.write_to(tmp)
            swap_in_folder(tmp, out_dir)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ExportError(f"cannot write {out_dir}: {e.strerror or e}") from None

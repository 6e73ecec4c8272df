"""Requests gathered into session runs: split what is larger than a run may be, pack what fits
together (same input dtypes and non-batch dims), run, and hand each request its own rows back.
A run never holds more rows than ``max_rows`` nor than the session's profiles take. One bad
request fails alone: when a packed run fails, its requests are run one by one to find out whose
fault it was. No Ray here (the deployment calls it)."""
from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trt_backend.errors import FeedError, RequestError, TrtBackendError
from trt_backend.profiles.profile import leading_ranges
from trt_backend.session.feeds import random_feeds, rows_interact
from trt_backend.session.session import Session

log = logging.getLogger(__name__)

Feeds = Mapping[str, Any]
Reply = dict[str, np.ndarray] | TrtBackendError


def batch_rows(session: Session, max_batch_size: int) -> int | None:
    """Most rows one run may hold: ``max_batch_size``, lowered to what the session's profiles
    take on the leading dim. None when the model has no batch dim (:func:`no_batch_dim` says why):
    then each request runs alone, as sent."""
    return None if no_batch_dim(session) is not None else _rows(session, max_batch_size)


def _rows(session: Session, max_batch_size: int) -> int:
    rows = max_batch_size
    if session.input_profiles:
        names = [a.name for a in session.get_inputs()]
        best = max(min((p[n].max[0] for n in names if n in p and p[n].max), default=max_batch_size)
                   for p in session.input_profiles)
        rows = min(rows, int(best))
    return max(1, rows)


def no_batch_dim(session: Session) -> str | None:
    """Why requests cannot be batched on the model's leading dim, naming the input or output
    that does not carry it; None where every one does. The rule export-triton's
    ``--max-batch-size`` applies to the model's inputs and outputs: every input leads with a
    dynamic dim, which the profiles give every input as one range (or the inputs name alike,
    whatever that name is, or leave unnamed); an output carries it where its leading dim has the
    inputs' batch name, else where runs of the session at two batch sizes (1 and 2 where the
    profiles take them) on seeded random data show it following the batch."""
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if not inputs:
        return "the model has no inputs"
    for a in [*inputs, *outputs]:
        if a.kind != "tensor":
            return f"'{a.name}' is {a.type}, not a tensor whose rows can be split"
        if not a.shape:
            return f"'{a.name}' {'is a scalar' if a.rank == 0 else 'has no known rank'}"
    fixed = next((a for a in inputs if isinstance(a.shape[0], int)), None)
    if fixed is not None:
        return f"input '{fixed.name}' leads with a fixed {fixed.shape[0]}, not a batch dim"
    names = {a.shape[0] for a in inputs if isinstance(a.shape[0], str)}
    ranges = _batch_ranges(session)
    if isinstance(ranges, str):
        return ranges
    if len(names) > 1 and not ranges:
        listed = ", ".join(f"'{a.name}' {a.shape[0]!r}" for a in inputs)
        return f"the inputs lead with different dims ({listed}) and no profile gives them one range"
    others = {d for a in inputs for d in a.shape[1:] if isinstance(d, str)} - names
    undecided = []
    for a in outputs:
        lead = a.shape[0]
        if isinstance(lead, int):
            return f"output '{a.name}' leads with a fixed {lead}, not the batch"
        if isinstance(lead, str) and lead in others:
            return f"output '{a.name}' leads with {lead!r}, which the inputs name another dim than the batch"
        if not (isinstance(lead, str) and lead in names):
            undecided.append(a.name)
    why = _not_following(session, undecided, ranges) if undecided else None
    return why if why is not None else _rows_depend(session, ranges)


def _rows_depend(session: Session, ranges: list[tuple[int, int]]) -> str | None:
    """Why the model's rows cannot be batched together: a run of the smallest batch the first
    profile takes plus one row against one of the smallest (other dims at the first profile's opt
    shapes) shows its rows depend on each other (:func:`trt_backend.session.feeds.rows_interact`).
    None where they do not, or where the profiles take one batch size only."""
    lo, hi = ranges[0] if ranges else (1, 2)
    if lo + 1 > hi:
        return None
    args = session.get_inputs()
    shapes = _at_batch(session, lo + 1)
    outputs = [a.name for a in session.get_outputs()]
    try:
        return rows_interact(lambda feeds, names: session.run(names, feeds), args, shapes, [a.name for a in args],
                             outputs, rows=lo, seed=2)
    except TrtBackendError as e:  # (random data at made-up dims a model may refuse: batched as the shapes allow)
        log.warning("requests are batched without checking that the model's rows are independent: a run to check "
                    "failed (%s); give profiles (or --inputs) of shapes it runs at to check it", e)
        return None


def _at_batch(session: Session, batch: int) -> dict[str, tuple[int, ...]]:
    """The session's input shapes at ``batch`` rows, the other dims at the first profile's opt
    shapes (without one, the fixed dims and 1 for the rest)."""
    first = session.input_profiles[0] if session.input_profiles else {}
    return {a.name: (batch, *(first[a.name].opt[1:] if a.name in first else
                              [d if isinstance(d, int) else 1 for d in a.shape[1:]])) for a in session.get_inputs()}


def _batch_ranges(session: Session) -> list[tuple[int, int]] | str:
    """Per profile, the batch range its inputs share; a reason where a profile gives the inputs'
    leading dims different ranges."""
    out = []
    for k, seen in enumerate(leading_ranges(session.input_profiles, [a.name for a in session.get_inputs()])):
        if len(set(seen.values())) > 1:
            return f"profile {k} gives the inputs different batch ranges {seen}"
        if seen:
            out.append(next(iter(seen.values())))
    return out


def _not_following(session: Session, names: list[str], ranges: list[tuple[int, int]]) -> str | None:
    """Whether ``names`` (outputs) follow the batch in runs at two batch sizes, the smallest the
    first profile takes and the next (1 and 2 without profiles; the other dims at the first
    profile's opt shapes): the first that does not, or why the runs could not tell."""
    lo, hi = ranges[0] if ranges else (1, 2)
    batches = sorted({lo, min(lo + 1, hi)})
    args = session.get_inputs()
    seen: list[list[int | None]] = []
    for k, b in enumerate(batches):
        shapes = _at_batch(session, b)
        try:
            values = session.run(names, random_feeds(args, shapes, seed=k))
        except TrtBackendError as e:
            return f"output '{names[0]}' is not named as the batch, and a run at batch {b} to see failed: {e}"
        seen.append([np.shape(v)[0] if np.ndim(v) else None for v in values])
    for j, name in enumerate(names):
        got = [s[j] for s in seen]
        if got != batches:
            dims = ", ".join(f"{d} at batch {b}" for d, b in zip(got, batches))
            return f"output '{name}' does not follow the batch: its leading dim was {dims}"
    return None


@dataclass
class _Piece:
    request: int
    feeds: dict[str, np.ndarray]
    rows: int
    key: tuple[Any, ...]
    outputs: list[Any] | None = None
    part: tuple[int, int, int] | None = None  # (first row, end, rows of the request) of a split request


@dataclass
class BatchStats:
    """What the runner did, for tests and the benchmark."""

    requests: int = 0
    runs: int = 0
    rows: int = 0
    largest_run: int = 0
    split_requests: int = 0
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "runs": self.runs, "rows": self.rows, "largest_run": self.largest_run,
                "split_requests": self.split_requests, "refused": self.refused}


class BatchRunner:
    """Runs lists of requests (feeds by input name) through one Session."""

    def __init__(self, session: Session, max_batch_size: int) -> None:
        self.session = session
        self.no_batching = no_batch_dim(session)  # why each request runs alone, where it does
        self.max_rows = None if self.no_batching is not None else _rows(session, max_batch_size)
        self.output_names = [a.name for a in session.get_outputs()]
        self.input_names = [a.name for a in session.get_inputs()]
        self.stats = BatchStats()

    def run(self, requests: Sequence[Feeds]) -> list[Reply]:
        replies: list[Reply | None] = [None] * len(requests)
        pieces: list[_Piece] = []
        for k, feeds in enumerate(requests):
            try:
                pieces.extend(self._split(k, feeds))
            except TrtBackendError as e:
                replies[k] = e
        groups: dict[tuple[Any, ...], list[_Piece]] = {}
        for piece in pieces:
            groups.setdefault(piece.key, []).append(piece)
        for group in groups.values():
            for run in self._pack(group):
                self._run(run, replies)
        for k in range(len(requests)):
            if replies[k] is None:
                mine = [p for p in pieces if p.request == k]
                replies[k] = self._join(mine)
        with self.stats.lock:
            self.stats.requests += len(requests)
            self.stats.refused += sum(isinstance(r, TrtBackendError) for r in replies)
        return [r for r in replies if r is not None]

    # ------------------------------------------------------------ helpers

    def _split(self, k: int, feeds: Feeds) -> list[_Piece]:
        if not isinstance(feeds, Mapping):
            raise RequestError(f"a request is a mapping of input name to array, got {type(feeds).__name__}")
        arrays = {n: v if isinstance(v, np.ndarray) else np.asarray(v) for n, v in feeds.items()}
        if self.max_rows is None or not arrays or any(a.ndim == 0 for a in arrays.values()) \
                or set(arrays) != set(self.input_names):
            return [_Piece(k, arrays, 0, ("alone", k))]  # the session names what is wrong, if anything
        rows = {a.shape[0] for a in arrays.values()}
        if len(rows) != 1:
            sizes = ", ".join(f"'{n}' {a.shape[0]}" for n, a in arrays.items())
            raise RequestError(f"inputs disagree on the batch size (leading dim): {sizes}")
        n = rows.pop()
        key = tuple((name, arrays[name].dtype.str, arrays[name].shape[1:]) for name in self.input_names)
        if n <= self.max_rows:
            return [_Piece(k, arrays, n, key)]
        with self.stats.lock:
            self.stats.split_requests += 1
        return [_Piece(k, {name: a[lo:lo + self.max_rows] for name, a in arrays.items()},
                       min(self.max_rows, n - lo), key, part=(lo, min(lo + self.max_rows, n), n))
                for lo in range(0, n, self.max_rows)]

    def _pack(self, group: list[_Piece]) -> list[list[_Piece]]:
        if group[0].key[0] == "alone":
            return [[p] for p in group]
        runs: list[list[_Piece]] = []
        rows = 0
        for piece in group:
            if not runs or rows + piece.rows > (self.max_rows or 0):
                runs.append([])
                rows = 0
            runs[-1].append(piece)
            rows += piece.rows
        return runs

    def _run(self, run: list[_Piece], replies: list[Reply | None]) -> None:
        feeds = run[0].feeds if len(run) == 1 else \
            {n: np.concatenate([p.feeds[n] for p in run]) for n in run[0].feeds}
        try:
            outputs = self.session.run(None, feeds)
        except TrtBackendError as e:
            if len(run) == 1:
                part = run[0].part  # (the shapes the session names are the part's: say so, of the first)
                if replies[run[0].request] is None:
                    replies[run[0].request] = e if part is None or not isinstance(e, (FeedError, RequestError)) \
                        else type(e)(f"{e} (in rows {part[0]}..{part[1] - 1} of the request's {part[2]}, which runs "
                                     f"in parts of at most {self.max_rows} rows)")
                return
            for piece in run:  # whose fault? each alone
                self._run([piece], replies)
            return
        rows = sum(p.rows for p in run)
        with self.stats.lock:
            self.stats.runs += 1
            self.stats.rows += rows
            self.stats.largest_run = max(self.stats.largest_run, rows)
        if len(run) == 1:
            run[0].outputs = list(outputs)
            return
        start = 0
        for piece in run:
            piece.outputs = [o[start:start + piece.rows] for o in outputs]
            start += piece.rows

    def _join(self, pieces: list[_Piece]) -> Reply:
        parts = [p.outputs for p in pieces]
        if any(p is None for p in parts):
            return RequestError("a part of this request was not run")  # Not reached: failures are recorded.
        if len(parts) == 1:
            return dict(zip(self.output_names, parts[0]))  # type: ignore[arg-type]
        return {n: np.concatenate([p[i] for p in parts])  # type: ignore[index]
                for i, n in enumerate(self.output_names)}

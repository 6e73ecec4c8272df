"""GPU timing for ``trt-backend bench``: CUDA events on a TensorRT runner's stream split each run
into host-to-device copies, compute and device-to-host copies, as trtexec reports them.

:class:`PhaseRecorder` attaches to a :class:`~trt_backend.gpu.trt_runner.TensorRTRunner` (or any
runner with the same shape: a ``stream`` and the ``_bind_input`` / ``_output`` steps, called in
that order around ``execute_async_v3``) by shadowing those methods on the instance: an event
before the first input is bound, one after the last input (end of H2D, start of compute), one
before the first output copy (end of compute) and one after the last (end of D2H). Events
measure what the GPU did between them, so they are read only after the runner synchronized.
Nothing here runs without a GPU; CPU tests drive it with stand-in events."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

PHASES = ("h2d", "compute", "d2h")
_WRAPPED = ("run", "_bind_input", "_output")
_UNSET = object()


def restore(obj: Any, saved: dict[str, Any]) -> None:
    """Undo instance-attribute shadowing: drop the attribute, or put back what it was."""
    for name, value in saved.items():
        if value is _UNSET:
            obj.__dict__.pop(name, None)
        else:
            obj.__dict__[name] = value


class PhaseRecorder:
    """Per-run H2D / compute / D2H milliseconds of one runner, while :attr:`recording`.

    ``event_factory`` makes an event with ``record(stream)``, ``synchronize()`` and
    ``elapsed_ms(start_event)``; default :class:`trt_backend.gpu.device.Event`."""

    def __init__(self, runner: Any, event_factory: Callable[[], Any] | None = None) -> None:
        if event_factory is None:
            from .gpu.device import Event

            event_factory = Event
        self.runner = runner
        self.stream = runner.stream
        self.start, self.h2d_end, self.compute_end, self.d2h_end = (event_factory() for _ in range(4))
        self.samples: dict[str, list[float]] = {p: [] for p in PHASES}
        self.recording = False
        self._n_in = len(runner.input_names)
        self._n_out = len(runner.output_names)
        self._bound = self._copied = 0
        self._installed = False
        self._saved: dict[str, Any] = {}

    def install(self) -> PhaseRecorder:
        if self._installed:
            return self
        r = self.runner
        self._saved = {n: r.__dict__.get(n, _UNSET) for n in _WRAPPED}
        r.run, r._bind_input, r._output = self._run(r.run), self._bind(r._bind_input), self._out(r._output)
        self._installed = True
        return self

    def remove(self) -> None:
        """Put back what was there before :meth:`install` (wrappers nest: remove in reverse order)."""
        if self._installed:
            restore(self.runner, self._saved)
            self._installed = False

    def close(self) -> None:
        self.remove()
        for ev in (self.start, self.h2d_end, self.compute_end, self.d2h_end):
            close = getattr(ev, "close", None)
            if close is not None:
                close()

    def _run(self, run: Callable[[Sequence[Any]], list[Any]]) -> Callable[[Sequence[Any]], list[Any]]:
        @functools.wraps(run)
        def timed(inputs: Sequence[Any]) -> list[Any]:
            self._bound = self._copied = 0
            if self._n_in == 0:
                self.start.record(self.stream)
                self.h2d_end.record(self.stream)
            out = run(inputs)  # the runner synchronizes its stream before returning
            if self.recording and self._copied == self._n_out:
                self.d2h_end.synchronize()
                self.samples["h2d"].append(self.h2d_end.elapsed_ms(self.start))
                self.samples["compute"].append(self.compute_end.elapsed_ms(self.h2d_end))
                self.samples["d2h"].append(self.d2h_end.elapsed_ms(self.compute_end))
            return out

        return timed

    def _bind(self, bind: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(bind)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if self._bound == 0:
                self.start.record(self.stream)
            result = bind(*args, **kwargs)
            self._bound += 1
            if self._bound == self._n_in:
                self.h2d_end.record(self.stream)
            return result

        return recorded

    def _out(self, output: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(output)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if self._copied == 0:
                self.compute_end.record(self.stream)
            result = output(*args, **kwargs)
            self._copied += 1
            if self._copied == self._n_out:
                self.d2h_end.record(self.stream)
            return result

        return recorded

    def totals_ms(self) -> list[float]:
        """H2D + compute + D2H of every recorded run."""
        return [sum(v) for v in zip(*(self.samples[p] for p in PHASES))]


def attach_phase_recorders(runners: Sequence[Any]) -> dict[int, PhaseRecorder]:
    """A PhaseRecorder for every TensorRT runner (a CUDA stream and the bind/output steps), by
    index. With outputs kept on the device, the "d2h" phase is their device-to-device copy, and
    inputs already on the device make "h2d" a bind without a copy."""
    return {k: PhaseRecorder(r).install() for k, r in enumerate(runners)
            if getattr(r, "stream", None) is not None and hasattr(r, "_bind_input") and hasattr(r, "_output")}


__all__ = ["PHASES", "PhaseRecorder", "attach_phase_recorders"]

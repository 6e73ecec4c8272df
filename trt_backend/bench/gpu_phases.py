"""GPU timing for ``trt-backend bench``: CUDA events on a TensorRT runner's stream split each run
into host-to-device copies, compute and device-to-host copies, as trtexec reports them.

:class:`PhaseRecorder` hands a :class:`~trt_backend.runners.tensorrt.TensorRTRunner` (or any runner
with a ``stream`` and a ``phase_events`` slot it records into) four events, which the runner
records at the start of a run, after its inputs are bound (end of H2D), after its work is
enqueued (end of compute) and after its outputs are copied (end of D2H). Events measure what the
GPU did between them, so they are read only after the runner synchronized. Nothing here runs
without a GPU; CPU tests drive it with stand-in events."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from trt_backend.gpu.device import Event

PHASES = ("h2d", "compute", "d2h")
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
            event_factory = Event
        self.runner = runner
        self.events = tuple(event_factory() for _ in range(4))
        self.samples: dict[str, list[float]] = {p: [] for p in PHASES}
        self.recording = False
        self._installed = False
        self._saved: dict[str, Any] = {}

    def install(self) -> PhaseRecorder:
        if self._installed:
            return self
        r = self.runner
        self._saved = {"run": r.__dict__.get("run", _UNSET)}
        r.phase_events = self.events
        r.run = self._run(r.run)
        self._installed = True
        return self

    def remove(self) -> None:
        """Put back what was there before :meth:`install` (wrappers nest: remove in reverse order)."""
        if self._installed:
            restore(self.runner, self._saved)
            self.runner.phase_events = None
            self._installed = False

    def close(self) -> None:
        self.remove()
        for ev in self.events:
            close = getattr(ev, "close", None)
            if close is not None:
                close()

    def _run(self, run: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
        start, h2d_end, compute_end, d2h_end = self.events

        @functools.wraps(run)
        def timed(inputs: Sequence[Any], *args: Any) -> list[Any]:
            out = run(inputs, *args)  # the runner recorded the four events and synchronized its stream
            if self.recording:
                d2h_end.synchronize()
                self.samples["h2d"].append(h2d_end.elapsed_ms(start))
                self.samples["compute"].append(compute_end.elapsed_ms(h2d_end))
                self.samples["d2h"].append(d2h_end.elapsed_ms(compute_end))
            return out

        return timed

    def totals_ms(self) -> list[float]:
        """H2D + compute + D2H of every recorded run."""
        return [sum(v) for v in zip(*(self.samples[p] for p in PHASES))]


def attach_phase_recorders(runners: Sequence[Any]) -> dict[int, PhaseRecorder]:
    """A PhaseRecorder for every TensorRT runner (a CUDA stream and a ``phase_events`` slot), by
    index. With outputs kept on the device, the "d2h" phase is their device-to-device copy, and
    inputs already on the device make "h2d" a bind without a copy."""
    return {k: PhaseRecorder(r).install() for k, r in enumerate(runners)
            if getattr(r, "stream", None) is not None and hasattr(r, "phase_events")}


__all__ = ["PHASES", "PhaseRecorder", "attach_phase_recorders"]

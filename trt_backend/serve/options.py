"""How a Session is served on Ray Serve (:class:`ServeOptions`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from partitioner.options_check import keyword_checked, plain_options, number_option
from trt_backend.errors import OptionsError
from trt_backend.session.options import SessionOptions

DEFAULT_MAX_BATCH = 8
DEFAULT_WAIT_MS = 5.0


@keyword_checked
@plain_options
@dataclass(frozen=True)
class ServeOptions:
    """``replicas``: session replicas (each holds one Session). ``batching``: requests are
    gathered with ``@serve.batch`` (at most ``max_batch_size`` rows per session run, never past
    the session's profiles: larger batches are split; ``batch_wait_ms`` the longest a request
    waits for company). ``num_gpus``: GPUs per replica (None: 1 where the Ray cluster has GPUs,
    else 0); a replica with a GPU runs its session on device 0, which is the GPU Ray gave it
    (Ray sets CUDA_VISIBLE_DEVICES). ``num_cpus``: CPUs per replica. ``session``: every replica's
    SessionOptions (partition, precision, emulation, the engine cache folder they all build
    through, the signing key a folder must carry); its ``device_id`` is set by the replica (0 with
    a GPU, which is the one Ray gave it). ``profiles``: input profiles when
    serving a model rather than a build folder. ``host``/``port``: HTTP; ``name``: the Serve
    application's name, ``route_prefix`` its HTTP route. ``http_ingress``: HTTP goes through a
    small ingress deployment that sends a request again when its replica died (True), or
    straight to the session replicas, one hop less, but a replica's death fails its HTTP requests
    (False; the Python handle resends either way)."""

    replicas: int = 1
    batching: bool = True
    max_batch_size: int = DEFAULT_MAX_BATCH
    batch_wait_ms: float = DEFAULT_WAIT_MS
    num_gpus: float | None = None
    num_cpus: float = 1.0
    session: SessionOptions = field(default_factory=SessionOptions)
    profiles: Sequence[Mapping[str, Any]] | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    name: str = "trt-backend"
    route_prefix: str = "/"
    max_ongoing_requests: int = 64
    health_check_period_s: float = 2.0
    retries: int = 8  # a request whose replica died is sent again, this many times at most
    http_ingress: bool = True  # HTTP through an ingress that resends; False: the replicas take HTTP (one hop less)
    extra_actor_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, low in (("replicas", 1), ("max_batch_size", 1), ("max_ongoing_requests", 1), ("retries", 0)):
            number_option(getattr(self, name), f"ServeOptions.{name}", whole=True, low=low)
        number_option(self.port, "ServeOptions.port", whole=True, low=0, high=65535)
        for name, low_f in (("batch_wait_ms", 0.0), ("num_cpus", 0.0), ("health_check_period_s", 0.1)):
            number_option(getattr(self, name), f"ServeOptions.{name}", low=low_f)
        if self.num_gpus is not None:
            number_option(self.num_gpus, "ServeOptions.num_gpus", low=0.0)
        if self.batching and self.max_ongoing_requests < self.max_batch_size:
            raise OptionsError(f"ServeOptions.max_ongoing_requests ({self.max_ongoing_requests}) must be >= "
                               f"max_batch_size ({self.max_batch_size}) when batching")
        if not isinstance(self.session, SessionOptions):
            raise OptionsError(f"ServeOptions.session must be a SessionOptions, got {type(self.session).__name__}")
        if not self.route_prefix.startswith("/"):
            raise OptionsError(f"ServeOptions.route_prefix must start with '/', got {self.route_prefix!r}")

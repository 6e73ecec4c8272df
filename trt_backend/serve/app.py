"""A Session on Ray Serve: a deployment whose replicas each hold a Session (from a build folder
or a model), requests gathered with ``@serve.batch``, an HTTP ingress (JSON or NumPy) and a
Python handle (:class:`ServeClient`). A request whose replica dies is sent again (inference is
idempotent), by the ingress for HTTP and by the client for the handle, so a killed replica
loses no accepted request while Serve replaces it. Ray is imported inside functions only."""
from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from trt_backend._files import path_text
from trt_backend.artifacts.read import is_build_folder, read_manifest
from trt_backend.errors import RequestError, ServeError, TrtBackendError
from trt_backend.ort.sessions import first_line
from trt_backend.planning import load_normalized, plan_for
from trt_backend.profiles import (
    check_profile_names,
    complete_profiles,
    node_arg,
    normalize_profiles,
)
from trt_backend.profiles.given import profile_shapes
from trt_backend.serve.batching import BatchRunner, Reply
from trt_backend.serve.codec import (
    JSON,
    NPZ,
    decode_request,
    encode_error,
    encode_reply,
    is_npz,
)
from trt_backend.serve.options import ServeOptions
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

log = logging.getLogger(__name__)

SESSION_DEPLOYMENT = "TrtBackendSession"
HTTP_DEPLOYMENT = "TrtBackendHTTP"
T = TypeVar("T")


def import_serve() -> ModuleType:
    try:
        from ray import serve
    except ImportError:
        raise ServeError("Ray Serve is not installed: pip install 'trt-backend[serve]' (ray[serve])") from None
    return serve


@dataclass(frozen=True)
class Refusal:
    """A request the session refused, returned as data (a bad request is not a dead replica)."""

    message: str
    kind: str


def _reply(r: Reply) -> dict[str, np.ndarray] | Refusal:
    return Refusal(str(r), type(r).__name__) if isinstance(r, TrtBackendError) else r


def replica_session(source: str, options: ServeOptions, gpus: float, digest: str | None = None) -> Session:
    """The Session a replica holds. With a GPU it runs on device 0: Ray has set the replica's
    CUDA_VISIBLE_DEVICES to the GPU(s) it was given, so device 0 is its own. ``digest``: the
    build folder's manifest digest when serving began; a folder rebuilt since (a replica that
    died and is replaced loads it again) is refused, so that every replica serves one build."""
    so = dataclasses.replace(options.session, device_id=0 if gpus > 0 else None)
    session = Session(source, None if is_build_folder(source) else options.profiles, so)
    now = (session.folder_manifest or {}).get("digest")
    if digest is not None and now != digest:
        session.close()
        raise ServeError(f"{source} was rebuilt after serving began (manifest digest {str(now)[:19]}, served "
                         f"{digest[:19]}): this replica does not load it beside replicas serving the old build; "
                         "restart serve to serve the new one")
    return session


def _retriable() -> tuple[type[BaseException], ...]:
    import ray.exceptions as rex
    from ray.serve.exceptions import ReplicaUnavailableError

    return rex.RayActorError, rex.ActorUnavailableError, ReplicaUnavailableError


def _backoff(attempt: int) -> float:
    return min(2.0, 0.1 * 2 ** attempt)


async def call_with_retries(call: Callable[[], Awaitable[T]], retries: int) -> T:
    """``await call()``, sent again while the replica it reached died (at most ``retries`` times)."""
    retriable = _retriable()
    for attempt in range(retries + 1):
        try:
            return await call()
        except retriable as e:
            if attempt == retries:
                raise ServeError(f"no replica answered after {retries + 1} tries: {type(e).__name__}") from None
            log.info("replica lost (%s); sending the request again", type(e).__name__)
            await asyncio.sleep(_backoff(attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def _package_root() -> str:
    """The folder holding the trt_backend package this module belongs to."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_app(source: str | os.PathLike[str], options: ServeOptions | None = None) -> Any:
    """The Ray Serve application: the HTTP ingress bound to the session deployment (or, with
    ``http_ingress=False``, the session deployment alone, taking HTTP itself)."""
    serve = import_serve()
    import ray

    opts = options or ServeOptions()
    src = os.path.abspath(path_text(source, "the source (a build folder or a model file)"))
    gpus = replica_gpus(opts, ray.cluster_resources() if ray.is_initialized() else {})
    # replicas import the trt_backend this process imported (a checkout, an editable install)
    env = {"PYTHONPATH": os.pathsep.join([_package_root(), *filter(None, [os.environ.get("PYTHONPATH")])])}
    actor = {"num_cpus": opts.num_cpus, "num_gpus": gpus, "runtime_env": {"env_vars": env}, **opts.extra_actor_options}
    wait_s = opts.batch_wait_ms / 1000.0
    digest = str(read_manifest(src).get("digest") or "") or None if is_build_folder(src) else None

    @serve.deployment(name=SESSION_DEPLOYMENT, num_replicas=opts.replicas, ray_actor_options=actor,
                      max_ongoing_requests=opts.max_ongoing_requests,
                      health_check_period_s=opts.health_check_period_s)
    class SessionReplica:
        def __init__(self) -> None:
            self.session = replica_session(src, opts, gpus, digest)
            self.runner = BatchRunner(self.session, opts.max_batch_size)

        def _run(self, requests: list[Any]) -> list[Any]:
            return [_reply(r) for r in self.runner.run(requests)]

        @serve.batch(max_batch_size=opts.max_batch_size, batch_wait_timeout_s=wait_s)
        async def _batched(self, requests: list[Any]) -> list[Any]:
            return await asyncio.to_thread(self._run, requests)

        async def infer(self, feeds: Mapping[str, Any]) -> Any:
            if opts.batching:
                return await self._batched(feeds)
            return (await asyncio.to_thread(self._run, [feeds]))[0]

        async def infer_http(self, body: bytes, content_type: str | None) -> tuple[int, bytes, str]:
            try:
                feeds = decode_request(body, content_type, self.session.get_inputs())
            except RequestError as e:
                return 400, encode_error(str(e)), JSON
            reply = await self.infer(feeds)
            if isinstance(reply, Refusal):
                return 400, encode_error(reply.message), JSON
            npz = is_npz(content_type)
            return 200, encode_reply(reply, npz), NPZ if npz else JSON

        async def __call__(self, request: Any) -> Any:  # HTTP straight to a replica (http_ingress=False)
            from starlette.responses import Response

            status, data, media = await self.infer_http(await request.body(), request.headers.get("content-type"))
            return Response(content=data, status_code=status, media_type=media)

        def info(self) -> dict[str, Any]:
            return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                    "stats": self.runner.stats.as_dict(), "max_rows": self.runner.max_rows,
                    "no_batching": self.runner.no_batching,
                    "executors": self.session.segment_executors, "device_id": self.session.device_id,
                    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    @serve.deployment(name=HTTP_DEPLOYMENT, num_replicas=1,
                      ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": env}},
                      max_ongoing_requests=max(opts.max_ongoing_requests * opts.replicas, 100))
    class HTTPIngress:
        def __init__(self, sessions: Any) -> None:
            self.sessions = sessions

        async def __call__(self, request: Any) -> Any:
            from starlette.responses import Response

            body = await request.body()
            ctype = request.headers.get("content-type")
            try:
                status, data, media = await call_with_retries(lambda: self.sessions.infer_http.remote(body, ctype),
                                                              opts.retries)
            except ServeError as e:
                status, data, media = 503, encode_error(str(e)), JSON
            return Response(content=data, status_code=status, media_type=media)

    if not opts.http_ingress:
        return SessionReplica.bind()  # type: ignore[attr-defined]
    return HTTPIngress.bind(SessionReplica.bind())  # type: ignore[attr-defined]


class ServeClient:
    """A Python handle on a served session: :meth:`infer` takes feeds by input name and returns
    outputs by name (numpy), raising :class:`RequestError` with the session's one-line message
    for a bad request; a request whose replica died is sent again. From another process than
    the one that started serving, it joins the Ray cluster at ``address``."""

    def __init__(self, app_name: str = ServeOptions.name, retries: int = ServeOptions.retries, *,
                 address: str = "auto") -> None:
        serve = import_serve()
        import ray

        if not ray.is_initialized():  # another process: join the cluster serving it
            try:
                ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
            except ConnectionError as e:
                raise ServeError(f"no Ray cluster to join at address {address!r} ({first_line(e)}); serve first "
                                 "(trt-backend serve, or trt_backend.serve.start)") from None
        try:
            self.handle = serve.get_deployment_handle(SESSION_DEPLOYMENT, app_name=app_name)
        except serve.exceptions.RayServeException as e:  # (no Serve controller on that cluster)
            raise ServeError(f"the Ray cluster serves no trt-backend application named {app_name!r} "
                             f"({type(e).__name__}: {first_line(e)})") from None
        self.retries = retries
        self.resent = 0  # requests sent again because their replica died
        self.port: int | None = None  # the HTTP port, where this process started serving

    def _call(self, method: str, *args: Any) -> Any:
        retriable = _retriable()
        for attempt in range(self.retries + 1):
            try:
                return getattr(self.handle, method).remote(*args).result()
            except retriable as e:
                if attempt == self.retries:
                    raise ServeError(f"no replica answered after {self.retries + 1} tries: "
                                     f"{type(e).__name__}") from None
                self.resent += 1
                time.sleep(_backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def infer(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        reply = self._call("infer", dict(feeds))
        if isinstance(reply, Refusal):
            raise RequestError(reply.message)
        return reply  # type: ignore[no-any-return]

    def info(self) -> dict[str, Any]:
        """One replica's pid, node, batching counters, executors and device."""
        return self._call("info")  # type: ignore[no-any-return]


def _check_source(source: str, options: ServeOptions) -> None:
    """Fail here, in one line, rather than in every replica."""
    if not os.path.exists(source):
        raise ServeError(f"{source}: no such build folder or model file")
    if is_build_folder(source):  # cheap: no planning; engines are not loaded (emulated)
        Session(source, None, SessionOptions(emulate=True)).close()
    else:
        check_profiles(source, options)


def check_profiles(source: str, options: ServeOptions) -> None:
    """A model served needs a profile for every dynamic input its TensorRT segments read: the
    MissingProfileError naming all of them, here rather than in every replica. Planned only when
    the profiles given leave a dynamic input out (to learn whether TensorRT reads it)."""
    model = load_normalized(source)
    graph = model.proto.graph
    inputs = [node_arg(vi.name, vi.type) for vi in graph.input]
    dynamic = [a.name for a in inputs if a.is_dynamic]
    given = options.profiles
    check_profile_names(given, graph)
    listed = [given] if isinstance(given, Mapping) else list(given or [])
    if not dynamic or (listed and all(isinstance(p, Mapping) and all(n in p for n in dynamic) for p in listed)):
        return
    so = options.session
    plan = plan_for(model, so.partition, flavor=so.flavor, oracle=so.oracle, isolate=so.isolate_parser,
                    shapes=profile_shapes(listed))  # (planned as a replica's Session plans it)
    trt = plan.tensorrt_segments()
    user, _ = normalize_profiles(given, inputs, {n for seg in trt for n in seg.inputs} - {a.name for a in inputs})
    complete_profiles(user, inputs, required=bool(trt))


def check_port(host: str, port: int) -> None:
    """ServeError, in one line, when ``host:port`` cannot be listened on (another program holds
    it): said before any Ray replica starts, instead of in Ray's own tracebacks."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # A port left in TIME_WAIT is free.
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ServeError(f"port {port} on {host} is already in use by another program; stop it or choose "
                                 "another --port") from None
            raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def start(source: str | os.PathLike[str], options: ServeOptions | None = None, *,
          address: str | None = None) -> ServeClient:
    """Serve ``source`` (a build folder or a model) on Ray Serve: connects to the Ray cluster at
    ``address`` (None: the one this process is connected to, else the one ``RAY_ADDRESS`` names,
    else a new local one: never a cluster Ray would find on its own, which may be serving another
    application at the same route or port), starts HTTP on ``options.host:options.port`` and the application; returns a
    :class:`ServeClient`."""
    serve = import_serve()
    import ray

    opts = options or ServeOptions()
    src = os.path.abspath(path_text(source, "the source (a build folder or a model file)"))
    if opts.port == 0:  # (any free port: picked here, so that it can be said; Ray's proxy does not tell)
        opts = dataclasses.replace(opts, port=free_port(opts.host))
    if address is None and not ray.is_initialized():  # A cluster joined may be serving on it already.
        check_port(opts.host, opts.port)
    _check_source(src, opts)
    if not ray.is_initialized():
        joined = address if address is not None else os.environ.get("RAY_ADDRESS") or "local"
        check_reachable(joined)
        ray.init(address=joined, include_dashboard=False, logging_level=logging.WARNING)
    check_resources(opts, ray.cluster_resources())
    from ray.serve.exceptions import RayServeException

    serve.start(http_options={"host": opts.host, "port": opts.port}, proxy_location="HeadOnly")
    try:
        serve.run(build_app(src, opts), name=opts.name, route_prefix=opts.route_prefix)
    except (RuntimeError, RayServeException) as e:  # (RayServeException: a route another application holds)
        raise ServeError(f"the deployment of {src} did not start: {ray_reason(e)}") from None
    client = ServeClient(opts.name, opts.retries)
    client.port = opts.port
    return client


def free_port(host: str) -> int:
    """A port on ``host`` nothing listens on now (the one the system gives a socket bound to 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, 0))
        except OSError as e:
            raise ServeError(f"cannot listen on {host}: {e.strerror or e}") from None
        return int(sock.getsockname()[1])


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """ServeError, in one line, where ``address`` names a Ray cluster as HOST:PORT (or
    ray://HOST:PORT) that nothing answers at: Ray's own client retries such an address for
    minutes, printing native warnings. "local", "auto" and other forms are left to Ray."""
    target = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise ServeError(f"no Ray cluster answers at {address} ({e.strerror or e}): start one (ray start --head) or "
                         "give the address it printed") from None


def replica_gpus(opts: ServeOptions, resources: Mapping[str, float]) -> float:
    """The GPUs a replica asks Ray for: ``opts.num_gpus``, else 1 where the cluster has GPUs."""
    return opts.num_gpus if opts.num_gpus is not None else (1.0 if resources.get("GPU", 0) > 0 else 0.0)


def check_resources(opts: ServeOptions, resources: Mapping[str, float]) -> None:
    """ServeError, in one line, where the cluster cannot place every replica (``num_gpus`` and
    ``num_cpus`` each, as Ray schedules them): Ray Serve would wait for them for ever."""
    gpus = replica_gpus(opts, resources)
    extra = opts.extra_actor_options  # (Ray's own actor options, given: they win, as in the deployment)
    gpus, cpus = float(extra.get("num_gpus", gpus)), float(extra.get("num_cpus", opts.num_cpus))
    for what, each, have, flag in (("GPU", gpus, resources.get("GPU", 0.0), "--num-gpus"),
                                   ("CPU", cpus, resources.get("CPU", 0.0), "--num-cpus")):
        need = each * opts.replicas
        if need > have + 1e-9:
            raise ServeError(f"{opts.replicas} replica(s) x {each:g} {what} ({flag}) need {need:g} {what}(s); the Ray "
                             f"cluster has {have:g}: lower {flag} or --replicas, or add nodes")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ray_reason(error: BaseException) -> str:
    """The line of a Ray error that says what went wrong. An error raised in one of Ray's actors
    comes as the actor's description (colour codes, pid, actor id), its traceback, then the
    exception itself: that last line, without its class's module path."""
    lines = [_ANSI.sub("", ln).strip() for ln in str(error).splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("ray::", "File ", "Traceback", "^", "~"))]
    if not lines:
        return repr(error)
    last = lines[-1]
    head, sep, tail = last.partition(": ")
    return tail if sep and "." in head and " " not in head else last


def stop() -> None:
    """Shut Serve down (the Ray cluster stays)."""
    import_serve().shutdown()

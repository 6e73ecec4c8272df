"""Serving throughput: trt_backend.serve (the demo model's build folder) against plain ONNX Runtime
Ray Serve replicas (the whole model in one onnxruntime.InferenceSession, the same HTTP JSON
interface and the same @serve.batch settings), for 1 and 2 replicas with batching on and off, all
in one run on one local Ray cluster. Requests: 1..4 rows each, sent over HTTP by --clients threads.

    python benchmarks/serve_throughput.py [--requests 300] [--clients 16]

Prints requests/s, p50 and p99 latency per configuration and the ratio of ours to the baseline
with the same replicas and batching; ours twice: "trt-backend" with its HTTP ingress (a second
hop that resends requests of a replica that died) and "trt-backend/1" with HTTP straight to the
session replicas (``http_ingress=False``, one hop like the baseline); every answer is checked against whole-model
ONNX Runtime (PASS/FAIL). Without a GPU our TensorRT segments run emulated (through ONNX Runtime), so this
measures the serving machinery, not TensorRT."""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import logging
import os
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trt_backend.data.demo import DEMO_PATH
from trt_backend.serve import ServeOptions, build_app
from trt_backend.serve.codec import (
    JSON,
    decode_request,
    encode_reply,
    json_request,
    read_reply,
)
from trt_backend.artifacts.write import build as build_folder_build
from trt_backend.session.options import SessionOptions

PROFILE = [{"image": ((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}]


def ort_app(options: ServeOptions) -> Any:
    """Plain ONNX Runtime replicas: the whole model, concatenating a batch's rows as ours does."""
    import onnx
    from ray import serve

    from trt_backend.profiles.node_arg import node_arg

    env = {"PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    inputs = [node_arg(i.name, i.type) for i in onnx.load(DEMO_PATH).graph.input]

    @serve.deployment(name="OrtWholeModel", num_replicas=options.replicas,
                      max_ongoing_requests=options.max_ongoing_requests,
                      ray_actor_options={"num_cpus": options.num_cpus, "runtime_env": {"env_vars": env}})
    class OrtReplica:
        def __init__(self) -> None:
            import onnxruntime as ort

            self.session = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"])
            self.names = [o.name for o in self.session.get_outputs()]

        def _run(self, batch: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
            outputs = self.session.run(None, {"image": np.concatenate(batch)})
            replies, start = [], 0
            for x in batch:
                replies.append({n: o[start:start + len(x)] for n, o in zip(self.names, outputs)})
                start += len(x)
            return replies

        @serve.batch(max_batch_size=options.max_batch_size, batch_wait_timeout_s=options.batch_wait_ms / 1000)
        async def _batched(self, batch: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
            return await asyncio.to_thread(self._run, batch)

        async def __call__(self, request: Any) -> Any:
            from starlette.responses import Response

            x = decode_request(await request.body(), request.headers.get("content-type"), inputs)["image"]
            reply = await self._batched(x) if options.batching else (await asyncio.to_thread(self._run, [x]))[0]
            return Response(content=encode_reply(reply, False), media_type=JSON)

    return OrtReplica.bind()  # type: ignore[attr-defined]


def post(url: str, body: bytes) -> tuple[float, dict[str, np.ndarray]]:
    start = time.perf_counter()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": JSON})
    with urllib.request.urlopen(req, timeout=120) as r:
        data, ctype = r.read(), r.headers.get("content-type")
    return time.perf_counter() - start, read_reply(data, ctype)


def measure(url: str, xs: list[np.ndarray], clients: int) -> tuple[float, float, float, list[dict[str, np.ndarray]]]:
    bodies = [json_request({"image": x}) for x in xs]
    for body in bodies[:clients]:  # warm-up
        post(url, body)
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda b: post(url, b), bodies))
    wall = time.perf_counter() - start
    lat = np.array([r[0] for r in results]) * 1000
    return len(xs) / wall, float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), [r[1] for r in results]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--port", type=int, default=18765)
    args = p.parse_args()
    import onnxruntime as ort
    import ray
    from ray import serve

    folder = os.path.join(tempfile.mkdtemp(prefix="serve-bench-"), "demo_build")
    build_folder_build(DEMO_PATH, folder, PROFILE, SessionOptions())
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1 + k % 4, 3, 32, 32)).astype(np.float32) for k in range(args.requests)]
    reference = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"])
    want = [reference.run(None, {"image": x}) for x in xs]
    ray.init(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": args.port}, proxy_location="HeadOnly")
    url = f"http://127.0.0.1:{args.port}/"
    cpus = int(ray.cluster_resources().get("CPU", 0))
    print(f"serve_throughput: demo model, {args.requests} requests of 1..4 rows, {args.clients} HTTP clients, "
          f"Ray {ray.__version__} on {cpus} CPU(s), one node")
    print(f"{'replicas':>8} {'batching':>8} {'runner':<14} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    ok = True
    for replicas in (1, 2):
        for batching in (False, True):
            options = ServeOptions(replicas=replicas, batching=batching, max_batch_size=8, batch_wait_ms=5,
                                   num_cpus=min(1.0, cpus / replicas), name="bench")
            row: dict[str, tuple[float, float, float]] = {}
            direct = dataclasses.replace(options, http_ingress=False)
            for runner, app in (("trt-backend", functools.partial(build_app, folder, options)),
                                ("trt-backend/1", functools.partial(build_app, folder, direct)),
                                ("onnxruntime", functools.partial(ort_app, options))):
                serve.run(app(), name="bench", route_prefix="/")
                rps, p50, p99, answers = measure(url, xs, args.clients)
                serve.delete("bench")
                for got, w in zip(answers, want):
                    ok &= bool(np.allclose(got["probs"], w[0], rtol=1e-5, atol=1e-6)
                               and np.array_equal(got["top_classes"], w[2]))
                row[runner] = (rps, p50, p99)
                print(f"{replicas:>8} {'on' if batching else 'off':>8} {runner:<14} {rps:>8.1f} {p50:>8.1f} "
                      f"{p99:>8.1f}", flush=True)
            base = row["onnxruntime"]
            for runner in ("trt-backend", "trt-backend/1"):
                ours = row[runner]
                print(f"{'':>8} {'':>8} {runner + ' / ORT':<14} {ours[0] / base[0]:>7.2f}x {ours[1] / base[1]:>7.2f}x "
                      f"{ours[2] / base[2]:>7.2f}x")
    print(("PASS" if ok else "FAIL")
          + f": every answer ({args.requests} x 12 configurations) equals whole-model ONNX Runtime")
    serve.shutdown()
    ray.shutdown()
    return 0  # a report: PASS/FAIL lines, exit 0 either way (benchmarks/README.md)


if __name__ == "__main__":
    sys.exit(main())

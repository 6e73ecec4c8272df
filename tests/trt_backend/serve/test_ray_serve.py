"""trt_backend.serve on a real local Ray cluster of two nodes (one CPU each, small object stores):
two replicas of the demo model's session (emulated: no GPU here), 200 concurrent requests of
mixed batch sizes over HTTP (JSON and .npz) and through the Python handle, each checked against
whole-model ONNX Runtime; bad requests get HTTP 400 with the session's one-line message and the
replicas keep serving; a killed replica is replaced and no accepted request is lost."""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest

from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import RequestError
from trt_backend.serve import ServeOptions, start, stop
from trt_backend.serve.app import SESSION_DEPLOYMENT
from trt_backend.serve.codec import json_request, npz_request, read_reply
from trt_backend.artifacts.write import build as build_folder_build
from trt_backend.session.options import SessionOptions

ray = pytest.importorskip("ray", reason="ray[serve] is installed by the serve extra (CI installs it)")
pytestmark = pytest.mark.usefixtures("flavor")  # the build folder is built with TensorRT-RTX
PROFILE = [{"image": ((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}]
APP = "trt-backend-test"
STORE = 100 * 1024**2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from ray.cluster_utils import Cluster

    folder = str(tmp_path_factory.mktemp("serve") / "demo_build")
    build_folder_build(DEMO_PATH, folder, PROFILE, SessionOptions())
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": STORE,
                                                             "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=STORE)
        ray.init(address=cluster.address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        port = free_port()
        options = ServeOptions(replicas=2, port=port, name=APP, max_batch_size=4, batch_wait_ms=10,
                               session=SessionOptions(cache_dir=str(tmp_path_factory.mktemp("engines"))))
        client = start(folder, options)
        yield client, f"http://127.0.0.1:{port}/", folder
    finally:
        try:
            stop()
        finally:
            ray.shutdown()
            cluster.shutdown()


@pytest.fixture(scope="module")
def reference() -> ort.InferenceSession:
    return ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"])


def post(url: str, body: bytes, ctype: str) -> tuple[int, bytes, str]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read(), r.headers.get("content-type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("content-type", "")


def check(got: dict, x: np.ndarray, reference: ort.InferenceSession) -> None:
    want = reference.run(None, {"image": x})
    np.testing.assert_allclose(got["probs"], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["top_scores"], want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["top_classes"], want[2])


def image(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 3, 32, 32)).astype(np.float32)


def one_request(k: int, url: str, client) -> tuple[np.ndarray, dict]:
    """Request k: 1..10 rows (some past the profile's 8 and the batch's 4: split), by one of
    three routes."""
    x = image(1 + (k * 7) % 10, k)
    route = k % 3
    if route == 0:
        return x, client.infer({"image": x})
    ctype = "application/json" if route == 1 else "application/x-npz"
    status, body, reply_type = post(url, json_request({"image": x}) if route == 1 else npz_request({"image": x}), ctype)
    assert status == 200, body[:300]
    return x, read_reply(body, reply_type)


def replica_infos(client, want: int = 2, tries: int = 40) -> dict[int, dict]:
    infos: dict[int, dict] = {}
    for _ in range(tries):
        info = client.info()
        infos[info["pid"]] = info
        if len(infos) >= want:
            break
    return infos


def test_two_replicas_on_two_nodes_answer_200_concurrent_requests(served, reference) -> None:
    client, url, _ = served
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda k: one_request(k, url, client), range(200)))
    assert len(answers) == 200
    for x, got in answers:
        check(got, x, reference)
    # two replicas of one CPU each on two nodes of one CPU each: one per node, every CPU taken
    assert len(replica_actors()) == 2 and len([n for n in ray.nodes() if n["Alive"]]) == 2
    assert ray.cluster_resources()["CPU"] == 2 and ray.available_resources().get("CPU", 0) == 0
    infos = replica_infos(client, tries=5)  # (the handle prefers its own node's replica: maybe only that one)
    assert all(i["executors"] == ["emulated", "onnxruntime", "emulated"] and i["max_rows"] == 4 for i in infos.values())
    stats = [i["stats"] for i in infos.values()]
    assert sum(s["requests"] for s in stats) > 0 and all(s["largest_run"] <= 4 for s in stats)
    assert sum(s["split_requests"] for s in stats) > 0  # 5..10-row requests were split
    assert sum(s["runs"] for s in stats) < sum(s["rows"] for s in stats)  # requests shared runs


def test_bad_requests_get_400_with_one_line_and_the_replicas_keep_serving(served, reference) -> None:
    client, url, _ = served
    cases = [
        (json_request({"image": image(2, 1).astype(np.float64)}), "application/json",
         "input 'image': expected dtype float32 (tensor(float)), got float64 array of shape (2, 3, 32, 32)"),
        (npz_request({"image": np.zeros((1, 3, 16, 16), np.float32)}), "application/x-npz",
         "input 'image': dim 2 must be 32 (shape [batch, 3, 32, 32]), got shape (1, 3, 16, 16)"),
        (b'{"inputs": {"image": [1, 2', "application/json", "cannot read the request body as JSON"),
        (json_request({"picture": image(1, 2)}), "application/json", "unknown input 'picture'"),
    ]
    for body, ctype, message in cases:
        status, reply, _ = post(url, body, ctype)
        assert status == 400, reply[:300]
        error = json.loads(reply)["error"]
        assert message in error and "\n" not in error and "Traceback" not in error
    with pytest.raises(RequestError, match=r"expected dtype float32 .* got int32 array"):
        client.infer({"image": np.zeros((1, 3, 32, 32), np.int32)})
    x = image(3, 9)  # the replicas still serve, on both routes
    check(client.infer({"image": x}), x, reference)
    status, body, reply_type = post(url, json_request({"image": x}), "application/json")
    assert status == 200
    check(read_reply(body, reply_type), x, reference)


def replica_actors() -> set[str]:
    from ray.util import list_named_actors

    return {a["name"] for a in list_named_actors(all_namespaces=True)
            if a["namespace"] == "serve" and f"#{SESSION_DEPLOYMENT}#" in a["name"] and APP in a["name"]}


def test_a_killed_replica_is_replaced_and_no_accepted_request_is_lost(served, reference) -> None:
    from ray import serve
    from ray.serve.schema import ReplicaState

    client, url, _ = served
    before = replica_actors()
    assert len(before) == 2
    victim = client.info()["pid"]  # the replica the handle's requests go to (its node's, or one of the two)
    answers: list = []
    errors: list = []
    sent = threading.Event()

    def send(k: int) -> None:
        try:
            answers.append(one_request(1000 + k, url, client))
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)
        if k == 10:
            sent.set()

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(send, k) for k in range(60)]
        sent.wait(60)
        os.kill(victim, signal.SIGKILL)  # a crash, mid-traffic (the replica is a process this test's cluster started)
        for f in futures:
            f.result()
    assert errors == [] and len(answers) == 60
    print(f"requests the handle sent again after the kill: {client.resent}")
    for x, got in answers:
        check(got, x, reference)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        now = replica_actors()
        state = serve.status().applications[APP].deployments[SESSION_DEPLOYMENT].replica_states
        if len(now) == 2 and len(now - before) == 1 and state.get(ReplicaState.RUNNING) == 2:
            break
        time.sleep(0.5)
    now = replica_actors()
    assert len(now) == 2 and len(now - before) == 1 and len(before - now) == 1, (before, now)  # one replaced
    assert victim not in {client.info()["pid"] for _ in range(10)}
    x = image(5, 77)
    check(client.infer({"image": x}), x, reference)
    assert os.path.isdir(served[2])


def test_a_route_another_application_holds_is_one_error_and_that_application_keeps_serving(served, reference) -> None:
    """Starting a second application at the route the first one serves: Ray refuses it with its
    own exception (a traceback from ``trt-backend serve`` before); it is one ServeError naming the
    folder, and the first application answers as before."""
    from trt_backend.errors import ServeError

    client, _url, folder = served
    with pytest.raises(ServeError, match=r"the deployment of .*demo_build did not start: .*Prefix / is being used"):
        start(folder, ServeOptions(name="another-app", port=free_port()))
    x = image(3, 5)
    check(client.infer({"image": x}), x, reference)


def test_replicas_the_cluster_cannot_place_are_one_error(served) -> None:
    """A replica asking for a GPU on a cluster without one (or more CPUs than it has) waited for
    ever in Ray Serve, with Ray's autoscaler warning once a minute; it is one ServeError naming
    the flag, and the application already served is untouched."""
    from trt_backend.errors import ServeError

    _client, _url, folder = served
    with pytest.raises(ServeError, match=r"1 replica\(s\) x 1 GPU \(--num-gpus\) need 1 GPU\(s\); the Ray cluster "
                                         r"has 0: lower --num-gpus or --replicas, or add nodes"):
        start(folder, ServeOptions(name="gpu-app", num_gpus=1, port=free_port()))
    with pytest.raises(ServeError, match=r"3 replica\(s\) x 1 CPU \(--num-cpus\) need 3 CPU\(s\); the Ray cluster "
                                         r"has 2"):
        start(folder, ServeOptions(name="cpu-app", replicas=3, port=free_port()))


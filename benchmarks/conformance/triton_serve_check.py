"""Load an exported Triton model repository in a real ``tritonserver`` and serve its ensemble.

No Triton with the onnxruntime and tensorrt backends installs on our machines; PyTriton
(``nvidia-pytriton``) bundles ``tritonserver`` with the Python backend only, and runs only from a
venv made with a system Python 3.11 build whose shared libpython it links against. So this script keeps the ensemble's
``config.pbtxt`` byte for byte and stands in for each composing model with a Python-backend model
of the same name, inputs, outputs, max_batch_size and dynamic batching, which runs the model's own
ONNX file through ONNX Runtime (an ``onnxruntime`` model's ``1/model.onnx``, file or folder form;
a plan's ``1/segment.onnx``). Triton then applies its own ensemble load rules to our ensemble
config and schedules it; the answers, sent over HTTP (several at once, so dynamic batching
forms batches), are compared with whole-model ONNX Runtime. What it does not check: the
onnxruntime/tensorrt backend fields of the composing configs (accelerators, plans).

It uses no trt_backend code (the repository is all it reads). Run it with PyTriton's venv:

    /usr/bin/python3.11 -m venv /tmp/pyt && /tmp/pyt/bin/pip install nvidia-pytriton==0.7.0 onnxruntime onnx
    /tmp/pyt/bin/python benchmarks/conformance/triton_serve_check.py REPO MODEL.onnx --shape image:2x3x32x32 \
        [--shape ...]

Prints PASS/FAIL lines and exits 0 either way (a report, not a test)."""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

MODEL_PY = '''
import json
import sys

sys.path[:0] = {site!r}  # the python backend stub does not see this venv otherwise
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        self.sess = ort.InferenceSession({path!r}, so,
                                         providers=["CPUExecutionProvider"])
        config = json.loads(args["model_config"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {{n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.inputs}}
            values = self.sess.run(self.outputs, feeds)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(n, np.ascontiguousarray(v)) for n, v in zip(self.outputs, values)]))
        return responses
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _onnx_of(folder: str, config) -> str:
    version = os.path.join(folder, "1")
    if config.platform == "tensorrt_plan":
        return os.path.join(version, "segment.onnx")
    path = os.path.join(version, config.default_model_filename or "model.onnx")
    return os.path.join(path, "model.onnx") if os.path.isdir(path) else path


def stand_in_repo(repo: str, out: str) -> tuple[str, list[str]]:
    """A copy of ``repo`` whose composing models run in the Python backend; returns the ensemble
    name and what was stood in for."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    ensemble, stood = None, []
    for name in sorted(os.listdir(repo)):
        src = os.path.join(repo, name)
        cfg_path = os.path.join(src, "config.pbtxt")
        if not os.path.isfile(cfg_path):
            continue
        text = open(cfg_path, encoding="utf-8").read()
        config = text_format.Parse(text, mc.ModelConfig())
        dst = os.path.join(out, name)
        os.makedirs(os.path.join(dst, "1"))
        if config.platform == "ensemble":
            ensemble = name
            shutil.copy(cfg_path, os.path.join(dst, "config.pbtxt"))  # byte for byte
            continue
        kind = config.platform or config.backend
        onnx_path = os.path.abspath(_onnx_of(src, config))
        config.ClearField("platform")
        config.backend = "python"
        config.ClearField("optimization")
        config.ClearField("cc_model_filenames")
        config.ClearField("default_model_filename")
        for io in config.input:
            io.is_shape_tensor = False
        for group in config.instance_group:
            group.kind = mc.ModelInstanceGroup.KIND_CPU
            group.ClearField("profile")
        with open(os.path.join(dst, "config.pbtxt"), "w", encoding="utf-8") as f:
            f.write(text_format.MessageToString(config))
        with open(os.path.join(dst, "1", "model.py"), "w", encoding="utf-8") as f:
            f.write(MODEL_PY.format(path=onnx_path, site=[p for p in sys.path if p.endswith("site-packages")]))
        stood.append(f"{name} ({kind})")
    if ensemble is None:
        raise SystemExit(f"{repo}: no ensemble model")
    return ensemble, stood


def start_server(repo: str, work: str) -> tuple[subprocess.Popen, int, str]:
    import pytriton
    from pytriton.utils.distribution import get_libs_path, get_stub_path

    root = os.path.join(os.path.dirname(pytriton.__file__), "tritonserver")
    server = os.path.join(work, "tritonserver")
    shutil.copytree(root, server, ignore=shutil.ignore_patterns("python_backend_stubs"))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    shutil.copy(get_stub_path(version), os.path.join(server, "backends", "python", "triton_python_backend_stub"))
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(get_libs_path()), env.get("LD_LIBRARY_PATH", "")) if p)
    env["PYTHONPATH"] = ":".join(p for p in sys.path if p)
    port = _free_port()
    log = os.path.join(work, "tritonserver.log")
    cmd = [os.path.join(server, "bin", "tritonserver"), f"--model-repository={repo}",
           f"--backend-directory={os.path.join(server, 'backends')}", f"--http-port={port}",
           f"--grpc-port={_free_port()}", f"--metrics-port={_free_port()}", "--allow-metrics=false",
           "--disable-auto-complete-config", "--exit-on-error=false", "--log-verbose=0"]
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
    return proc, port, log


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo")
    ap.add_argument("model", help="the whole ONNX model, for the reference outputs")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME:2x3x32x32",
                    help="input shape of one request (repeat per input; a batching ensemble: batch first)")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--atol", type=float, default=1e-5)
    args = ap.parse_args()
    import onnxruntime as ort
    import tritonclient.http as httpclient

    shapes = {s.split(":")[0]: tuple(int(d) for d in s.split(":")[1].split("x")) for s in args.shape}
    work = tempfile.mkdtemp(prefix="triton-check-")
    results: list[str] = []
    proc = None
    try:
        repo = os.path.join(work, "repo")
        os.makedirs(repo)
        ensemble, stood = stand_in_repo(args.repo, repo)
        print(f"ensemble {ensemble}: config.pbtxt as exported; stand-ins: {', '.join(stood)}")
        proc, port, log = start_server(repo, work)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", concurrency=args.requests)
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            try:
                if client.is_server_live() and client.is_model_ready(ensemble):
                    break
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            time.sleep(0.5)
        ready = proc.poll() is None and client.is_model_ready(ensemble)
        status = {m["name"]: m.get("state") for m in client.get_model_repository_index()} if proc.poll() is None else {}
        print(f"tritonserver model states: {status}")
        results.append(f"{'PASS' if ready else 'FAIL'}: tritonserver loaded ensemble '{ensemble}' (its load-time "
                       "checks of the ensemble config passed)")
        if not ready:
            print("\n".join(ln for ln in open(log).read().splitlines() if ln[:1] in "EW" or "rror" in ln)[-6000:])
            return 0
        meta = client.get_model_metadata(ensemble)
        import onnx

        # from memory: ONNX Runtime cannot shape-infer a Resize whose scales live in external data
        ref = ort.InferenceSession(onnx.load(args.model).SerializeToString(), providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        dtypes = {"FP32": np.float32, "FP16": np.float16, "INT64": np.int64, "INT32": np.int32, "BOOL": np.bool_}
        requests = []
        for _ in range(args.requests):
            feeds: dict[str, np.ndarray] = {}
            for inp in meta["inputs"]:
                shape = shapes[inp["name"]]
                feeds[inp["name"]] = rng.random(shape).astype(dtypes[inp["datatype"]])
            requests.append(feeds)

        def inputs_of(feeds):
            ins = []
            for name, v in feeds.items():
                t = httpclient.InferInput(name, list(v.shape), httpclient.np_to_triton_dtype(v.dtype))
                t.set_data_from_numpy(v)
                ins.append(t)
            return ins

        pending = [client.async_infer(ensemble, inputs_of(f)) for f in requests]  # all in flight at once
        answers = []
        for p in pending:
            r = p.get_result()
            answers.append({o["name"]: r.as_numpy(o["name"]) for o in meta["outputs"]})
        worst = 0.0
        for feeds, got in zip(requests, answers):
            names = [o.name for o in ref.get_outputs()]
            ref_feeds = {i.name: feeds[i.name].reshape(()) if len(i.shape) == 0 else feeds[i.name]
                         for i in ref.get_inputs()}  # a scalar travels as [1] through Triton
            for n, want in zip(names, ref.run(names, ref_feeds)):
                if want.shape == () and got[n].shape == (1,):
                    got[n] = got[n].reshape(())
                assert got[n].shape == want.shape, (n, got[n].shape, want.shape)
                worst = max(worst, float(np.max(np.abs(got[n].astype(np.float64) - want.astype(np.float64)),
                                                initial=0.0)))
        stats = client.get_inference_statistics(ensemble)["model_stats"][0]
        results.append(f"{'PASS' if worst <= args.atol else 'FAIL'}: {len(requests)} concurrent requests through "
                       f"the ensemble equal whole-model ONNX Runtime (max abs diff {worst:.2e}, atol {args.atol})")
        print(f"ensemble inference count {stats['inference_count']}, executions {stats['execution_count']}")
        for name in stood:
            s = client.get_inference_statistics(name.split(" ")[0])["model_stats"][0]
            print(f"  {name}: {s['inference_count']} inferences in {s['execution_count']} executions")
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)
        print("\n".join(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Shared fixtures. TensorRT-dependent tests skip only where no TensorRT flavor imports; in CI
(CI=true) that is an error instead, since CI installs tensorrt-rtx and must run them. Tests that
need a package only tests/install.sh installs skip as optional outside CI, and the run prints
how many did."""
from __future__ import annotations

import os

import onnx
import pytest

from tests.helpers import OPTIONAL_SKIP


def _tensorrt_importable() -> bool:
    try:
        from trt_backend.tensorrt.flavor import load_flavor

        load_flavor("auto")
        return True
    except Exception:  # noqa: BLE001 - any import failure means "not here"
        return False


HAVE_TENSORRT = _tensorrt_importable()


@pytest.fixture(scope="session")
def flavor():
    """The installed TensorRT flavor (tensorrt preferred, else tensorrt_rtx)."""
    if not HAVE_TENSORRT:
        if os.environ.get("CI"):
            pytest.fail("CI must have a TensorRT flavor (tensorrt-rtx-cu13) for capability and build tests")
        pytest.skip("no TensorRT flavor importable")
    from trt_backend.tensorrt.flavor import load_flavor

    return load_flavor("auto")


@pytest.fixture(scope="session")
def oracle(flavor):
    """The real TensorRT(-RTX) parser oracle."""
    from trt_backend.tensorrt.oracle import ParserOracle

    return ParserOracle(flavor)


@pytest.fixture(scope="session")
def light_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _cuda_devices() -> int:
    try:
        from trt_backend.gpu.device import cuda_device_count

        return cuda_device_count()
    except Exception:  # noqa: BLE001 - no cuda-python, no driver: no device
        return 0


def pytest_collection_modifyitems(config, items) -> None:
    # by marker, not keyword: a test under a folder named gpu/ has the keyword too
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or _cuda_devices() > 0:
        return
    skip = pytest.mark.skip(reason="needs a usable CUDA device")
    for item in gpu_items:
        item.add_marker(skip)


# ------------------------------------------------------------------ CI cannot pass by skipping
# In CI (CI set, as .ci/run sets it) a skip is a failure unless it is one of these: the tests
# that need a CUDA device (CI has none), and named platform gaps of the CI image.
CI_ALLOWED_SKIPS = {
    "gpu": "needs a usable CUDA device",
    # ONNX Runtime's StringNormalizer needs the en_US.UTF-8 locale, which the CI image lacks
    "locale": "Failed to construct locale",
}
_skips: list[tuple[str, str]] = []


def pytest_runtest_logreport(report) -> None:
    if report.skipped:
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skips.append((report.nodeid, reason))


def ci_disallowed_skips(skips: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(n, r) for n, r in skips if not any(allowed in r for allowed in CI_ALLOWED_SKIPS.values())]


def pytest_sessionfinish(session, exitstatus) -> None:
    optional = [nodeid for nodeid, reason in _skips if reason.removeprefix("Skipped: ").startswith(OPTIONAL_SKIP)]
    if optional:
        print(f"\noptional tests skipped: {len(optional)} (they need packages tests/install.sh installs)")
    if not os.environ.get("CI") or not _skips:
        return
    counts = {kind: sum(text in r for _, r in _skips) for kind, text in CI_ALLOWED_SKIPS.items()}
    bad = ci_disallowed_skips(_skips)
    print(f"\nCI skips: {len(_skips)} ({', '.join(f'{k} {v}' for k, v in counts.items())}, not allowed {len(bad)})")
    if bad:
        for nodeid, reason in bad:
            print(f"CI: skipped and not allowed to be: {nodeid}: {reason[:200]}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ------------------------------------------------------------------ a GPU for tests without one

@pytest.fixture
def fake_gpu(monkeypatch):
    """One fake GPU with TensorRT-RTX's runtime (tests/fakes/): contract-strict CUDA and TensorRT
    runtimes at the GPU boundary. At teardown: no contract broken that the test did not provoke,
    and every allocation, stream and event the code made given back."""
    from tests.fakes.machine import FakeMachine

    machine = FakeMachine(monkeypatch)
    yield machine
    machine.check()

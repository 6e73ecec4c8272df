#!/usr/bin/env bash
# The gpu-marked tests on a machine with a GPU, PyTorch, cuda-python, onnx,
# onnxruntime and pytest but no internet and no TensorRT: device 0 and the missing-device error, and
# the Session's whole device path with a PyTorch stand-in for the engines
# (tests/trt_backend/gpu/torch_standin.py).
#
# Before, on a machine with internet (the folder is git-ignored; carry it with the tree):
#   pip install --no-deps --target .device-pylib onnx2torch
# There:
#   bash benchmarks/device/gpu_device_check.sh           (extra arguments go to pytest)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -d .device-pylib/onnx2torch ]; then
  echo "gpu_device_check: .device-pylib/onnx2torch is missing; run: pip install --no-deps --target .device-pylib onnx2torch" >&2
  exit 2
fi
export PYTHONPATH="$PWD:$PWD/.device-pylib${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import torch, onnxruntime as o; print('torch', torch.__version__, '| cuda', torch.cuda.is_available(), torch.cuda.device_count(), '| onnxruntime', o.__version__, o.get_available_providers())"
# every gpu-marked test (the contract-fake tests beside them need tensorrt_rtx, which CI has)
python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/trt_backend/gpu tests/plugins/test_resize_gpu.py \
  tests/trt_backend/bench/test_gpu_phases.py tests/trt_backend/engines/test_builder.py "$@"

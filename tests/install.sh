#!/bin/sh
# Installs everything the tests and the lint gates need into the active virtual environment:
# the package (editable) with its cpu, test, serve and dev extras, and two pinned packages that an
# extra cannot express. README.md's test command and .ci/run both run this script.
#   tensorrt-stubs 10.13: the text of full TensorRT 10's Python API, which the API-name tests read.
#     It is installed without its dependencies because it requires full TensorRT itself.
#   tensorrt-cu13-bindings 11.1: a second, older copy of TensorRT's tensorrt.plugin package, in a
#     folder beside the environment's site-packages (the test extra installs the newest 11.x). Its
#     plugin creator converts scalar attributes in a way NumPy 2.4 refuses, and the Resize plugin
#     tests run against both copies.
# Without these two, the tests that need them skip as "optional" and the run says how many did.
set -eu
prefix=$(python -c 'import sys; print(sys.prefix if sys.prefix != sys.base_prefix else "")')
if [ -z "$prefix" ]; then
  echo "tests/install.sh: activate a virtual environment first (python3 -m venv .venv && . .venv/bin/activate)" >&2
  exit 1
fi
python -m pip install -q --upgrade pip
python -m pip install -q -e ".[cpu,test,serve,dev]"
python -m pip install -q --no-deps "tensorrt-stubs==10.13.*"
python -m pip install -q --no-deps --upgrade --target "$prefix/tensorrt-plugin-11.1" "tensorrt-cu13-bindings==11.1.*"

"""TensorRT without a GPU: the flavor shim (tensorrt or tensorrt_rtx), the parser as capability
oracle, and the list of TensorRT API names the code uses."""

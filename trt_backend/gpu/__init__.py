"""The GPU path: the cuda-python device layer, the TensorRT runner, the ONNX Runtime CUDA-EP runner,
and whether TensorRT segments can execute here. cuda-python loads only when first used."""

"""Segment runners: the base every runner shares (input checks, profile choice) and the runners
on ONNX Runtime (an ONNX Runtime segment, a TensorRT segment emulated)."""

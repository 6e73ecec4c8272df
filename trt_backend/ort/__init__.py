"""ONNX Runtime glue: options, sessions made one way, process thread pools, OrtValue conversions."""

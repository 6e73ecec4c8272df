"""Engines: the precision transform, the builder (one segment -> one engine), the engine cache,
building every TensorRT segment of a plan with demotion of what TensorRT refuses, build reports."""

"""Accuracy: compare() a Session against whole-model ONNX Runtime through Polygraphy, and localise
the first segment an error starts in."""

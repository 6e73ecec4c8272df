"""Exports of a build for serving engines: a Triton Inference Server model repository."""

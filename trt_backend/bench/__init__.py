"""trtexec-style benchmarking of a Session against baselines measured in the same run."""

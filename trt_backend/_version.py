"""The package version (a leaf: build folders and bench reports record it)."""
__version__ = "0.1.0"

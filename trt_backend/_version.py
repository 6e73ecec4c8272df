"""The package version, the one place it is written: setup.py reads it from here, build folders
and bench reports record it."""
__version__ = "0.1.0"

"""A command line read before argparse and the heavy modules load, for work started at once (a
build cache hit answered from its index, a build's head start, inspect's early parse): it takes
only command lines made of options it knows, so anything else goes the usual way."""
from __future__ import annotations

from collections.abc import Sequence

VERBOSITY = frozenset({"-v", "--verbose", "-q", "--quiet", "-vv", "-vvv"})


def scan(argv: Sequence[str], command: str, values: frozenset[str], flags: frozenset[str]
         ) -> list[tuple[str | None, str | None]] | None:
    """``argv`` of ``command`` as ``(option, value)`` pairs in their order: a flag of ``flags`` with
    value None, an option of ``values`` with its value (``--name=value`` or ``--name value``), and
    the one positional argument with option None. Verbosity flags, anywhere, are left out. None
    where the command is another, or an argument is none of these (an unknown option, a short
    form, a second positional, a value missing at the end)."""
    out: list[tuple[str | None, str | None]] = []
    seen_command = positional = False
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, value = token.partition("=")
        if token in VERBOSITY:
            pass
        elif not seen_command:
            if token != command:
                return None
            seen_command = True
        elif name in values:
            if not eq:
                i += 1
                if i == len(argv):
                    return None
                value = argv[i]
            out.append((name, value))
        elif token in flags:
            out.append((token, None))
        elif token.startswith("-") or positional:
            return None
        else:
            positional = True
            out.append((None, token))
        i += 1
    return out if seen_command else None


# build's options that take a plain value (no file whose content matters), and its flags
BUILD_LINE_VALUES = frozenset({
    "--shapes", "--min-shapes", "--opt-shapes", "--max-shapes", "--precision", "--calibration-method", "--atol",
    "--rtol", "--atol-of-range", "--allow", "--cache-dir", "--workspace-mb", "--builder-optimization-level",
    "--max-aux-streams", "--hardware-compatibility", "--compute-capabilities", "--max-memory",
    "--max-build-memory", "--exclude-ops", "--exclude-nodes", "--min-segment-size", "--launch-cost-us",
    "--flavor", "--target", "--plugin-ops", "--qdq-rewrite"})
BUILD_LINE_FLAGS = frozenset({"--version-compatible", "--include-lean-runtime", "--no-boundary-cost", "--isolate",
                              "--no-plugins", "--weights-by-reference"})


class Call:
    """A ``build`` command line made of options :func:`parse` knows: its model, output, cache and
    the arguments as given, less the output folder and the verbosity flags (the build index's key
    material)."""

    def __init__(self, model: str, output: str, cache_dir: str | None, argv: list[str]) -> None:
        self.model, self.output, self.cache_dir, self.argv = model, output, cache_dir, argv

    def values(self, name: str) -> list[str]:
        """The values given to option ``name``, in order."""
        return [self.argv[k + 1] for k, token in enumerate(self.argv[:-1]) if token == name]

    def options(self) -> set[str]:
        """The options and flags given."""
        return {token for token in self.argv if token.startswith("--")}


def parse(argv: Sequence[str], *, need_cache: bool = True) -> Call | None:
    """The build command line ``argv`` (as the CLI got it) if every argument is one of
    :data:`BUILD_LINE_VALUES` and :data:`BUILD_LINE_FLAGS` (and, with ``need_cache``, it names one
    --cache-dir); else None (the command goes the usual way)."""
    line = scan(argv, "build", BUILD_LINE_VALUES | {"-o", "--output"}, BUILD_LINE_FLAGS)
    if line is None:
        return None
    kept = ["build"]
    model = output = cache_dir = None
    for name, value in line:
        if name is None:
            model = value
            kept.append("<model>")
        elif name in ("-o", "--output"):
            output = value
        elif value is None:
            kept.append(name)
        elif name == "--precision" and value == "auto":
            return None  # The usual path searches a precision plan first; its result is not in this key.
        else:
            cache_dir = value if name == "--cache-dir" else cache_dir
            kept += [name, value]
    if not model or not output or kept.count("--cache-dir") > 1 or (need_cache and not cache_dir):
        return None
    return Call(model, output, cache_dir, kept)

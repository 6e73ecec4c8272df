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

"""Seeded mutation fuzzer: malformed models through every subcommand and the Python API.

    python benchmarks/conformance/fuzz.py --mutants 1000 --seed 16 --timeout 60     # all six commands
    python benchmarks/conformance/fuzz.py --seed 16 --only 417 --save /tmp/m417     # one mutant again, its files kept

Each mutant (``tests/support/mutants.py``: byte-level and protobuf-valid semantic edits of five
seed models) goes through each command in a child process (``tests/support/fuzzing.py`` says
how, and the classes: success, mismatch, error, traceback, signal, hang, oom, other).

The table has a row per command; every case not success/mismatch/error is listed with its
mutant id, mutation and first line, to rerun with ``--only ID``. A hang or signal can be
re-checked without the fork (``--spawn``: a fresh ``python -m trt_backend`` per command).
A report: it prints PASS/FAIL and exits 0."""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support.fuzzing import COMMANDS, fuzz, problems, table


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mutants", type=int, default=100, help="mutants 0..N-1 (default 100)")
    p.add_argument("--seed", type=int, default=16, help="run seed: mutant i is a function of (seed, i) (default 16)")
    p.add_argument("--only", default=None, metavar="ID,ID", help="just these mutant ids (overrides --mutants)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per command before it counts as a hang")
    p.add_argument("--commands", default=",".join(COMMANDS), help=f"comma-separated from {','.join(COMMANDS)}")
    p.add_argument("--jobs", type=int, default=2, help="children at once (default 2)")
    p.add_argument("--max-rss-mb", type=float, default=3000.0, help="a child past this resident size is killed: oom")
    p.add_argument("--spawn", action="store_true", help="a fresh interpreter per command instead of a fork")
    p.add_argument("--save", metavar="DIR", help="keep each mutant's files in DIR/m<ID>/ (to rerun by hand)")
    p.add_argument("--verbose", action="store_true", help="list every result, not only the unclean ones")
    args = p.parse_args(argv)
    ids = [int(x) for x in args.only.split(",")] if args.only else list(range(args.mutants))
    commands = [c.strip() for c in args.commands.split(",") if c.strip()]
    start = time.monotonic()
    results = fuzz(ids, args.seed, commands, timeout=args.timeout, jobs=args.jobs, max_rss_mb=args.max_rss_mb,
                   spawn=args.spawn, save=args.save)
    wall = time.monotonic() - start
    print(f"fuzz: {len(ids)} mutant(s), seed {args.seed}, commands {','.join(commands)}, timeout {args.timeout:g} s, "
          f"{args.jobs} job(s), {'spawned' if args.spawn else 'forked'} children | wall {wall:.0f} s")
    print(table(results, commands))
    kinds: dict[str, int] = {}
    for r in results:
        if r.command == commands[0]:
            kinds[r.mutant.mutation] = kinds.get(r.mutant.mutation, 0) + 1
    print("mutations: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    shown = (sorted(results, key=lambda r: (r.mutant.id, COMMANDS.index(r.command))) if args.verbose
             else problems(results))
    for r in shown:
        print(f"  mutant {r.mutant.id:>4} {r.command:<8} {r.cls:<9} [{r.mutant.seed}: {r.mutant.mutation}: "
              f"{r.mutant.detail}] {r.first_line[:300]}")
    bad = problems(results)
    print(("PASS" if not bad else "FAIL") + f": {len(bad)} traceback/signal/hang/oom/other case(s) "
          f"in {len(results)} run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

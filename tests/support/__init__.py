"""Model builders, fuzzers and checkers shared by the tests and the benchmarks. The tests never import
``benchmarks``; the benchmarks may import this package but no test module."""

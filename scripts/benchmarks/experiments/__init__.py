"""Experiments whose conclusions are recorded in the docs (docs/auto.md, docs/benchmarks.md): kept
so that they can be repeated, apart from the benchmarks that hold a target."""

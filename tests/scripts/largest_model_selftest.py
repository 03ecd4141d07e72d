#!/usr/bin/env python3
"""bench/largest_model.py's depth bisection (largest_passing), on the CPU with stand-in trials: the deepest depth
that trains for every threshold in and around a range, the failure at the bottom, and the number of trials it
spends. Exit 0 when every expectation holds."""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import largest_model  # noqa: E402

failures = []


def expect(got, want, what):
    if got != want:
        failures.append(f"{what}: got {got!r}, expected {want!r}")


for lo, hi in ((104, 120), (1, 1), (7, 8), (3, 100)):
    budget = 2 + math.ceil(math.log2(hi - lo + 1))
    for deepest in range(lo - 1, hi + 2):  # trains up to `deepest` layers and not beyond
        tried = []

        def trains(layers):
            tried.append(layers)
            return layers <= deepest

        got = largest_model.largest_passing(lo, hi, trains)
        want = None if deepest < lo else min(deepest, hi)
        expect(got, want, f"range {lo}..{hi}, trains up to {deepest}")
        if len(tried) > budget:
            failures.append(f"range {lo}..{hi}, trains up to {deepest}: {len(tried)} trials, more than {budget}")
        if any(t < lo or t > hi for t in tried):
            failures.append(f"range {lo}..{hi}: tried {tried}, outside the range")
for failure in failures:
    print("FAIL", failure)
print(f"largest_model self-test: {'FAIL' if failures else 'PASS'}")
sys.exit(1 if failures else 0)

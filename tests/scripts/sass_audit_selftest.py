#!/usr/bin/env python3
"""How scripts/sass_audit.py reads its --kernels pattern, on the CPU (no cuobjdump needed): the pattern's
top-level alternatives, and the rule that each must match some kernel, so that a kernel renamed out of the
list (as the Hopper forward once was: the list named wgmma_forward_kernel after it became tma_forward_kernel)
fails the audit instead of dropping out of it. Exit 0 when every expectation holds."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import sass_audit  # noqa: E402

failures = []


def expect(got, want, what):
    if got != want:
        failures.append(f"{what}: got {got!r}, expected {want!r}")


expect(sass_audit.top_level_alternatives("a.*Lb0E|(x|y)z|w\\|q|[|]k"), ["a.*Lb0E", "(x|y)z", "w\\|q", "[|]k"],
       "alternatives outside groups, brackets and escapes")
expect(sass_audit.top_level_alternatives("only_one"), ["only_one"], "a pattern without '|'")
kernels = ["_ZN5alpha7kernels4cuda11tma_forward18tma_forward_kernelI", "_ZN5alpha7kernels4cuda22attention_delta_kernelI"]
expect(sass_audit.unmatched_alternatives("tma_forward_kernel|attention_delta_kernel", kernels), [],
       "every alternative matches")
expect(sass_audit.unmatched_alternatives("wgmma_forward_kernel|attention_delta_kernel", kernels),
       ["wgmma_forward_kernel"], "a stale kernel name")
for failure in failures:
    print("FAIL", failure)
print(f"sass_audit self-test: {'FAIL' if failures else 'PASS'}")
sys.exit(1 if failures else 0)

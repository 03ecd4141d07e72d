#!/usr/bin/env python3
"""Opcode counts of a kernel's loops, from `cuobjdump -sass` of an object or binary: for every kernel whose
mangled name contains --kernel, each loop (a backward branch and the instructions from its target to it)
with its opcodes counted, the largest loops first. What a tile kernel's inner loop issues per step
(HMMA, LDSM, MUFU against the address and index arithmetic around them) is the first thing to know before
tuning it; ncu gives the dynamic totals, this gives where they come from. The SASS is read by
scripts/sass_audit.py's parser.

Usage: python3 scripts/sass_loops.py OBJECT --kernel SUBSTRING [--loops N]
"""
import argparse
import collections
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sass_audit import find_tool, parse_kernels  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("object")
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--loops", type=int, default=3)
    args = parser.parse_args()
    cuobjdump = find_tool("cuobjdump", [])
    if not cuobjdump:
        sys.exit("sass_loops: cuobjdump not found (the CUDA toolkit's bin folder on PATH)")
    sass = subprocess.run([cuobjdump, "-sass", args.object], capture_output=True, text=True, check=True).stdout
    kernels = parse_kernels(sass, lambda name: args.kernel in name)
    if not kernels:
        sys.exit(f"sass_loops: no kernel of {args.object} contains {args.kernel!r}")
    for name, code in sorted(kernels.items()):
        opcode = lambda i: i.op.split(".")[0]  # noqa: E731
        total = collections.Counter(opcode(i) for i in code)
        print(f"{name}: {len(code)} instructions; {dict(total.most_common(12))}")
        index = {int(i.address, 16): k for k, i in enumerate(code)}
        loops = []
        for k, i in enumerate(code):
            target = re.search(r"0x([0-9a-f]+)", i.args) if opcode(i) == "BRA" else None
            if target and int(target.group(1), 16) < int(i.address, 16) and int(target.group(1), 16) in index:
                loops.append((index[int(target.group(1), 16)], k))
        for start, end in sorted(loops, key=lambda loop: loop[0] - loop[1])[: args.loops]:
            ops = collections.Counter(opcode(i) for i in code[start:end + 1])
            print(f"  loop {code[start].address}..{code[end].address}: {end - start + 1} instructions; "
                  f"{dict(ops.most_common(16))}")


if __name__ == "__main__":
    main()

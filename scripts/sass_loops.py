#!/usr/bin/env python3
"""Opcode counts of a kernel's loops, from `cuobjdump -sass` of an object or binary: for every kernel whose
mangled name contains --kernel, each loop (a backward branch and the instructions from its target to it)
with its opcodes counted, the largest loops first. What a tile kernel's inner loop issues per step
(HMMA, LDSM, MUFU against the address and index arithmetic around them) is the first thing to know before
tuning it; ncu gives the dynamic totals, this gives where they come from.

Usage: python3 scripts/sass_loops.py OBJECT --kernel SUBSTRING [--loops N]
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def kernels(sass):
    name, body = None, []
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
        elif name:
            m = LINE.search(line)
            if m:
                body.append((int(m.group(1), 16), m.group(2), m.group(3)))
    if name:
        yield name, body


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("object")
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--loops", type=int, default=3)
    args = parser.parse_args()
    tool = shutil.which("cuobjdump")
    if not tool:
        sys.exit("sass_loops: cuobjdump not found")
    sass = subprocess.run([tool, "-sass", args.object], capture_output=True, text=True, check=True).stdout
    for name, body in kernels(sass):
        if args.kernel not in name:
            continue
        total = collections.Counter(op.split(".")[0] for _, op, _ in body)
        print(f"{name}: {len(body)} instructions; {dict(total.most_common(12))}")
        address = {a: i for i, (a, _, _) in enumerate(body)}
        loops = []
        for i, (a, op, operands) in enumerate(body):
            m = re.search(r"0x([0-9a-f]+)", operands) if op.startswith("BRA") else None
            if m and int(m.group(1), 16) < a and int(m.group(1), 16) in address:
                loops.append((address[int(m.group(1), 16)], i))
        for start, end in sorted(loops, key=lambda l: l[0] - l[1])[: args.loops]:
            ops = collections.Counter(op.split(".")[0] for _, op, _ in body[start:end + 1])
            print(f"  loop {body[start][0]:#x}..{body[end][0]:#x}: {end - start + 1} instructions; "
                  f"{dict(ops.most_common(16))}")


if __name__ == "__main__":
    main()

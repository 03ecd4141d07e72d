#!/usr/bin/env python3
"""SASS check of the Hopper attention kernels (issue 10): their tile products run on wgmma, and which spill.

Disassembles objects or binaries with `cuobjdump -sass` (which needs `nvdisasm` beside it) and counts, for every
kernel whose mangled name matches --kernels, the warpgroup tensor-core instructions (HGMMA, from wgmma), the
warp-level ones (HMMA, IMMA, from mma.sync) and the local-memory ones (STL, LDL: register spills, as these kernels
keep no arrays in local memory). Rules:

  wgmma      every kernel issues HGMMA and no HMMA or IMMA: a tile product left on mma.sync would feed the tensor
             cores through the register file at a fraction of wgmma's rate;
  no-spill   every kernel that --no-spills also matches issues no STL or LDL.

Each top-level alternative of --kernels and of --no-spills (A|B|...) must match at least one kernel, so a renamed
kernel cannot drop out unseen. The spills of the other kernels are printed, not judged: issue 10 asks that nothing
spills, and docs/PERFORMANCE.md ("Hopper kernels in the SASS") lists the kernels that still do.

Exit status: 0 when every rule holds, 1 otherwise, 2 on a usage error (a missing file, a pattern that matches no
kernel), 77 when cuobjdump or nvdisasm cannot be found (CTest's skip).

Usage: python3 scripts/sass_hopper.py OBJECT... --kernels REGEX [--no-spills REGEX] [--tools DIR]
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sass_audit import SKIP, disassemble, parse_kernels, unmatched_alternatives  # noqa: E402

COUNTED = ("HGMMA", "HMMA", "IMMA", "STL", "LDL")


def opcode_counts(instructions):
    """How many of the kernel's instructions are each of COUNTED (by base opcode, modifiers dropped)."""
    counts = collections.Counter(i.op.split(".")[0] for i in instructions)
    return {op: counts[op] for op in COUNTED}


def judge(kernels, no_spills=None):
    """Per kernel (name -> instructions, as parse_kernels gives them), sorted by name: (name, counts, the rules it
    breaks)."""
    verdicts = []
    for name, code in sorted(kernels.items()):
        counts = opcode_counts(code)
        broken = []
        if counts["HGMMA"] == 0 or counts["HMMA"] or counts["IMMA"]:
            broken.append("wgmma")
        if counts["STL"] + counts["LDL"] and no_spills and re.search(no_spills, name):
            broken.append("no-spill")
        verdicts.append((name, counts, broken))
    return verdicts


def readable_names(names):
    """The names demangled by c++filt where it is installed (without the return type, the parameters and the
    namespaces every kernel here shares), else as given."""
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {name: name for name in names}
    out = subprocess.run([cxxfilt], input="\n".join(names), check=True, capture_output=True, text=True).stdout
    readable = {}
    for name, demangled in zip(names, out.splitlines()):
        demangled = re.sub(r"^void |alpha::(kernels::cuda::(\w+::)?)?", "", demangled)
        readable[name] = demangled[: demangled.rfind("(")] if demangled.endswith(")") else demangled
    return readable


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("objects", nargs="+", help="objects, libraries or executables with sm_90a code")
    parser.add_argument("--kernels", required=True, help="regular expression over mangled names: the Hopper kernels")
    parser.add_argument("--no-spills", help="regular expression over mangled names: those of them that must not spill")
    parser.add_argument("--tools", action="append", default=[], help="a folder to look for cuobjdump and nvdisasm in")
    args = parser.parse_args()
    missing = [o for o in args.objects if not os.path.isfile(o)]
    if missing:
        print(f"sass_hopper: no such file: {', '.join(missing)} (build the CUDA library first)")
        return 2
    kernels = {}
    for obj in args.objects:
        sass = disassemble(obj, args.tools)
        if sass is None:
            print("sass_hopper: skipped: cuobjdump and nvdisasm are needed (the CUDA toolkit's bin folder on PATH)")
            return SKIP
        kernels.update(parse_kernels(sass, lambda name: re.search(args.kernels, name) is not None))
    for option, pattern in (("--kernels", args.kernels), ("--no-spills", args.no_spills)):
        if pattern is None:
            continue
        unmatched = unmatched_alternatives(pattern, [name for name in kernels if re.search(args.kernels, name)])
        if unmatched:
            print(f"sass_hopper: {option}: no kernel matches {', '.join(repr(a) for a in unmatched)}")
            return 2
    verdicts = judge(kernels, args.no_spills)
    names = readable_names([name for name, _, _ in verdicts])
    print(f"{'HGMMA':>6} {'HMMA':>5} {'IMMA':>5} {'STL':>5} {'LDL':>5}  verdict   kernel")
    for name, counts, broken in verdicts:
        spills = counts["STL"] + counts["LDL"]
        verdict = "FAIL " + ",".join(broken) if broken else ("spills" if spills else "clean")
        print(f"{counts['HGMMA']:6d} {counts['HMMA']:5d} {counts['IMMA']:5d} {counts['STL']:5d} {counts['LDL']:5d}  "
              f"{verdict:<9} {names[name]}")
    failures = sum(1 for _, _, broken in verdicts if broken)
    spilling = sum(1 for _, counts, _ in verdicts if counts["STL"] + counts["LDL"])
    print(f"sass_hopper: {len(verdicts)} kernels, {spilling} of them spill; {failures} break a rule: "
          f"{'FAIL' if failures else 'PASS'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

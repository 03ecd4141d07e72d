#!/usr/bin/env python3
"""SASS audit of constant-time CUDA kernels (issue 8; the rules are documented in docs/SECURITY.md).

Disassembles a binary with `cuobjdump -sass` (which needs `nvdisasm` beside it) and checks every kernel
whose mangled name matches --kernels against two rules:

  slow-path   no FCHK (the test that sends an IEEE division to its slow path) and no CALL (a subroutine:
              the slow paths of division, square root and 64-bit integer division are calls);
  branch      no branch, exit or return predicated on a value derived from loaded data.

Memory addresses are not audited here: the compiler reuses registers under predicated writes (a tile
load's address register holds last iteration's data where the load is predicated off), which a
register-level taint analysis cannot tell from a data-dependent address. The counter differential
(bench/constant_time.py: identical memory transactions across input classes) checks addresses instead.

"Derived from loaded data" is a taint analysis over the instruction stream: registers (R, UR) and
predicates (P, UP) written by loads from global, shared or local memory are tainted, every instruction
with a tainted source taints what it writes and an untainted write clears the taint; spills (STL/LDL)
carry taint through their stack slot. The analysis runs over the kernel's control-flow graph (branch
targets and fallthrough) to a fixed point, the taint at a join being the union of its predecessors'; a
predicated write never clears taint. Values from the constant bank (kernel parameters: shapes and flags), special registers (thread
and block indices) and immediates are clean: control flow and addresses may depend on them.

Exit status: 0 when every kernel --kernels matches is clean and every kernel --leaky matches (the positive
control) has a finding, 1 otherwise, 2 on a usage error, 77 when cuobjdump or nvdisasm cannot be found
(CTest's skip).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

SKIP = 77
LOADS = re.compile(r"^(LDG|LDS|LDSM|LD|LDL|ATOM|ATOMS|ATOMG)(\.|$)")
CONTROL = re.compile(r"^(BRA|BRX|JMP|JMX|EXIT|RET|CALL|BREAK|CONT)(\.|$)")
NO_DESTINATION = re.compile(
    r"^(STG|STS|ST|STL|RED|BAR|BRA|BRX|JMP|JMX|EXIT|RET|CALL|BSSY|BSYNC|BREAK|WARPSYNC|NOP|MEMBAR|DEPBAR|"
    r"LDGSTS|LDGDEPBAR|ARRIVES|SYNCS|ERRBAR|CCTL|FENCE|YIELD|BPT|KILL|NANOSLEEP|CGAERRBAR|UTMALDG|UTMASTG|"
    r"UTMAPF|UTMACCTL)(\.|$)")
TWO_PREDICATE_DESTINATIONS = re.compile(r"^(ISETP|FSETP|DSETP|HSETP2|PLOP3|UISETP|UPLOP3)(\.|$)")
REGISTER = re.compile(r"\b(U?R\d+|U?P\d+)\b")
INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?P<pred>@!?U?P[T0-9]+\s+)?(?P<op>[A-Z][A-Z0-9_.]*)\s*(?P<args>[^;]*);")


def vector_width(op):
    """Registers written from the first destination register on."""
    if op.startswith("HMMA") and ".F32" in op.split(".", 3)[-1][:8]:
        return 4
    if op.startswith("HMMA"):
        return 2
    for suffix, width in ((".128", 4), (".64", 2), (".WIDE", 2), (".M88.4", 4), (".M88.2", 2), (".MT88.4", 4),
                          (".MT88.2", 2)):
        if suffix in op:
            return width
    return 1


def expand(register, width):
    match = re.match(r"(U?[RP])(\d+)$", register)
    if not match:
        return [register]
    prefix, number = match.group(1), int(match.group(2))
    return [f"{prefix}{number + k}" for k in range(width)]


def split_operands(args):
    operands, depth, current = [], 0, ""
    for ch in args:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            operands.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        operands.append(current.strip())
    return operands


def registers_in(text):
    return [r for r in REGISTER.findall(text) if r not in ("RZ", "URZ", "PT", "UPT")]


class Instruction:
    def __init__(self, address, predicate, op, args):
        self.address, self.op, self.args = address, op, args
        self.predicate = registers_in(predicate or "")
        operands = split_operands(args)
        base = op.split(".")[0]
        width = vector_width(op)
        self.addresses = [r for o in operands if "[" in o for r in registers_in(o[o.index("["):])]
        self.destinations, sources = [], []
        if NO_DESTINATION.match(op) or not operands:
            sources = operands
        elif TWO_PREDICATE_DESTINATIONS.match(op) or (base in ("LOP3", "ULOP3") and operands[0].startswith(("P", "UP"))):
            self.destinations = [r for o in operands[:2] for r in registers_in(o)]
            sources = operands[2:]
        else:
            first = registers_in(operands[0]) if "[" not in operands[0] else []
            self.destinations = [r for d in first for r in expand(d, width)]
            rest = operands[1:]
            # Carry-out predicates right after the destination (IADD3 R4, P0, P1, ...).
            while rest and re.fullmatch(r"U?P\d+|U?PT", rest[0]):
                self.destinations += registers_in(rest[0])
                rest = rest[1:]
            sources = rest
        self.sources = [r for o in sources for r in registers_in(o)]
        if base in ("HMMA", "IMMA", "DADD", "DMUL", "DFMA"):
            self.sources = [r for s in self.sources for r in expand(s, 4 if base in ("HMMA", "IMMA") else 2)]
        self.slot = None
        if base in ("STL", "LDL"):
            slot = re.search(r"\[[^\]]*\]", args)
            self.slot = slot.group(0) if slot else None


def parse_kernels(sass, wanted=lambda name: True):
    """The instructions of every kernel whose mangled name is `wanted` (the others are skipped unparsed: a
    library's SASS runs to millions of lines)."""
    kernels, name = {}, None
    for line in sass.splitlines():
        if "Function : " in line:
            name = re.search(r"Function : (\S+)", line).group(1)
            name = name if wanted(name) else None
            if name:
                kernels[name] = []
            continue
        match = INSTRUCTION.search(line) if name else None
        if match:
            address = line.split("*/")[0].split("/*")[-1]
            kernels[name].append(Instruction(address, match.group("pred"), match.group("op"), match.group("args")))
    return kernels


def successors(instructions):
    """Control-flow edges by instruction index: fallthrough and branch targets."""
    index_of = {int(i.address, 16): n for n, i in enumerate(instructions)}
    edges = []
    for n, i in enumerate(instructions):
        base = i.op.split(".")[0]
        target = re.search(r"0x([0-9a-f]+)", i.args) if base in ("BRA", "BSSY", "BREAK", "CALL") else None
        out = []
        if base == "BRA" and target:
            out.append(index_of.get(int(target.group(1), 16)))
        ends_flow = base in ("BRA", "EXIT", "RET", "BRX", "JMP", "JMX") and not i.predicate
        if not ends_flow and n + 1 < len(instructions):
            out.append(n + 1)
        if base in ("BRX", "JMX"):  # an indirect jump: any instruction may follow
            out = list(range(len(instructions)))
        edges.append([t for t in out if t is not None])
    return edges


ALL_BYTES = 0xF


def permuted_bytes(i, taint):
    """Byte taint of PRMT Rd, Ra, selector, Rb: dest byte k comes from byte (nibble k & 7) of Rb:Ra (its sign
    with bit 3 set). The compiler keeps 8- and 16-bit values in parts of a register, so whole-register taint
    would see a clean flag as tainted when it shares a register with data."""
    operands = split_operands(i.args)
    selector = re.fullmatch(r"0x([0-9a-f]+)", operands[2]) if len(operands) == 4 else None
    if not selector:
        return None
    low, high = (taint.get(r, 0) for r in (operands[1].lstrip("-~"), operands[3].lstrip("-~")))
    nibbles, mask = int(selector.group(1), 16), 0
    for k in range(4):
        source = (nibbles >> (4 * k)) & 7
        if ((high >> (source - 4)) if source >= 4 else (low >> source)) & 1:
            mask |= 1 << k
    return mask


def transfer(i, state, findings):
    """Applies instruction i to the taint state (byte masks of tainted registers, tainted spill slots);
    records findings."""
    taint, slots = state
    base = i.op.split(".")[0]
    predicate_tainted = any(taint.get(p, 0) for p in i.predicate)
    sources_tainted = any(taint.get(s, 0) for s in i.sources)
    if findings is not None and CONTROL.match(i.op) and base != "CALL" and (predicate_tainted or sources_tainted):
        findings.append(("branch", i))
    if base == "STL" and i.slot:
        data = [s for s in i.sources if s not in i.addresses]
        (slots.add if any(taint.get(s, 0) for s in data) else slots.discard)(i.slot)
    if not i.destinations:
        return
    if base == "LDL":
        mask = ALL_BYTES if i.slot in slots else 0
    elif LOADS.match(i.op):
        mask = ALL_BYTES
    elif base == "PRMT" and not predicate_tainted and permuted_bytes(i, taint) is not None:
        mask = permuted_bytes(i, taint)
    else:
        mask = ALL_BYTES if predicate_tainted or sources_tainted else 0
    for d in i.destinations:
        if i.predicate:  # a predicated write may keep the old, possibly tainted, value
            mask_d = mask | taint.get(d, 0)
        else:
            mask_d = mask
        if mask_d:
            taint[d] = mask_d
        else:
            taint.pop(d, None)


def merge(a, b):
    taint = dict(a[0])
    for r, m in b[0].items():
        taint[r] = taint.get(r, 0) | m
    return (taint, a[1] | b[1])


def audit(instructions):
    findings = [("slow-path", i) for i in instructions if i.op.split(".")[0] in ("FCHK", "CALL")]
    if not instructions:
        return findings
    edges = successors(instructions)
    # Taint on entry to each instruction, to a fixed point (the masks only grow: the analysis terminates).
    entry = [None] * len(instructions)
    entry[0] = ({}, frozenset())
    work = [0]
    while work:
        n = work.pop()
        taint, slots = dict(entry[n][0]), set(entry[n][1])
        transfer(instructions[n], (taint, slots), None)
        out = (taint, frozenset(slots))
        for m in edges[n]:
            merged = merge(entry[m], out) if entry[m] is not None else out
            if entry[m] is None or merged != entry[m]:
                entry[m] = merged
                work.append(m)
    for n, i in enumerate(instructions):
        if entry[n] is not None:
            transfer(i, (dict(entry[n][0]), set(entry[n][1])), findings)
    return findings


def find_tool(name, folders):
    for folder in folders + ["/usr/local/cuda/bin"]:
        if os.access(os.path.join(folder, name), os.X_OK):
            return os.path.join(folder, name)
    return shutil.which(name)


def disassemble(path, folders):
    """The SASS of `path` (`cuobjdump -sass`, which needs `nvdisasm` on its PATH), or None where either tool is not
    found in `folders`, the CUDA toolkit's bin folder or PATH."""
    cuobjdump, nvdisasm = find_tool("cuobjdump", folders), find_tool("nvdisasm", folders)
    if not cuobjdump or not nvdisasm:
        return None
    env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([cuobjdump, "-sass", path], check=True, capture_output=True, text=True, env=env).stdout


def top_level_alternatives(pattern):
    """The alternatives of a regular expression's outermost '|' (not inside brackets or parentheses)."""
    parts, depth, current, escaped = [], 0, "", False
    for c in pattern:
        if escaped:
            current, escaped = current + c, False
            continue
        if c == "\\":
            escaped = True
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += c
    return parts + [current]


def unmatched_alternatives(pattern, names):
    """The top-level alternatives of `pattern` that match none of `names` (a stale kernel name, say)."""
    return [a for a in top_level_alternatives(pattern) if not any(re.search(a, name) for name in names)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", help="an executable, library or object with sm_90a code")
    parser.add_argument("--kernels",
                        help="regular expression over mangled names of kernels that must be clean; each of its "
                             "top-level alternatives (A|B|...) must match at least one kernel, so a renamed kernel "
                             "cannot drop out unseen")
    parser.add_argument("--leaky",
                        help="the same for a positive control: kernels that must each have a finding (audited from "
                             "the same disassembly as --kernels: the binary's SASS takes a minute to produce and read)")
    parser.add_argument("--show", type=int, default=5, help="findings printed per kernel")
    parser.add_argument("--tools", action="append", default=[], help="a folder to look for cuobjdump and nvdisasm in")
    args = parser.parse_args()
    patterns = {"clean": args.kernels, "leaky": args.leaky}
    patterns = {expect: pattern for expect, pattern in patterns.items() if pattern}
    if not patterns:
        parser.error("give --kernels, --leaky or both")
    sass = disassemble(args.binary, args.tools)
    if sass is None:
        print("sass_audit: skipped: cuobjdump and nvdisasm are needed (the CUDA toolkit's bin folder on PATH)")
        return SKIP
    kernels = parse_kernels(sass, lambda name: any(re.search(p, name) for p in patterns.values()))
    failed = False
    for expect, pattern in patterns.items():
        matched = {name: code for name, code in kernels.items() if re.search(pattern, name)}
        if not matched:
            print(f"sass_audit: no kernel of {args.binary} matches {pattern!r}")
            return 2
        unmatched = unmatched_alternatives(pattern, matched)
        if unmatched:
            print(f"sass_audit: no kernel of {args.binary} matches {', '.join(repr(a) for a in unmatched)}: FAIL")
            return 1
        for name, code in sorted(matched.items()):
            findings = audit(code)
            clean = not findings
            verdict = "clean" if clean else f"{len(findings)} findings"
            print(f"{verdict:>14}  {len(code):6d} instructions  {name}")
            for rule, i in findings[: args.show]:
                print(f"{'':16}{rule:9} /*{i.address}*/ {'@' + i.predicate[0] + ' ' if i.predicate else ''}{i.op} {i.args}")
            failed |= clean if expect == "leaky" else not clean
        expectation = "every kernel leaks (positive control)" if expect == "leaky" else "every kernel clean"
        print(f"sass_audit: {len(matched)} kernels, expected {expectation}")
    print(f"sass_audit: {'FAIL' if failed else 'PASS'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

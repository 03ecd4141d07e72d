#!/usr/bin/env python3
"""scripts/sass_hopper.py's rules on a made-up disassembly, on the CPU (no cuobjdump needed): a kernel on wgmma alone
passes, one with an mma.sync product left (HMMA) or with no tensor-core instruction fails the wgmma rule, and a spill
fails only in a kernel --no-spills names; an object that does not exist is a usage error (exit 2) naming it. Exit 0
when every expectation holds."""
import contextlib
import io
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import sass_audit  # noqa: E402
import sass_hopper  # noqa: E402


def kernel(name, *ops):
    lines = [f"\t\tFunction : {name}"]
    lines += [f"        /*{16 * i:04x}*/                   {op} ;" for i, op in enumerate(ops)]
    return "\n".join(lines)


HGMMA = "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24, gsb0"
sass = "\n".join([
    kernel("on_wgmma", HGMMA, "FFMA R1, R2, R3, R4"),
    kernel("mma_sync_left", HGMMA, "HMMA.16816.F32.BF16 R8, R12, R16, R8"),
    kernel("no_tensor_core", "FFMA R1, R2, R3, R4"),
    kernel("spills_allowed", HGMMA, "STL [R1+0x10], R5"),
    kernel("spills_forbidden", HGMMA, "LDL R5, [R1+0x10]"),
])
verdicts = {name: (counts, broken) for name, counts, broken in
            sass_hopper.judge(sass_audit.parse_kernels(sass), no_spills="forbidden")}

failures = []


def expect(got, want, what):
    if got != want:
        failures.append(f"{what}: got {got!r}, expected {want!r}")


expect(sorted(verdicts), ["mma_sync_left", "no_tensor_core", "on_wgmma", "spills_allowed", "spills_forbidden"],
       "every kernel judged")
expect(verdicts["on_wgmma"][1], [], "a kernel on wgmma alone")
expect(verdicts["mma_sync_left"][1], ["wgmma"], "an HMMA beside the HGMMA")
expect(verdicts["no_tensor_core"][1], ["wgmma"], "no HGMMA at all")
expect(verdicts["spills_allowed"][1], [], "a spill outside --no-spills")
expect(verdicts["spills_allowed"][0]["STL"], 1, "the spill counted")
expect(verdicts["spills_forbidden"][1], ["no-spill"], "a spill inside --no-spills")
missing = "/nonexistent/flash_attention_tma_forward.cu.o"
sys.argv = ["sass_hopper.py", missing, "--kernels", "tma_forward_kernel"]
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    status = sass_hopper.main()
expect(status, 2, "a missing object's exit status")
expect(missing in printed.getvalue() and "no such file" in printed.getvalue(), True,
       f"a missing object named in the message (printed {printed.getvalue()!r})")
for failure in failures:
    print("FAIL", failure)
print(f"sass_hopper self-test: {'FAIL' if failures else 'PASS'}")
sys.exit(1 if failures else 0)

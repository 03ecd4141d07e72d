#!/usr/bin/env python3
"""The hardware-counter differential of the constant-time checks (issue 8; docs/SECURITY.md).

Runs `alpha_constant_time counters` under Nsight Compute once per input class, for the constant-time kernel
(the library's bf16 tensor-core forward) and for the leaky control, and compares executed instructions,
branches and memory traffic. Passes when every counter of the constant-time kernel is identical across all
classes AND the leaky control differs between zeros and random inputs (the positive control: without it,
identical counters would prove nothing). Writes counters.json to --out.

Usage: python3 bench/constant_time.py --tool build/cuda/alpha_constant_time [--ncu ncu] [--out DIR]
"""
import argparse
import csv
import io
import json
import os
import subprocess
import sys

CLASSES = ["zeros", "one_hot", "denormal", "huge", "masked_rows", "random"]
# What the differential compares, by kind; a metric the installed ncu does not know is left out (and listed).
CANDIDATES = {
    "instructions": ["smsp__inst_executed.sum", "smsp__thread_inst_executed.sum"],
    "branches": ["smsp__sass_inst_executed_op_branch.sum", "sm__sass_branch_targets.sum",
                 "sm__sass_branch_targets_threads_divergent.sum"],
    "memory": ["smsp__sass_inst_executed_op_global_ld.sum", "smsp__sass_inst_executed_op_global_st.sum",
               "smsp__sass_inst_executed_op_ldgsts.sum", "smsp__sass_inst_executed_op_shared_ld.sum",
               "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
               "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_write.sum"],
}


def available_metrics(ncu):
    listing = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listing.splitlines() if line.strip() and "__" in line.split()[0]}


def counters(ncu, tool, metrics, name, leaky):
    command = [ncu, "--metrics", ",".join(metrics), "--kernel-name", "regex:mma_forward_kernel", "--launch-skip", "1",
               "--launch-count", "1", "--csv", "--print-units", "base", tool, "counters", "--class", name]
    if leaky:
        command.append("--leaky")
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"ncu failed for {name}: {result.stderr[-2000:]}")
    lines = [l for l in result.stdout.splitlines() if l.startswith('"')]
    values = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        values[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
    missing = [m for m in metrics if m not in values]
    if missing:
        sys.exit(f"ncu returned no value for {missing} ({name})")
    return values


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", required=True, help="the alpha_constant_time executable")
    parser.add_argument("--ncu", default="ncu")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    known = available_metrics(args.ncu)
    metrics = [m for kind in CANDIDATES.values() for m in kind if m.rsplit(".", 1)[0] in known]
    left_out = [m for kind in CANDIDATES.values() for m in kind if m not in metrics]
    for kind, names in CANDIDATES.items():
        if not any(m in metrics for m in names):
            sys.exit(f"this ncu knows none of the {kind} metrics {names}")
    constant = {name: counters(args.ncu, args.tool, metrics, name, False) for name in CLASSES}
    leaky = {name: counters(args.ncu, args.tool, metrics, name, True) for name in ("zeros", "random")}
    print(f"{'metric':50} " + " ".join(f"{c:>13}" for c in CLASSES) + f" {'leaky zeros':>13} {'leaky random':>13}")
    differing, control_differs = [], []
    for m in metrics:
        row = [constant[c][m] for c in CLASSES]
        print(f"{m:50} " + " ".join(f"{v:13.0f}" for v in row) +
              f" {leaky['zeros'][m]:13.0f} {leaky['random'][m]:13.0f}")
        if len(set(row)) > 1:
            differing.append(m)
        if leaky["zeros"][m] != leaky["random"][m]:
            control_differs.append(m)
    if left_out:
        print("not offered by this ncu, left out: " + ", ".join(left_out))
    ok = not differing and bool(control_differs)
    print(f"constant-time kernel: {'identical across classes' if not differing else 'DIFFERS in ' + ', '.join(differing)}")
    print(f"leaky control: {'differs in ' + ', '.join(control_differs) if control_differs else 'NOT detected'}")
    print(f"counter differential: {'PASS' if ok else 'FAIL'}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "counters.json"), "w") as f:
        json.dump({"metrics": metrics, "left_out": left_out, "constant_time": constant, "leaky": leaky,
                   "differing": differing, "control_differs": control_differs, "pass": ok}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

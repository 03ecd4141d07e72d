#!/usr/bin/env python3
"""The Nsight Compute side of the constant-time checks (issue 8; docs/SECURITY.md), in two modes.

--mode counters (the counter differential): runs `alpha_constant_time counters` under Nsight Compute per
input class, --repeats measured launches each, for the constant-time kernel (the library's bf16 tensor-core
forward) and for the leaky control, and compares executed instructions, branches and memory traffic. A
counter that is the same in every launch of every class is identical; one that varies between launches of
the same inputs (the L2's sector counts do: they follow the timing of the misses that reach it) is compared
class by class against random with Welch's t, |t| < 4.5 as in the timing test. Passes when the
constant-time kernel shows no counter that differs by class AND the leaky control differs between zeros and
random (the positive control: without it, identical counters would prove nothing). Writes counters.json.

--mode clocks: runs the dudect timing test (`alpha_constant_time timing --record`) under Nsight Compute
and reads, per launch, its duration, its elapsed SM clock cycles and the SM clock frequency, for each
--clock-control given (none: the GPU's own clock management; base: ncu holds the base clock during each
launch). Welch's t of each class against random, on the duration and on the cycles, separates a difference
in work (cycles differ) from one in the clock the GPU chose (only the duration differs). Writes clocks.json.
A measurement, not a pass/fail check.

Usage: python3 bench/constant_time.py --tool build/cuda/alpha_constant_time [--mode counters|clocks]
           [--ncu ncu] [--out DIR] [--repeats 20] [--launches-per-class 2000] [--clock-controls none,base]
"""
import argparse
import csv
import io
import json
import math
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
CLOCK_METRICS = ["gpu__time_duration.sum", "gpc__cycles_elapsed.max", "gpc__cycles_elapsed.avg.per_second"]
KERNELS = "regex:forward_kernel"  # the wgmma (Hopper) or mma.sync forward, and the leaky control
T_LIMIT = 4.5


def welch(a, b):
    """Welch's t of samples a against b (0 when neither varies and their means agree)."""
    def stats(x):
        mean = sum(x) / len(x)
        return mean, sum((v - mean) ** 2 for v in x) / (len(x) - 1)
    (ma, va), (mb, vb) = stats(a), stats(b)
    spread = math.sqrt(va / len(a) + vb / len(b))
    if spread == 0:
        return 0.0 if ma == mb else math.copysign(math.inf, ma - mb)
    return (ma - mb) / spread


def ncu_launches(command, metrics):
    """Runs ncu's command line; returns each profiled launch's {metric: value}, in launch order."""
    result = subprocess.run(command, capture_output=True, text=True)
    lines = [l for l in result.stdout.splitlines() if l.startswith('"')]
    if not lines:
        sys.exit(f"ncu returned no rows (exit {result.returncode}): {result.stderr[-2000:]}")
    launches = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        launches.setdefault(int(row["ID"]), {})[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
    ordered = [launches[i] for i in sorted(launches)]
    for values in ordered:
        missing = [m for m in metrics if m not in values]
        if missing:
            sys.exit(f"ncu returned no value for {missing}")
    return ordered


def available_metrics(ncu):
    listing = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listing.splitlines() if line.strip() and "__" in line.split()[0]}


def counters(ncu, tool, metrics, name, leaky, repeats):
    """Each measured launch's counters for one class (after the harness's warm-up launch)."""
    command = [ncu, "--metrics", ",".join(metrics), "--kernel-name", KERNELS, "--launch-skip", "1",
               "--launch-count", str(repeats), "--csv", "--print-units", "base", tool, "counters", "--class", name,
               "--repeats", str(repeats)] + (["--leaky"] if leaky else [])
    launches = ncu_launches(command, metrics)
    if len(launches) != repeats:
        sys.exit(f"ncu profiled {len(launches)} launches of {name}, expected {repeats}")
    return launches


def compare(runs, classes, reference="random"):
    """Per metric: 'identical', or a verdict with the largest |t| against the reference class."""
    verdicts = {}
    for m in runs[reference][0]:
        values = {c: [launch[m] for launch in runs[c]] for c in classes}
        if len({v for c in classes for v in values[c]}) == 1:
            verdicts[m] = {"verdict": "identical", "t": 0.0}
            continue
        if not any(len(set(values[c])) > 1 for c in classes):
            verdicts[m] = {"verdict": "differs", "t": math.inf}
            continue
        worst = max(abs(welch(values[c], values[reference])) for c in classes if c != reference)
        verdicts[m] = {"verdict": "differs (|t| >= 4.5)" if worst >= T_LIMIT else "varies per launch, not by class",
                       "t": worst}
    return verdicts


def run_counters(args):
    known = available_metrics(args.ncu)
    metrics = [m for kind in CANDIDATES.values() for m in kind if m.rsplit(".", 1)[0] in known]
    left_out = [m for kind in CANDIDATES.values() for m in kind if m not in metrics]
    for kind, names in CANDIDATES.items():
        if not any(m in metrics for m in names):
            sys.exit(f"this ncu knows none of the {kind} metrics {names}")
    constant = {c: counters(args.ncu, args.tool, metrics, c, False, args.repeats) for c in CLASSES}
    leaky = {c: counters(args.ncu, args.tool, metrics, c, True, args.repeats) for c in ("zeros", "random")}
    constant_verdicts = compare(constant, CLASSES)
    leaky_verdicts = compare(leaky, ["zeros", "random"])
    mean = lambda runs, m: sum(l[m] for l in runs) / len(runs)
    print(f"{args.repeats} launches per class; mean per launch, and the verdict over all launches")
    print(f"{'metric':50} " + " ".join(f"{c:>13}" for c in CLASSES) + f" {'leaky zeros':>13} {'leaky random':>13}"
          "  constant-time / leaky control")
    for m in metrics:
        cv, lv = constant_verdicts[m], leaky_verdicts[m]
        describe = lambda v: v["verdict"] + (f" (max |t| {v['t']:.1f})" if 0 < v["t"] < math.inf else "")
        print(f"{m:50} " + " ".join(f"{mean(constant[c], m):13.0f}" for c in CLASSES) +
              f" {mean(leaky['zeros'], m):13.0f} {mean(leaky['random'], m):13.0f}  {describe(cv)} / {describe(lv)}")
    differing = [m for m in metrics if constant_verdicts[m]["verdict"].startswith("differs")]
    control_differs = [m for m in metrics if leaky_verdicts[m]["verdict"].startswith("differs")]
    if left_out:
        print("not offered by this ncu, left out: " + ", ".join(left_out))
    ok = not differing and bool(control_differs)
    print(f"constant-time kernel: {'no counter differs by class' if not differing else 'DIFFERS in ' + ', '.join(differing)}")
    print(f"leaky control: {'differs in ' + ', '.join(control_differs) if control_differs else 'NOT detected'}")
    print(f"counter differential: {'PASS' if ok else 'FAIL'}")
    with open(os.path.join(args.out, "counters.json"), "w") as f:
        json.dump({"metrics": metrics, "left_out": left_out, "repeats": args.repeats, "constant_time": constant,
                   "leaky": leaky, "constant_time_verdicts": constant_verdicts, "leaky_verdicts": leaky_verdicts,
                   "differing": differing, "control_differs": control_differs, "pass": ok}, f, indent=1,
                  default=str)
    return 0 if ok else 1


def run_clocks(args):
    record = os.path.join(args.out, "timing-order.csv")
    skipped = 20 * len(CLASSES)  # the harness's warm-up launches
    results = {}
    for control in args.clock_controls.split(","):
        command = [args.ncu, "--clock-control", control, "--cache-control", "none", "--metrics",
                   ",".join(CLOCK_METRICS), "--kernel-name", KERNELS, "--launch-skip", str(skipped), "--csv",
                   "--print-units", "base", args.tool, "timing", "--launches-per-class", str(args.launches_per_class),
                   "--record", record]
        launches = ncu_launches(command, CLOCK_METRICS)
        with open(record) as f:
            order = [row["class"] for row in csv.DictReader(f)]
        if len(order) != len(launches):
            sys.exit(f"ncu profiled {len(launches)} launches, the harness timed {len(order)}")
        by_class = {c: [l for l, k in zip(launches, order) if k == c] for c in CLASSES}
        duration = {c: [l["gpu__time_duration.sum"] for l in by_class[c]] for c in CLASSES}
        cycles = {c: [l["gpc__cycles_elapsed.max"] for l in by_class[c]] for c in CLASSES}
        clock = {c: [l["gpc__cycles_elapsed.avg.per_second"] for l in by_class[c]] for c in CLASSES}
        mean = lambda x: sum(x) / len(x)
        print(f"clock control {control}: {args.launches_per_class} launches per class under ncu")
        print(f"{'class':12} {'ns':>10} {'t(ns)':>8} {'cycles':>10} {'t(cycles)':>10} {'MHz':>8} {'t(MHz)':>8}")
        rows = {}
        for c in CLASSES:
            row = {"ns": mean(duration[c]), "cycles": mean(cycles[c]), "mhz": mean(clock[c]) / 1e6}
            if c != "random":
                row.update(t_ns=welch(duration[c], duration["random"]), t_cycles=welch(cycles[c], cycles["random"]),
                           t_mhz=welch(clock[c], clock["random"]))
            rows[c] = row
            t = lambda k: f"{row[k]:8.2f}" if k in row else f"{'':8}"
            print(f"{c:12} {row['ns']:10.1f} {t('t_ns')} {row['cycles']:10.1f} {t('t_cycles'):>10} {row['mhz']:8.1f} "
                  f"{t('t_mhz')}")
        results[control] = {"rows": rows, "duration_ns": duration, "cycles": cycles, "clock_hz": clock}
    with open(os.path.join(args.out, "clocks.json"), "w") as f:
        json.dump(results, f)
    return 0


def at_least_two(text):
    """A sample count Welch's t can use (it needs a variance)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 2:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 2 (Welch's t needs a variance), got {text!r}")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", required=True, help="the alpha_constant_time executable")
    parser.add_argument("--mode", choices=["counters", "clocks"], default="counters")
    parser.add_argument("--ncu", default="ncu")
    parser.add_argument("--out", default=".")
    parser.add_argument("--repeats", type=at_least_two, default=20, help="counters: measured launches per class")
    parser.add_argument("--launches-per-class", type=at_least_two, default=2000,
                        help="clocks: timed launches per class")
    parser.add_argument("--clock-controls", default="none,base", help="clocks: ncu --clock-control values")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return run_counters(args) if args.mode == "counters" else run_clocks(args)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Same-call A/B of `alpha train` binaries: tokens/s, peak memory and one profiled step's GPU time, alternating.

Issue 9's way of telling whether a change to the engine is faster: every variant trains the same config on the
same GPU in the same call, the variants taking turns (round 1: A, B, ...; round 2: A, B, ...), so that a GPU's
drift over the call lands on all of them. The data is prepared once (the built-in corpus, `alpha prepare`), and
every run reads it.

Per run: the median tokens/s over the steps after --warmup (metrics.jsonl, the profiled step left out), the
largest per-step peak of the caching allocator's bytes in use, and, from the profiled step (profile.json), the
GPU span, its active time and the kernels whose time differs most between the first variant and the others.
It also says whether each variant's losses are the first's bit for bit (a change meant to leave the numbers
alone must). With --clocks, nvidia-smi samples the GPUs' SM clock and power every 100 ms during each run, and each
run reports the means of its GPUs over the second half of the samples: some H200 machines train at their power
limit (the thirty-sixth session's did, the thirty-seventh's did not), so a run's clock says how much of a difference
is the GPU's state rather than the code.

Data parallel (issue 11): with --gpus N every variant trains on N GPUs (`alpha train --gpus N`, the batch per
GPU); --scaling adds, each round, a run of the first variant on each of those GPUs alone (cuda:0 .. cuda:N-1), and
prints each variant's scaling efficiency twice: tokens/s ÷ the sum of the GPUs' medians alone (what the N GPUs do
when each trains by itself: two GPUs of one machine can differ by a percent or more, and the N-GPU run goes at its
slowest's pace), and tokens/s ÷ (N × cuda:0's median), the figure the earlier sessions reported.

Usage: python3 bench/ab_train.py --variant new=build/cuda/alpha --variant old=/tmp/alpha_old
       [--config gpt2-124m] [--batch-size 16] [--seq-len 1024] [--steps 40] [--warmup 5] [--rounds 2]
       [--device cuda:0] [--gpus N [--scaling]] [--profile-step 20] [--clocks] [--out DIR]
       [-- extra alpha train flags]
Writes DIR/ab_CONFIG.json with every run.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile


def run_train(binary, config, args, data_dir, run_dir, extra, gpus, device):
    where = ["--gpus", str(gpus)] if gpus > 1 else ["--device", device]
    cmd = [binary, "train", "--config", config, "--precision", args.precision, "--batch-size", str(args.batch_size),
           "--seq-len", str(args.seq_len), "--steps", str(args.steps), "--eval-every", "0", "--sample-tokens", "0",
           "--save-every", "-1", "--data", data_dir, "--out", run_dir] + where
    if args.profile_step:
        cmd += ["--profile-step", str(args.profile_step)]
    samples_path = run_dir + ".clocks.csv"
    sampler = start_clock_sampler(samples_path) if args.clocks else None
    try:
        # Sampled, the run numbers its GPUs as nvidia-smi does (PCI order), so that cuda:N is the clocks' index N.
        env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID") if sampler else None
        done = subprocess.run(cmd + extra, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    finally:
        if sampler:
            sampler.terminate()
            sampler.wait()
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        tail = "\n".join(lines[-20:]) if lines else f"exit status {done.returncode}"
        raise SystemExit(f"ab_train.py: {' '.join(cmd + extra)} failed:\n{tail}")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    timed = [r for r in records if "tokens_per_second" in r and not r.get("profiled")][args.warmup:]
    if not timed:
        raise SystemExit(f"ab_train.py: {run_dir}: no steps after the {args.warmup} warm-up steps")
    result = {"tokens_per_second": statistics.median(r["tokens_per_second"] for r in timed),
              "timed_steps": len(timed), "peak_bytes": max(r["peak_bytes"] for r in records),
              "final_loss": records[-1]["loss"], "losses": [r["loss"] for r in records if "loss" in r]}
    if sampler:
        used = list(range(gpus)) if gpus > 1 else [int(device.partition(":")[2] or 0)]
        result.update(clocks_of(samples_path, used))
    profile_path = os.path.join(run_dir, "profile.json")
    if args.profile_step and os.path.exists(profile_path):
        with open(profile_path) as f:
            report = json.load(f)
        if "span_s" in report:
            result.update(span_s=report["span_s"], active_s=report["active_s"])
        # profile.json has a row per kernel and the op that queued it: a kernel's time is the sum of its rows.
        kernels = {}
        for k in report.get("kernels", []):
            kernels[k["name"]] = kernels.get(k["name"], 0.0) + k["time_s"]
        result["kernels"] = kernels
    return result


def start_clock_sampler(path):
    """nvidia-smi writing every GPU's SM clock and power draw every 100 ms to `path` until terminated."""
    with open(path, "w") as out:
        return subprocess.Popen(["nvidia-smi", "--query-gpu=index,clocks.sm,power.draw",
                                 "--format=csv,noheader,nounits", "-lms", "100"], stdout=out,
                                stderr=subprocess.DEVNULL)


def clocks_of(path, gpus):
    """The mean SM clock (MHz) and power draw (W) of GPUs `gpus` (nvidia-smi's indices) over the second half of the
    samples: the run's steady state, past its start-up and the GPUs' climb to their power limit."""
    rows = []
    with open(path) as f:
        for line in f:
            fields = [x.strip() for x in line.split(",")]
            if len(fields) == 3 and fields[0].isdigit() and int(fields[0]) in gpus:
                try:
                    rows.append((float(fields[1]), float(fields[2])))
                except ValueError:
                    pass  # "[N/A]" and the like
    rows = rows[len(rows) // 2:]
    if not rows:
        return {}
    return {"sm_mhz": statistics.mean(r[0] for r in rows), "power_w": statistics.mean(r[1] for r in rows)}


def clocks_text(runs):
    """The runs' median SM clock and power, when sampled."""
    if not all("sm_mhz" in run for run in runs):
        return ""
    return (f", SM {statistics.median(r['sm_mhz'] for r in runs):,.0f} MHz, "
            f"{statistics.median(r['power_w'] for r in runs):.0f} W")


def parse_variant(text):
    name, sep, binary = text.partition("=")
    if not sep or not name or not binary:
        raise SystemExit(f"ab_train.py: --variant {text!r}: expected NAME=PATH")
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"ab_train.py: --variant {text!r}: {binary} is not an executable")
    return name, binary


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", required=True, help="NAME=PATH of an alpha binary (2 or more)")
    parser.add_argument("--config", default="gpt2-124m")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--gpus", type=int, default=1, help="every variant on this many GPUs (alpha train --gpus)")
    parser.add_argument("--scaling", action="store_true",
                        help="with --gpus N > 1: a run of the first variant on each GPU alone each round, and "
                             "the efficiency")
    parser.add_argument("--profile-step", type=int, default=20, help="0: no profiled step")
    parser.add_argument("--out", default=".")
    parser.add_argument("--clocks", action="store_true",
                        help="sample the GPUs' SM clock and power with nvidia-smi during each run and report their "
                             "means over its second half (some H200s train power-capped: docs/PERFORMANCE.md)")
    args = parser.parse_args(argv)
    variants = [parse_variant(v) for v in args.variant]
    if len(variants) < 2 or len({name for name, _ in variants}) != len(variants):
        parser.error("--variant: expected two or more, with distinct names")
    for name in ("batch_size", "seq_len", "steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive count, got {getattr(args, name)}")
    if not 0 <= args.warmup < args.steps:
        parser.error(f"--warmup: expected 0 <= warmup < steps ({args.steps}), got {args.warmup}")
    if args.gpus < 1:
        parser.error(f"--gpus: expected a positive count, got {args.gpus}")
    if args.clocks and shutil.which("nvidia-smi") is None:
        parser.error("--clocks: expected nvidia-smi on the PATH, found none")
    if args.clocks and args.gpus == 1 and not re.fullmatch(r"cuda(:[0-9]+)?", args.device):
        parser.error(f"--clocks: expected a CUDA --device (cuda or cuda:N, the GPU whose clocks are sampled), "
                     f"got {args.device}")
    if args.scaling and args.gpus < 2:
        parser.error(f"--scaling: expected --gpus of 2 or more (the runs it compares with one GPU), got {args.gpus}")
    # --scaling's runs: the first variant on each GPU alone.
    baselines = [f"1-gpu:{i}" for i in range(args.gpus)] if args.scaling else []
    if {name for name, _ in variants} & set(baselines):
        parser.error(f"--variant: the names {', '.join(baselines)} are --scaling's runs; choose others")

    runs = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = os.path.join(tmp, "data")
        subprocess.run([variants[0][1], "prepare", "--builtin", "--out", data_dir], check=True,
                       stdout=subprocess.DEVNULL)
        for name in baselines:
            runs[name] = []
        for r in range(args.rounds):
            schedule = [(name, binary, args.gpus, args.device) for name, binary in variants]
            schedule[:0] = [(name, variants[0][1], 1, f"cuda:{i}") for i, name in enumerate(baselines)]
            for name, binary, gpus, device in schedule:
                result = run_train(binary, args.config, args, data_dir, os.path.join(tmp, f"{name}_{r}"), extra, gpus,
                                   device)
                runs[name].append(result)
                active = f", GPU active {result['active_s'] * 1e3:.2f} of {result['span_s'] * 1e3:.2f} ms" \
                    if "active_s" in result else ""
                if "sm_mhz" in result:
                    active += f", SM {result['sm_mhz']:,.0f} MHz, {result['power_w']:.0f} W"
                print(f"round {r + 1} {name:10s} {result['tokens_per_second']:12,.0f} tokens/s, peak "
                      f"{result['peak_bytes'] / 2**20:9.1f} MiB{active}", flush=True)

    base_name = variants[0][0]
    base = statistics.median(x["tokens_per_second"] for x in runs[base_name])
    where = f"{args.gpus} GPUs" if args.gpus > 1 else args.device
    print(f"\n{args.config}, {args.precision}, batch {args.batch_size} x {args.seq_len}, {where}: medians of "
          f"{args.rounds} rounds")
    alone = {name: statistics.median(x["tokens_per_second"] for x in runs[name]) for name in baselines}
    for i, name in enumerate(baselines):
        print(f"  {name:10s} {alone[name]:12,.0f} tokens/s  ({base_name} on cuda:{i} alone){clocks_text(runs[name])}")
    for name, _ in variants:
        tps = statistics.median(x["tokens_per_second"] for x in runs[name])
        efficiency = (f"  efficiency {tps / sum(alone.values()):.3f} (÷ the GPUs alone), "
                      f"{tps / (args.gpus * alone[baselines[0]]):.3f} (÷ {args.gpus} × cuda:0)") if alone else ""
        same = all(run["losses"] == base_run["losses"] for run, base_run in zip(runs[name], runs[base_name]))
        print(f"  {name:10s} {tps:12,.0f} tokens/s  {tps / base:6.3f} x {base_name}{efficiency}  losses "
              f"{'bit-identical to' if same else 'differ from'} {base_name}'s{clocks_text(runs[name])}")
    if all(run.get("kernels") for name, _ in variants for run in runs[name]):
        def kernel_ms(name):
            names = set().union(*(run["kernels"] for run in runs[name]))
            return {k: statistics.median(run["kernels"].get(k, 0.0) for run in runs[name]) * 1e3 for k in names}
        base_kernels = kernel_ms(base_name)
        for name, _ in variants[1:]:
            other = kernel_ms(name)
            deltas = sorted(set(base_kernels) | set(other),
                            key=lambda k: -abs(other.get(k, 0.0) - base_kernels.get(k, 0.0)))[:8]
            print(f"  profiled step, the kernels that differ most, {name} against {base_name} (ms):")
            for k in deltas:
                print(f"    {other.get(k, 0.0):8.3f} {base_kernels.get(k, 0.0):8.3f}  {k[:90]}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"ab_{args.config}.json"), "w") as f:
        json.dump({"config": args.config, "batch_size": args.batch_size, "seq_len": args.seq_len,
                   "device": args.device, "gpus": args.gpus, "variants": dict(variants), "runs": runs}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())

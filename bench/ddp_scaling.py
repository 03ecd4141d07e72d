#!/usr/bin/env python3
"""Data-parallel scaling of GPT training on this host's GPUs: Alpha next to PyTorch, measured in the same run.

Issue 11's scaling efficiency: tokens/s on N GPUs ÷ (N × tokens/s on 1 GPU) of the same engine, with the same
batch per GPU (--batch-size × the config's block_size; default 32 × 512 for seed, 16 × 1024 for gpt2-124m).
Alpha: `alpha train --config CONFIG --precision bf16`, with --device cuda (1 GPU) and with --gpus N; tokens/s is
the median over the steps after --warmup of metrics.jsonl's tokens_per_second (all ranks' tokens on N GPUs),
profiled steps left out. gpt2-124m trains on `alpha prepare --builtin`'s tokens, seed on the built-in corpus
(the N-GPU run on the data its 1-GPU run tokenized).
PyTorch peer: bench/train_seed.py's GPT and step (bf16 autocast, fused AdamW, clipping at 1.0) under
torch.compile, one process per GPU started by torchrun; on N GPUs the model is wrapped in DistributedDataParallel
(25 MiB buckets, gradient_as_bucket_view, the f32 gradients all-reduced by NCCL overlapped with backward) before
torch.compile; on 1 GPU it is the plain model, as Alpha's 1-GPU run has no communicator. (The step's
zero_grad(set_to_none=True), PyTorch's default, drops the bucket views, so DDP copies each gradient into its bucket
every step: one f32 copy of the gradients.) With --grad-accum K each step is K micro-batches of --batch-size, their
gradients added locally and reduced once, on the last (Alpha's `--grad-accum K`; PyTorch's micro-steps but the last
under DDP's no_sync()), and tokens/s counts every micro-batch. Each rank trains on its own random ids; tokens/s =
N × batch × seq × K × --steps ÷ the wall time of the --steps steps after --warmup, with no host synchronisation
inside them. NCCL_NVLS_ENABLE=0 (NVLink multicast off) for every run.

Usage: python3 bench/ddp_scaling.py [--alpha build/cuda/alpha] [--config seed|gpt2-124m] [--batch-size B]
       [--gpus 2] [--steps 30] [--warmup 5] [--grad-accum 1] [--no-compile] [--out DIR]
Runs, each as a subprocess: Alpha on 1 GPU, Alpha on N (both only with --alpha), PyTorch on 1, PyTorch DDP on N.
Prints a table and writes DIR/ddp_scaling_CONFIG_accumK.json with every run's numbers and exact command.
"""
import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_seed  # noqa: E402  (the 1-GPU peer: its GPT, optimiser and step are this peer's)

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on these machines; children inherit it


def worker(args, cfg, batch):
    """One torchrun rank: trains the peer and, on rank 0, writes the result to --result."""
    local, rank, world = (int(os.environ[k]) for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE"))
    cuda = args.device == "cuda"  # --device cpu (gloo, f32) only checks the plumbing on a machine without a GPU
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(local)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    torch.manual_seed(0)  # the same initial weights on every rank (DDP would broadcast rank 0's anyway)
    model = train_seed.GPT(cfg).to(device)
    step_model = model
    if world > 1:
        step_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[local] if cuda else None, bucket_cap_mb=25, gradient_as_bucket_view=True)
    if not args.no_compile:
        step_model = torch.compile(step_model)  # compiled DDP: graphs split at the buckets, reductions overlap
    opt = train_seed.peer_optimizer(model)
    torch.manual_seed(1 + rank)  # each rank its own batch, as data-parallel ranks read different data
    ids = torch.randint(0, cfg["vocab_size"], (batch, cfg["block_size"] + 1), device=device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    # peer_step clips model.parameters(): under DDP their grads are already averaged over the ranks when
    # backward returns, so the norm is the global batch's, as in Alpha.
    def step():
        for _ in range(args.grad_accum - 1):  # the local micro-steps: DDP reduces nothing until the last backward
            with step_model.no_sync() if world > 1 else contextlib.nullcontext():
                train_seed.peer_backward(step_model, ids, args.grad_accum)
        return train_seed.peer_step(model, step_model, opt, ids, args.grad_accum)

    for _ in range(args.warmup):
        step()
    if world > 1:
        dist.barrier()  # the ranks start the timed steps together
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):  # no per-step synchronisation: Alpha's loop has none either
        loss = step()
    sync()  # rank 0's last step waited on every rank's gradients, so this is the end of the job's step
    seconds = time.perf_counter() - start
    if rank == 0:
        tokens = world * batch * cfg["block_size"] * args.grad_accum * args.steps
        result = {"tokens_per_second": tokens / seconds,
                  "seconds": seconds, "world": world, "ddp": world > 1, "compile": not args.no_compile,
                  "peak_bytes": torch.cuda.max_memory_allocated() if cuda else 0, "final_loss": loss.item(),
                  "gpu": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__}
        with open(args.result, "w") as f:
            json.dump(result, f, indent=2)
    if world > 1:
        dist.destroy_process_group()


def alpha_run(binary, config, batch, seq, steps, warmup, gpus, grad_accum, run_dir, data_dir):
    """train_seed.alpha_run with `--gpus N` in place of `--device cuda` for N > 1 (that one hard-codes the device)."""
    cmd = [binary, "train", "--config", config, *(["--device", "cuda"] if gpus == 1 else ["--gpus", str(gpus)]),
           "--precision", "bf16", "--batch-size", str(batch), "--seq-len", str(seq), "--steps", str(steps),
           "--eval-every", "0", "--sample-tokens", "0", "--save-every", "0", "--keep-last", "1",
           "--grad-accum", str(grad_accum), "--out", run_dir]
    if data_dir:
        cmd += ["--data", data_dir]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    timed = [r for r in records[warmup:] if not r.get("profiled")]  # a profiled step is synchronised
    return {"tokens_per_second": statistics.median(r["tokens_per_second"] for r in timed),
            "peak_bytes": max(r["peak_bytes"] for r in timed), "final_loss": records[-1]["loss"],
            "command": shlex.join(cmd)}


def torch_run(args, batch, gpus, result):
    """The peer on `gpus` GPUs: this script under torchrun (as a module, so no torchrun on PATH is needed)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus), "--standalone",
           os.path.abspath(__file__), "--config", args.config, "--batch-size", str(batch), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--grad-accum", str(args.grad_accum), "--device", args.device,
           "--result", result]
    if args.no_compile:
        cmd.append("--no-compile")
    subprocess.run(cmd, check=True)
    with open(result) as f:
        return {**json.load(f), "command": shlex.join(cmd)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alpha", help="path to the alpha binary (a CUDA build with NCCL); without it, PyTorch only")
    parser.add_argument("--config", default="seed", choices=("seed", "gpt2-124m"))
    parser.add_argument("--batch-size", type=int, help="per GPU; default: 32 for seed, 16 for gpt2-124m")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step, reduced once (K >= 1)")
    parser.add_argument("--no-compile", action="store_true", help="the PyTorch peer eager")
    parser.add_argument("--out", default=".")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)  # a worker's output file
    args = parser.parse_args()
    if args.grad_accum < 1:
        parser.error(f"--grad-accum: expected an integer >= 1, got {args.grad_accum}")
    with open(os.path.join(train_seed.ROOT, "configs", f"{args.config}.json")) as f:
        cfg = json.load(f)
    seq = cfg["block_size"]
    batch = args.batch_size or (32 if args.config == "seed" else 16)
    if "LOCAL_RANK" in os.environ:  # started by torchrun
        return worker(args, cfg, batch)

    n = args.gpus
    names = {"alpha1": "alpha 1 GPU", "alphan": f"alpha {n} GPUs",
             "pytorch1": "pytorch 1 GPU", "pytorchn": f"pytorch DDP {n} GPUs"}
    results = {"config": args.config, "batch_size_per_gpu": batch, "seq_len": seq, "gpus": n, "steps": args.steps,
               "warmup": args.warmup, "grad_accum": args.grad_accum, "pytorch_compile": not args.no_compile, "runs": {}}
    runs = results["runs"]
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        if args.alpha:
            data_dir = None
            if args.config != "seed":  # the built-in corpus as a seed run tokenizes it; its vocabulary fits
                data_dir = os.path.join(tmp, "prepare")
                subprocess.run([args.alpha, "prepare", "--builtin", "--out", data_dir], check=True,
                               stdout=subprocess.DEVNULL)
            run1 = os.path.join(tmp, "alpha1")
            runs[names["alpha1"]] = alpha_run(args.alpha, args.config, batch, seq, args.warmup + args.steps,
                                              args.warmup, 1, args.grad_accum, run1, data_dir)
            # The N-GPU run reads the same tokens: for seed, those the 1-GPU run tokenized into its run folder.
            runs[names["alphan"]] = alpha_run(args.alpha, args.config, batch, seq, args.warmup + args.steps,
                                              args.warmup, n, args.grad_accum, os.path.join(tmp, "alphan"),
                                              data_dir or os.path.join(run1, "data"))
        runs[names["pytorch1"]] = torch_run(args, batch, 1, os.path.join(tmp, "torch1.json"))
        runs[names["pytorchn"]] = torch_run(args, batch, n, os.path.join(tmp, "torchn.json"))

    results["gpu"], results["torch"] = runs[names["pytorch1"]]["gpu"], runs[names["pytorch1"]]["torch"]
    results["efficiency"] = {}
    for engine in ("alpha", "pytorch") if args.alpha else ("pytorch",):
        one, many = runs[names[engine + "1"]], runs[names[engine + "n"]]
        many["efficiency"] = results["efficiency"][engine] = many["tokens_per_second"] / (n * one["tokens_per_second"])
    if args.alpha:
        for k in "1n":
            runs[names["alpha" + k]]["vs_pytorch"] = (runs[names["alpha" + k]]["tokens_per_second"]
                                                      / runs[names["pytorch" + k]]["tokens_per_second"])
        results["alpha_vs_pytorch_n_gpus"] = runs[names["alphan"]]["vs_pytorch"]

    print(f"{args.config} config, batch {batch} x {seq} tokens per GPU x {args.grad_accum} micro-steps, "
          f"{results['gpu']} x {n}, "
          f"torch {results['torch']} ({'compile' if not args.no_compile else 'eager'})")
    print(f"{'run':22s} {'tokens/s':>12s} {'efficiency':>11s} {'vs pytorch':>11s}")
    for name, r in runs.items():
        eff = f"{r['efficiency']:11.3f}" if "efficiency" in r else f"{'':11s}"
        vs = f"{r['vs_pytorch']:11.3f}" if "vs_pytorch" in r else f"{'':11s}"
        print(f"{name:22s} {r['tokens_per_second']:12.0f} {eff} {vs}")
    with open(os.path.join(args.out, f"ddp_scaling_{args.config}_accum{args.grad_accum}.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())

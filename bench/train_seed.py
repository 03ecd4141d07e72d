#!/usr/bin/env python3
"""Training throughput of a GPT config on one GPU: Alpha next to PyTorch, measured in the same run.

--config seed (default batch 20 x 512) or gpt2-124m (default batch 16 x 1024), issue 9's two benchmarks.
Alpha: `alpha train --config CONFIG --device cuda --precision bf16` (and f32, for seed) for --steps steps on
the built-in corpus (gpt2-124m: the same tokens, from `alpha prepare --builtin`, whose vocabulary fits); tokens/s is the median over the steps after --warmup of metrics.jsonl's
tokens_per_second (the optimiser step included), peak memory the largest per-step peak of bytes in use
in Alpha's caching allocator.
PyTorch peers: the same GPT shape (configs/CONFIG.json: pre-LN blocks, tanh GELU, biases, tied
embeddings), bf16 autocast with f32 master weights, F.scaled_dot_product_attention (causal), fused AdamW,
grad clipping at 1.0, the same batch and sequence length; once eager and once under torch.compile.
tokens/s over --steps timed steps after --warmup, peak memory torch.cuda.max_memory_allocated over them.
Model FLOPs utilisation (MFU): tokens/s × FLOPs per token (flops_per_token) ÷ the bf16 matmul ceiling measured
in the same run (torch.matmul of 8192³).

Usage: python3 bench/train_seed.py --alpha build/cuda/alpha [--config seed|gpt2-124m] [--batch-size N]
       [--steps 30] [--out DIR] [--profile] [--reduce-overhead] [--cuda-graphs]
Prints a table and writes DIR/train_CONFIG.json. With --profile, also one step of each side kernel by kernel:
Alpha's `alpha train --profile` (DIR/alpha_profile.json) and the torch.compile peer's under torch.profiler
(DIR/torch_profile.json, the same fields: kernels with calls, time_s, mean_us, share; busy_s, wall_s), and the
largest of each are printed.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flops_per_token(cfg, seq):
    """Model FLOPs per trained token (forward and backward, PaLM's count): 6 per weight of every matmul (the
    blocks' 12·C² per layer and the tied head's V·C), plus causal attention's 6·T·C per layer (QKᵀ and PV over
    the T/2 keys a query sees on average: 2·T·C forward, twice that backward)."""
    c, layers = cfg["n_embd"], cfg["n_layer"]
    matmul_weights = layers * 12 * c * c + cfg["vocab_size"] * c
    return 6 * matmul_weights + 6 * layers * seq * c


def matmul_ceiling_tflops(n=8192, iters=20):
    """The measured bf16 matmul ceiling of this GPU: torch.matmul (cuBLAS) of n × n by n × n, median TFLOP/s."""
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(5):
        a @ b
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return 2 * n ** 3 / statistics.median(times) / 1e12


def alpha_run(binary, config, precision, batch, seq, steps, warmup, run_dir, data_dir=None, profile_step=0,
              cuda_graphs=False):
    cmd = [binary, "train", "--config", config, "--device", "cuda", "--precision", precision,
           "--batch-size", str(batch), "--seq-len", str(seq), "--steps", str(steps), "--eval-every", "0",
           "--save-every", "0", "--sample-tokens", "0", "--out", run_dir]
    if cuda_graphs:
        cmd += ["--cuda-graphs", "true"]
    if data_dir:
        cmd += ["--data", data_dir]
    if profile_step:
        cmd += ["--profile-step", str(profile_step)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    timed = [r for r in records[warmup:] if not r.get("profiled")]  # the profiled step is synchronised
    return {
        "tokens_per_second": statistics.median(r["tokens_per_second"] for r in timed),
        "peak_bytes": max(r["peak_bytes"] for r in timed),
        "ops_per_step": timed[-1]["ops"],
        "allocations_per_step": timed[-1]["allocations"],
        "fresh_allocations_per_step": timed[-1]["fresh_allocations"],
        "final_loss": records[-1]["loss"],
        "command": " ".join(cmd),
    }


class Block(nn.Module):
    def __init__(self, c, heads, bias):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(c, bias=bias)
        self.qkv = nn.Linear(c, 3 * c, bias=bias)
        self.proj = nn.Linear(c, c, bias=bias)
        self.ln2 = nn.LayerNorm(c, bias=bias)
        self.fc = nn.Linear(c, 4 * c, bias=bias)
        self.fc_proj = nn.Linear(4 * c, c, bias=bias)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, cfg, checkpoint_blocks=False):
        super().__init__()
        c = cfg["n_embd"]
        # Full recomputation (bench/largest_model.py): each block's input kept, the block re-run in backward.
        self.checkpoint_blocks = checkpoint_blocks
        self.wte = nn.Embedding(cfg["vocab_size"], c)
        self.wpe = nn.Embedding(cfg["block_size"], c)
        self.blocks = nn.ModuleList(Block(c, cfg["n_head"], cfg.get("bias", True)) for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(c, bias=cfg.get("bias", True))
        # GPT-2's initialisation, as Alpha's: normal(0, 0.02) weights, zero biases, the residual projections
        # scaled by 1/sqrt(2 n_layer); PyTorch's defaults would start the tied head with huge logits.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * cfg["n_layer"]) if name.endswith(("proj.weight", "fc_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, ids, targets):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpoint_blocks else block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def profile_report(step, device_type):
    """One call of `step` under torch.profiler: its kernels (or CPU ops, without a GPU) by total time, largest
    first, in the fields of Alpha's profile.json."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    sync = torch.cuda.synchronize if device_type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        step()
        sync()
    wall = time.perf_counter() - start
    totals = {}
    for event in prof.events():
        on_gpu = event.device_type == torch.autograd.DeviceType.CUDA
        if on_gpu != (device_type == "cuda") or (not on_gpu and event.cpu_parent is not None):
            continue  # kernels on a GPU; the outermost ops on the CPU
        if getattr(event, "is_user_annotation", False):
            continue  # a range such as "Optimizer.step#AdamW.step" on the GPU's timeline spans kernels counted already
        duration_us = event.time_range.elapsed_us()
        calls, total = totals.get(event.name, (0, 0.0))
        totals[event.name] = (calls + 1, total + duration_us)
    busy = sum(total for _, total in totals.values()) * 1e-6
    kernels = [{"name": name, "calls": calls, "time_s": total * 1e-6, "mean_us": total / calls,
                "share": total * 1e-6 / busy if busy > 0 else 0.0}
               for name, (calls, total) in sorted(totals.items(), key=lambda kv: -kv[1][1])]
    return {"wall_s": wall, "busy_s": busy, "kernels": kernels}


def print_profile(title, report, rows=12):
    print(f"{title}: wall {report['wall_s'] * 1e3:.3f} ms, busy {report['busy_s'] * 1e3:.3f} ms, "
          f"{sum(k['calls'] for k in report['kernels'])} kernels")
    for k in report["kernels"][:rows]:
        print(f"  {k['time_s'] * 1e3:8.3f} ms {100 * k['share']:5.1f}% {k['calls']:5d}  {k['name'][:100]}")


def peer_optimizer(model):
    """The peers' AdamW: Alpha's defaults (lr 3e-4, betas 0.9 / 0.95, weight decay 0.1), fused."""
    return torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)


def peer_backward(step_model, ids, micro_steps=1):
    """One micro-batch's forward and backward on ids [B, T + 1] under bf16 autocast, its gradients added to the
    parameters' as one of micro_steps equal parts of a step. Returns the micro-batch's loss."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = step_model(ids[:, :-1], ids[:, 1:])
    (loss / micro_steps if micro_steps > 1 else loss).backward()
    return loss


def peer_step(model, step_model, opt, ids, micro_steps=1):
    """The last micro-batch of a peer's training step on ids [B, T + 1] (the whole step when micro_steps is 1):
    bf16 autocast, clipping at 1.0, AdamW. Returns the micro-batch's loss."""
    loss = peer_backward(step_model, ids, micro_steps)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def torch_run(cfg, batch, seq, steps, warmup, compile_mode, profile=False):
    """compile_mode: None for eager, else torch.compile's mode ("default", "reduce-overhead", ...)."""
    torch.manual_seed(0)
    model = GPT(cfg).cuda()
    step_model = torch.compile(model, mode=compile_mode) if compile_mode else model
    opt = peer_optimizer(model)
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq + 1), device="cuda")

    def step():
        return peer_step(model, step_model, opt, ids)

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    result = {"tokens_per_second": batch * seq * steps / seconds, "peak_bytes": torch.cuda.max_memory_allocated(),
              "final_loss": loss.item()}
    if profile:
        result["profile"] = profile_report(step, "cuda")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alpha", required=True, help="path to the alpha binary (a CUDA build)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--config", default="seed", choices=("seed", "gpt2-124m"))
    parser.add_argument("--batch-size", type=int, help="default: 20 for seed, 16 for gpt2-124m")
    parser.add_argument("--out", default=".")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one step of Alpha bf16 and of the torch.compile peer, kernel by kernel")
    parser.add_argument("--reduce-overhead", action="store_true",
                        help="also run torch.compile's reduce-overhead mode (its forward and backward in CUDA graphs)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="also run Alpha bf16 with --cuda-graphs true (every step after the first replayed)")
    args = parser.parse_args()
    with open(os.path.join(ROOT, "configs", f"{args.config}.json")) as f:
        cfg = json.load(f)
    seq = cfg["block_size"]
    batch = args.batch_size or (20 if args.config == "seed" else 16)
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "batch_size": batch,
               "seq_len": seq, "config": args.config, "runs": {}}
    os.makedirs(args.out, exist_ok=True)
    profiles = {}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = None
        if args.config != "seed":  # the built-in corpus as a seed run tokenizes it; its vocabulary fits
            data_dir = os.path.join(tmp, "prepare")
            subprocess.run([args.alpha, "prepare", "--builtin", "--out", data_dir], check=True,
                           stdout=subprocess.DEVNULL)
        # f32 (no TF32) only for seed: gpt2-124m's f32 run would take most of the benchmark's time.
        for precision in ("bf16", "f32") if args.config == "seed" else ("bf16",):
            # The profiled step is the last one; the metrics of the others give the tokens/s.
            profile_step = args.warmup + args.steps + 1 if args.profile and precision == "bf16" else 0
            results["runs"][f"alpha {precision}"] = alpha_run(
                args.alpha, args.config, precision, batch, seq, args.warmup + args.steps + (profile_step > 0),
                args.warmup, os.path.join(tmp, precision), data_dir, profile_step)
            if profile_step:
                with open(os.path.join(tmp, precision, "profile.json")) as f:
                    profiles["alpha"] = json.load(f)
        if args.cuda_graphs:
            results["runs"]["alpha graphs bf16"] = alpha_run(
                args.alpha, args.config, "bf16", batch, seq, args.warmup + args.steps, args.warmup,
                os.path.join(tmp, "graphs"), data_dir, cuda_graphs=True)
    results["runs"]["pytorch eager bf16"] = torch_run(cfg, batch, seq, args.steps, args.warmup, None)
    results["runs"]["pytorch compile bf16"] = torch_run(cfg, batch, seq, args.steps, args.warmup, "default",
                                                        args.profile)
    if args.reduce_overhead:
        results["runs"]["pytorch compile graphs bf16"] = torch_run(cfg, batch, seq, args.steps, args.warmup,
                                                                   "reduce-overhead")
    if args.profile:
        profiles["torch"] = results["runs"]["pytorch compile bf16"].pop("profile")
        for side, report in profiles.items():
            with open(os.path.join(args.out, f"{side}_profile.json"), "w") as f:
                json.dump(report, f, indent=2)

    peer = results["runs"]["pytorch compile bf16"]
    results["flops_per_token"] = flops_per_token(cfg, seq)
    results["matmul_ceiling_tflops"] = matmul_ceiling_tflops()
    print(f"{args.config} config, batch {batch} x {seq} tokens, {results['gpu']}, torch {results['torch']}; "
          f"{results['flops_per_token'] / 1e6:.1f} MFLOP per token, bf16 matmul ceiling "
          f"{results['matmul_ceiling_tflops']:.0f} TFLOP/s (torch.matmul, 8192³)")
    print(f"{'run':24s} {'tokens/s':>12s} {'peak MiB':>10s} {'vs compile':>11s} {'mem vs compile':>15s} {'MFU':>6s}")
    for name, r in results["runs"].items():
        r["model_tflops"] = r["tokens_per_second"] * results["flops_per_token"] / 1e12
        r["mfu"] = r["model_tflops"] / results["matmul_ceiling_tflops"]
        print(f"{name:24s} {r['tokens_per_second']:12.0f} {r['peak_bytes'] / 2**20:10.1f} "
              f"{r['tokens_per_second'] / peer['tokens_per_second']:11.3f} {r['peak_bytes'] / peer['peak_bytes']:15.2f}"
              f" {r['mfu']:6.1%}")
    with open(os.path.join(args.out, f"train_{args.config}.json"), "w") as f:
        json.dump(results, f, indent=2)
    if args.profile:
        print_profile("alpha bf16, one step", profiles["alpha"])
        print_profile("pytorch compile bf16, one step", profiles["torch"])


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Attention forward and backward on one GPU: Alpha's flash attention next to PyTorch SDPA's flash and cuDNN
backends, measured in the same run.

Rows: D in {64, 128}, T in 512..16384 (batch x T = 16384 tokens, H = 2048 / D heads, as FlashAttention's own
benchmarks), causal and not, plus the `seed` shape (B 20, H 8, T 512, D 48). Inputs bf16 [B, T, H, D].
FLOPs: 4·B·H·T·T·D forward, halved when causal; the backward counts 2.5x the forward.
Alpha's backward is timed twice: deterministic (the default) and with config.deterministic false (which
allows the atomic-dQ backward, FlashAttention-2's scheme); their ratio is the cost of determinism (issue 8).
On Hopper, head dims 33-64 and 97-128 run the wgmma dK/dV kernel that also adds dQ (5 products), but causal at
T <= 2048 (D 33-64) and T <= 1024 (D 97-128), where the deterministic kernels run either way: ratio 1.
Alpha is timed by build/.../alpha_attention_bench (median of CUDA-event timings); PyTorch by CUDA events
around F.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION) or (CUDNN_ATTENTION), forward
alone and backward alone (autograd.grad on a retained graph). A backend that refuses a shape is reported
as such.

Usage: python3 bench/flash_attention.py --bench build/cuda/alpha_attention_bench [--out DIR] [--quick]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def rows(quick):
    out = []
    for d in (64, 128):
        for t in ((512, 2048, 8192) if quick else (512, 1024, 2048, 4096, 8192, 16384)):
            for causal in (False, True):
                out.append(dict(batch=max(1, 16384 // t), heads=2048 // d, seq=t, head_dim=d, causal=causal))
    out.append(dict(batch=20, heads=8, seq=512, head_dim=48, causal=True))
    return out


def constant_time_rows():
    return [dict(batch=b, heads=16, seq=t, head_dim=d, causal=c) for b, t, d in ((1, 1024, 64), (4, 4096, 128))
            for c in (False, True)]


def flops(r):
    f = 4 * r["batch"] * r["heads"] * r["seq"] * r["seq"] * r["head_dim"]
    return f / 2 if r["causal"] else f


def time_ms(fn, warmup=5, iters=20, queued=False):
    """Milliseconds per call of fn after `warmup` calls: the median of `iters` calls, each between two CUDA
    events and synchronised (its latency, the host's time before the launch included); queued: the mean of
    `iters` calls issued back to back between one pair of events (the throughput of a loop whose host runs
    ahead of the GPU, as in training)."""
    for _ in range(warmup):
        fn()
    if queued:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / iters
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def torch_row(r, backend):
    shape = (r["batch"], r["heads"], r["seq"], r["head_dim"])
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel(backend):
            fwd = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=r["causal"]))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=r["causal"])
            bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
        return {"forward_ms": fwd, "backward_ms": bwd}
    except RuntimeError as e:
        return {"error": str(e).splitlines()[0][:120]}


def alpha_row(r, binary, extra=()):
    cmd = [binary, "--batch", str(r["batch"]), "--heads", str(r["heads"]), "--seq", str(r["seq"]),
           "--head-dim", str(r["head_dim"])] + (["--causal"] if r["causal"] else []) + list(extra)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1][:120] if p.stderr.strip() else f"exit {p.returncode}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True, help="path to alpha_attention_bench (a CUDA build)")
    parser.add_argument("--out", default=".")
    parser.add_argument("--quick", action="store_true", help="fewer sequence lengths")
    parser.add_argument("--constant-time", action="store_true",
                        help="issue 8's rows (B 1 H 16 T 1024 D 64, and B 4 H 16 T 4096 D 128), causal and not, with "
                             "Alpha's constant_time mode as a fourth column")
    args = parser.parse_args()
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    print(f"{results['gpu']}, torch {results['torch']}, bf16; TFLOP/s (ratio of Alpha to the peer)")
    print(f"{'B':>3s} {'H':>3s} {'T':>6s} {'D':>4s} {'causal':>6s} | {'alpha fwd':>9s} {'flash fwd':>9s} {'cudnn fwd':>9s}"
          f" | {'alpha bwd':>9s} {'flash bwd':>9s} {'cudnn bwd':>9s} | {'atomic-dQ':>9s} {'det/atomic':>10s}")
    names = ("alpha", "flash", "cudnn") + (("alpha_ct",) if args.constant_time else ())
    if args.constant_time:
        print("(a fourth column in each half: Alpha with constant_time)")
    for r in constant_time_rows() if args.constant_time else rows(args.quick):
        entry = dict(r, alpha=alpha_row(r, args.bench), flash=torch_row(r, SDPBackend.FLASH_ATTENTION),
                     cudnn=torch_row(r, SDPBackend.CUDNN_ATTENTION))
        if args.constant_time:
            entry["alpha_ct"] = alpha_row(r, args.bench, ["--constant-time"])
        f = flops(r)

        def tflops(run, key, scale):
            return f * scale / (run[key] * 1e-3) / 1e12 if key in run else float("nan")

        for name in names:
            run = entry[name]
            run["forward_tflops"] = tflops(run, "forward_ms", 1.0)
            run["backward_tflops"] = tflops(run, "backward_ms", 2.5)
        entry["alpha"]["backward_atomic_tflops"] = tflops(entry["alpha"], "backward_atomic_ms", 2.5)
        atomic = entry["alpha"]["backward_atomic_tflops"]
        cost = entry["alpha"]["backward_ms"] / entry["alpha"]["backward_atomic_ms"] \
            if "backward_atomic_ms" in entry["alpha"] else float("nan")
        results["rows"].append(entry)
        forward = " ".join(f"{entry[n]['forward_tflops']:9.1f}" for n in names)
        backward = " ".join(f"{entry[n]['backward_tflops']:9.1f}" for n in names)
        print(f"{r['batch']:3d} {r['heads']:3d} {r['seq']:6d} {r['head_dim']:4d} {str(r['causal']):>6s} | "
              + forward + " | " + backward + f" | {atomic:9.1f} {cost:10.2f}", flush=True)
        for n in names:
            if "error" in entry[n]:
                print(f"    {n}: {entry[n]['error']}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "flash_attention.json"), "w") as fh:
        json.dump(results, fh, indent=2)


if __name__ == "__main__":
    sys.exit(main())

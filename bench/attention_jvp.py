#!/usr/bin/env python3
"""The attention JVP on one GPU: Alpha's fused JVP next to torch.func.jvp of PyTorch's attention, and next to
Alpha's own forward, measured in the same run.

Rows: B 8, H 16, T 1024 and 2048 (--quick: 2048 only), D 64 and 128, causal and not, plus issue 6's B 4,
H 16, T 2048, causal, D 64 and 128. Inputs bf16 (Alpha [B, T, H, D], PyTorch [B, H, T, D]), tangents fresh random values.
FLOPs, per visible (query, key) pair, a multiply-add counted as 2 (kernels/cuda/attention_jvp.cu): the
forward 2D + 2Dv (q·k, P·V); the fused JVP 6D + 6Dv (q·k; tq·k and q·tk; e·V; (e·tS)·V and e·tv), three
times the forward's. Pairs per head: T·T, or T(T + 1)/2 when causal. Every column's TFLOP/s divides the JVP's
count by its time, so the TFLOP/s of a column is its speed at the same work.
Columns:
  alpha fwd      ops::flash_attention (the tensor-core forward), alpha_attention_bench --mode jvp
  alpha jvp      ops::attention_jvp_fused (out and tangent together), same binary, same run
  alpha saved    ops::attention_jvp on the forward's out and statistics: in bf16 the tensor-core kernel (one pass,
                 P = exp(S − m)/l from the statistics, no running max; 6D + 4Dv per pair, but the column is at
                 the fused count like every other; the JSON has its own-count TFLOP/s too)
  jvp/fwd, saved/fwd   alpha jvp's and alpha saved's times over alpha fwd's (the issue's bar: at most 3.5)
  torch sdpa     torch.func.jvp of F.scaled_dot_product_attention with PyTorch's default backend choice;
                 the fused backends lack forward AD, so under sdpa_kernel(FLASH_ATTENTION) or
                 (EFFICIENT_ATTENTION) it is expected to raise: what each does is recorded in the JSON
  torch math     the same under sdpa_kernel(MATH)
  torch compile  torch.compile of a function that calls torch.func.jvp of a manual attention (q·kᵀ, mask,
                 softmax in f32, ·V); if compiling fails its error is recorded
Times are medians of CUDA-event timings; peak memory is torch.cuda.max_memory_allocated over one call, minus
what was allocated before (Alpha reports the bytes its fused call allocates: out, tangent, statistics).
A peer that runs out of memory or raises is reported with its error.

Usage: python3 bench/attention_jvp.py --bench build/release/alpha_attention_bench [--out DIR] [--quick]
"""
import argparse
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flash_attention import time_ms  # this folder's timer: the median of CUDA-event timings


def rows(quick):
    out = []
    for d in (64, 128):
        for t in ((2048,) if quick else (1024, 2048)):
            for causal in (False, True):
                out.append(dict(batch=8, heads=16, seq=t, head_dim=d, causal=causal))
    for d in (64, 128):
        out.append(dict(batch=4, heads=16, seq=2048, head_dim=d, causal=True))
    return out


def pairs(r):
    t = r["seq"]
    per_head = t * (t + 1) // 2 if r["causal"] else t * t
    return r["batch"] * r["heads"] * per_head


def jvp_flops(r):
    return pairs(r) * (6 * r["head_dim"] + 6 * r["head_dim"])


def saved_flops(r):
    return pairs(r) * (6 * r["head_dim"] + 4 * r["head_dim"])


def forward_flops(r):
    return pairs(r) * (2 * r["head_dim"] + 2 * r["head_dim"])


def first_line(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160]}" if str(e).strip() else type(e).__name__


def manual_attention(q, k, v, causal):
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-2, -1)).float() * scale
    if causal:
        t_q, t_k = s.shape[-2], s.shape[-1]
        mask = torch.ones(t_q, t_k, dtype=torch.bool, device=s.device).tril(t_k - t_q)
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1).to(q.dtype) @ v


def measure(fn, warmup, iters):
    """Median ms and peak extra bytes of fn(), or the error it raised."""
    try:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        result = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        del result
        return {"ms": time_ms(fn, warmup, iters), "peak_bytes": peak}
    except Exception as e:  # out of memory, no forward AD, and torch.compile's many kinds of failure
        torch.cuda.empty_cache()
        return {"error": first_line(e)}


def torch_rows(r, warmup, iters):
    shape = (r["batch"], r["heads"], r["seq"], r["head_dim"])
    primals = tuple(torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    tangents = tuple(torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    causal = r["causal"]

    def sdpa_jvp():
        return torch.func.jvp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), primals,
                              tangents)

    out = {"sdpa_default": measure(sdpa_jvp, warmup, iters)}
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION),
                          ("sdpa_math", SDPBackend.MATH)):
        with sdpa_kernel(backend):
            out[name] = measure(sdpa_jvp, warmup, iters)

    def manual_jvp(q, k, v, tq, tk, tv):
        return torch.func.jvp(lambda a, b, c: manual_attention(a, b, c, causal), (q, k, v), (tq, tk, tv))

    compiled = torch.compile(manual_jvp)
    out["compile"] = measure(lambda: compiled(*primals, *tangents), warmup, iters)
    del primals, tangents
    torch.cuda.empty_cache()
    return out


def alpha_row(r, binary, warmup, iters):
    cmd = [binary, "--mode", "jvp", "--batch", str(r["batch"]), "--heads", str(r["heads"]), "--seq", str(r["seq"]),
           "--head-dim", str(r["head_dim"]), "--warmup", str(warmup), "--iters", str(iters)]
    cmd += ["--causal"] if r["causal"] else []
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1][:160] if p.stderr.strip() else f"exit {p.returncode}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True, help="path to alpha_attention_bench (a CUDA build)")
    parser.add_argument("--out", default=".")
    parser.add_argument("--quick", action="store_true", help="T 2048 only (and issue 6's B 4 rows)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "dtype": "bf16",
               "flops": "per visible pair: forward 4D, JVP 12D (D = Dv)", "rows": []}
    peers = ("sdpa_default", "sdpa_math", "compile")
    print(f"{results['gpu']}, torch {results['torch']}, bf16; ms (JVP TFLOP/s); x: peer time / alpha jvp time")
    print(f"{'B':>2s} {'H':>3s} {'T':>5s} {'D':>4s} {'causal':>6s} | {'alpha fwd':>9s} {'alpha jvp':>16s} "
          f"{'alpha saved':>16s} {'jvp/fwd':>7s} {'saved/fwd':>9s} | {'torch sdpa':>23s} {'torch math':>23s} {'torch compile':>23s}")
    for r in rows(args.quick):
        entry = dict(r, flops_jvp=jvp_flops(r), flops_forward=forward_flops(r))
        entry["alpha"] = alpha_row(r, args.bench, args.warmup, args.iters)
        entry.update(torch_rows(r, args.warmup, args.iters))
        a = entry["alpha"]

        def tflops(ms):
            return entry["flops_jvp"] / (ms * 1e-3) / 1e12

        if "jvp_fused_ms" in a:
            a["jvp_fused_tflops"] = tflops(a["jvp_fused_ms"])
            a["jvp_saved_tflops"] = entry["flops_jvp"] / (a["jvp_saved_ms"] * 1e-3) / 1e12
            a["forward_tflops"] = entry["flops_forward"] / (a["forward_ms"] * 1e-3) / 1e12
            a["jvp_saved_own_count_tflops"] = saved_flops(r) / (a["jvp_saved_ms"] * 1e-3) / 1e12
            a["jvp_over_forward"] = a["jvp_fused_ms"] / a["forward_ms"]
            a["saved_over_forward"] = a["jvp_saved_ms"] / a["forward_ms"]
        for peer in peers:
            run = entry[peer]
            if "ms" in run:
                run["tflops"] = tflops(run["ms"])
                if "jvp_fused_ms" in a:
                    run["time_over_alpha_jvp"] = run["ms"] / a["jvp_fused_ms"]
        results["rows"].append(entry)

        def alpha_cell(key):
            return f"{a[key + '_ms']:7.2f} ({a[key + '_tflops']:5.1f})" if key + "_ms" in a else f"{'error':>16s}"

        def peer_cell(peer):
            run = entry[peer]
            if "ms" not in run:
                return f"{'error':>23s}"
            ratio = run.get("time_over_alpha_jvp", float("nan"))
            return f"{run['ms']:8.2f} ({run['tflops']:5.1f}) {ratio:5.1f}x"

        fwd = f"{a['forward_ms']:9.2f}" if "forward_ms" in a else f"{'error':>9s}"
        ratio = f"{a['jvp_over_forward']:7.2f}" if "jvp_over_forward" in a else f"{'-':>7s}"
        ratio += f" {a['saved_over_forward']:9.2f}" if "saved_over_forward" in a else f" {'-':>9s}"
        print(f"{r['batch']:2d} {r['heads']:3d} {r['seq']:5d} {r['head_dim']:4d} {str(r['causal']):>6s} | {fwd} "
              f"{alpha_cell('jvp_fused')} {alpha_cell('jvp_saved')} {ratio} | "
              + " ".join(peer_cell(p) for p in peers), flush=True)
        mib = [f"alpha jvp {a['jvp_fused_bytes'] / 2**20:.0f}" if "jvp_fused_bytes" in a else "alpha jvp -"]
        mib += [f"{p} {entry[p]['peak_bytes'] / 2**20:.0f}" for p in peers if "peak_bytes" in entry[p]]
        print("    peak MiB beyond the inputs: " + ", ".join(mib))
        for name in ("alpha",) + peers + ("sdpa_flash", "sdpa_efficient"):
            if "error" in entry[name]:
                print(f"    {name}: {entry[name]['error']}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "attention_jvp.json"), "w") as fh:
        json.dump(results, fh, indent=2)


if __name__ == "__main__":
    sys.exit(main())

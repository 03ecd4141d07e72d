#!/usr/bin/env python3
"""alpha_attn through PyTorch next to SDPA's backends and to Alpha's own benchmark, in the same run (issue 13).

For each shape (the `seed` model's attention, B 20 H 8 T 512 D 48 causal, and two larger ones), bf16 on one
GPU: the forward alone and the backward alone (autograd.grad on a retained graph) of
- alpha_attn.flash_attention, taking SDPA's [B, H, T, D] tensors (layout="BHTD", strided views, no copy);
- F.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION), (CUDNN_ATTENTION), (EFFICIENT_ATTENTION);
- with --native build/cuda/alpha_attention_bench: Alpha's kernels timed by its C++ harness (no Python,
  no torch), whose ratio to the first row is the binding's overhead (issue 13 asks under 5% at `seed`).
Each time is the median of CUDA-event timings of 20 calls after 5 warm-ups.

Usage: python3 python/bench.py [--native build/cuda/alpha_attention_bench] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# The installed alpha_attn, not the source folder beside this script (Python puts the script's folder first on
# sys.path, and that copy has no compiled _C).
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
import alpha_attn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from flash_attention import time_ms  # noqa: E402  (the repository's benchmark: CUDA events, median of 20)

SHAPES = [dict(batch=20, heads=8, seq=512, head_dim=48, causal=True),
          dict(batch=8, heads=16, seq=2048, head_dim=64, causal=True),
          dict(batch=2, heads=16, seq=8192, head_dim=128, causal=False)]


def measure(attention, r):
    shape = (r["batch"], r["heads"], r["seq"], r["head_dim"])
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    try:
        forward = time_ms(lambda: attention(q, k, v, r["causal"]))
        out = attention(q, k, v, r["causal"])
        backward = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
        return {"forward_ms": forward, "backward_ms": backward}
    except RuntimeError as e:
        return {"error": str(e).splitlines()[0][:120]}


def sdpa(backend):
    def attention(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return attention


def native(r, binary):
    cmd = [binary, "--batch", str(r["batch"]), "--heads", str(r["heads"]), "--seq", str(r["seq"]), "--head-dim",
           str(r["head_dim"])] + (["--causal"] if r["causal"] else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][:120]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native", help="path to alpha_attention_bench (Alpha's C++ harness, a CUDA build)")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    columns = {"alpha_attn": lambda q, k, v, causal: alpha_attn.flash_attention(q, k, v, causal=causal, layout="BHTD"),
               "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
               "sdpa_efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION)}
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    print(f"{results['gpu']}, torch {results['torch']}, bf16; forward / backward ms (median of 20)")
    names = list(columns) + (["alpha_native"] if args.native else [])
    print(f"{'B':>3s} {'H':>3s} {'T':>5s} {'D':>4s} {'causal':>6s} | " + " | ".join(f"{n:>17s}" for n in names)
          + (" | binding overhead fwd / bwd" if args.native else ""))
    for r in SHAPES:
        entry = dict(r, **{name: measure(fn, r) for name, fn in columns.items()})
        if args.native:
            entry["alpha_native"] = native(r, args.native)
        cells = []
        for n in names:
            run = entry[n]
            cells.append(f"{run['forward_ms']:8.3f} {run['backward_ms']:8.3f}" if "forward_ms" in run else f"{'refused':>17s}")
        line = f"{r['batch']:3d} {r['heads']:3d} {r['seq']:5d} {r['head_dim']:4d} {str(r['causal']):>6s} | " + " | ".join(cells)
        if args.native and "forward_ms" in entry["alpha_native"] and "forward_ms" in entry["alpha_attn"]:
            a, b = entry["alpha_attn"], entry["alpha_native"]
            entry["overhead"] = {k: a[k] / b[k] - 1 for k in ("forward_ms", "backward_ms")}
            line += f" | {100 * entry['overhead']['forward_ms']:+.1f}% / {100 * entry['overhead']['backward_ms']:+.1f}%"
        print(line, flush=True)
        for n in names:
            if "error" in entry[n]:
                print(f"    {n}: {entry[n]['error']}")
        results["rows"].append(entry)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "alpha_attn_bench.json"), "w") as fh:
        json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""alpha_attn through PyTorch next to SDPA's backends and to Alpha's own benchmark, in the same run (issue 13).

For each shape (the `seed` model's attention, B 20 H 8 T 512 D 48 causal, and two larger ones), bf16 on one
GPU: the forward alone and the backward alone (autograd.grad on a retained graph) of
- alpha_attn.flash_attention, taking SDPA's [B, H, T, D] tensors (layout="BHTD", strided views, no copy),
  and (alpha_attn_bthd) contiguous [B, T, H, D] tensors, as the native harness does;
- F.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION), (CUDNN_ATTENTION), (EFFICIENT_ATTENTION);
- with --native build/cuda/alpha_attention_bench: Alpha's kernels timed by its C++ harness (no Python,
  no torch) on [B, T, H, D] tensors: its ratio to alpha_attn_bthd is the binding's overhead (issue 13 asks
  under 5% at `seed`).
Each is timed twice after 5 warm-ups (bench/flash_attention.py's time_ms): the median of 20 synchronised calls
(latency: the host's time before the launch included) and the mean of 20 calls issued back to back (throughput:
the host runs ahead of the GPU, as in a training loop); the native harness is timed the same two ways.

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


TIMINGS = ("forward_ms", "backward_ms", "forward_queued_ms", "backward_queued_ms")


def measure(attention, r, layout="BHTD"):
    shape = ((r["batch"], r["heads"], r["seq"], r["head_dim"]) if layout == "BHTD"
             else (r["batch"], r["seq"], r["heads"], r["head_dim"]))
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    try:
        forward = lambda: attention(q, k, v, r["causal"])  # noqa: E731
        out = forward()
        backward = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)  # noqa: E731
        return {"forward_ms": time_ms(forward), "backward_ms": time_ms(backward),
                "forward_queued_ms": time_ms(forward, queued=True), "backward_queued_ms": time_ms(backward, queued=True)}
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
    result = {}
    for queued in (False, True):
        p = subprocess.run(cmd + (["--queued"] if queued else []), capture_output=True, text=True)
        if p.returncode != 0:
            return {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][:120]}
        times = json.loads(p.stdout.strip().splitlines()[-1])
        suffix = "_queued_ms" if queued else "_ms"
        result.update({f"forward{suffix}": times["forward_ms"], f"backward{suffix}": times["backward_ms"]})
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native", help="path to alpha_attention_bench (Alpha's C++ harness, a CUDA build)")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    def alpha(layout):
        return lambda q, k, v, causal: alpha_attn.flash_attention(q, k, v, causal=causal, layout=layout)

    # name: (attention, the layout of its inputs)
    columns = {"alpha_attn": (alpha("BHTD"), "BHTD"), "alpha_attn_bthd": (alpha("BTHD"), "BTHD"),
               "sdpa_flash": (sdpa(SDPBackend.FLASH_ATTENTION), "BHTD"),
               "sdpa_cudnn": (sdpa(SDPBackend.CUDNN_ATTENTION), "BHTD"),
               "sdpa_efficient": (sdpa(SDPBackend.EFFICIENT_ATTENTION), "BHTD")}
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    names = list(columns) + (["alpha_native"] if args.native else [])
    for r in SHAPES:
        entry = dict(r, **{name: measure(fn, r, layout) for name, (fn, layout) in columns.items()})
        if args.native:
            entry["alpha_native"] = native(r, args.native)
        a, b = entry["alpha_attn_bthd"], entry.get("alpha_native", {})  # the same [B, T, H, D] tensors
        if "forward_ms" in a and "forward_ms" in b:
            entry["overhead"] = {k: a[k] / b[k] - 1 for k in TIMINGS}
        results["rows"].append(entry)
    print(f"{results['gpu']}, torch {results['torch']}, bf16; forward / backward ms per call")
    for suffix, what in (("_ms", "synchronised calls, median of 20 (latency: host time included)"),
                         ("_queued_ms", "20 calls back to back, mean (throughput: the host runs ahead)")):
        print(f"\n{what}")
        print(f"{'B':>3s} {'H':>3s} {'T':>5s} {'D':>4s} {'causal':>6s} | " + " | ".join(f"{n:>17s}" for n in names)
              + (" | binding overhead fwd / bwd" if args.native else ""))
        for entry in results["rows"]:
            cells = [f"{entry[n]['forward' + suffix]:8.3f} {entry[n]['backward' + suffix]:8.3f}"
                     if "forward_ms" in entry[n] else f"{'refused':>17s}" for n in names]
            line = (f"{entry['batch']:3d} {entry['heads']:3d} {entry['seq']:5d} {entry['head_dim']:4d} "
                    f"{str(entry['causal']):>6s} | " + " | ".join(cells))
            if "overhead" in entry:
                over = entry["overhead"]
                line += f" | {100 * over['forward' + suffix]:+.1f}% / {100 * over['backward' + suffix]:+.1f}%"
            print(line, flush=True)
    for entry in results["rows"]:
        for n in names:
            if "error" in entry[n]:
                print(f"    {n} at T {entry['seq']}: {entry[n]['error']}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "alpha_attn_bench.json"), "w") as fh:
        json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()

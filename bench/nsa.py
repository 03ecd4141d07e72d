#!/usr/bin/env python3
"""Native Sparse Attention forward and backward on one GPU: Alpha's NSA (ops::nsa, kernels/cuda/nsa.cu) next to
our dense causal flash attention, our flash attention with a 512-token causal sliding window and, where PyTorch
has it on this machine, FlexAttention with the same sliding window, all in the same run (issue 7).

Rows: T in 8192, 16384 (--long adds 32768 and 65536), B 1, 4 kv heads of 16 query heads each (Hq 64), D 128,
bf16, the paper's NSA blocks (l 32, d 16, l' 64, n 16, w 512). Reported: milliseconds, NSA's speedup over
dense (the issue's target at 64k: 9x forward, 6x backward, the paper's figures against FlashAttention-2), and
each pass's rate in TFLOP/s of its own work (nsa_flops, dense_causal_flops).
Alpha is timed by alpha_nsa_bench (median of CUDA-event timings); FlexAttention by CUDA events around a
torch.compile'd flex_attention: the forward alone, and forward plus backward less the forward (its compiled
backward refuses a retained graph).

Usage: python3 bench/nsa.py --bench build/cuda/alpha_nsa_bench [--out DIR] [--long] [--dtype bf16] [--forward-only]
"""
import argparse
import json
import os
import subprocess


def alpha_row(binary, r, dtype, forward_only):
    cmd = [binary, "--seq", str(r["seq"]), "--batch", str(r["batch"]), "--heads", str(r["heads"]),
           "--kv-heads", str(r["kv_heads"]), "--head-dim", str(r["head_dim"]), "--dtype", dtype]
    if forward_only:
        cmd.append("--forward-only")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1][:160] if p.stderr.strip() else f"exit {p.returncode}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def flex_row(r, window, forward_only):
    """FlexAttention with a causal sliding window, or the reason it cannot run here."""
    try:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        from flash_attention import time_ms  # bench/flash_attention.py: CUDA-event medians
    except Exception as e:  # no torch, or a torch without FlexAttention
        return {"error": f"unavailable: {str(e).splitlines()[0][:100]}"}
    if not torch.cuda.is_available():
        return {"error": "unavailable: torch has no CUDA device"}
    try:
        b, t, hq, hkv, d = r["batch"], r["seq"], r["heads"], r["kv_heads"], r["head_dim"]

        def sliding_causal(b_, h_, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

        mask = create_block_mask(sliding_causal, B=None, H=None, Q_LEN=t, KV_LEN=t)
        q = torch.randn(b, hq, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(b, hkv, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(b, hkv, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(b, hq, t, d, device="cuda", dtype=torch.bfloat16)
        flex = torch.compile(flex_attention)
        fwd = time_ms(lambda: flex(q, k, v, block_mask=mask, enable_gqa=True))
        if forward_only:
            return {"forward_ms": fwd}
        # The compiled backward refuses a retained graph, so each timing runs forward and backward; the
        # backward is that less the forward.
        both = time_ms(lambda: torch.autograd.grad(flex(q, k, v, block_mask=mask, enable_gqa=True), (q, k, v), dout))
        return {"forward_ms": fwd, "backward_ms": both - fwd}
    except Exception as e:
        return {"error": str(e).splitlines()[0][:160]}


def nsa_entries(r, l=32, d=16, lp=64, n=16, w=512):
    """Per head, summed over the queries: the (query, key) entries of the three branches (the compressed blocks a
    query sees, its kept blocks' keys, its window); the compressed blocks the selection scores read again (where a
    query has more than n candidate blocks); and the number of compressed blocks."""
    t_len = r["seq"]
    keys = scores = 0
    for t in range(t_len):
        compressed = 0 if t + 1 < l else (t + 1 - l) // d + 1
        current = t // lp
        selected = t + 1 if current + 1 <= n else (n - 1) * lp + (t - current * lp + 1)
        keys += compressed + selected + min(w, t + 1)
        scores += compressed if current + 1 > n else 0
    blocks = (t_len - l) // d + 1 if t_len >= l else 0
    return keys, scores, blocks


def compressor_flops(r, blocks, l=32):
    """The compressor's two products (keys and values), [B·Nc·Hkv, l·D] by [l·D, D]."""
    return 2 * 2 * r["batch"] * blocks * r["kv_heads"] * r["head_dim"] * l * r["head_dim"]


def nsa_flops(r):
    """NSA's work in FLOPs (a multiply-add is 2), as {"forward": ..., "backward": ...}. Forward: per entry and head
    q·k and p·v (4·D); q·k again for the selection scores (2·D per compressed block read again); the compressor.
    Backward, as our kernels do it: per entry and head 14·D, S and dP computed on the query side (with dq) and
    again on the key side (with dK and dV), as in our deterministic flash backward, which takes the window; no
    selection scores (the choice is not differentiated); the compressor's dX and dW."""
    keys, scores, blocks = nsa_entries(r)
    dim, heads = r["head_dim"], r["batch"] * r["heads"]
    return {"forward": heads * (4 * dim * keys + 2 * dim * scores) + compressor_flops(r, blocks),
            "backward": heads * 14 * dim * keys + 2 * compressor_flops(r, blocks)}


def dense_causal_flops(r):
    """Causal attention's work as {"forward": ..., "backward": ...}: the forward 4·D per (query, visible key) and
    head; the backward as our deterministic kernels execute it, 7 products to the forward's 2 (3.5 times)."""
    t_len = r["seq"]
    forward = 4 * r["head_dim"] * t_len * (t_len + 1) // 2 * r["batch"] * r["heads"]
    return {"forward": forward, "backward": 3.5 * forward}


def fmt(x):
    return f"{x:9.2f}" if isinstance(x, (int, float)) else f"{'-':>9s}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True, help="path to alpha_nsa_bench (a CUDA build)")
    parser.add_argument("--out", default=".")
    parser.add_argument("--long", action="store_true", help="add T = 32768 and 65536")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "f16", "f32"))
    parser.add_argument("--no-flex", action="store_true", help="skip PyTorch FlexAttention")
    parser.add_argument("--forward-only", action="store_true", help="time the forward passes only")
    args = parser.parse_args()
    seqs = (8192, 16384) + ((32768, 65536) if args.long else ())
    rows = [dict(batch=1, seq=t, heads=64, kv_heads=4, head_dim=128) for t in seqs]
    results = {"dtype": args.dtype, "rows": []}
    print(f"NSA (l 32, d 16, l' 64, n 16, w 512) vs flash attention, B 1, Hq 64, Hkv 4, D 128, {args.dtype}; ms")
    print(f"{'T':>6s} | {'nsa fwd':>9s} {'dense fwd':>9s} {'win fwd':>9s} {'flex fwd':>9s} {'speedup':>8s} | "
          f"{'nsa bwd':>9s} {'dense bwd':>9s} {'win bwd':>9s} {'flex bwd':>9s} {'speedup':>8s}")
    for r in rows:
        a = alpha_row(args.bench, r, args.dtype, args.forward_only)
        flex = {"error": "skipped"} if args.no_flex else flex_row(r, 512, args.forward_only)
        entry = dict(r, alpha=a, flex=flex)
        results["rows"].append(entry)
        if "error" in a:
            print(f"{r['seq']:6d} | alpha: {a['error']}", flush=True)
            continue
        speed_f = a["dense_forward_ms"] / a["nsa_forward_ms"] if "dense_forward_ms" in a else float("nan")
        speed_b = (a["dense_backward_ms"] / a["nsa_backward_ms"]
                   if "nsa_backward_ms" in a and "dense_backward_ms" in a else float("nan"))
        entry["speedup_forward"], entry["speedup_backward"] = speed_f, speed_b
        work = {"nsa": nsa_flops(r), "dense": dense_causal_flops(r)}
        for kind in work:
            for direction in ("forward", "backward"):
                if f"{kind}_{direction}_ms" in a:
                    entry[f"{kind}_{direction}_tflops"] = work[kind][direction] / a[f"{kind}_{direction}_ms"] / 1e9
        print(f"{r['seq']:6d} | {fmt(a['nsa_forward_ms'])} {fmt(a.get('dense_forward_ms'))} "
              f"{fmt(a.get('window_forward_ms'))} {fmt(flex.get('forward_ms'))} {speed_f:7.2f}x | "
              f"{fmt(a.get('nsa_backward_ms'))} {fmt(a.get('dense_backward_ms'))} {fmt(a.get('window_backward_ms'))} "
              f"{fmt(flex.get('backward_ms'))} {speed_b:7.2f}x", flush=True)
        for direction in ("forward", "backward"):
            rates = [f"{name} {entry[f'{kind}_{direction}_tflops']:.0f} ({work[kind][direction] / 1e12:.2f} TFLOP)"
                     for kind, name in (("nsa", "NSA"), ("dense", "dense")) if f"{kind}_{direction}_tflops" in entry]
            if rates:
                print(f"    {direction} TFLOP/s: " + ", ".join(rates))
        if "error" in flex:
            print(f"    flex: {flex['error']}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "nsa.json"), "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""NCCL all-reduce bandwidth between this host's GPUs, through PyTorch (torch.distributed): the ceiling that
data-parallel training's gradient reduction runs against (issues 11 and 12).

For each size, the median of --iters timed f32 all-reduces (sum) after warm-up; algorithm bandwidth =
bytes / time, bus bandwidth = algbw × 2(N−1)/N (nccl-tests' convention: the bytes each link carries).
Sizes: 25 MiB (Alpha's bucket), 64 MiB (seed's gradients), 154 MiB (gpt2-124m's tied embedding), 496 MiB
(all of gpt2-124m's gradients in f32).

Usage: NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node N bench/allreduce_bw.py [--iters 20] [--out FILE.json]
"""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on these machines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out")
    args = parser.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world, rank = dist.get_world_size(), dist.get_rank()
    rows = []
    for mib in (25, 64, 154, 496):
        x = torch.randn(mib * (1 << 20) // 4, device="cuda")
        for _ in range(5):
            dist.all_reduce(x)
        times = []
        for _ in range(args.iters):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            dist.barrier()
            start.record()
            dist.all_reduce(x)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        t = statistics.median(times)
        algbw = x.numel() * 4 / t / 1e9
        rows.append({"mib": mib, "ms": t * 1e3, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world - 1) / world})
    if rank == 0:
        print(f"{torch.cuda.get_device_name()} x {world}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
        print(f"{'MiB':>5s} {'ms':>8s} {'algbw GB/s':>11s} {'busbw GB/s':>11s}")
        for r in rows:
            print(f"{r['mib']:5d} {r['ms']:8.3f} {r['algbw_gbs']:11.1f} {r['busbw_gbs']:11.1f}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"gpu": torch.cuda.get_device_name(), "world": world, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

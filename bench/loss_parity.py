#!/usr/bin/env python3
"""Loss parity (issue 9): a GPT trained by Alpha in bf16, by Alpha in f32 and by PyTorch in bf16 on the same
tokens with the same hyperparameters reaches the same validation loss.

1. `alpha prepare` tokenizes --text into train/val shards (SentencePiece, the config's vocabulary).
2. `alpha train --config CONFIG --data DATA --precision bf16` and `f32` for --steps steps, validation every
   --eval-every steps and at the last over --eval-batches sequences (the val shards' first windows, in file
   order, one per batch).
3. PyTorch trains bench/train_seed.py's GPT of the same shape on the same shards:
   - the same initialisation scheme;
   - AdamW (fused) with Alpha's defaults: lr 3e-3 with 30 warmup steps and a cosine to 3e-4 at the last
     step, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the matrices except the embeddings;
   - grad clipping at 1.0, bf16 autocast, the same batch;
   - batches drawn from the same windows (T + 1 tokens starting every T, within a shard), shuffled each epoch;
   - validation over the same sequences.
   Only the random streams (initial weights, batch order) differ from Alpha's.

4. A yardstick: Alpha again with other seeds (initial weights, batch order), to show how far the random
   streams alone move the validation loss.

The bar: Alpha bf16's final validation loss within --tolerance (0.02) of Alpha f32's and of PyTorch's.
Exit status 0 when both hold. Prints the lowest validation loss of each curve and its step too (on a small
text the runs overfit well before 1000 steps). Writes DIR/loss_parity.json.

Usage: python3 bench/loss_parity.py --alpha build/cuda/alpha --text ../shared/data/tinyshakespeare.txt
       [--config seed] [--steps 1000] [--batch-size 20] [--eval-batches 64] [--eval-every 100] [--device cuda]
       [--out DIR]
(--device cpu with a small --steps and --config tiny checks the script itself on a machine without a GPU.)
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_seed import GPT  # noqa: E402  (the PyTorch peer's model, shared with the throughput benchmark)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARD_MAGIC, SHARD_VERSION, HEADER_INTS = 20240520, 1, 256
# Alpha's TrainConfig defaults (src/alpha/train/train_config.h), which both sides use.
LR, MIN_LR, WARMUP, WEIGHT_DECAY, BETAS, EPS, GRAD_CLIP = 3e-3, 3e-4, 30, 0.1, (0.9, 0.95), 1e-8, 1.0


def read_shard(path):
    """The tokens of an llm.c-format shard (data/shard.h), checked as Alpha checks them."""
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if len(header) < 3 or header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        sys.exit(f"loss_parity: {path}: not a token shard (magic {header[:2].tolist()})")
    tokens = np.fromfile(path, dtype="<u2", offset=HEADER_INTS * 4)
    if len(tokens) != header[2]:
        sys.exit(f"loss_parity: {path}: header says {header[2]} tokens, file holds {len(tokens)}")
    return tokens.astype(np.int64)


def windows(shards, seq):
    """(shard, start) of every window of seq + 1 tokens starting every seq tokens within a shard, in file
    order: data/loader.h's windows."""
    return [(s, start) for s, tokens in enumerate(shards) for start in range(0, len(tokens) - seq, seq)]


def batch_of(shards, picked, seq, device):
    rows = np.stack([shards[s][start:start + seq + 1] for s, start in picked])
    rows = torch.from_numpy(rows).to(device)
    return rows[:, :-1], rows[:, 1:]


def lr_at(step, steps):
    """train/schedule.cpp's warmup and cosine, decaying over the whole run."""
    warmup = min(WARMUP, steps)
    if step < warmup:
        return LR * (step + 1) / warmup
    if step >= steps:
        return MIN_LR
    ratio = (step - warmup) / (steps - warmup)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def summary(curve, train_loss):
    """The final validation loss, the lowest one on the way and its step, from [(step, val_loss)]."""
    best_step, best = min(curve, key=lambda point: point[1])
    return {"val_loss": curve[-1][1], "best_val_loss": best, "best_step": best_step, "train_loss": train_loss,
            "val_curve": curve}


def alpha_train(args, data_dir, precision, seeds=(1337, 1)):
    run_dir = os.path.join(args.out, f"alpha-{precision}" + ("" if seeds == (1337, 1) else f"-seed{seeds[0]}"))
    cmd = [args.alpha, "train", "--config", args.config, "--data", data_dir, "--device", args.device,
           "--precision", precision, "--steps", str(args.steps), "--batch-size", str(args.batch_size),
           "--eval-every", str(args.eval_every), "--eval-batches", str(args.eval_batches), "--save-every", "0",
           "--sample-tokens", "0", "--seed", str(seeds[0]), "--data-seed", str(seeds[1]), "--out", run_dir]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    curve = [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
    return dict(summary(curve, records[-1]["loss"]), command=" ".join(cmd))


def torch_train(args, cfg, data_dir):
    device = torch.device(args.device)
    torch.manual_seed(0)
    train = [read_shard(p) for p in sorted(glob.glob(os.path.join(data_dir, "train_*.bin")))]
    val = [read_shard(p) for p in sorted(glob.glob(os.path.join(data_dir, "val_*.bin")))]
    seq = cfg["block_size"]
    train_windows, val_windows = windows(train, seq), windows(val, seq)[:args.eval_batches]
    model = GPT(cfg).to(device)
    decayed = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith(("wte", "wpe"))]
    others = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith(("wte", "wpe")))]
    fused = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": WEIGHT_DECAY}, {"params": others, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, **fused)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)

    def validation_loss():
        model.eval()
        with torch.no_grad(), autocast:
            losses = [model(*batch_of(val, [w], seq, device)).item() for w in val_windows]
        model.train()
        return sum(losses) / len(losses)

    generator = torch.Generator().manual_seed(1)
    order, cursor, curve = [], 0, []
    for step in range(args.steps):
        if cursor + args.batch_size > len(order):  # a new epoch: whole batches only, as the loader
            order, cursor = torch.randperm(len(train_windows), generator=generator).tolist(), 0
        picked = [train_windows[i] for i in order[cursor:cursor + args.batch_size]]
        cursor += args.batch_size
        inputs, targets = batch_of(train, picked, seq, device)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.steps)
        with autocast:
            loss = model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            curve.append((step + 1, validation_loss()))
    return summary(curve, loss.item())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alpha", required=True, help="path to the alpha binary")
    parser.add_argument("--text", required=True, help="the training text (e.g. ../shared/data/tinyshakespeare.txt)")
    parser.add_argument("--config", default="seed", help="a name in configs/ or a JSON file")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=20, help="the seed config's batch (issue 9)")
    parser.add_argument("--eval-batches", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=100, help="steps between validations (the curve)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--out", default="loss-parity")
    args = parser.parse_args()
    for name in ("steps", "batch_size", "eval_batches", "eval_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive count, got {getattr(args, name)}")
    config_path = args.config if args.config.endswith(".json") else os.path.join(ROOT, "configs", f"{args.config}.json")
    with open(config_path) as f:
        cfg = json.load(f)
    if cfg.get("n_kv_head", cfg["n_head"]) != cfg["n_head"] or cfg.get("dropout", 0.0) != 0.0:
        sys.exit("loss_parity: the PyTorch peer has no GQA and no dropout: choose a config without them")
    os.makedirs(args.out, exist_ok=True)
    data_dir = os.path.join(args.out, "data")
    subprocess.run([args.alpha, "prepare", "--input", args.text, "--vocab", str(cfg["vocab_size"]), "--out", data_dir],
                   check=True, stdout=subprocess.DEVNULL)
    bf16 = "bf16" if args.device == "cuda" else "f32"
    runs = {"alpha bf16": alpha_train(args, data_dir, "bf16") if args.device == "cuda" else None,
            "alpha f32": alpha_train(args, data_dir, "f32"),
            "pytorch bf16": torch_train(args, cfg, data_dir)}
    runs = {name: r for name, r in runs.items() if r is not None}
    # The yardstick: Alpha again with other initial weights and batch order. How far the validation loss
    # moves with the random streams alone is the noise any comparison between two engines carries.
    yardstick = alpha_train(args, data_dir, bf16, seeds=(1338, 2))
    reference = runs.get("alpha bf16", runs["alpha f32"])
    print(f"{args.config}, {args.steps} steps of {args.batch_size} x {cfg['block_size']} tokens on {args.text}, "
          f"validation over {args.eval_batches} sequences, device {args.device}")
    print(f"{'run':22s} {'val loss':>9s} {'vs alpha bf16':>14s} {'lowest val (step)':>18s} {'train loss':>11s}")
    for name, r in list(runs.items()) + [(f"(alpha {bf16}, other seeds)", yardstick)]:
        print(f"{name:22s} {r['val_loss']:9.4f} {r['val_loss'] - reference['val_loss']:+14.4f} "
              f"{r['best_val_loss']:11.4f} ({r['best_step']:4d}) {r['train_loss']:11.4f}")
    within = all(abs(r["val_loss"] - reference["val_loss"]) <= args.tolerance for r in runs.values())
    print(f"final validation losses within {args.tolerance}: {'yes' if within else 'NO'}; "
          f"the seeds alone move it by {yardstick['val_loss'] - reference['val_loss']:+.4f}")
    with open(os.path.join(args.out, "loss_parity.json"), "w") as f:
        json.dump({"config": args.config, "steps": args.steps, "batch_size": args.batch_size,
                   "eval_batches": args.eval_batches, "device": args.device, "tolerance": args.tolerance,
                   "within": within, "runs": runs, "yardstick_other_seeds": yardstick}, f, indent=2)
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The largest GPT-2-shaped model that trains on one GPU with full recomputation: Alpha next to PyTorch.

Issue 9's memory bench. Climbs a ladder of GPT-2 shapes (n_layer, n_embd, n_head: GPT-2's four sizes, then
wider and deeper ones, head dim 64, vocabulary 50304, context 1024) and trains each for --steps steps at
--batch-size × 1024 tokens:
- Alpha: `alpha train --config gpt2-124m --n-layer L --n-embd C --n-head H --device cuda --precision bf16
  --recompute block --save-every -1` (each block's input kept, the block re-run in backward; no checkpoint,
  whose write of a model of billions of parameters would take minutes); peak memory from metrics.jsonl.
- PyTorch: bench/train_seed.py's GPT with every block under torch.utils.checkpoint (non-reentrant), bf16
  autocast with f32 master weights, fused AdamW; peak from torch.cuda.max_memory_allocated. Each trial runs
  in a process of its own, so that an out-of-memory failure leaves nothing behind for the next.
A shape "trains" when its steps finish with a finite loss. Each engine climbs until its first failure; the
table gives every trial and the largest shape each engine trained.

Also the issue's smaller check, with --check-wide: a 12-layer, width 512, 8-head model at batch 16 × 1024
trains on Alpha without recomputation.

Usage: python3 bench/largest_model.py --alpha build/cuda/alpha [--batch-size 8] [--steps 3] [--out DIR]
       [--ladder 12:768:12,24:1024:16,... | --bisect-layers N_EMBD:N_HEAD:LO:HI] [--check-wide]
       [--engines alpha,pytorch] [--per-use-copies]
--engines climbs only the engines named, so that the two can climb at once on two GPUs (CUDA_VISIBLE_DEVICES).
--bisect-layers finds, for each engine, the deepest model of one width between LO and HI layers that trains, by
bisection (memory grows with depth, so training stops at one depth): about log2(HI - LO) trials instead of a
ladder's rungs, for pinning the answer down once a ladder has bracketed it.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, VOCAB = 1024, 50304
# GPT-2's 124M, 355M, 774M and 1.5B, then head dim 64 at growing width and depth (about 2.5B to 11B).
DEFAULT_LADDER = [(12, 768, 12), (24, 1024, 16), (36, 1280, 20), (48, 1600, 25), (48, 2048, 32),
                  (64, 2304, 36), (64, 2560, 40), (80, 2560, 40), (96, 2816, 44), (96, 3072, 48)]
OOM_EXIT = 3  # a PyTorch trial that ran out of memory


def parameter_count(layers, width):
    """Weights and biases of the tied GPT: the blocks' 12·C² + 13·C per layer, the embeddings, the final norm."""
    return layers * (12 * width * width + 13 * width) + (VOCAB + SEQ) * width + 2 * width


def failure_line(done):
    """The last line a failed trial's process wrote to stderr (or its exit status)."""
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}"


def alpha_trial(binary, data_dir, run_dir, shape, batch, steps, recompute, per_use_copies=False):
    layers, width, heads = shape
    cmd = [binary, "train", "--config", "gpt2-124m", "--n-layer", str(layers), "--n-embd", str(width),
           "--n-head", str(heads), "--n-kv-head", str(heads), "--device", "cuda", "--precision", "bf16",
           "--recompute", recompute, "--batch-size", str(batch), "--seq-len", str(SEQ), "--steps", str(steps),
           "--eval-every", "0", "--save-every", "-1", "--sample-tokens", "0", "--data", data_dir, "--out", run_dir]
    if per_use_copies:  # bf16 weights converted at each use, as autocast does, instead of held between steps
        cmd += ["--hold-compute-copies", "false"]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        return {"trained": False, "why": failure_line(done), "out_of_memory": "memory available on" in done.stderr}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    loss = records[-1]["loss"]
    return {"trained": math.isfinite(loss), "loss": loss, "peak_bytes": max(r["peak_bytes"] for r in records),
            "why": "" if math.isfinite(loss) else "non-finite loss"}


def torch_trial(shape, batch, steps):
    """Runs in its own process (--torch-trial): exits OOM_EXIT on out-of-memory, prints the result as JSON."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from train_seed import GPT, peer_optimizer, peer_step
    layers, width, heads = shape
    cfg = {"n_layer": layers, "n_embd": width, "n_head": heads, "vocab_size": VOCAB, "block_size": SEQ,
           "bias": True}
    try:
        torch.manual_seed(0)
        with torch.device("cuda"):  # built there: a host copy of billions of weights would take minutes
            model = GPT(cfg, checkpoint_blocks=True)
        opt = peer_optimizer(model)
        ids = torch.randint(0, VOCAB, (batch, SEQ + 1), device="cuda")
        for _ in range(steps):
            loss = peer_step(model, model, opt, ids)
        loss = loss.item()
    except torch.cuda.OutOfMemoryError as e:
        print(json.dumps({"trained": False, "why": str(e).splitlines()[0], "out_of_memory": True}))
        sys.exit(OOM_EXIT)
    print(json.dumps({"trained": math.isfinite(loss), "loss": loss, "peak_bytes": torch.cuda.max_memory_allocated(),
                      "why": "" if math.isfinite(loss) else "non-finite loss"}))


def torch_trial_in_process(shape, batch, steps):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-trial", ":".join(map(str, shape)),
           "--batch-size", str(batch), "--steps", str(steps)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode in (0, OOM_EXIT) and lines:
        return json.loads(lines[-1])
    return {"trained": False, "why": failure_line(done), "out_of_memory": False}


def parse_shape(text):
    """n_layer:n_embd:n_head, three positive integers with n_embd a multiple of n_head."""
    try:
        layers, width, heads = (int(v) for v in text.split(":"))
    except ValueError:
        raise SystemExit(f"largest_model.py: --ladder: shape {text!r}: expected n_layer:n_embd:n_head, three integers")
    if min(layers, width, heads) < 1 or width % heads != 0:
        raise SystemExit(f"largest_model.py: --ladder: shape {text!r}: expected positive sizes with n_embd a multiple "
                         f"of n_head")
    return layers, width, heads


def parse_bisection(text):
    """n_embd:n_head:lo:hi, the width and heads of a depth search between lo and hi layers."""
    try:
        width, heads, lo, hi = (int(v) for v in text.split(":"))
    except ValueError:
        raise SystemExit(f"largest_model.py: --bisect-layers: {text!r}: expected n_embd:n_head:lo:hi, four integers")
    if min(width, heads, lo) < 1 or width % heads != 0 or hi < lo:
        raise SystemExit(f"largest_model.py: --bisect-layers: {text!r}: expected positive sizes, n_embd a multiple of "
                         f"n_head and lo <= hi")
    return width, heads, lo, hi


def largest_passing(lo, hi, trains):
    """The largest n in [lo, hi] for which trains(n) holds, by bisection, taking it to hold up to one n and not
    beyond (a model's memory grows with its depth); None when it fails at lo. At most 2 + log2(hi - lo) calls."""
    if not trains(lo):
        return None
    good, bad = lo, hi + 1  # trains at good; bad is past the range or failed
    while bad - good > 1:
        mid = (good + bad) // 2
        if trains(mid):
            good = mid
        else:
            bad = mid
    return good


def describe(result):
    if result["trained"]:
        return f"trains, peak {result['peak_bytes'] / 2**30:6.1f} GiB, loss {result['loss']:.3f}"
    return ("out of memory" if result.get("out_of_memory") else "fails") + f": {result['why'][:90]}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alpha", help="path to the alpha binary (a CUDA build)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    shapes = parser.add_mutually_exclusive_group()
    shapes.add_argument("--ladder", help="comma-separated n_layer:n_embd:n_head, smallest first")
    shapes.add_argument("--bisect-layers", help="n_embd:n_head:lo:hi: the deepest model of that width that trains")
    parser.add_argument("--check-wide", action="store_true",
                        help="also train 12 layers, width 512, 8 heads at batch 16 on Alpha without recomputation")
    parser.add_argument("--engines", default="alpha,pytorch", help="comma-separated: alpha, pytorch or both")
    parser.add_argument("--per-use-copies", action="store_true",
                        help="Alpha's trials with --hold-compute-copies false: 2 bytes a parameter less")
    parser.add_argument("--out", default=".")
    parser.add_argument("--torch-trial", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_trial:
        return torch_trial(parse_shape(args.torch_trial), args.batch_size, args.steps)
    engines = args.engines.split(",")
    if not engines or any(e not in ("alpha", "pytorch") for e in engines) or len(set(engines)) != len(engines):
        parser.error(f"--engines: expected alpha, pytorch or alpha,pytorch, got {args.engines!r}")
    if not args.alpha:
        parser.error("--alpha is required (it also prepares the data)")
    for name in ("batch_size", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive count, got {getattr(args, name)}")
    ladder = [parse_shape(s) for s in args.ladder.split(",")] if args.ladder else DEFAULT_LADDER
    bisection = parse_bisection(args.bisect_layers) if args.bisect_layers else None
    results = {"batch_size": args.batch_size, "seq_len": SEQ, "steps": args.steps, "trials": []}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = os.path.join(tmp, "prepare")  # the built-in corpus: its vocabulary fits 50304
        subprocess.run([args.alpha, "prepare", "--builtin", "--out", data_dir], check=True, stdout=subprocess.DEVNULL)
        if args.check_wide:
            wide = alpha_trial(args.alpha, data_dir, os.path.join(tmp, "wide"), (12, 512, 8), 16, args.steps, "none")
            results["wide_12x512_batch16"] = wide
            print(f"alpha, 12 layers x 512, 8 heads, batch 16 x {SEQ}, no recomputation: {describe(wide)}", flush=True)

        def trial(engine, shape):
            """Trains shape on engine, records and prints the result; whether it trained."""
            if engine == "alpha":
                r = alpha_trial(args.alpha, data_dir, os.path.join(tmp, f"run{len(results['trials'])}"), shape,
                                args.batch_size, args.steps, "block", args.per_use_copies)
            else:
                r = torch_trial_in_process(shape, args.batch_size, args.steps)
            r.update({"engine": engine, "shape": shape, "parameters": parameter_count(*shape[:2])})
            results["trials"].append(r)
            print(f"{engine:8s} {shape[0]:3d} x {shape[1]:5d}, {shape[2]:2d} heads "
                  f"({r['parameters'] / 1e9:5.2f} B parameters): {describe(r)}", flush=True)
            return r["trained"]

        if bisection:
            width, heads, lo, hi = bisection
            top = (hi, width, heads)
            for engine in engines:
                largest_passing(lo, hi, lambda layers: trial(engine, (layers, width, heads)))
        else:
            top = ladder[-1]
            climbing = {engine: True for engine in engines}
            for shape in ladder:
                for engine in engines:
                    if climbing[engine]:
                        climbing[engine] = trial(engine, shape)
                if not any(climbing.values()):
                    break
    for engine in engines:
        trained = [t for t in results["trials"] if t["engine"] == engine and t["trained"]]
        best = max(trained, key=lambda t: t["parameters"]) if trained else None
        results[f"largest_{engine}"] = best
        at_top = best is not None and tuple(best["shape"]) == top
        print(f"largest on {engine}: " + (f"{best['shape'][0]} x {best['shape'][1]}, "
                                          f"{best['parameters'] / 1e9:.2f} B parameters" if best else "none")
              + (" (the top of the search: a larger one may train too)" if at_top else ""))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"largest_model_{'_'.join(engines)}.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())

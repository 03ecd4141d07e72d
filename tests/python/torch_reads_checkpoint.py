"""A real client reads Alpha's weights.

Trains a tiny model with `alpha train`, loads the checkpoint's model.safetensors into the plain PyTorch
GPT below (written from the architecture description, not from Alpha's code), runs one token batch
through both (Alpha through `alpha logits`) and requires the logits to agree within 1e-4 relative.

usage: torch_reads_checkpoint.py ALPHA_BINARY WORK_DIR
"""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file, save_file


class GPT(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.w = {k: torch.from_numpy(v.copy()) for k, v in weights.items()}

    def linear(self, x, name):
        bias = self.w.get(name + ".bias")
        return F.linear(x, self.w[name + ".weight"], bias)

    def layernorm(self, x, name):
        c = x.shape[-1]
        return F.layer_norm(x, (c,), self.w[name + ".weight"], self.w.get(name + ".bias"), self.cfg["layernorm_eps"])

    def attention(self, x, i):
        cfg = self.cfg
        b, t, c = x.shape
        hq, hkv = cfg["n_head"], cfg["n_kv_head"]
        dh = c // hq
        qkv = self.linear(x, f"blocks.{i}.attn.qkv")
        q, k, v = qkv.split([hq * dh, hkv * dh, hkv * dh], dim=-1)
        q = q.view(b, t, hq, dh).transpose(1, 2)
        k = k.view(b, t, hkv, dh).transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
        v = v.view(b, t, hkv, dh).transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
        s = q @ k.transpose(-1, -2) / math.sqrt(dh)
        if cfg["attn_softcap"] > 0:
            s = cfg["attn_softcap"] * torch.tanh(s / cfg["attn_softcap"])
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        s = s.masked_fill(~mask, float("-inf"))
        y = torch.softmax(s, dim=-1) @ v
        y = y.transpose(1, 2).reshape(b, t, c)
        return self.linear(y, f"blocks.{i}.attn.proj")

    def forward(self, ids):
        cfg = self.cfg
        t = ids.shape[1]
        x = self.w["wte.weight"][ids] + self.w["wpe.weight"][:t]
        for i in range(cfg["n_layer"]):
            x = x + self.attention(self.layernorm(x, f"blocks.{i}.ln1"), i)
            h = self.linear(self.layernorm(x, f"blocks.{i}.ln2"), f"blocks.{i}.mlp.fc")
            x = x + self.linear(F.gelu(h, approximate="tanh"), f"blocks.{i}.mlp.proj")
        x = self.layernorm(x, "ln_f")
        head = self.w.get("lm_head.weight", self.w["wte.weight"])
        logits = x @ head.T
        if cfg["logit_softcap"] > 0:
            logits = cfg["logit_softcap"] * torch.tanh(logits / cfg["logit_softcap"])
        return logits


def main():
    alpha, work = Path(sys.argv[1]), Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    run = work / "run"
    # GQA, softcaps, untied head and biases all on, so every named tensor is exercised.
    subprocess.run([str(alpha), "train", "--config", "tiny", "--steps", "6", "--out", str(run),
                    "--n-kv-head", "2", "--attn-softcap", "30", "--logit-softcap", "15",
                    "--tie-embeddings", "false", "--sample-tokens", "0"], check=True)
    ckpt = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    cfg = json.loads((ckpt / "state.json").read_text())["model_config"]
    weights = load_file(str(ckpt / "model.safetensors"))

    rng = np.random.default_rng(1234)
    ids = rng.integers(0, cfg["vocab_size"], size=(2, cfg["block_size"] // 2), dtype=np.int32)
    save_file({"ids": ids}, str(work / "ids.safetensors"))
    subprocess.run([str(alpha), "logits", "--checkpoint", str(ckpt), "--input", str(work / "ids.safetensors"),
                    "--out", str(work / "logits.safetensors")], check=True)
    ours = load_file(str(work / "logits.safetensors"))["logits"].astype(np.float64)

    with torch.no_grad():
        theirs = GPT(cfg, weights)(torch.from_numpy(ids).long()).double().numpy()
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    rel = np.abs(ours - theirs).max() / np.abs(theirs).max()
    print(f"logits {ours.shape}: max relative difference {rel:.3e} (bound 1e-4)")
    if not rel <= 1e-4:
        sys.exit(1)
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()

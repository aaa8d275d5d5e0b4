#!/usr/bin/env python3
"""HF reference for a checkpoint zayac trained: python3 scripts/make_trained_fixture.py CKPT OUT.

Loads CKPT with ZayaForCausalLM.from_pretrained (fp32), exactly as a user would, and writes OUT/:
config.json, model.safetensors (the checkpoint's weights, copied as they are), its tokenizer, tokens.npy [B,T]
int32, logits.npy [B,T,V] float32, loss.json-like fields in reference.json (mean next-token
cross-entropy, labels = tokens), prompt.npy [1,T0] and greedy.npy [1,T0+N] (HF greedy generation,
no eos handling), and how far training moved the parameters that the random-weight fixtures do
not exercise: balancing-bias spread, residual scales, key temperatures, skip-class share. Refuses a
checkpoint where they did not move (then it would not test what it is for).
Run where transformers 5.17 is installed (the GPU machine)."""
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file
from transformers import ZayaForCausalLM

from make_hf_fixtures import route_stats


def movement(ckpt, model, ids):
    """What training moved, read from the file (not the loaded model) and from HF's routing."""
    sd = load_file(os.path.join(ckpt, "model.safetensors"))
    biases = [v for k, v in sd.items() if k.endswith("balancing_biases")]
    scales = torch.cat([v.flatten() for k, v in sd.items() if k.endswith("_scale")
                        and "router_states" not in k])
    temps = torch.cat([v.flatten() for k, v in sd.items() if k.endswith("qk_norm.temp")])
    counts = route_stats(model, ids)
    n = sum(sum(c) for c in counts)
    return dict(
        skip_bias=[float(b[-1]) for b in biases],
        expert_bias_spread=max(float(b[:-1].max() - b[:-1].min()) for b in biases),
        residual_scale_max_dev=float((scales - 1).abs().max()),
        temp_max_dev=float((temps - 1).abs().max()),
        skip_share=sum(c[-1] for c in counts) / n,
        route_counts=counts)


def main(ckpt, out):
    model = ZayaForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    cfg = model.config
    gen = torch.Generator().manual_seed(5)
    B, T, T0, new = 2, 48, 8, 16
    ids = torch.randint(3, cfg.vocab_size, (B, T), generator=gen)
    moved = movement(ckpt, model, ids)
    assert moved["expert_bias_spread"] > 0.05, moved
    assert moved["residual_scale_max_dev"] > 0.1, moved
    assert moved["temp_max_dev"] > 0.05, moved
    assert moved["skip_share"] > 0.02, moved
    os.makedirs(out, exist_ok=True)
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(ckpt, f), os.path.join(out, f))
    with torch.no_grad():
        res = model(ids, labels=ids)
        prompt = ids[:1, :T0]
        # no eos handling at all (min_new_tokens would mask eos instead): N plain argmax steps
        model.generation_config.eos_token_id = None
        greedy = model.generate(prompt, max_new_tokens=new, do_sample=False,
                                pad_token_id=cfg.pad_token_id)
        assert greedy.shape[1] == T0 + new, greedy.shape
    np.save(os.path.join(out, "tokens.npy"), ids.numpy().astype(np.int32))
    np.save(os.path.join(out, "logits.npy"), res.logits.numpy().astype(np.float32))
    np.save(os.path.join(out, "prompt.npy"), prompt.numpy().astype(np.int32))
    np.save(os.path.join(out, "greedy.npy"), greedy.numpy().astype(np.int32))
    meta = dict(source=os.path.normpath(ckpt), loss=float(res.loss), moved=moved,
                transformers=transformers.__version__, torch=torch.__version__)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{out}: loss {float(res.loss):.6f} skip share {moved['skip_share']:.3f} "
          f"bias spread {moved['expert_bias_spread']:.3f} scales {moved['residual_scale_max_dev']:.3f} "
          f"temps {moved['temp_max_dev']:.3f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

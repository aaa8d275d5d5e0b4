#!/usr/bin/env python3
"""Reference fixtures from Hugging Face transformers' ZayaForCausalLM (fp32), for the C model tests.

For each small config: build a random model, perturb every parameter and buffer away from its init
(so scales, biases, temperatures and balancing biases all matter, and some tokens pick the skip
class), save it with save_pretrained, load it back with from_pretrained (what a user runs: the
references come from the reloaded model) and write tokens.npy [B,T] int32, logits.npy [B,T,V] float32,
loss.json (mean next-token cross-entropy, labels = tokens), grads.safetensors (every parameter's
gradient by HF name), prompt.npy [1,T0] int32 and greedy.npy [1,T0+N] int32 (HF greedy generation).

Run on the GPU machine (or anywhere with transformers 5.17): python3 scripts/make_hf_fixtures.py OUT
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import ZayaConfig, ZayaForCausalLM

CONFIGS = {
    # 3 layers, GQA 4/2, half rotary, defaults for the convolutions
    "small_a": dict(
        cfg=dict(vocab_size=97, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, num_experts=4, moe_intermediate_size=32,
                 router_hidden_size=16, cca_time0=2, cca_time1=2, max_position_embeddings=256,
                 rope_parameters={"hybrid": {"rope_type": "default", "rope_theta": 10000.0,
                                             "partial_rotary_factor": 0.5}},
                 pad_token_id=0, bos_token_id=1, eos_token_id=2),
        B=2, T=12, T0=5, new=8, seed=1, canonical=True),
    # 2 layers, 6/3 heads, full rotary, longer convolutions, a sliding-window layer
    "small_b": dict(
        cfg=dict(vocab_size=61, hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
                 num_key_value_heads=3, head_dim=8, num_experts=3, moe_intermediate_size=24,
                 router_hidden_size=12, cca_time0=3, cca_time1=2, max_position_embeddings=256,
                 layer_types=["hybrid", "hybrid_sliding"], sliding_window=4,
                 rope_parameters={"hybrid": {"rope_type": "default", "rope_theta": 500.0,
                                             "partial_rotary_factor": 1.0},
                                  "hybrid_sliding": {"rope_type": "default", "rope_theta": 10000.0,
                                                     "partial_rotary_factor": 0.25}},
                 pad_token_id=0, bos_token_id=1, eos_token_id=2),
        B=3, T=9, T0=4, new=7, seed=2, canonical=False),
}


def perturb(model, gen):
    """Moves every tensor away from its init, deterministically."""
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if "inv_freq" in name:
                continue
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("balancing_biases"):
                p.copy_(0.03 * noise)  # small against the spread of the probabilities
                p[-1] = 0.02  # the skip class gets a fair chance too
            elif name.endswith("temp"):
                p.copy_(1.0 + 0.3 * noise)
            elif "scale" in name or "norm" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.3 * noise)  # tokens that differ clearly, so routing differs by token
            elif ".gate." in name:
                p.copy_(noise / p.shape[-1] ** 0.5)  # unit-gain router layers
            elif "conv" in name:
                p.copy_(0.3 * noise)
            else:
                p.copy_(0.12 * noise)


def balance(model, ids, gen):
    """Sets each layer's balancing biases against its mean router probabilities (what the balancing
    controller converges toward), so that tokens spread over the experts and the skip class."""
    for layer in model.model.layers:
        gate = layer.mlp.gate
        seen = []
        h = gate.register_forward_hook(lambda mod, inp, out: seen.append(torch.softmax(out[0], -1)))
        with torch.no_grad():
            model(ids)
        h.remove()
        with torch.no_grad():
            noise = torch.randn(gate.balancing_biases.shape, generator=gen)
            gate.balancing_biases.copy_(-seen[0].mean(0) + 0.01 * noise)


def canonicalise(model):
    """Shifts each layer's balancing biases so the skip class is at -1: the same routing, and the
    form that survives from_pretrained (transformers 5.17 sets the skip bias to -1 on load)."""
    with torch.no_grad():
        for layer in model.model.layers:
            b = layer.mlp.gate.balancing_biases
            b -= b[-1] + 1.0
            b[-1] = -1.0


def route_stats(model, ids):
    """Counts chosen classes per layer (recomputed from router logits and balancing biases)."""
    stats = []

    def hook(mod, inp, out):
        logits = out[0].float()
        biased = torch.softmax(logits, -1) + mod.balancing_biases
        stats.append(torch.bincount(biased.argmax(-1), minlength=mod.num_router_classes).tolist())

    hs = [layer.mlp.gate.register_forward_hook(hook) for layer in model.model.layers]
    with torch.no_grad():
        model(ids)
    for h in hs:
        h.remove()
    return stats


def make(name, spec, out_root):
    torch.manual_seed(spec["seed"])
    gen = torch.Generator().manual_seed(spec["seed"])
    config = ZayaConfig(**spec["cfg"])
    config._attn_implementation = "eager"
    model = ZayaForCausalLM(config).float().eval()
    perturb(model, gen)
    B, T, V = spec["B"], spec["T"], config.vocab_size
    ids = torch.randint(0, V, (B, T), generator=gen)
    ids[0, 3] = config.pad_token_id  # the padding row's embedding gets no lookup gradient
    balance(model, ids, gen)
    if spec["canonical"]:
        canonicalise(model)  # skip tokens survive the reload: HF's skip path is exercised
    stats = route_stats(model, ids)
    skips = sum(s[-1] for s in stats)
    assert skips > 0, f"{name}: no token picked the skip class: {stats}"
    assert all(sum(1 for c in s[:-1] if c > 0) >= 2 for s in stats), f"{name}: {stats}"

    out = os.path.join(out_root, name)
    model.save_pretrained(out, safe_serialization=True)
    # A non-canonical file (small_b) routes differently once loaded: its skip biases become -1, so
    # the file's skip tokens go to experts. zayac must load it the same way by default.
    model = ZayaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    stats_loaded = route_stats(model, ids)
    if spec["canonical"]:
        assert stats_loaded == stats, (stats, stats_loaded)
    else:
        assert stats_loaded != stats, f"{name}: the reload did not change the routing"
    model.zero_grad()
    res = model(ids, labels=ids)
    res.loss.backward()
    grads = {n: p.grad.detach().contiguous().clone() for n, p in model.named_parameters()
             if p.grad is not None}
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, missing
    save_file(grads, os.path.join(out, "grads.safetensors"))
    np.save(os.path.join(out, "tokens.npy"), ids.numpy().astype(np.int32))
    np.save(os.path.join(out, "logits.npy"), res.logits.detach().numpy().astype(np.float32))

    prompt = ids[:1, : spec["T0"]]
    with torch.no_grad():
        greedy = model.generate(prompt, max_new_tokens=spec["new"], min_new_tokens=spec["new"],
                                do_sample=False, pad_token_id=config.pad_token_id)
    np.save(os.path.join(out, "prompt.npy"), prompt.numpy().astype(np.int32))
    np.save(os.path.join(out, "greedy.npy"), greedy.numpy().astype(np.int32))
    meta = dict(loss=float(res.loss), route_counts=stats_loaded, route_counts_file=stats,
                canonical=spec["canonical"], transformers=transformers.__version__,
                torch=torch.__version__, B=B, T=T)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: loss {float(res.loss):.6f} route (file) {stats} route (loaded) "
          f"{stats_loaded} -> {out}")


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/hf"
    torch.use_deterministic_algorithms(True)
    for name, spec in CONFIGS.items():
        make(name, spec, out_root)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Fixtures for the file-format tests (tests/test_{safetensors,npy,config,hf_checkpoint}.c).

Everything under tests/fixtures/io/ is written here by the reference libraries (numpy, torch,
safetensors, transformers), so the C readers are checked against files they did not write.

    python3 scripts/make_io_fixtures.py            # (re)write tests/fixtures/io/
    python3 scripts/make_io_fixtures.py check DIR  # check a folder the C code wrote (see below)

`check DIR`: DIR holds config.json + model.safetensors written by zayac (the hf_checkpoint test
writes one when ZAYAC_IO_EXPORT_DIR is set). transformers must load it with AutoConfig,
ZayaConfig and ZayaForCausalLM.from_pretrained, and its weights must equal the hf_tiny fixture's
(exactly for F32, to bf16 rounding for BF16).
"""
import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "io")

# The non-default config of the hf_tiny fixture (the C test repeats these values by hand).
TINY = dict(
    vocab_size=64, hidden_size=16, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, num_experts=3, moe_intermediate_size=8,
    router_hidden_size=8, max_position_embeddings=256, cca_time0=3, cca_time1=2,
    sliding_window=32, layer_types=["hybrid", "hybrid_sliding", "hybrid"],
    rope_parameters={
        "hybrid": {"rope_type": "default", "rope_theta": 20000.0, "partial_rotary_factor": 0.5},
        "hybrid_sliding": {"rope_type": "default", "rope_theta": 5000.0,
                           "partial_rotary_factor": 0.25},
    },
    rms_norm_eps=1e-6, initializer_range=0.01, pad_token_id=3, bos_token_id=4,
    eos_token_id=[5, 7],
)


def save_st():
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(1)
    t = {
        "a.f32": torch.randn(2, 3, generator=g),
        "b.bf16": (torch.randn(4, 5, generator=g) * 100).to(torch.bfloat16),
        "c.f16": (torch.randn(3, generator=g) * 1e-3).to(torch.float16),
        "d.i32": torch.tensor([[1, -2], [2147483647, -2147483648]], dtype=torch.int32),
        "e.i64": torch.tensor([0, 1, -1, 123456789, -5], dtype=torch.int64),
        "s.scalar": torch.tensor(2.5),
    }
    save_file(t, os.path.join(OUT, "st_mixed.safetensors"), metadata={"format": "pt", "note": "fx"})
    # Expected values, computed by torch's own upcasts (bf16/f16 -> f32 are exact).
    np.save(os.path.join(OUT, "st_a.npy"), t["a.f32"].numpy())
    np.save(os.path.join(OUT, "st_b.npy"), t["b.bf16"].float().numpy())
    np.save(os.path.join(OUT, "st_c.npy"), t["c.f16"].float().numpy())
    np.save(os.path.join(OUT, "st_d.npy"), t["d.i32"].numpy())
    np.save(os.path.join(OUT, "st_e.npy"), t["e.i64"].numpy())


def save_conversions():
    """fp32 values and their bf16 / f16 bits as torch and numpy round them (nearest even)."""
    rng = np.random.default_rng(2)
    bits = [
        0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F80FFFF, 0xBF808000, 0x7F7FFFFF,
        0x7F7F8000, 0x00000001, 0x80000000, 0x00800000, 0x007FFFFF, 0x7F800000, 0xFF800000,
        0x477FE000, 0x477FEFFF, 0x477FF000, 0x33000000, 0x33000001, 0x33800000, 0x387FC000,
        0x38800000, 0x38801000, 0x38803000, 0x3C7FF000, 0x4B800000,
    ]
    special = np.array(bits, dtype=np.uint32).view(np.float32)
    rand = np.concatenate([
        rng.standard_normal(400).astype(np.float32) * np.float32(10.0) ** rng.integers(-9, 6, 400),
        rng.integers(0, 2**32, 400, dtype=np.uint64).astype(np.uint32).view(np.float32),
    ])
    src = np.concatenate([special, rand]).astype(np.float32)
    src = src[~np.isnan(src)]
    with np.errstate(over="ignore"):
        f16 = src.astype(np.float16).view(np.uint16).astype(np.int32)
    bf16 = torch.from_numpy(src.copy()).to(torch.bfloat16).view(torch.int16).numpy()
    bf16 = bf16.astype(np.int32) & 0xFFFF
    np.save(os.path.join(OUT, "conv_src.npy"), src)
    np.save(os.path.join(OUT, "conv_bf16.npy"), bf16.astype(np.int32))
    np.save(os.path.join(OUT, "conv_f16.npy"), f16)


def save_npy():
    # Values follow formulas the C test repeats: f32[i] = i / 4 - 2, i4[i] = 7 i - 20 (flat index i).
    np.save(os.path.join(OUT, "np_f32.npy"), (np.arange(24, dtype=np.float32) / 4 - 2).reshape(2, 3, 4))
    np.save(os.path.join(OUT, "np_i4.npy"), (np.arange(15, dtype=np.int32) * 7 - 20).reshape(3, 5))
    np.save(os.path.join(OUT, "np_i8.npy"), np.array([[0, 1, 2**31 - 1], [-2**31, -7, 42]], np.int64))
    np.save(os.path.join(OUT, "np_i8_big.npy"), np.array([1, 2**31], np.int64))
    np.save(os.path.join(OUT, "np_scalar.npy"), np.float32(1.25))
    np.save(os.path.join(OUT, "np_empty.npy"), np.zeros((0, 3), np.int32))
    np.save(os.path.join(OUT, "np_big_endian.npy"), np.ones(3, ">f4"))
    np.save(os.path.join(OUT, "np_fortran.npy"), np.asfortranarray(np.ones((2, 3), np.float32)))
    np.save(os.path.join(OUT, "np_f8.npy"), np.ones(3, np.float64))
    with open(os.path.join(OUT, "np_v2.npy"), "wb") as f:
        np.lib.format.write_array(f, np.arange(6, dtype=np.float32).reshape(3, 2), version=(2, 0))


def save_hf_tiny():
    """A perturbed tiny ZAYA model saved by transformers, sharded, with a non-default config;
    the expected values are every tensor flattened in name order (hf_tiny_flat.npy) and the
    names and shapes (hf_tiny_names.txt)."""
    from transformers import ZayaConfig, ZayaForCausalLM
    d = os.path.join(OUT, "hf_tiny")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    torch.manual_seed(4)
    cfg = ZayaConfig(**TINY)
    m = ZayaForCausalLM(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        for n, b in m.named_buffers():
            if n.endswith("balancing_biases"):
                b.add_(torch.randn_like(b) * 0.1)
    m.save_pretrained(d, max_shard_size="10KB")
    os.remove(os.path.join(d, "generation_config.json"))
    sd = {k: v for k, v in m.state_dict().items() if k != "lm_head.weight"}
    names = sorted(sd)
    with open(os.path.join(OUT, "hf_tiny_names.txt"), "w") as f:
        for n in names:
            f.write(n + " " + " ".join(str(s) for s in sd[n].shape) + "\n")
    np.save(os.path.join(OUT, "hf_tiny_flat.npy"),
            np.concatenate([sd[n].detach().float().reshape(-1).numpy() for n in names]))


def check(dirname):
    """Returns the number of tensors that differ from what they should be."""
    from safetensors import safe_open
    from transformers import AutoConfig, ZayaConfig, ZayaForCausalLM
    ac = AutoConfig.from_pretrained(dirname)
    zc = ZayaConfig.from_pretrained(dirname)
    assert type(ac).__name__ == "ZayaConfig", type(ac)
    for k, v in TINY.items():
        got = getattr(zc, k)
        assert got == v or (k == "eos_token_id" and got == v[0]), (k, got, v)
    m, info = ZayaForCausalLM.from_pretrained(dirname, dtype=torch.float32, output_loading_info=True)
    bad_info = {k: v for k, v in info.items() if v}
    assert not bad_info, bad_info
    with safe_open(os.path.join(dirname, "model.safetensors"), "pt") as f:
        assert f.metadata().get("format") == "pt", f.metadata()
        stored = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    sd = m.state_dict()
    ref = ZayaForCausalLM.from_pretrained(os.path.join(OUT, "hf_tiny"), dtype=torch.float32).state_dict()
    bad = 0
    for k, v in ref.items():
        if k == "lm_head.weight":
            k_st = "model.embed_tokens.weight"  # tied
        else:
            k_st = k
        # What torch gives when it rounds the reference to the stored dtype.
        want = v.to(torch.bfloat16).float() if stored[k_st] == "BF16" else v
        if not torch.equal(sd[k], want):
            print("differs:", k, stored[k_st], (sd[k] - want).abs().max().item())
            bad += 1
    kinds = sorted(set(stored.values()))
    print(f"{dirname}: AutoConfig and ZayaConfig load it; from_pretrained reports no missing, "
          f"unexpected or mismatched keys; {len(ref)} tensors stored as {kinds}; {bad} differ "
          f"from torch's rounding of the reference")
    return bad


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "check":
        sys.exit(1 if check(sys.argv[2]) else 0)
    os.makedirs(OUT, exist_ok=True)
    save_st()
    save_conversions()
    save_npy()
    save_hf_tiny()
    print("wrote", OUT)


if __name__ == "__main__":
    main()

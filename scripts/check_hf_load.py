#!/usr/bin/env python3
"""Checks that a checkpoint folder zayac wrote loads in HF transformers as it is and computes the
same logits as zayac: python3 scripts/check_hf_load.py CKPT_DIR [ZAYAC_BIN]. Needs torch and
transformers (5.17) with the zaya model. Exit 1 on a mismatch."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoTokenizer, ZayaForCausalLM


def main(ckpt, zayac):
    model = ZayaForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32).eval()
    cfg = model.config
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab_size, size=(2, 48), dtype=np.int32)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/ids.npy", ids)
        subprocess.run([zayac, "logits", "--model", ckpt, "--tokens", f"{tmp}/ids.npy", "--out",
                        f"{tmp}/logits.npy"], check=True, capture_output=True)
        ours = np.load(f"{tmp}/logits.npy")
    with torch.no_grad():
        ref = model(torch.from_numpy(ids).long()).logits.numpy()
    err = np.abs(ours - ref).max() / np.abs(ref).max()
    print(f"{ckpt}: loaded in transformers; logits max error / max |logit| = {err:.2e}")
    if os.path.exists(os.path.join(ckpt, "tokenizer.json")):
        tok = AutoTokenizer.from_pretrained(ckpt)
        text = "Q: Why did the chicken cross the road?\nA: "
        print(f"tokenizer loads: {len(tok(text)['input_ids'])} ids for a {len(text)}-byte text")
    return 0 if err < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "build/zayac"))

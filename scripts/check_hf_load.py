#!/usr/bin/env python3
"""Checks that a checkpoint folder zayac wrote loads in HF transformers as it is and computes the
same logits and greedy generation as zayac: python3 scripts/check_hf_load.py CKPT_DIR [ZAYAC_BIN].
Logits on random ids: max error / max |logit| must be <= 1e-4. Greedy generation (when the folder
has tokenizer.json): model.generate(do_sample=False) from "A man walks into" must equal
`zayac generate --greedy` token for token (both stop at eos). Needs torch and transformers (5.17)
with the zaya model. Exit 1 on a mismatch."""
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
    same_greedy = True
    if os.path.exists(os.path.join(ckpt, "tokenizer.json")):
        tok = AutoTokenizer.from_pretrained(ckpt)
        prompt = tok("A man walks into")["input_ids"]
        with torch.no_grad():
            hf = model.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False,
                                pad_token_id=cfg.pad_token_id)[0].tolist()
        with tempfile.TemporaryDirectory() as tmp:
            np.save(f"{tmp}/prompt.npy", np.array([prompt], dtype=np.int32))
            subprocess.run([zayac, "generate", "--model", ckpt, "--prompt-tokens",
                            f"{tmp}/prompt.npy", "--max-new", "32", "--greedy", "--out",
                            f"{tmp}/gen.npy"], check=True, capture_output=True)
            ours = np.load(f"{tmp}/gen.npy")[0].tolist()
        same_greedy = ours == hf
        print(f"greedy from 'A man walks into': identical = {same_greedy}\n"
              f"  transformers: {tok.decode(hf)!r}\n  zayac:        {tok.decode(ours)!r}")
    return 0 if err <= 1e-4 and same_greedy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "build/zayac"))

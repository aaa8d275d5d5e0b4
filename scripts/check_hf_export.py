#!/usr/bin/env python3
"""Checks a folder `zayac export` wrote, in transformers as a user would use it:
python3 scripts/check_hf_export.py EXPORT_DIR [ZAYAC_BIN] [PROMPT].

- AutoTokenizer and AutoModelForCausalLM load it (dtype "auto": the dtype the export chose);
- pipeline("text-generation") greedy output equals `zayac generate --greedy` on the same prompt
  token for token for an fp32 export. For bf16, transformers computes in bf16 and zayac in fp32
  from the same bf16 weights, so the tokens may part after a while; the check is that zayac's
  logits are no further from transformers-in-bf16 than transformers-in-fp32 is (bf16 noise is
  measured, not assumed) and the greedy agreement is reported;
- the same weights loaded in fp32 give zayac's logits within 1e-4.
Needs torch and transformers 5.17. Exit 1 on a mismatch."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline


def zayac_logits(zayac, d, ids, tmp):
    np.save(f"{tmp}/ids.npy", ids)
    subprocess.run([zayac, "logits", "--model", d, "--tokens", f"{tmp}/ids.npy", "--out",
                    f"{tmp}/logits.npy"], check=True, capture_output=True)
    return np.load(f"{tmp}/logits.npy")


def main(d, zayac, prompt):
    cfg = json.load(open(os.path.join(d, "config.json")))
    bf16 = cfg["dtype"] == "bfloat16"
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d).eval()  # dtype from the folder
    print(f"{d}: {type(model).__name__} loaded in {model.dtype}, tokenizer "
          f"{type(tok).__name__} (model_max_length {tok.model_max_length})")
    ok = model.dtype == (torch.bfloat16 if bf16 else torch.float32)
    new = 24
    gen = pipeline("text-generation", model=model, tokenizer=tok, device="cpu")
    out = gen(prompt, max_new_tokens=new, do_sample=False,
              return_tensors=True)[0]["generated_token_ids"]  # the prompt's ids included
    hf_ids = [int(t) for t in out]
    prompt_ids = tok(prompt)["input_ids"]
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/prompt.npy", np.array([prompt_ids], dtype=np.int32))
        subprocess.run([zayac, "generate", "--model", d, "--prompt-tokens", f"{tmp}/prompt.npy",
                        "--max-new", str(new), "--greedy", "--out", f"{tmp}/gen.npy"], check=True,
                       capture_output=True)
        ours = [int(t) for t in np.load(f"{tmp}/gen.npy")[0]]
        same = next((i for i, (a, b) in enumerate(zip(ours, hf_ids)) if a != b),
                    min(len(ours), len(hf_ids)))
        equal = ours == hf_ids
        print(f"pipeline greedy: {len(hf_ids) - len(prompt_ids)} new tokens, zayac "
              f"{len(ours) - len(prompt_ids)}; identical: {equal} (first {same} of "
              f"{max(len(ours), len(hf_ids))} agree)")
        print(f"  transformers: {tok.decode(hf_ids)!r}\n  zayac:        {tok.decode(ours)!r}")
        rng = np.random.default_rng(1)
        ids = rng.integers(0, cfg["vocab_size"], size=(2, 32), dtype=np.int32)
        z = zayac_logits(zayac, d, ids, tmp)
        with torch.no_grad():
            native = model(torch.from_numpy(ids).long()).logits.float().numpy()
            fp32 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
            ref = fp32(torch.from_numpy(ids).long()).logits.numpy()
        err32 = np.abs(z - ref).max() / np.abs(ref).max()
        errn = np.abs(z - native).max() / np.abs(native).max()
        noise = np.abs(ref - native).max() / np.abs(native).max()
        print(f"logits vs transformers fp32: {err32:.2e}; vs transformers in {model.dtype}: "
              f"{errn:.2e} (transformers fp32 vs its own {model.dtype}: {noise:.2e})")
    ok = ok and err32 <= 1e-4
    ok = ok and (errn <= 1.01 * noise + 1e-6 if bf16 else equal)
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "build/zayac",
                  sys.argv[3] if len(sys.argv) > 3 else "A man walks into"))

#!/usr/bin/env python3
"""Reference data for zayac's tokenizer.json pipelines, made with Hugging Face `tokenizers`.

  python3 scripts/make_tok_pipeline_fixtures.py     fixtures + cross-checks (needs build/zayac)

Real checkpoints' tokenizers cannot be downloaded here, so this trains small ones shaped like them
on the fortunes corpus (fixtures in tests/fixtures/tok/):
  llama3_style.json    BPE, ignore_merges, Sequence[Split(Llama 3's regex), ByteLevel(no regex)],
                       ByteLevel decoder, TemplateProcessing post-processor, Llama 3's specials
  cl100k_style.json    the same vocabulary with tiktoken's possessive-quantifier pattern ($, ?+, ++)
  gemma3_style.json    SentencePiece-style BPE as Gemma 3: normalizer Replace(" " -> "▁"),
                       pre_tokenizer Split(" ", MergedWithPrevious), byte_fallback with all 256
                       <0xXX> tokens, decoder Sequence[Replace, ByteFallback, Fuse], specials
                       (<mask> lstrip), a normalized added token
  llama2_style.json    the Gemma vocabulary as Llama 2 ships one: normalizer Sequence[Prepend("▁"),
                       Replace], merges as "a b" strings, decoder ...+Strip(" ", 1, 0), unk with
                       fuse_unk and some byte tokens missing (emoji fall to <unk>)
  metaspace_style.json the same with a Metaspace pre-tokenizer (prepend_scheme first, no split)
                       and the Metaspace decoder
  pipeline_cases.json  per tokenizer: texts with HF's ids ("special": encode(), "plain":
                       encode_special_tokens=True) and decode() of those ids (skipping special
                       tokens or not); id lists with their HF decode
  component_cases.json pre-tokenizers (pieces), normalizers (normalized text), decoders (text) on
                       their own, for every Split behaviour, Metaspace scheme and regex rewrite:
                       {"pre_tokenizers": [{"pre_tokenizer": {..}, "cases": [[text, pieces]]}],
                        "normalizers": [.. [text, normalized]], "decoders": [.. [tokens, text]]}
Cross-checks (printed, not saved): zayac's CLI encodes thousands of random strings like HF.
"""
import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tok_fixtures as base  # noqa: E402  (fortune files, our text, random strings)

FIX = base.FIX
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CL100K_RE = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"
             r" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>"]
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]

EXTRA_CASES = [
    "def f(x):\n    return {'a': [1, 2, 3]}  # done\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "日本語のテキストです。中文文本，标点符号。한국어 텍스트",
    "🙂😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️✨ 🎉🎉🎉",
    "a\t\t\tb", "   ", "x    \n\n\n   y", "\r\n\r\n", "  \n", "\n \n \n",
    "I'M YOU'LL He'S She'D it'S 'ſ 'K 'LL'VE'RE",
    "12345678 1,234.56 ١٢٣٤٥ ৪৫৬ ½⅔ 一二三",
    "Ꙃ ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \x01\x02\x7f ࿗ 𓀀",
    "mixed: English, Русский, Ελληνικά, العربية, עברית, हिन्दी, ไทย",
    "<|begin_of_text|>Hi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello",
    "<start_of_turn>user\nhello world<end_of_turn>\n<start_of_turn>model\n",
    "a <mask> b   <mask>c <eos><bos>",
    "hello world and hello  world, hello world!",
    "▁ already ▁▁ meta ▁",
    " leading space", "trailing space ", "  two leading",
    "a" * 300, " " * 50 + "x", "ab" * 200,
    "<unk> <pad> </s> <s>",
]


def corpus():
    for p in base.fortune_files():
        with open(p, encoding="utf-8", errors="replace") as f:
            yield f.read()
    for _ in range(20):
        yield base.OUR_TEXT


def train_llama3():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_RE), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=LLAMA3_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    tok.add_tokens([AddedToken("<think>", normalized=False, special=False)])
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    d = json.loads(tok.to_str())
    cl = copy.deepcopy(d)
    cl["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = CL100K_RE
    cl["model"]["ignore_merges"] = False
    return d, cl


def train_gemma():
    """A SentencePiece-style BPE: trained on words split at ▁, shipped without the split."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=700, limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    trained = json.loads(tok.to_str())["model"]
    vocab = {}
    for s in GEMMA_SPECIALS:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    added = []
    for s in GEMMA_SPECIALS:
        added.append({"id": vocab[s], "content": s, "single_word": False, "lstrip": s == "<mask>",
                      "rstrip": False, "normalized": False, "special": True})
    added.append({"id": len(vocab), "content": "hello world", "single_word": False,
                  "lstrip": False, "rstrip": False, "normalized": True, "special": False})
    added.append({"id": len(vocab) + 1, "content": "\t\t", "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": False})
    d = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                          "behavior": "MergedWithPrevious", "invert": False},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<bos>": {"id": "<bos>", "ids": [vocab["<bos>"]],
                                                        "tokens": ["<bos>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": trained["merges"]},
    }
    llama2 = copy.deepcopy(d)
    llama2["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    llama2["pre_tokenizer"] = None
    llama2["decoder"]["decoders"].append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    llama2["model"]["merges"] = [f"{a} {b}" for a, b in trained["merges"]]
    for b in range(0xF0, 0xF5):  # 4-byte characters (emoji) have no fallback: <unk>, fused
        del llama2["model"]["vocab"][f"<0x{b:02X}>"]
    meta = copy.deepcopy(llama2)
    meta["normalizer"] = None
    meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                             "prepend_scheme": "first", "split": False}
    meta["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                       "split": False}
    return d, llama2, meta


def hf_encode(tok, text, plain):
    tok.encode_special_tokens = plain
    try:
        return tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = False


def cases_for(tok, specials, seed):
    texts = base.CASES + EXTRA_CASES + random_texts(30, seed, specials)
    rows = []
    for s in texts:
        ids = hf_encode(tok, s, False)
        rows.append({"text": s, "special": ids, "plain": hf_encode(tok, s, True),
                     "decoded": tok.decode(ids, skip_special_tokens=False),
                     "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    rng = random.Random(seed)
    id_rows = []
    while len(id_rows) < 40:
        ids = [rng.randrange(tok.get_vocab_size()) for _ in range(rng.randint(1, 8))]
        if any(tok.id_to_token(i) is None for i in ids):
            continue
        out = tok.decode(ids, skip_special_tokens=False)
        if "\ufffd" in out:  # zayac keeps the bytes where HF prints U+FFFD
            continue
        id_rows.append({"ids": ids, "decoded": out,
                        "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    return {"cases": rows, "id_cases": id_rows}


def random_texts(n, seed, specials):
    out = base.random_strings(n, seed)
    rng = random.Random(seed + 100)
    return [s if rng.random() < 0.7 else s + rng.choice(specials) + s[::-1] for s in out]


def component_cases():
    pres, norms, decs = [], [], []
    texts = ["Hello, world! It's 2024: don't-stop  now\n\nok", "  a--b---c-", "",
             "x", "日本語 テキスト\t\tend ", "'S 'll'VE 12345 ½ 🙂 a\r\n\r\nb", "axxbxxxc xx",
             "a\nb a", "a.b\na\nb", "café CAFE face 0xff", "   \n  \n x y  "]
    split_pats = [("Regex", LLAMA3_RE), ("Regex", CL100K_RE), ("Regex", r"\s+"),
                  ("String", "-"), ("Regex", "x*"), ("Regex", r"(?m)a.b"), ("Regex", r"a$"),
                  ("Regex", r"x{,2}"), ("Regex", r"\h+"), ("Regex", r"\d+"),
                  ("Regex", r"\u00e9"), ("Regex", r"[^\S\n]+"), ("Regex", r"\p{N}"),
                  ("Regex", r"(?i)[a-c]+"), ("String", "xx")]
    behaviors = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
    configs = []
    for kind, pat in split_pats:
        for beh in behaviors:
            for inv in (False, True):
                configs.append({"type": "Split", "pattern": {kind: pat}, "behavior": beh,
                                "invert": inv})
    for scheme in ("always", "first", "never"):
        for split in (True, False):
            configs.append({"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme,
                            "split": split})
    for aps in (True, False):
        for rx in (True, False):
            configs.append({"type": "ByteLevel", "add_prefix_space": aps, "trim_offsets": True,
                            "use_regex": rx})
    configs.append({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]})
    configs.append({"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        {"type": "Split", "pattern": {"String": "Ġ"}, "behavior": "MergedWithNext",
         "invert": False}]})
    configs.append({"type": "Sequence", "pretokenizers": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True},
        {"type": "Split", "pattern": {"Regex": r"\p{N}"}, "behavior": "Isolated",
         "invert": False}]})
    for c in configs:
        tok = Tokenizer.from_str(json.dumps(skeleton(pre_tokenizer=c)))
        pres.append({"pre_tokenizer": c, "cases": [
            [s, [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(s)]] for s in texts]})
    norm_configs = [
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
        {"type": "Replace", "pattern": {"Regex": r"(?i)hello"}, "content": "bye"},
        {"type": "Replace", "pattern": {"String": "xx"}, "content": "y"},
        {"type": "Replace", "pattern": {"Regex": "x*"}, "content": "-"},
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                             {"type": "Replace", "pattern": {"String": " "},
                                              "content": "▁"}]},
    ]
    for c in norm_configs:
        tok = Tokenizer.from_str(json.dumps(skeleton(normalizer=c)))
        norms.append({"normalizer": c, "cases": [
            [s, tok.normalizer.normalize_str(s)] for s in texts + ["hello HELLO hellO", "axxxxxb"]]})
    dec_configs = [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        {"type": "Strip", "content": "▁", "start": 2, "stop": 1},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": True},
        {"type": "ByteFallback"},
        {"type": "Replace", "pattern": {"Regex": r"▁+"}, "content": "_"},
    ]
    token_lists = [["▁Hello", "▁world"], ["<0xE6>", "<0x97>", "<0xA5>", "▁a", "<0x41>"],
                   ["▁▁", "x▁", "▁", "▁▁y▁▁"], ["Ġhello", "Ċ", "<|eot|>", "ĠĠ"],
                   ["<0x+5>", "<0x4g>", "<0x41>"], [], ["  a  ", " "], ["▁"], ["ab", "▁cd▁"],
                   ["<0xF0>", "<0x9F>", "<0x99>", "<0x82>", "▁ok"]]
    for c in dec_configs:
        tok = Tokenizer.from_str(json.dumps(skeleton(decoder=c)))
        decs.append({"decoder": c, "cases": []})
        for toks in token_lists:
            try:
                out = tok.decoder.decode(toks)
            except BaseException:  # HF's Strip panics when its cuts cross (pyo3 PanicException)
                continue
            if "\ufffd" not in out:
                decs[-1]["cases"].append([toks, out])
    return {"pre_tokenizers": pres, "normalizers": norms, "decoders": decs}


def skeleton(**parts):
    d = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
         "post_processor": None, "decoder": None,
         "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}
    d.update(parts)
    return d


def zayac_ids(zayac, tj, text, special):
    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        cmd = [zayac, "tokenizer", "encode", "--tokenizer", tj, "--input", path]
        if special:
            cmd.append("--special-tokens")
        r = subprocess.run(cmd, capture_output=True, check=True)
        return [int(x) for x in r.stdout.split()]
    finally:
        os.unlink(path)


def cross_check(zayac, name, tok, specials, n):
    tj = os.path.join(FIX, name)
    strings = base.CASES + EXTRA_CASES + random_texts(n, 7, specials)
    bad = tokens = 0
    for s in strings:
        for plain in (False, True):
            want = hf_encode(tok, s, plain)
            got = zayac_ids(zayac, tj, s, not plain)
            tokens += len(want)
            if want != got:
                bad += 1
                if bad <= 5:
                    print(f"  MISMATCH {name} plain={plain} {s!r}: hf {want} zayac {got}")
    print(f"{name}: {len(strings)} strings x 2 modes, {tokens} tokens, {bad} mismatches")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zayac", default=os.path.join(base.ROOT, "build", "zayac"))
    ap.add_argument("--random", type=int, default=1000, help="random strings per cross-check")
    a = ap.parse_args()
    llama3, cl100k = train_llama3()
    gemma, llama2, meta = train_gemma()
    files = {"llama3_style.json": (llama3, LLAMA3_SPECIALS),
             "cl100k_style.json": (cl100k, LLAMA3_SPECIALS),
             "gemma3_style.json": (gemma, GEMMA_SPECIALS),
             "llama2_style.json": (llama2, GEMMA_SPECIALS),
             "metaspace_style.json": (meta, GEMMA_SPECIALS)}
    all_cases, toks = {}, {}
    for i, (name, (d, specials)) in enumerate(files.items()):
        hf = Tokenizer.from_str(json.dumps(d))
        for entry in d["added_tokens"]:  # list the ids HF gives (it ignores listed ones)
            entry["id"] = hf.token_to_id(entry["content"])
        text = json.dumps(d, ensure_ascii=False, separators=(",", ":"))
        with open(os.path.join(FIX, name), "w", encoding="utf-8") as f:
            f.write(text)
        toks[name] = Tokenizer.from_str(text)  # HF reads exactly the file written
        all_cases[name] = cases_for(toks[name], specials, seed=10 + i)
    with open(os.path.join(FIX, "pipeline_cases.json"), "w", encoding="utf-8") as f:
        json.dump(all_cases, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(FIX, "component_cases.json"), "w", encoding="utf-8") as f:
        json.dump(component_cases(), f, ensure_ascii=False, separators=(",", ":"))
    print("wrote", ", ".join(files), "pipeline_cases.json, component_cases.json")
    if not os.path.exists(a.zayac):
        print(f"{a.zayac} not built: no cross-checks")
        return 0
    bad = sum(cross_check(a.zayac, name, toks[name], specials, a.random)
              for name, (_, specials) in files.items())
    print("all identical" if bad == 0 else f"{bad} MISMATCHES")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fixtures for zayac's data formats (tests/test_data_formats.c), written without zayac's code.

  python3 scripts/make_data_fixtures.py      (needs `tokenizers` and the `zstd` command)

tests/fixtures/data/:
  tok.json            a small byte-level BPE tokenizer trained and saved by HF `tokenizers`
  docs.jsonl          JSON Lines, one {"id", "text", "meta"} record a document (DOCS in order)
  docs.jsonl.gz       the same bytes, gzip (Python's gzip module) in two members, as pigz and
                      bgzip write them
  docs.jsonl.zst      the same bytes, zstd (the zstd command)
  content.jsonl       the same documents under the field "content" (--text-field content)
  lines.txt.gz        LINES, one a line (a text file read with --doc-sep line)
  expected.json       the documents ("texts"), HF's ids of each ("docs", "lines") and the eos id
  mg_u16.{bin,idx}    a Megatron indexed dataset (MMIDIDX version 1, uint16 elements) written
                      from the format description with struct, and mg_i32.{bin,idx} (int32
                      elements); expected.json "megatron" holds their sequences and documents
"""
import gzip
import json
import os
import random
import struct
import subprocess

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "data")

# Documents we wrote: prose, code, CJK, emoji, whitespace runs, escapes JSON must carry.
DOCS = [
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b  # tabs\tand spaces\n",
    "日本語のテキストです。東京は大きな都市です。中文文本也在这里。",
    "Emoji: 🙂 😀 👍🏽 🎉🎉 🇫🇷 👨‍👩‍👧‍👦 ❤️ ✨",
    "   leading spaces, trailing spaces   ",
    "line one\n\n\nline four after blank lines\r\nwindows ending",
    'quotes "inside" and a backslash \\ and a slash / in the text',
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "a" * 200,
    "numbers 3.14159 2,718 1000000 ½ ⅔ ١٢٣",
]

LINES = [
    "first line of a plain text file",
    "second line: ümlauts, ß and ñ",
    "third line with    runs   of spaces",
    "四行目",
]


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(DOCS * 3 + LINES * 3, trainer=trainer)
    return tok


def hf_ids(tok, text):
    tok.encode_special_tokens = True  # zayac's plain encoding: special-token text is text
    return tok.encode(text, add_special_tokens=False).ids


def write_megatron(prefix, dtype_code, fmt, sequences, doc_starts):
    """MMIDIDX: magic, version u64 1, dtype u8, count u64, doc count u64, sizes i32[count],
    pointers i64[count] (byte offsets into .bin), doc_idx i64[doc count]."""
    item = struct.calcsize("<" + fmt)
    with open(prefix + ".bin", "wb") as f:
        for seq in sequences:
            f.write(struct.pack("<%d%s" % (len(seq), fmt), *seq))
    sizes = [len(s) for s in sequences]
    pointers, at = [], 0
    for n in sizes:
        pointers.append(at)
        at += n * item
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", dtype_code))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_starts)))
        f.write(struct.pack("<%di" % len(sizes), *sizes))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_starts), *doc_starts))


def main():
    os.makedirs(FIX, exist_ok=True)
    tok = train_tokenizer()
    tok.save(os.path.join(FIX, "tok.json"))
    eos = tok.token_to_id("<|endoftext|>")

    records = [{"id": i, "text": t, "meta": {"source": "ours", "n": [i, i * 2]}} for i, t in
               enumerate(DOCS)]
    jsonl = "".join(json.dumps(r, ensure_ascii=(r["id"] % 2 == 0)) + "\n" for r in records)
    data = jsonl.encode("utf-8")
    with open(os.path.join(FIX, "docs.jsonl"), "wb") as f:
        f.write(data)
    half = len(data) // 2
    with open(os.path.join(FIX, "docs.jsonl.gz"), "wb") as f:
        f.write(gzip.compress(data[:half], mtime=0) + gzip.compress(data[half:], mtime=0))
    subprocess.run(["zstd", "-q", "-f", "-19", os.path.join(FIX, "docs.jsonl"), "-o",
                    os.path.join(FIX, "docs.jsonl.zst")], check=True)
    with open(os.path.join(FIX, "content.jsonl"), "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps({"content": r["text"], "text_len": len(r["text"])}) + "\n")
    with open(os.path.join(FIX, "lines.txt.gz"), "wb") as f:
        f.write(gzip.compress(("\n".join(LINES) + "\n").encode("utf-8"), mtime=0))

    rng = random.Random(15)
    u16 = [[rng.randrange(0, 400) for _ in range(rng.randrange(1, 40))] for _ in range(12)]
    u16[3] = [399, 0, 65535 % 400]
    i32 = [[rng.randrange(0, 50000) for _ in range(rng.randrange(5, 30))] for _ in range(7)]
    write_megatron(os.path.join(FIX, "mg_u16"), 8, "H", u16, [0, 2, 5, 9, 12])
    write_megatron(os.path.join(FIX, "mg_i32"), 4, "i", i32, [0, 3, 7])

    expected = {
        "eos": eos,
        "texts": DOCS,
        "vocab_size": tok.get_vocab_size(),
        "docs": [hf_ids(tok, t) for t in DOCS],
        "lines": [hf_ids(tok, t) for t in LINES],
        "megatron": {
            "mg_u16": {"sequences": u16, "doc_idx": [0, 2, 5, 9, 12]},
            "mg_i32": {"sequences": i32, "doc_idx": [0, 3, 7]},
        },
    }
    with open(os.path.join(FIX, "expected.json"), "w") as f:
        json.dump(expected, f)
        f.write("\n")
    print("wrote", FIX)


if __name__ == "__main__":
    main()

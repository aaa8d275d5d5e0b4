#!/usr/bin/env python3
"""Reference data for zayac's tokenizer, made with Hugging Face `tokenizers`.

  python3 scripts/make_tok_fixtures.py            fixtures + cross-checks (needs build/zayac)
  python3 scripts/make_tok_fixtures.py --unicode  regenerate src/data/unicode_gpt2.c (about a minute)

Fixtures (tests/fixtures/tok/):
  hf_gpt2_style.json  a GPT-2-style tokenizer trained and saved by HF (BPE, ByteLevel pre-tokenizer
                      without prefix space, ByteLevel decoder and post-processor, ~1000 ids) with a
                      few added tokens (<|endoftext|>, <mask> lstrip, <sep> rstrip, <sw> single_word,
                      [NEW] non-special normalized)
  hf_cases.json       test strings and HF's ids for them: "special" = HF encode (special tokens
                      matched), "plain" = encode_special_tokens=True, "prefix" = the same tokenizer
                      with add_prefix_space=true
Cross-checks (printed, not saved): zayac encodes every case and a few thousand random strings
like HF; a tokenizer trained and written by zayac loads in HF and gives zayac's ids.

unicode_gpt2.c holds the letters and digits of HF's GPT-2 split pattern and the word characters
of its single_word rule, measured from HF itself (its regex engines' Unicode tables are newer than
many PCRE2 builds): pretok.c adds what PCRE2's own classes lack so zayac splits exactly as HF.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "tok")
FORTUNES = "/usr/share/games/fortunes"

# Text we wrote, mixing scripts, so the fixture tokenizer learns some non-ASCII merges.
OUR_TEXT = """
Ünïcödé façade, naïve résumé: the café served crème brûlée and jalapeño piñatas.
Привет, мир! Это короткий текст на русском языке для проверки токенизатора.
Быстрая коричневая лиса прыгает через ленивую собаку. Ещё раз: лиса, собака.
日本語のテキストです。東京は大きな都市です。中文文本也在这里。
한국어 텍스트도 조금 있습니다. 서울은 큰 도시입니다.
Ελληνικά: η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.
مرحبا بالعالم، هذا نص قصير. שלום עולם, זה טקסט קצר.
Emoji: 🙂 😀 👍🏽 🎉🎉 🇫🇷 👨‍👩‍👧‍👦 ❤️ ✨
Numbers: 3.14159 2,718 1000000 ½ ⅔ ١٢٣ ৪৫৬
def tokenize(text):\n    return [t for t in text.split()]  # a comment\n\tpass
"""

CASES = [
    "",
    "Hello, world! It's a test: don't we'll they've I'm you'd she'll",
    "'s 's's 'S 'LL 're've 'd'm't",
    "  leading spaces",
    "trailing spaces   ",
    "tabs\tand\nnewlines\r\n\r\nend",
    "\n\n\n",
    "   \n  \n  x",
    "a  b   c    d     e",
    "Ünïcödé façade naïve résumé",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "日本語のテキスト、中文文本。",
    "한국어 텍스트",
    "مرحبا بالعالم שלום עולם Ελληνικά",
    "🙂😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️✨",
    "1234567890 3.14159 1,000,000 ½ ⅔ ١٢٣ 一二三",
    "!!!??? ... --- *** ===>>> ''' \"\"\"",
    "\u00a0nbsp\u3000ideographic\u2028line\u2029para\u180emongolian\u200bzwsp\u0085nel\x0bvt\x0cff",
    " \u3000 x \u180e y",
    "e\u0301 a\u0308 n\u0303",
    "def f(x):\n    return x**2  # comment\n\tif x > 0: pass",
    "a" * 300,
    " " * 50 + "x",
    "\n" * 20,
    "\u1c89\u1c8a test \U000105c0\U000105c1 \U00011380x",
    "<|endoftext|>",
    "text<|endoftext|>more text<|endoftext|>",
    "a <mask> b",
    "a     <mask>b",
    "x <sep>   y",
    "<sw> word<sw>word <sw>",
    "[NEW]token [NEW] ",
    "<|endoftext|><|endoftext|> <mask><sep>",
]


def fortune_files():
    if not os.path.isdir(FORTUNES):
        sys.exit(f"{FORTUNES} is missing: apt-get install fortunes")
    out = []
    for name in sorted(os.listdir(FORTUNES)):
        p = os.path.join(FORTUNES, name)
        if "." in name or os.path.islink(p) or not os.path.isfile(p):
            continue
        out.append(p)
    return out


def random_strings(n, seed):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " \t\n\r\x0b\x0c\u00a0\u3000\u2028\u0085\u180e",
        " ",
        "'\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`",
        "éüñçßøåæœ",
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
        "的一是不了人我在有他这中大来上",
        "\U0001F600\U0001F44D\U0001F3FD\u200d\U0001F1EB\u2764\ufe0f",
        "\u0301\u0308\u0303",
        "½⅔١٢৪",
        "\u1c89\U000105c0\U00011380",
    ]
    words = ["<|endoftext|>", "<mask>", "<sep>", "<sw>", "[NEW]", "'s", "'ll", "the", " the"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.1:
                parts.append(rng.choice(words))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def train_hf():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def texts():
        for p in fortune_files():
            with open(p, encoding="utf-8", errors="replace") as f:
                yield f.read()
        for _ in range(20):
            yield OUR_TEXT

    tok.train_from_iterator(texts(), trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.add_special_tokens([AddedToken("<sep>", rstrip=True, special=True, normalized=False)])
    tok.add_special_tokens([AddedToken("<sw>", single_word=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("[NEW]", normalized=True, special=False)])
    return tok


def hf_ids(tok, text, mode):
    if mode == "plain":
        tok.encode_special_tokens = True
    try:
        return tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = False


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


def with_prefix_space(tok):
    d = json.loads(tok.to_str())
    d["pre_tokenizer"]["add_prefix_space"] = True
    return Tokenizer.from_str(json.dumps(d))


def cross_check(zayac, tj, tok, tok_pfx, strings, label):
    """zayac vs HF on strings, in every mode; returns the number of mismatches."""
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        pfx_path = os.path.join(d, "pfx.json")
        tok_pfx.save(pfx_path)
        for s in strings:
            for mode, path, ref, special in (
                ("special", tj, tok, True),
                ("plain", tj, tok, False),
                ("prefix", pfx_path, tok_pfx, True),
            ):
                want = hf_ids(ref, s, mode)
                got = zayac_ids(zayac, path, s, special)
                if want != got:
                    bad += 1
                    if bad <= 10:
                        print(f"  MISMATCH {label} {mode} {s!r}: hf {want} zayac {got}")
    print(f"{label}: {len(strings)} strings x 3 modes, {bad} mismatches")
    return bad


def make_fixtures(zayac):
    os.makedirs(FIX, exist_ok=True)
    tok = train_hf()
    tj = os.path.join(FIX, "hf_gpt2_style.json")
    tok.save(tj)
    tok_pfx = with_prefix_space(tok)
    cases = CASES + random_strings(40, seed=1)
    rows = []
    for s in cases:
        rows.append({
            "text": s,
            "special": hf_ids(tok, s, "special"),
            "plain": hf_ids(tok, s, "plain"),
            "prefix": hf_ids(tok_pfx, s, "special"),
        })
    with open(os.path.join(FIX, "hf_cases.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, ensure_ascii=False, indent=0)
    print(f"wrote {tj} ({tok.get_vocab_size()} ids) and hf_cases.json ({len(rows)} cases)")
    if not zayac:
        return 0
    bad = cross_check(zayac, tj, tok, tok_pfx, cases + random_strings(1500, seed=2), "HF file")

    # A tokenizer trained and written by zayac, read by HF.
    with tempfile.TemporaryDirectory() as d:
        corpus = os.path.join(d, "ours.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write(OUR_TEXT * 20)
        zj = os.path.join(d, "zayac.json")
        subprocess.run([zayac, "tokenizer", "train", "--input", corpus] + fortune_files() +
                       ["--vocab-size", "2000", "--out", zj, "--doc-sep", "fortune"],
                       check=True, capture_output=True)
        ztok = Tokenizer.from_file(zj)
        print(f"zayac-trained tokenizer loads in HF: {ztok.get_vocab_size()} ids")
        zpfx = with_prefix_space(ztok)
        bad += cross_check(zayac, zj, ztok, zpfx, cases + random_strings(500, seed=3), "zayac file")
        nfiles = 0
        for p in fortune_files():
            with open(p, encoding="utf-8", errors="strict") as f:
                text = f.read()
            if ztok.encode(text, add_special_tokens=False).ids != zayac_ids(zayac, zj, text, True):
                bad += 1
                print(f"  MISMATCH on {p}")
            nfiles += 1
        print(f"zayac file on {nfiles} fortune files: compared")
    print("all identical" if bad == 0 else f"{bad} MISMATCHES")
    return 1 if bad else 0


def classify(prefix):
    """Code points the pattern treats like `prefix` (a letter or a digit): prefix+c is one piece."""
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False)
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and c != 10]
    found = set()
    for start in range(0, len(cps), 200000):
        chunk = cps[start:start + 200000]
        text = "".join(f"{prefix}{chr(c)}\n" for c in chunk)
        groups, cur = [], []
        for piece, _ in pre.pre_tokenize_str(text):
            cur.append(piece)
            if piece.endswith("\u010a"):  # the newline's byte-level character ends each line
                groups.append(cur)
                cur = []
        assert len(groups) == len(chunk)
        found.update(c for c, g in zip(chunk, groups) if len(g) == 2)
    return found


def classify_word():
    """Code points HF's added-token matching counts as word characters (Rust regex \\w): a
    single_word token right after one is not matched."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.add_special_tokens([AddedToken("<sw>", single_word=True, special=True, normalized=False)])
    sw = tok.token_to_id("<sw>")
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    found = set()
    for start in range(0, len(cps), 100000):
        chunk = cps[start:start + 100000]
        encs = tok.encode_batch([chr(c) + "<sw>" for c in chunk], add_special_tokens=False)
        found.update(c for c, e in zip(chunk, encs) if sw not in e.ids)
    return found


def ranges(s):
    out = []
    for c in sorted(s):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def make_unicode():
    import tokenizers
    letters, digits = ranges(classify("a")), ranges(classify("1"))
    word = ranges(classify_word())
    path = os.path.join(ROOT, "src", "data", "unicode_gpt2.c")
    with open(path, "w") as f:
        f.write("/* Generated by scripts/make_tok_fixtures.py --unicode from Hugging Face tokenizers "
                f"{tokenizers.__version__}: the code\n * points its GPT-2 split pattern treats as "
                "letters (\\p{L}) and digits (\\p{N}), and the word\n * characters (\\w) of its "
                "single_word rule for added tokens, as inclusive ranges. */\n")
        f.write('#include "data/pretok.h"\n\n')
        for name, rs in (("letters", letters), ("digits", digits), ("word", word)):
            f.write(f"const uint32_t zy_gpt2_{name}[][2] = {{\n")
            for i in range(0, len(rs), 4):
                f.write("    " + " ".join(f"{{0x{a:X}, 0x{b:X}}}," for a, b in rs[i:i + 4]) + "\n")
            f.write("};\n")
            f.write(f"const int zy_gpt2_n_{name} = {len(rs)};\n\n")
    os.system(f"clang-format -i {path}")
    print(f"wrote {path}: {len(letters)} letter, {len(digits)} digit, {len(word)} word ranges")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zayac", default=os.path.join(ROOT, "build", "zayac"))
    ap.add_argument("--unicode", action="store_true")
    a = ap.parse_args()
    if a.unicode:
        make_unicode()
        return 0
    zayac = a.zayac if os.path.exists(a.zayac) else None
    if not zayac:
        print(f"{a.zayac} not built: writing fixtures without the cross-checks")
    return make_fixtures(zayac)


if __name__ == "__main__":
    sys.exit(main())

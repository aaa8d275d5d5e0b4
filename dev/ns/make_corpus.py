#!/usr/bin/env python3
"""A corpus larger than fortunes for optimizer comparisons longer than one pass over it: Python's
standard library sources and the text/Markdown files of /usr/share/doc on this machine (text
nobody here wrote), one document per file, sampled up to a byte budget each.

Usage: python3 dev/ns/make_corpus.py OUT_DIR [PY_MB] [DOC_MB]
Then (from the zayac root), with the fortunes as well:
  build-cpu/zayac tokenizer train --input OUT_DIR/py OUT_DIR/doc /usr/share/games/fortunes \
      --doc-sep file --vocab-size 4096 --out runs/big/tokenizer.json
  build-cpu/zayac data prepare --tokenizer runs/big/tokenizer.json --input OUT_DIR/py \
      OUT_DIR/doc /usr/share/games/fortunes --doc-sep file --val-fraction 0.01 \
      --out runs/big/data --force
  DATA=runs/big/data ... bash dev/ns/ns_steps_study.sh
The files come from what this machine has installed, so the corpus differs between machines; the
choice among them is fixed (sorted paths, seeded shuffle)."""
import hashlib
import os
import random
import sys
import sysconfig


def files_under(root, keep, skip=None):
    out = []
    for d, dirs, names in os.walk(root):
        dirs.sort()
        if skip and skip in d:
            continue
        out += [os.path.join(d, n) for n in sorted(names) if keep(n)]
    return out


def sample(paths, budget, out_dir, rng):
    """Copies files in a seeded order until `budget` bytes; skips tiny, huge and non-UTF-8 ones."""
    os.makedirs(out_dir, exist_ok=True)
    rng.shuffle(paths)
    total = count = 0
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) < 200 or len(text) > 400_000:
            continue
        name = hashlib.md5(p.encode()).hexdigest()[:12] + ".txt"  # flat, collision-free names
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write(text)
        total += len(text)
        count += 1
        if total > budget:
            break
    print(f"{out_dir}: {count} files, {total / 1e6:.2f} MB")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    py_mb = float(sys.argv[2]) if len(sys.argv) > 2 else 14
    doc_mb = float(sys.argv[3]) if len(sys.argv) > 3 else 8
    rng = random.Random(1)
    stdlib = sysconfig.get_paths()["stdlib"]
    sample(files_under(stdlib, lambda n: n.endswith(".py"), skip="site-packages"),
           py_mb * 1e6, os.path.join(out, "py"), rng)
    sample(files_under("/usr/share/doc", lambda n: n.endswith((".txt", ".md"))),
           doc_mb * 1e6, os.path.join(out, "doc"), rng)


if __name__ == "__main__":
    main()

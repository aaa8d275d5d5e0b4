#!/usr/bin/env python3
"""Checks PNG files written by zayac (src/base/png.c) with independent decoders (not run in CI).

usage: python3 scripts/check_png.py FILE.png...

Each file is decoded twice: by Pillow (pip install pillow; verify() checks every chunk CRC) and by
zlib plus the PNG row filters undone here; the two must give the same pixels. Prints the size,
the compressed size beside Pillow's own best effort, and the colour of the top-left pixel.
"""
import io
import struct
import sys
import zlib

from PIL import Image


def own_decode(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "bad signature"
    at, idat, w = 8, b"", None
    while at < len(data):
        (n,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + n]
        (crc,) = struct.unpack(">I", data[at + 8 + n:at + 12 + n])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind}"
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert (depth, ctype) == (8, 2), "expected RGB8"
        elif kind == b"IDAT":
            idat += body
        at += 12 + n
    raw = zlib.decompress(idat)  # checks the Adler-32 trailer
    stride = w * 3
    assert len(raw) == h * (stride + 1), "wrong decompressed size"
    out, prev = bytearray(), bytearray(stride)
    for y in range(h):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - 3] if i >= 3 else 0
            b = prev[i]
            c = prev[i - 3] if i >= 3 else 0
            if f == 1:
                row[i] = (row[i] + a) & 255
            elif f == 2:
                row[i] = (row[i] + b) & 255
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            else:
                assert f == 0, f"bad filter {f}"
        out += row
        prev = row
    return w, h, bytes(out)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for path in sys.argv[1:]:
        data = open(path, "rb").read()
        Image.open(path).verify()
        im = Image.open(path)
        im.load()
        w, h, pixels = own_decode(data)
        assert im.size == (w, h) and im.mode == "RGB", f"{path}: Pillow sees {im.size} {im.mode}"
        assert im.tobytes() == pixels, f"{path}: Pillow and zlib+unfilter disagree"
        best = io.BytesIO()
        im.save(best, "PNG", optimize=True)
        print(f"{path}: {w}x{h} OK, {len(data)} bytes (Pillow optimize: {len(best.getvalue())}), "
              f"top-left {im.getpixel((0, 0))}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes one fp32 tensor of a safetensors file as raw little-endian fp32 (for gram_ns_study), or
lists the file's tensors. Standard library only.

  python3 dev/ns/st_tensor.py FILE.safetensors list
  python3 dev/ns/st_tensor.py FILE.safetensors NAME OUT.bin [FIRST_ELEMENT COUNT]
"""
import json
import struct
import sys


def main():
    path, name = sys.argv[1], sys.argv[2]
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
        if name == 'list':
            for k, v in header.items():
                if k != '__metadata__':
                    print(k, v['dtype'], v['shape'])
            return 0
        if name not in header or header[name]['dtype'] != 'F32':
            print(f'{path}: no F32 tensor {name}', file=sys.stderr)
            return 2
        a, b = header[name]['data_offsets']
        first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
        count = int(sys.argv[5]) if len(sys.argv) > 5 else (b - a) // 4 - first
        if first < 0 or count < 1 or a + 4 * (first + count) > b:
            print(f'{path}: {name} has {(b - a) // 4} elements, not {first} + {count}',
                  file=sys.stderr)
            return 2
        f.seek(8 + n + a + 4 * first)
        data = f.read(4 * count)
    with open(sys.argv[3], 'wb') as out:
        out.write(data)
    print(name, header[name]['shape'], f'elements {first}..{first + count}')
    return 0


if __name__ == '__main__':
    sys.exit(main())

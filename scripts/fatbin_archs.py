#!/usr/bin/env python3
"""The CUDA code a shared library or object carries, as `cuobjdump --list-elf
--list-ptx` would count it, for machines without cuobjdump: each fatbin
container of its .nv_fatbin section (magic 0xBA55ED50) and each entry's kind
(2: ELF machine code "sm_XX", 1: PTX "compute_XX") and architecture (the
entry header's word at byte 28).
  scripts/fatbin_archs.py FILE [--need sm_90]
prints one line per kind and architecture with the number of entries; with
--need, exits 1 unless FILE has ELF (SASS) entries for that architecture."""
import collections
import struct
import sys


def sections(data):
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit("fatbin_archs.py: not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = heads[shstrndx][4]
    for h in heads:
        end = data.index(b"\0", names + h[0])
        yield data[names + h[0]:end].decode(), data[h[4]:h[4] + h[5]]


def entries(fb):
    off = 0
    while off + 16 <= len(fb):
        magic, _, hsz, fsz = struct.unpack_from("<IHHQ", fb, off)
        if magic != 0xBA55ED50:
            off += 8  # containers are 8-byte aligned
            continue
        p, end = off + hsz, off + hsz + fsz
        while p < end:
            kind, _, ehsz, size = struct.unpack_from("<HHIQ", fb, p)
            arch, = struct.unpack_from("<I", fb, p + 28)
            yield {1: "compute", 2: "sm"}.get(kind, "kind%d" % kind), arch
            p += ehsz + size
        off = end


def main():
    args = sys.argv[1:]
    need = None
    if "--need" in args:
        i = args.index("--need")
        need = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    with open(args[0], "rb") as f:
        data = f.read()
    count = collections.Counter()
    for name, sec in sections(data):
        if name == ".nv_fatbin":
            for kind, arch in entries(sec):
                count["%s_%d" % (kind, arch)] += 1
    for k in sorted(count):
        print("%s: %d %s" % (k, count[k], "ELF (SASS)" if k.startswith("sm_") else "PTX"))
    if need and count[need] == 0:
        print("fatbin_archs.py: %s has no %s machine code" % (args[0], need), file=sys.stderr)
        sys.exit(1)


main()

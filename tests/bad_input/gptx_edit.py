#!/usr/bin/env python3
"""Edits a .gptx artifact and writes it back with a valid container: the
header's file size, each section's length and the FNV-1a-64 trailer are
recomputed (docs/ARTIFACT.md), so the reader's checksum passes and only the
checks of what the sections mean can refuse the file.

  gptx_edit.py IN OUT EDIT...

EDIT is one of
  set SECTION PATH JSON   set a value in a JSON section; PATH is dot-separated
                          object keys and list indices, and KEY=VALUE picks the
                          first list element whose KEY is VALUE
                          (plan entries.0.thunks.kind=kernel.grid)
  cut SECTION FRACTION    keep the first FRACTION (e.g. 0.33) of a section
"""
import json
import struct
import sys


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def read(path):
    data = open(path, "rb").read()
    magic, version, _, count = struct.unpack_from("<4sIQI", data, 0)
    assert magic == b"GPTX", "not a gptx artifact"
    at, sections = 20, []
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, at)
        name = data[at + 4 : at + 4 + n].decode()
        at += 4 + n
        (length,) = struct.unpack_from("<Q", data, at)
        sections.append([name, data[at + 8 : at + 8 + length]])
        at += 8 + length
    return version, sections


def write(path, version, sections):
    body = b"".join(
        struct.pack("<I", len(name)) + name.encode() + struct.pack("<Q", len(b)) + b
        for name, b in sections
    )
    size = 20 + len(body) + 8
    out = struct.pack("<4sIQI", b"GPTX", version, size, len(sections)) + body
    open(path, "wb").write(out + struct.pack("<Q", fnv1a64(out)))


def step(node, key):
    if "=" in key:
        field, value = key.split("=", 1)
        return next(i for i, x in enumerate(node) if str(x.get(field)) == value)
    return int(key) if isinstance(node, list) else key


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    version, sections = read(argv[1])
    by_name = {s[0]: s for s in sections}
    edits = argv[3:]
    while edits:
        if edits[0] == "set":
            _, section, path, value = edits[:4]
            edits = edits[4:]
            doc = json.loads(by_name[section][1])
            keys = path.split(".")
            node = doc
            for key in keys[:-1]:
                node = node[step(node, key)]
            node[step(node, keys[-1])] = json.loads(value)
            by_name[section][1] = json.dumps(doc, sort_keys=True).encode()
        elif edits[0] == "cut":
            _, section, fraction = edits[:3]
            edits = edits[3:]
            data = by_name[section][1]
            by_name[section][1] = data[: int(len(data) * float(fraction))]
        else:
            sys.exit("unknown edit " + edits[0])
    write(argv[2], version, sections)


if __name__ == "__main__":
    main(sys.argv)

#!/usr/bin/env python3
"""chunk_sharing.py: how much of a checkpoint content-defined chunking would
share with the one before it (docs/scale-out.md §4).

    chunk_sharing.py A.svp B.svp [C.svp ...]

Cuts each savepoint file into chunks with a gear rolling hash (4 KiB
minimum, 16 KiB average, 64 KiB maximum) and prints, for each file after
the first, the share of its bytes that lie in chunks the file before it
also has. To make the files, run a job and savepoint it twice:

    weir run --state-dir st counter --records 100M --keys 200000 \\
        --rate 20000 --sink null --quiet &
    sleep 4; weir savepoint --state-dir st --out a.svp
    sleep 1; weir savepoint --state-dir st --out b.svp
    weir stop --state-dir st
    bench/chunk_sharing.py a.svp b.svp
"""
import hashlib
import random
import sys

MIN, AVG_BITS, MAX = 4096, 14, 65536
_rng = random.Random(1)
GEAR = [_rng.getrandbits(64) for _ in range(256)]
MASK64 = (1 << 64) - 1


def chunks(data):
    out, i, n = [], 0, len(data)
    while i < n:
        h, j, end = 0, i, min(n, i + MAX)
        cut = end
        while j < end:
            h = ((h << 1) + GEAR[data[j]]) & MASK64
            j += 1
            if j - i >= MIN and (h >> (64 - AVG_BITS)) == 0:
                cut = j
                break
        out.append((hashlib.sha1(data[i:cut]).digest(), cut - i))
        i = cut
    return out


def main(paths):
    if len(paths) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    prev = None
    for p in paths:
        with open(p, "rb") as f:
            data = f.read()
        cs = chunks(data)
        if prev is not None:
            seen = set(prev)
            shared = sum(n for c, n in cs if (c, n) in seen)
            print("%s: %d bytes in %d chunks, %.1f%% of them shared with the one before"
                  % (p, len(data), len(cs), 100.0 * shared / max(1, len(data))))
        prev = cs
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Compare the glued values of two sets of ``posgeom run`` results: a refactor must leave every number as it was.

    python scripts/compare_results.py OLD NEW [--rename old=new ...] [--renames FILE] [--rtol 0]

OLD and NEW are result folders (``<dir>/<chapter>/results.json``) or ``REV:path`` for a folder committed at a
git revision (e.g. ``HEAD~3:book/results/reference``). Every key of OLD must be in NEW (after renaming) with an
identical value (exactly equal, or for floats within ``--atol + --rtol * max(|a|, |b|)`` when asked: rerunning
unchanged code on another CPU, or under another load, moves float32 training results by about 1e-6 and values
that are rounding error, such as a stress of 1e-31, by 100%); keys only NEW has are listed as added. ``--renames FILE`` reads ``old new`` pairs, one per line (``#`` starts a comment); a pair may name a
chapter, ``chapter:old chapter:new``. Exits 1 on any difference, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any


def load(spec: str) -> dict[str, dict[str, Any]]:
    """``{chapter: results}`` of a folder, or of ``REV:path`` in git."""
    if ":" in spec and not Path(spec).exists():
        rev, path = spec.split(":", 1)
        names = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", rev, path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        out = {}
        for name in names:
            if name.endswith("/results.json"):
                text = subprocess.run(
                    ["git", "show", f"{rev}:{name}"], capture_output=True, text=True, check=True
                ).stdout
                out[Path(name).parent.name] = json.loads(text)["results"]
        return out
    return {
        p.parent.name: json.loads(p.read_text())["results"]
        for p in sorted(Path(spec).glob("*/results.json"))
    }


def same(a: Any, b: Any, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Equal values; numbers within ``atol + rtol * max(|a|, |b|)``, NaN equal to NaN; lists and dicts
    element by element."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, rtol, atol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rtol, atol) for k in a)
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    if numbers:
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b or abs(a - b) <= atol + rtol * max(abs(a), abs(b))
    return a == b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument(
        "--rename", action="append", default=[], help="old=new (key or chapter:key)"
    )
    parser.add_argument("--renames", type=Path, help="a file of 'old new' pairs")
    parser.add_argument(
        "--rtol", type=float, default=0.0, help="relative tolerance for numbers (default 0)"
    )
    parser.add_argument(
        "--atol", type=float, default=0.0, help="absolute tolerance for numbers (default 0)"
    )
    parser.add_argument("--chapters", nargs="*", help="compare only these chapters")
    args = parser.parse_args(argv)
    pairs = [r.split("=", 1) for r in args.rename]
    if args.renames:
        for line in args.renames.read_text().splitlines():
            line = line.split("#", 1)[0].split()
            if line:
                pairs.append(line)
    old, new = load(args.old), load(args.new)
    bad = 0
    for chapter in sorted(old):
        if args.chapters and chapter not in args.chapters:
            continue
        if chapter not in new:
            print(f"{chapter}: missing in {args.new}")
            bad += 1
            continue
        renames = {}
        for a, b in pairs:
            if ":" in a:
                ca, a = a.split(":", 1)
                if ca != chapter:
                    continue
                b = b.split(":", 1)[-1]
            renames[a] = b
        mine, theirs = old[chapter], new[chapter]
        missing = object()
        found = [(k, a, theirs.get(renames.get(k, k), missing)) for k, a in mine.items()]
        exact = sum(b is not missing and same(a, b) for _, a, b in found)
        differ = [
            (k, a, "<missing>" if b is missing else b)
            for k, a, b in found
            if b is missing or not same(a, b, args.rtol, args.atol)
        ]
        added = sorted(set(theirs) - {renames.get(k, k) for k in mine})
        note = f" ({exact} exactly)" if args.rtol or args.atol else ""
        more = f", {len(added)} added ({', '.join(added[:8])}{', ...' if len(added) > 8 else ''})"
        print(
            f"{chapter}: {len(mine) - len(differ)} of {len(mine)} values identical{note}"
            + (more if added else "")
        )
        for key, a, b in differ[:40]:
            print(f"    {key}: {a!r} -> {b!r}")
        bad += bool(differ)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

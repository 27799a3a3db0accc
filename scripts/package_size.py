"""The size of the helper package: lines per subpackage (``wc -l``), and every function longer than a limit.

    python scripts/package_size.py [--limit 60] [--budget 6000]

Exits 1 when the package is over ``--budget`` lines or a function is over ``--limit`` lines (decorators and
docstring included), so CI can hold the package small.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "posgeom_utils"


def sizes(package: Path = PACKAGE) -> tuple[Counter, list[tuple[int, str]]]:
    """(lines per subpackage, [(lines, "file:function")] of every function) of ``package``."""
    lines: Counter = Counter()
    functions = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        part = path.relative_to(package).parts
        lines[part[0] if len(part) > 1 else "(science)"] += text.count("\n")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                functions.append(
                    (node.end_lineno - start + 1, f"{path.relative_to(package.parent)}:{node.name}")
                )
    return lines, sorted(functions, reverse=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--limit", type=int, default=60, help="the longest a function may be (lines)"
    )
    parser.add_argument(
        "--budget", type=int, default=6000, help="the most lines the package may have"
    )
    args = parser.parse_args(argv)
    lines, functions = sizes()
    for name, count in sorted(lines.items()):
        print(f"{name:>12}  {count:6d}")
    total = sum(lines.values())
    print(f"{'total':>12}  {total:6d}  (budget {args.budget})")
    long = [(n, f) for n, f in functions if n > args.limit]
    print(
        f"functions over {args.limit} lines: {len(long)}"
        + "".join(f"\n  {n:4d}  {f}" for n, f in long)
    )
    print(
        f"longest function: {functions[0][0]} lines ({functions[0][1]})"
        if functions
        else "no functions"
    )
    return 1 if total > args.budget or long else 0


if __name__ == "__main__":
    sys.exit(main())

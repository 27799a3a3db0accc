"""The size of the helper package: lines per subpackage (``wc -l``), and every function longer than a limit.

    python scripts/package_size.py [--limit 60] [--budget 7250] [--science 4830] [--machinery 2420]

Science is the top-level ``posgeom_utils/*.py`` plus ``repro/results.py`` (hashed into the chapters'
results); machinery is the rest of ``repro/``, ``scale/`` and ``teaching/``. Exits 1 when the package is
over ``--budget`` lines, science over ``--science``, machinery over ``--machinery``, or a function is over
``--limit`` lines (decorators and docstring included), so CI can hold the package small.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "posgeom_utils"
#: files under a subpackage that count as science: hashed into the chapters' results
SCIENCE_FILES = ("repro/results.py",)


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


def science_lines(package: Path = PACKAGE) -> int:
    """Lines of science: the top-level modules and :data:`SCIENCE_FILES`."""
    files = [*package.glob("*.py"), *(package / f for f in SCIENCE_FILES)]
    return sum(p.read_text(encoding="utf-8").count("\n") for p in files if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--limit", type=int, default=60, help="the longest a function may be (lines)"
    )
    parser.add_argument(
        "--budget", type=int, default=7250, help="the most lines the package may have"
    )
    parser.add_argument(
        "--science", type=int, default=4830, help="the most lines of science"
    )
    parser.add_argument(
        "--machinery", type=int, default=2420, help="the most lines of machinery"
    )
    args = parser.parse_args(argv)
    lines, functions = sizes()
    for name, count in sorted(lines.items()):
        print(f"{name:>12}  {count:6d}")
    total = sum(lines.values())
    science = science_lines()
    machinery = total - science
    print(f"{'total':>12}  {total:6d}  (budget {args.budget})")
    print(f"{'science':>12}  {science:6d}  (budget {args.science}; with {', '.join(SCIENCE_FILES)})")
    print(f"{'machinery':>12}  {machinery:6d}  (budget {args.machinery})")
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
    over = total > args.budget or science > args.science or machinery > args.machinery
    return 1 if over or long else 0


if __name__ == "__main__":
    sys.exit(main())

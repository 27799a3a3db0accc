"""The claims the chapters' prose makes about computed numbers, checked against their results.

Chapter: *Reproduction ledger* (``book/ledger.md``). Every sentence of a chapter that rests on a computed
number (``the model without positions stays at chance``, ``full-rank MDS has zero stress``) is written once
in ``book/claims.yaml`` with a machine-checkable condition on the chapter's glued keys, and the profiles at
which the prose asserts it. :func:`check_claims` evaluates them on the ``results`` of ``posgeom run``
(``<out>/<chapter>/results.json``), so a rerun at another scale says which sentences still hold.

The check language is a small, safe expression language (no ``eval``): a *check* is a mapping

- ``{key: K, op: OP, value: V}``: the chapter's value of ``K`` compared with the constant ``V``;
- ``{key: K, op: OP, other: K2, factor: F, offset: C}``: compared with ``F * value(K2) + C`` of the same
  chapter (``factor`` defaults to 1, ``offset`` to 0);
- ``{key: K, op: between, low: L, high: H}``: ``L <= value(K) <= H`` (bounds inclusive);
- ``{key: K, op: in, values: [...]}``: membership (strings or numbers);
- ``{all: [check, ...]}`` / ``{any: [check, ...]}``: every / at least one sub-check passes.

``OP`` is one of ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``, ``between``, ``in``. ``==`` and ``!=`` accept an
optional absolute tolerance ``tol`` (numbers only; strings compare exactly). Numeric comparisons accept a
glued number, a numeric string (``"16"``) or a percentage string (``"66%"`` is 0.66); anything else, or a
missing key, makes the check fail with a message naming the key.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

#: the profiles a claim can be asserted at (those of posgeom_utils.repro.profiles)
PROFILES = ("smoke", "default", "paper")
#: comparison operators of the check language
OPS = ("<", "<=", ">", ">=", "==", "!=", "between", "in")
#: the fields a claim may have (all but "note" are required)
CLAIM_FIELDS = ("id", "chapter", "statement", "check", "profiles", "note")
_REQUIRED = ("id", "chapter", "statement", "check", "profiles")
#: the fields a leaf check may have
CHECK_FIELDS = ("key", "op", "value", "other", "factor", "offset", "low", "high", "values", "tol")
_COMBINATORS = ("all", "any")
_NUMBER = re.compile(r"^\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\s*(%?)\s*$")

#: where the book keeps its claims
DEFAULT_CLAIMS = Path(__file__).resolve().parents[2] / "book" / "claims.yaml"


class ClaimError(ValueError):
    """A malformed ``claims.yaml`` (or a malformed check): the message says which claim and what is wrong."""


@dataclass(frozen=True)
class Claim:
    """One sentence of a chapter that rests on computed numbers. Chapter: *Reproduction ledger*."""

    id: str
    chapter: str
    statement: str
    check: dict[str, Any]
    profiles: tuple[str, ...]
    note: str = ""

    def keys(self) -> list[str]:
        """Every glued key the check reads (``key`` and ``other`` fields, in order, without repeats)."""
        return check_keys(self.check)


@dataclass(frozen=True)
class ClaimResult:
    """The outcome of one claim on one chapter's results. ``value`` is the value of the check's first key
    (``None`` when missing); ``message`` says what was compared, or why it failed."""

    claim: Claim
    passed: bool
    value: Any
    message: str

    def __str__(self) -> str:
        mark = "ok  " if self.passed else "FAIL"
        return f"{mark} {self.claim.id} ({self.claim.chapter}): {self.message}"


@dataclass
class _Outcome:
    passed: bool
    message: str
    values: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- validation

def validate_check(check: Any, where: str = "check") -> None:
    """Raise :class:`ClaimError` unless ``check`` is a well-formed check of the language (see the module
    docstring): known fields and operators only, the operands each operator needs, numbers where needed."""
    if not isinstance(check, Mapping):
        raise ClaimError(f"{where}: a check must be a mapping, got {type(check).__name__}: {check!r}")
    combinators = [c for c in _COMBINATORS if c in check]
    if combinators:
        if len(check) != 1:
            raise ClaimError(f"{where}: {combinators[0]!r} must be the only field of its check, got {sorted(check)}")
        subs = check[combinators[0]]
        if not isinstance(subs, list) or not subs:
            raise ClaimError(f"{where}: {combinators[0]!r} needs a non-empty list of checks")
        for k, sub in enumerate(subs):
            validate_check(sub, f"{where}.{combinators[0]}[{k}]")
        return
    unknown = sorted(set(check) - set(CHECK_FIELDS))
    if unknown:
        raise ClaimError(f"{where}: unknown field(s) {unknown}; a check has {list(CHECK_FIELDS)} or one of "
                         f"{list(_COMBINATORS)}")
    if not isinstance(check.get("key"), str) or not check["key"]:
        raise ClaimError(f"{where}: 'key' (the glued key to check) is required and must be a string")
    op = check.get("op")
    if op not in OPS:
        raise ClaimError(f"{where}: unknown op {op!r}; choose one of {list(OPS)}")
    if op == "between":
        if "low" not in check or "high" not in check:
            raise ClaimError(f"{where}: op 'between' needs 'low' and 'high'")
        for bound in ("low", "high"):
            if not _is_real(check[bound]):
                raise ClaimError(f"{where}: {bound!r} must be a number, got {check[bound]!r}")
        if check["low"] > check["high"]:
            raise ClaimError(f"{where}: low {check['low']} is above high {check['high']}")
        extra = set(check) & {"value", "other", "values", "factor", "offset", "tol"}
    elif op == "in":
        if not isinstance(check.get("values"), list) or not check["values"]:
            raise ClaimError(f"{where}: op 'in' needs a non-empty list 'values'")
        extra = set(check) & {"value", "other", "low", "high", "factor", "offset", "tol"}
    else:
        if ("value" in check) == ("other" in check):
            raise ClaimError(f"{where}: op {op!r} needs exactly one of 'value' (a constant) or 'other' (a key)")
        if "other" in check and not isinstance(check["other"], str):
            raise ClaimError(f"{where}: 'other' must name a key of the same chapter, got {check['other']!r}")
        if "value" in check and not (_is_real(check["value"]) or isinstance(check["value"], str)):
            raise ClaimError(f"{where}: 'value' must be a number or a string, got {check['value']!r}")
        if isinstance(check.get("value"), str) and op not in ("==", "!="):
            raise ClaimError(f"{where}: a string 'value' can only be compared with '==' or '!='")
        if "tol" in check and op not in ("==", "!="):
            raise ClaimError(f"{where}: 'tol' applies to '==' and '!=' only (op is {op!r})")
        extra = set(check) & {"low", "high", "values"}
        if "value" in check:
            extra |= set(check) & {"factor", "offset"}
    if extra:
        raise ClaimError(f"{where}: field(s) {sorted(extra)} do not apply to op {op!r}")
    for name in ("factor", "offset", "tol"):
        if name in check and not _is_real(check[name]):
            raise ClaimError(f"{where}: {name!r} must be a number, got {check[name]!r}")
    if "tol" in check and check["tol"] < 0:
        raise ClaimError(f"{where}: 'tol' must be >= 0")


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_claims(raw: Any, chapters: Iterable[str] | None = None) -> list[Claim]:
    """Turn the parsed YAML (``{"claims": [...]}`` or a bare list) into :class:`Claim` objects, raising
    :class:`ClaimError` on any unknown field, operator or profile, a duplicate id, or (when ``chapters`` is
    given) a chapter that does not exist."""
    items = raw.get("claims") if isinstance(raw, Mapping) else raw
    if isinstance(raw, Mapping) and set(raw) - {"claims"}:
        raise ClaimError(f"unknown top-level field(s) {sorted(set(raw) - {'claims'})}: only 'claims'")
    if not isinstance(items, list):
        raise ClaimError("claims.yaml must hold a list under 'claims'")
    known = set(chapters) if chapters is not None else None
    claims, seen = [], set()
    for k, item in enumerate(items):
        where = f"claim #{k + 1}" + (f" ({item.get('id')!r})" if isinstance(item, Mapping) and "id" in item else "")
        if not isinstance(item, Mapping):
            raise ClaimError(f"{where}: a claim must be a mapping")
        unknown = sorted(set(item) - set(CLAIM_FIELDS))
        if unknown:
            raise ClaimError(f"{where}: unknown field(s) {unknown}; a claim has {list(CLAIM_FIELDS)}")
        missing = [f for f in _REQUIRED if f not in item]
        if missing:
            raise ClaimError(f"{where}: missing field(s) {missing}")
        if not isinstance(item["id"], str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", item["id"]):
            raise ClaimError(f"{where}: 'id' must be lower-case letters, digits and dashes")
        if item["id"] in seen:
            raise ClaimError(f"{where}: duplicate id {item['id']!r}")
        seen.add(item["id"])
        if known is not None and item["chapter"] not in known:
            raise ClaimError(f"{where}: unknown chapter {item['chapter']!r}; choose one of {sorted(known)}")
        if not isinstance(item["statement"], str) or not item["statement"].strip():
            raise ClaimError(f"{where}: 'statement' must be a non-empty string")
        profiles = item["profiles"]
        if not isinstance(profiles, list) or not profiles or any(p not in PROFILES for p in profiles):
            raise ClaimError(f"{where}: 'profiles' must be a non-empty list drawn from {list(PROFILES)}, "
                             f"got {profiles!r}")
        validate_check(item["check"], f"{where}: check")
        claims.append(Claim(id=item["id"], chapter=item["chapter"], statement=" ".join(item["statement"].split()),
                            check=dict(item["check"]), profiles=tuple(profiles), note=str(item.get("note", ""))))
    return claims


def load_claims(path: str | Path | None = None, chapters: Iterable[str] | None = None) -> list[Claim]:
    """Read and validate ``book/claims.yaml`` (or ``path``). Chapter: *Reproduction ledger*."""
    import yaml

    path = Path(path) if path is not None else DEFAULT_CLAIMS
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ClaimError(f"{path}: not valid YAML ({exc})") from exc
    try:
        return validate_claims(raw, chapters)
    except ClaimError as exc:
        raise ClaimError(f"{path}: {exc}") from None


def check_keys(check: Mapping[str, Any]) -> list[str]:
    """The glued keys a check reads, in order of appearance, without repeats."""
    keys: list[str] = []
    for c in _leaves(check):
        for name in ("key", "other"):
            if name in c and c[name] not in keys:
                keys.append(c[name])
    return keys


def _leaves(check: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    for c in _COMBINATORS:
        if c in check:
            return [leaf for sub in check[c] for leaf in _leaves(sub)]
    return [check]


# --------------------------------------------------------------------------- evaluation

_MISSING = object()


def as_number(value: Any) -> float | None:
    """A glued value as a float: numbers as they are, ``"16"`` as 16, ``"66%"`` as 0.66; ``None`` otherwise
    (booleans, non-numeric strings, lists)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        match = _NUMBER.match(value)
        if match:
            number = float(value.strip().rstrip("%").strip())
            return number / 100 if match.group(4) else number
    return None


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return repr(x) if isinstance(x, str) else str(x)


def evaluate_check(check: Mapping[str, Any], results: Mapping[str, Any]) -> tuple[bool, str]:
    """Evaluate a (validated) check on one chapter's glued ``results``; returns (passed, message)."""
    outcome = _evaluate(check, results)
    return outcome.passed, outcome.message


def _evaluate(check: Mapping[str, Any], results: Mapping[str, Any]) -> _Outcome:
    if "all" in check or "any" in check:
        mode = "all" if "all" in check else "any"
        subs = [_evaluate(c, results) for c in check[mode]]
        passed = all(s.passed for s in subs) if mode == "all" else any(s.passed for s in subs)
        joiner = " and " if mode == "all" else " or "
        return _Outcome(passed, joiner.join(f"[{s.message}]" for s in subs))
    key, op = check["key"], check["op"]
    value = results.get(key, _MISSING)
    if value is _MISSING:
        return _Outcome(False, f"missing key {key!r} in the chapter's results")
    if op == "in":
        allowed = check["values"]
        passed = value in allowed or (as_number(value) is not None and any(
            as_number(a) is not None and as_number(a) == as_number(value) for a in allowed))
        return _Outcome(passed, f"{key} = {_fmt(value)} {'in' if passed else 'not in'} {allowed}")
    if op in ("==", "!=") and ("other" not in check) and isinstance(check["value"], str):
        equal = value == check["value"]
        passed = equal if op == "==" else not equal
        return _Outcome(passed, f"{key} = {_fmt(value)} {op} {check['value']!r}: {'holds' if passed else 'fails'}")
    x = as_number(value)
    if x is None:
        return _Outcome(False, f"{key} = {_fmt(value)} is not a number")
    if math.isnan(x):
        return _Outcome(False, f"{key} is NaN")
    if op == "between":
        low, high = check["low"], check["high"]
        passed = low <= x <= high
        return _Outcome(passed, f"{key} = {_fmt(x)} {'within' if passed else 'outside'} [{_fmt(low)}, {_fmt(high)}]")
    if "other" in check:
        other = check["other"]
        raw = results.get(other, _MISSING)
        if raw is _MISSING:
            return _Outcome(False, f"missing key {other!r} in the chapter's results")
        y0 = as_number(raw)
        if y0 is None or math.isnan(y0):
            return _Outcome(False, f"{other} = {_fmt(raw)} is not a number")
        factor, offset = check.get("factor", 1), check.get("offset", 0)
        y = factor * y0 + offset
        rhs = (f"{_fmt(factor)} * " if factor != 1 else "") + f"{other}" + \
              (f" {'+' if offset >= 0 else '-'} {_fmt(abs(offset))}" if offset else "")
        rhs = f"{rhs} = {_fmt(y)}" + (f" ({other} = {_fmt(y0)})" if (factor != 1 or offset) else "")
    else:
        y = float(check["value"])
        rhs = _fmt(check["value"])
    tol = float(check.get("tol", 0.0))
    passed = {
        "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y,
        "==": abs(x - y) <= tol, "!=": abs(x - y) > tol,
    }[op]
    tol_text = f" (tol {_fmt(tol)})" if "tol" in check else ""
    return _Outcome(passed, f"{key} = {_fmt(x)} {op} {rhs}{tol_text}: {'holds' if passed else 'fails'}")


def check_claims(results_by_chapter: Mapping[str, Mapping[str, Any]], profile: str,
                 claims: list[Claim] | None = None) -> list[ClaimResult]:
    """Check every claim asserted at ``profile`` against ``results_by_chapter`` (chapter name -> its glued
    ``results`` dict, as in ``results.json``; a whole ``results.json`` payload is accepted too).

    A chapter absent from ``results_by_chapter``, or a key absent from its results, is a failure whose message
    names it. ``claims`` defaults to :func:`load_claims`. Chapter: *Reproduction ledger*.
    """
    if profile not in PROFILES:
        raise ClaimError(f"unknown profile {profile!r}; choose one of {list(PROFILES)}")
    claims = load_claims() if claims is None else claims
    out = []
    for claim in claims:
        if profile not in claim.profiles:
            continue
        results = results_by_chapter.get(claim.chapter)
        if results is None:
            out.append(ClaimResult(claim, False, None, f"no results for chapter {claim.chapter!r}"))
            continue
        if isinstance(results.get("results"), Mapping) and "chapter" in results:
            results = results["results"]
        outcome = _evaluate(claim.check, results)
        first = claim.keys()[0]
        out.append(ClaimResult(claim, outcome.passed, results.get(first), outcome.message))
    return out


def glued_key_patterns(source: str | Path) -> list[re.Pattern]:
    """Every key a chapter source glues, as regular expressions: ``glue("k", ...)`` gives ``k`` exactly, an
    f-string ``glue(f"{name}_rank", ...)`` or a concatenation ``glue("dev_" + key, ...)`` gives a pattern in
    which each computed part matches any text. Read from the code cells of the MyST notebook (magics skipped).
    Chapter: *Reproduction ledger* (the tests check that every claim names a key its chapter glues)."""
    import ast

    import jupytext

    def parts(node: ast.AST) -> list[str | None]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            return [p for v in node.values for p in parts(v)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return parts(node.left) + parts(node.right)
        return [None]  # computed: matches anything

    patterns: list[re.Pattern] = []
    nb = jupytext.read(Path(source))
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        code = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args and (
                    (isinstance(node.func, ast.Name) and node.func.id == "glue")
                    or (isinstance(node.func, ast.Attribute) and node.func.attr == "glue")):
                pieces = parts(node.args[0])
                if all(p is None for p in pieces):
                    continue  # glue(key, ...) with a fully computed key says nothing
                regex = "".join(".+" if p is None else re.escape(p) for p in pieces)
                patterns.append(re.compile(regex))
    return patterns


def key_is_glued(key: str, patterns: list[re.Pattern]) -> bool:
    """True when ``key`` is matched in full by one of ``patterns`` (see :func:`glued_key_patterns`)."""
    return any(p.fullmatch(key) for p in patterns)


def read_results(folder: str | Path) -> dict[str, dict[str, Any]]:
    """``{chapter: results}`` from every ``<folder>/<chapter>/results.json`` (an absent folder gives ``{}``)."""
    import json

    found = {}
    folder = Path(folder)
    for path in sorted(folder.glob("*/results.json")) if folder.is_dir() else []:
        payload = json.loads(path.read_text())
        found[payload.get("chapter") or path.parent.name] = payload.get("results", {})
    return found

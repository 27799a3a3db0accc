"""Claims about computed numbers, in one schema with one checker: the prose's and the paper's.

Chapter: *Reproduction ledger* (``book/ledger.md``). Every statement that rests on a computed number is
written once in ``book/claims.yaml``: a sentence of a chapter's prose (``the model without positions stays at
chance``) or a claim of Cirrincione (2026) that we compare with (``the stress of the sinusoidal encoding on
SST-2 is 272``). A claim is a mapping

- ``id`` (lower-case letters, digits, dashes), ``chapter`` (a notebook in ``notebooks/``), ``statement``;
- ``check``: a condition on the chapter's glued keys, in the check language below;
- ``profiles``: the profiles at which the prose asserts the check (the tests fail when it does not hold
  there); empty only for a claim that is compared with the paper and not asserted by the prose;
- ``note`` (optional): why a threshold, or why a profile is left out;
- ``paper`` (optional): the comparison with the paper. A claim with this block is a row of the reproduction
  ledger (:mod:`.ledger`); its fields are

  - ``value``: the paper's number, by name: a key of :data:`posgeom_utils.repro.paper.REPORTED` or
    ``"key_a / key_b"`` (a ratio of two), never typed; or ``text``: the paper's statement, when qualitative;
  - ``quantity``: what our number is; ``ours``: how it is shown; ``evidence``: text shown with the verdict.
    All three are templates over the chapter's glued keys (``"{sst2_sin_raw:.0f}"``, see :func:`render`);
  - ``verdict``: the verdict when the check holds, ``reproduced`` (default), ``reproduced with a different
    definition``, which needs ``definition`` (a template saying which), or ``holds by construction``, for a
    statement our setting makes true whatever the data (a planted rank, a count computed on the paper's own
    constants, a symmetry of the null model), which needs ``definition`` saying why: such a row is a check of
    the code, not a reproduction; when the check fails the verdict is
    ``differs``, unless one of the ``alternatives`` (``[{check, definition}]``) holds, which gives ``reproduced
    with a different definition`` naming its definition;
  - ``not_checkable``: why the paper's claim cannot be checked here; such a claim has no ``check``, no
    ``profiles``, and only ``value``/``text``, ``quantity`` and ``ours`` besides.

The check language is a small, safe expression language (no ``eval``): a *check* is a mapping

- ``{key: K, op: OP, value: V}``: the chapter's value of ``K`` compared with the constant ``V``;
- ``{key: K, op: OP, other: K2, factor: F, offset: C}``: compared with ``F * value(K2) + C`` of the same
  chapter (``factor`` defaults to 1, ``offset`` to 0);
- ``{key: K, op: OP, paper: NAME, factor: F, offset: C}``: compared with ``F * paper + C``, where ``NAME``
  names a reported value as ``paper.value`` does;
- ``{key: K, op: between, low: L, high: H}``: ``L <= value(K) <= H`` (bounds inclusive);
- ``{key: K, op: in, values: [...]}``: membership (strings or numbers);
- ``{asserted: TEXT}``: the chapter asserts TEXT in its code and cannot finish otherwise, so the check holds
  whenever the chapter's results exist;
- ``{all: [check, ...]}`` / ``{any: [check, ...]}``: every / at least one sub-check passes.

``OP`` is one of ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``, ``between``, ``in``. ``==`` and ``!=`` accept a
tolerance: ``|x - y| <= tol + rtol * |y|`` counts as equal (``tol`` absolute, ``rtol`` relative to the
right-hand side ``y``; numbers only, strings compare exactly). Numeric comparisons accept a glued number, a
numeric string (``"16"``) or a percentage string (``"66%"`` is 0.66); anything else, or a missing key, makes
the check fail with a message naming the key.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from .paper import REPORTED

#: the profiles a claim can be asserted at (those of posgeom_utils.repro.profiles)
PROFILES = ("smoke", "default", "reference", "paper")
#: comparison operators of the check language
OPS = ("<", "<=", ">", ">=", "==", "!=", "between", "in")

REPRODUCED = "reproduced"
DIFFERENT_DEFINITION = "reproduced with a different definition"
DIFFERS = "differs"
NOT_CHECKABLE = "not checkable here"
BY_CONSTRUCTION = "holds by construction"
#: the five verdicts of a comparison with the paper
VERDICTS = (REPRODUCED, DIFFERENT_DEFINITION, BY_CONSTRUCTION, DIFFERS, NOT_CHECKABLE)

#: the fields a claim may have
CLAIM_FIELDS = ("id", "chapter", "statement", "check", "profiles", "note", "paper")
_REQUIRED = ("id", "chapter", "statement", "profiles")
#: the fields of a claim's ``paper`` block
PAPER_FIELDS = ("value", "text", "quantity", "ours", "verdict", "definition", "alternatives", "not_checkable",
                "evidence")
_NOT_CHECKABLE_FIELDS = {"value", "text", "quantity", "ours", "not_checkable"}
#: the fields a comparison check may have
CHECK_FIELDS = ("key", "op", "value", "other", "paper", "factor", "offset", "low", "high", "values", "tol", "rtol")
_COMBINATORS = ("all", "any")
_RIGHT_SIDES = ("value", "other", "paper")
_NUMBER = re.compile(r"^\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\s*(%?)\s*$")
_TEMPLATE = re.compile(r"\{([A-Za-z0-9_\-]+)(?::([^{}]*))?\}")
_PAPER_RATIO = re.compile(r"^\s*(\w+)\s*/\s*(\w+)\s*$")

#: where the book keeps its claims
DEFAULT_CLAIMS = Path(__file__).resolve().parents[2] / "book" / "claims.yaml"


class ClaimError(ValueError):
    """A malformed ``claims.yaml`` (or a malformed check): the message says which claim and what is wrong."""


@dataclass(frozen=True)
class Alternative:
    """Another definition of the paper's quantity: if ``check`` holds where the claim's own check fails, the
    verdict is *reproduced with a different definition*, naming ``definition`` (a template)."""

    check: dict[str, Any]
    definition: str


@dataclass(frozen=True)
class PaperComparison:
    """A claim's ``paper`` block: what the paper says and how our number is shown and judged against it.
    Chapter: *Reproduction ledger*."""

    ours: str
    value: str | None = None
    text: str | None = None
    quantity: str = ""
    verdict: str = REPRODUCED
    definition: str = ""
    alternatives: tuple[Alternative, ...] = ()
    not_checkable: str = ""
    evidence: str = ""

    def number(self) -> float | None:
        """The paper's number (see :func:`paper_value`); ``None`` for a qualitative claim."""
        return None if self.value is None else paper_value(self.value)

    def reported_keys(self) -> list[str]:
        """The :data:`~posgeom_utils.repro.paper.REPORTED` keys the block quotes."""
        return [] if self.value is None else paper_names(self.value)

    def keys(self) -> list[str]:
        """The glued keys the block reads: the alternatives' checks, then the templates."""
        keys = [k for alt in self.alternatives for k in check_keys(alt.check)]
        for text in (self.ours, self.quantity, self.evidence, self.definition,
                     *(alt.definition for alt in self.alternatives)):
            keys += template_keys(text)
        return keys


@dataclass(frozen=True)
class Claim:
    """One statement that rests on computed numbers: a sentence of a chapter, or a claim of the paper (then
    ``paper`` says how it compares). ``check`` is ``None`` only for a paper claim that is not checkable.
    Chapter: *Reproduction ledger*."""

    id: str
    chapter: str
    statement: str
    check: dict[str, Any] | None
    profiles: tuple[str, ...]
    note: str = ""
    paper: PaperComparison | None = None

    def keys(self) -> list[str]:
        """Every glued key the claim reads (its check, then its paper block), in order, without repeats."""
        keys = check_keys(self.check) if self.check is not None else []
        if self.paper is not None:
            keys += self.paper.keys()
        return list(dict.fromkeys(keys))


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


# --------------------------------------------------------------------------- paper values and templates

def paper_names(ref: str) -> list[str]:
    """The :data:`~posgeom_utils.repro.paper.REPORTED` keys a paper reference names (``"a / b"`` names two)."""
    ratio = _PAPER_RATIO.match(ref)
    return [ratio.group(1), ratio.group(2)] if ratio else [ref.strip()]


def paper_value(ref: str) -> float:
    """The paper's number for a reference: a REPORTED value, or the ratio ``"a / b"`` of two."""
    ratio = _PAPER_RATIO.match(ref)
    if ratio:
        return REPORTED[ratio.group(1)][0] / REPORTED[ratio.group(2)][0]
    return float(REPORTED[ref.strip()][0])


def template_keys(text: str) -> list[str]:
    """The glued keys a text template names (``"{sst2_sin_raw:.0f}"`` names ``sst2_sin_raw``)."""
    return [m.group(1) for m in _TEMPLATE.finditer(text or "")]


def render(text: str, results: Mapping[str, Any] | None) -> tuple[str, list[str]]:
    """Fill a template with a chapter's glued values; returns (text, missing keys). A missing key, or no
    results at all, leaves ``?`` in its place. Numbers accept a format spec (``{x:.3f}``)."""
    missing: list[str] = []

    def one(match: re.Match) -> str:
        key, spec = match.group(1), match.group(2)
        if results is None or key not in results:
            missing.append(key)
            return "?"
        value = results[key]
        if spec:
            try:
                return format(value, spec)
            except (TypeError, ValueError):
                return str(value)
        return str(value)

    return _TEMPLATE.sub(one, text or ""), missing


# --------------------------------------------------------------------------- validation of checks

def validate_check(check: Any, where: str = "check") -> None:
    """Raise :class:`ClaimError` unless ``check`` is a well-formed check of the language (see the module
    docstring): known fields and operators only, the operands each operator needs, numbers where needed."""
    if not isinstance(check, Mapping):
        raise ClaimError(f"{where}: a check must be a mapping, got {type(check).__name__}: {check!r}")
    combinator = next((c for c in _COMBINATORS if c in check), None)
    if combinator is not None:
        _validate_combinator(check, combinator, where)
    elif "asserted" in check:
        if set(check) != {"asserted"} or not isinstance(check["asserted"], str) or not check["asserted"].strip():
            raise ClaimError(f"{where}: an asserted check is {{asserted: TEXT}}, quoting the chapter's assertion")
    else:
        _validate_comparison(check, where)


def _validate_combinator(check: Mapping[str, Any], combinator: str, where: str) -> None:
    """``{all: [...]}`` or ``{any: [...]}``: the only field, a non-empty list of valid checks."""
    if len(check) != 1:
        raise ClaimError(f"{where}: {combinator!r} must be the only field of its check, got {sorted(check)}")
    subs = check[combinator]
    if not isinstance(subs, list) or not subs:
        raise ClaimError(f"{where}: {combinator!r} needs a non-empty list of checks")
    for k, sub in enumerate(subs):
        validate_check(sub, f"{where}.{combinator}[{k}]")


def _validate_comparison(check: Mapping[str, Any], where: str) -> None:
    """A leaf check ``{key, op, ...}``: its fields, its operator and the operands that operator takes."""
    unknown = sorted(set(check) - set(CHECK_FIELDS))
    if unknown:
        raise ClaimError(f"{where}: unknown field(s) {unknown}; a check has {list(CHECK_FIELDS)}, 'asserted' "
                         f"or one of {list(_COMBINATORS)}")
    if not isinstance(check.get("key"), str) or not check["key"]:
        raise ClaimError(f"{where}: 'key' (the glued key to check) is required and must be a string")
    op = check.get("op")
    if op not in OPS:
        raise ClaimError(f"{where}: unknown op {op!r}; choose one of {list(OPS)}")
    if op == "between":
        allowed = _validate_between(check, where)
    elif op == "in":
        if not isinstance(check.get("values"), list) or not check["values"]:
            raise ClaimError(f"{where}: op 'in' needs a non-empty list 'values'")
        allowed = {"values"}
    else:
        allowed = _validate_right_side(check, op, where)
    extra = set(check) - allowed - {"key", "op"}
    if extra:
        raise ClaimError(f"{where}: field(s) {sorted(extra)} do not apply to op {op!r}")
    for name in ("factor", "offset", "tol", "rtol"):
        if name in check and not _is_real(check[name]):
            raise ClaimError(f"{where}: {name!r} must be a number, got {check[name]!r}")
        if name in ("tol", "rtol") and name in check and check[name] < 0:
            raise ClaimError(f"{where}: {name!r} must be >= 0")


def _validate_between(check: Mapping[str, Any], where: str) -> set[str]:
    """``op: between``: numeric ``low <= high``; returns the operand fields it takes."""
    if "low" not in check or "high" not in check:
        raise ClaimError(f"{where}: op 'between' needs 'low' and 'high'")
    for bound in ("low", "high"):
        if not _is_real(check[bound]):
            raise ClaimError(f"{where}: {bound!r} must be a number, got {check[bound]!r}")
    if check["low"] > check["high"]:
        raise ClaimError(f"{where}: low {check['low']} is above high {check['high']}")
    return {"low", "high"}


def _validate_right_side(check: Mapping[str, Any], op: str, where: str) -> set[str]:
    """A comparison ``<``, ..., ``!=``: exactly one of ``value``/``other``/``paper``, well typed; returns the
    operand fields it takes (``factor``/``offset`` scale a key or a paper value, ``tol``/``rtol`` apply to
    ``==`` and ``!=``)."""
    sides = [s for s in _RIGHT_SIDES if s in check]
    if len(sides) != 1:
        raise ClaimError(f"{where}: op {op!r} needs exactly one of 'value' (a constant), 'other' (a key) or "
                         f"'paper' (a reported value)")
    side = sides[0]
    if side == "other" and not isinstance(check["other"], str):
        raise ClaimError(f"{where}: 'other' must name a key of the same chapter, got {check['other']!r}")
    if side == "paper":
        _validate_paper_ref(check["paper"], where)
    if side == "value" and not (_is_real(check["value"]) or isinstance(check["value"], str)):
        raise ClaimError(f"{where}: 'value' must be a number or a string, got {check['value']!r}")
    if isinstance(check.get("value"), str) and op not in ("==", "!="):
        raise ClaimError(f"{where}: a string 'value' can only be compared with '==' or '!='")
    for name in ("tol", "rtol"):
        if name in check and op not in ("==", "!="):
            raise ClaimError(f"{where}: {name!r} applies to '==' and '!=' only (op is {op!r})")
    return {side, "tol", "rtol"} | ({"factor", "offset"} if side != "value" else set())


def _validate_paper_ref(ref: Any, where: str) -> None:
    """A paper reference names REPORTED keys: ``"key"`` or ``"key_a / key_b"``."""
    if not isinstance(ref, str):
        raise ClaimError(f"{where}: a paper value is named by a string, got {ref!r}")
    for key in paper_names(ref):
        if key not in REPORTED:
            raise ClaimError(f"{where}: paper key {key!r} is not in posgeom_utils.repro.paper.REPORTED "
                             f"(known: {sorted(REPORTED)})")


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_keys(check: Mapping[str, Any]) -> list[str]:
    """The glued keys a check reads, in order of appearance, without repeats."""
    keys: list[str] = []
    for c in _leaves(check):
        for name in ("key", "other"):
            if name in c and c[name] not in keys:
                keys.append(c[name])
    return keys


def check_paper_refs(check: Mapping[str, Any]) -> list[str]:
    """The paper references a check compares with (its ``paper`` operands), in order."""
    return [c["paper"] for c in _leaves(check) if "paper" in c]


def _leaves(check: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    for c in _COMBINATORS:
        if c in check:
            return [leaf for sub in check[c] for leaf in _leaves(sub)]
    return [check]


# --------------------------------------------------------------------------- validation of claims

def validate_claims(raw: Any, chapters: Iterable[str] | None = None) -> list[Claim]:
    """Turn the parsed YAML (``{"claims": [...]}`` or a bare list) into :class:`Claim` objects, raising
    :class:`ClaimError` on any unknown field, operator, profile or paper key, a duplicate id, or (when
    ``chapters`` is given) a chapter that does not exist."""
    if isinstance(raw, Mapping) and set(raw) - {"claims"}:
        raise ClaimError(f"unknown top-level field(s) {sorted(set(raw) - {'claims'})}: only 'claims'")
    items = raw.get("claims") if isinstance(raw, Mapping) else raw
    if not isinstance(items, list):
        raise ClaimError("claims.yaml must hold a list under 'claims'")
    known = set(chapters) if chapters is not None else None
    claims: list[Claim] = []
    for k, item in enumerate(items):
        where = f"claim #{k + 1}" + (f" ({item.get('id')!r})" if isinstance(item, Mapping) and "id" in item else "")
        claim = _validate_claim(item, where, known)
        if any(c.id == claim.id for c in claims):
            raise ClaimError(f"{where}: duplicate id {claim.id!r}")
        claims.append(claim)
    return claims


def _validate_claim(item: Any, where: str, chapters: set[str] | None) -> Claim:
    """One entry of ``claims.yaml`` as a :class:`Claim` (see the module docstring for its fields)."""
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
    if chapters is not None and item["chapter"] not in chapters:
        raise ClaimError(f"{where}: unknown chapter {item['chapter']!r}; choose one of {sorted(chapters)}")
    if not isinstance(item["statement"], str) or not item["statement"].strip():
        raise ClaimError(f"{where}: 'statement' must be a non-empty string")
    if "check" in item:
        validate_check(item["check"], f"{where}: check")
    paper = _validate_paper(item["paper"], item.get("check"), where) if "paper" in item else None
    profiles = item["profiles"]
    if not isinstance(profiles, list) or any(p not in PROFILES for p in profiles):
        raise ClaimError(f"{where}: 'profiles' must be a list drawn from {list(PROFILES)}, got {profiles!r}")
    if not profiles and paper is None:
        raise ClaimError(f"{where}: a claim without a 'paper' block must be asserted at some profile")
    if paper is not None and paper.not_checkable:
        if "check" in item or profiles:
            raise ClaimError(f"{where}: a not-checkable paper claim has no 'check' and empty 'profiles'")
    elif "check" not in item:
        raise ClaimError(f"{where}: missing field(s) ['check'] (only a not-checkable paper claim has none)")
    return Claim(id=item["id"], chapter=item["chapter"], statement=_text(item["statement"]),
                 check=dict(item["check"]) if "check" in item else None, profiles=tuple(profiles),
                 note=str(item.get("note", "")), paper=paper)


def _validate_paper(block: Any, check: Any, where: str) -> PaperComparison:
    """A claim's ``paper`` block as a :class:`PaperComparison`; ``check`` is the claim's (validated) check, or
    ``None``."""
    where = f"{where}: paper"
    if not isinstance(block, Mapping):
        raise ClaimError(f"{where}: the paper block must be a mapping")
    unknown = sorted(set(block) - set(PAPER_FIELDS))
    if unknown:
        raise ClaimError(f"{where}: unknown field(s) {unknown}; a paper block has {list(PAPER_FIELDS)}")
    if ("value" in block) == ("text" in block):
        raise ClaimError(f"{where}: give exactly one of 'value' (a REPORTED key) or 'text' (the paper's words)")
    if "value" in block:
        _validate_paper_ref(block["value"], where)
    if not isinstance(block.get("ours"), str) or not block["ours"].strip():
        raise ClaimError(f"{where}: 'ours' (how our value is shown) is required")
    if "not_checkable" in block:
        extra = set(block) - _NOT_CHECKABLE_FIELDS
        if extra:
            raise ClaimError(f"{where}: field(s) {sorted(extra)} do not apply to a not-checkable claim")
        if not str(block["not_checkable"]).strip():
            raise ClaimError(f"{where}: 'not_checkable' must say why")
    verdict = block.get("verdict", REPRODUCED)
    if verdict not in (REPRODUCED, DIFFERENT_DEFINITION, BY_CONSTRUCTION):
        raise ClaimError(f"{where}: 'verdict' must be {REPRODUCED!r}, {DIFFERENT_DEFINITION!r} or "
                         f"{BY_CONSTRUCTION!r}")
    if verdict == DIFFERENT_DEFINITION and not block.get("definition"):
        raise ClaimError(f"{where}: a 'reproduced with a different definition' verdict must say which (definition)")
    if verdict == BY_CONSTRUCTION and not block.get("definition"):
        raise ClaimError(f"{where}: a 'holds by construction' verdict must say why (definition)")
    alternatives = _validate_alternatives(block.get("alternatives", []), where)
    refs = [r for c in ([check] if check is not None else []) + [a.check for a in alternatives]
            for r in check_paper_refs(c)]
    stray = [r for r in refs if r != block.get("value")]
    if stray:
        raise ClaimError(f"{where}: the checks compare with paper value(s) {stray}, but the claim quotes "
                         f"{block.get('value')!r}")
    return PaperComparison(
        ours=_text(block["ours"]), value=block.get("value"),
        text=_text(block["text"]) if "text" in block else None, quantity=_text(block.get("quantity", "")),
        verdict=verdict, definition=_text(block.get("definition", "")), alternatives=alternatives,
        not_checkable=_text(block.get("not_checkable", "")), evidence=_text(block.get("evidence", "")))


def _validate_alternatives(items: Any, where: str) -> tuple[Alternative, ...]:
    """The ``alternatives`` of a paper block: a list of ``{check, definition}``."""
    if not isinstance(items, list):
        raise ClaimError(f"{where}: 'alternatives' must be a list of {{check, definition}}")
    alternatives = []
    for k, alt in enumerate(items):
        if not isinstance(alt, Mapping) or set(alt) != {"check", "definition"}:
            raise ClaimError(f"{where}: each alternative is {{check, definition}}")
        validate_check(alt["check"], f"{where}.alternatives[{k}]")
        alternatives.append(Alternative(check=dict(alt["check"]), definition=_text(alt["definition"])))
    return tuple(alternatives)


def _text(value: Any) -> str:
    """A YAML text field on one line (folded whitespace)."""
    return " ".join(str(value).split())


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
    """A value as the checker's messages show it."""
    if isinstance(x, float):
        return f"{x:.6g}"
    return repr(x) if isinstance(x, str) else str(x)


def evaluate_check(check: Mapping[str, Any], results: Mapping[str, Any]) -> tuple[bool, str]:
    """Evaluate a (validated) check on one chapter's glued ``results``; returns (passed, message)."""
    for mode in _COMBINATORS:
        if mode in check:
            subs = [evaluate_check(c, results) for c in check[mode]]
            passed = (all if mode == "all" else any)(p for p, _ in subs)
            joiner = " and " if mode == "all" else " or "
            return passed, joiner.join(f"[{message}]" for _, message in subs)
    if "asserted" in check:
        return True, f"the chapter ran to completion, so its assertion held: {check['asserted']}"
    return _evaluate_comparison(check, results)


def _evaluate_comparison(check: Mapping[str, Any], results: Mapping[str, Any]) -> tuple[bool, str]:
    """A leaf check ``{key, op, ...}`` on ``results``."""
    key, op = check["key"], check["op"]
    value = results.get(key, _MISSING)
    if value is _MISSING:
        return False, f"missing key {key!r} in the chapter's results"
    if op == "in":
        allowed = check["values"]
        number = as_number(value)
        passed = value in allowed or (number is not None and any(as_number(a) == number for a in allowed))
        return passed, f"{key} = {_fmt(value)} {'in' if passed else 'not in'} {allowed}"
    if op in ("==", "!=") and isinstance(check.get("value"), str):
        passed = (value == check["value"]) == (op == "==")
        return passed, f"{key} = {_fmt(value)} {op} {check['value']!r}: {'holds' if passed else 'fails'}"
    x = as_number(value)
    if x is None:
        return False, f"{key} = {_fmt(value)} is not a number"
    if math.isnan(x):
        return False, f"{key} is NaN"
    if op == "between":
        low, high = check["low"], check["high"]
        passed = low <= x <= high
        return passed, f"{key} = {_fmt(x)} {'within' if passed else 'outside'} [{_fmt(low)}, {_fmt(high)}]"
    y, rhs = _right_side(check, results)
    if y is None:
        return False, rhs
    return _compare(check, x, y, rhs)


def _right_side(check: Mapping[str, Any], results: Mapping[str, Any]) -> tuple[float | None, str]:
    """The number a comparison compares with and how it reads, or ``(None, why it cannot be read)``."""
    if "value" in check:
        return float(check["value"]), _fmt(check["value"])
    if "other" in check:
        name = check["other"]
        raw = results.get(name, _MISSING)
        if raw is _MISSING:
            return None, f"missing key {name!r} in the chapter's results"
        base = as_number(raw)
        if base is None or math.isnan(base):
            return None, f"{name} = {_fmt(raw)} is not a number"
    else:
        name = f"paper {check['paper']}"
        base = paper_value(check["paper"])
    factor, offset = check.get("factor", 1), check.get("offset", 0)
    y = factor * base + offset
    text = (f"{_fmt(factor)} * " if factor != 1 else "") + name + \
           (f" {'+' if offset >= 0 else '-'} {_fmt(abs(offset))}" if offset else "")
    text = f"{text} = {_fmt(y)}" + (f" ({name} = {_fmt(base)})" if (factor != 1 or offset) else "")
    return y, text


def _compare(check: Mapping[str, Any], x: float, y: float, rhs: str) -> tuple[bool, str]:
    """``x OP y`` with the check's tolerance; the message shows both sides (and the difference and tolerance)."""
    key, op = check["key"], check["op"]
    tol = float(check.get("tol", 0.0)) + float(check.get("rtol", 0.0)) * abs(y)
    diff = abs(x - y)
    passed = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": diff <= tol, "!=": diff > tol}[op]
    tol_text = f" (|diff| {_fmt(diff)} {'<=' if diff <= tol else '>'} tol {_fmt(tol)})" \
        if "tol" in check or "rtol" in check else ""
    return passed, f"{key} = {_fmt(x)} {op} {rhs}{tol_text}: {'holds' if passed else 'fails'}"


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
        passed, message = evaluate_check(claim.check, results)
        first = next(iter(check_keys(claim.check)), None)
        out.append(ClaimResult(claim, passed, results.get(first), message))
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
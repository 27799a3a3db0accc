"""The reproduction ledger: each claim of Cirrincione (2026), our number and a verdict.

Chapter: *Reproduction ledger*. Rows: ``book/paper_claims.yaml``. A ``check`` is a
Python expression: ``< <= > >= ==`` (chained too), ``and``, ``or``, ``+ - * /`` and
``abs()`` on numbers, glued keys (``results["a-b"]``: one that is not a name) and
``paper.KEY`` (of ``REPORTED``), e.g. ``abs(x - paper.y) <= 0.1 * paper.y``; a value
that is not a number fails every comparison. ``asserted: TEXT`` replaces it where the
chapter asserts it."""

from __future__ import annotations

import ast
import dataclasses
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .paper import REPORTED
from .reference import read_run

REPRODUCED = "reproduced"
DIFFERENT_DEFINITION = "reproduced with a different definition"
BY_CONSTRUCTION = "holds by construction"
DIFFERS = "differs"
NOT_CHECKABLE = "not checkable here"
NOT_IDENTIFIABLE = "not identifiable"
VERDICTS = (REPRODUCED, DIFFERENT_DEFINITION, NOT_IDENTIFIABLE)
VERDICTS += (BY_CONSTRUCTION, DIFFERS, NOT_CHECKABLE)
#: the verdict, per profile, when a chapter's results are absent
PENDING = {p: f"pending a {p} run" for p in ("smoke", "default", "reference")}
PENDING["paper"] = "pending a GPU run"
#: the verdict when the results lack a key the check needs
MISSING = "missing result"
LEDGER_PROFILES = ("reference", "paper")
DEFAULT_CLAIMS = Path(__file__).resolve().parents[2] / "book" / "paper_claims.yaml"
_TEMPLATE = re.compile(r"\{([A-Za-z0-9_\-]+)(?::([^{}]*))?\}")
_ROW_VERDICTS = (REPRODUCED, DIFFERENT_DEFINITION, BY_CONSTRUCTION)
_PAPER_FIX = "name a key of posgeom_utils.repro.paper.REPORTED, or 'key_a / key_b'"
_CHECK_FORM = "write < <= > >= == of keys, paper.KEY and numbers (+ - * / abs), and/or"
_OPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.And: all}
_OPS |= {ast.GtE: operator.ge, ast.Eq: operator.eq, ast.Or: any, ast.Add: operator.add}
_OPS |= {ast.Sub: operator.sub, ast.Mult: operator.mul}
_OPS[ast.Div] = lambda a, b: a / b if b else math.nan  # x / 0 fails every comparison
_TESTS = (ast.Compare, ast.BoolOp)  # what and/or may join


class ClaimError(ValueError):
    """A malformed row of the ledger. Chapter: *Reproduction ledger*."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """One row of ``book/paper_claims.yaml``. Chapter: *Reproduction ledger*."""

    id: str
    chapter: str
    statement: str
    ours: str
    check: str | None = None
    asserted: str = ""
    value: str | None = None
    text: str | None = None
    quantity: str = ""
    verdict: str = REPRODUCED
    definition: str = ""
    alternatives: Sequence[dict[str, Any]] = ()
    not_checkable: str = ""
    evidence: str = ""
    headline: str = ""
    also: Sequence[str] = ()

    def keys(self) -> list[str]:
        """Every glued key the row reads, once. Chapter: *Reproduction ledger*."""
        alts = self.alternatives
        checks = [self.check, *(a["check"] for a in alts)]
        texts = [self.ours, self.quantity, self.evidence, self.definition]
        texts += [a["definition"] for a in alts]
        found = [k for c in checks for k in check_keys(c)]
        found += [k for t in texts for k, _ in _TEMPLATE.findall(t)]
        return list(dict.fromkeys(found))


def _pending(profile: str) -> str:
    return PENDING.get(profile, f"pending a {profile} run")


def _unknown_paper(ref: Any) -> bool:
    names = [part.strip() for part in str(ref).split("/")]
    return len(names) > 2 or not set(names) <= set(REPORTED)


def paper_value(ref: str) -> float:
    """A REPORTED key's number, or ``"a / b"``. Chapter: *Reproduction ledger*."""
    if _unknown_paper(ref):
        raise ClaimError(f"paper value {ref!r}: {_PAPER_FIX}")
    values = [float(REPORTED[part.strip()][0]) for part in ref.split("/")]
    return values[0] / values[1] if len(values) == 2 else values[0]


def _value(node: ast.AST, read: Callable[[str], float]) -> Any:
    """A node of a check, evaluated; ClaimError for anything a check may not use."""
    match node:
        case ast.Constant(int() | float() as x) if not isinstance(x, bool):
            return float(x)
        case ast.Name(key) if key not in ("paper", "results", "abs"):
            return read(key)
        case ast.Subscript(ast.Name("results"), ast.Constant(str(key))):
            return read(key)
        case ast.Attribute(ast.Name("paper"), key):
            return paper_value(key)
        case ast.Call(ast.Name("abs"), [x], []):
            return abs(_value(x, read))
        case ast.UnaryOp(ast.USub(), x):
            return -_value(x, read)
        case ast.BinOp(a, op, b) if type(op) in _OPS:
            return _OPS[type(op)](_value(a, read), _value(b, read))
        case ast.BoolOp(op, parts) if all(isinstance(p, _TESTS) for p in parts):
            return _OPS[type(op)]([_value(p, read) for p in parts])  # read every key
        case ast.Compare(a, ops, bs) if set(map(type, ops)) <= set(_OPS):
            x = [_value(side, read) for side in (a, *bs)]
            return all(_OPS[type(op)](x[k], x[k + 1]) for k, op in enumerate(ops))
    raise ClaimError(f"{ast.unparse(node)!r}: {_CHECK_FORM}")


def check_keys(check: str | None) -> list[str]:
    """The glued keys a check reads, in order, once. Chapter: *Reproduction ledger*."""
    keys: list[str] = []
    try:  # reading every key vets the whole check: a comparison, or an and/or of them
        tree = ast.parse(check, mode="eval").body if check is not None else None
        holds = tree is None or _value(tree, lambda key: keys.append(key) or math.nan)
    except (SyntaxError, TypeError):  # TypeError: not a string
        holds = None
    if not isinstance(holds, bool):
        raise ClaimError(f"{check!r}: {_CHECK_FORM}")
    return list(dict.fromkeys(keys))


def _row_problem(item: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first wrong field of a row and its fix; None if the row is right."""
    if unknown := sorted(set(item) - {f.name for f in dataclasses.fields(Claim)}):
        return ", ".join(unknown), "not a field; the header of the file lists them"
    if missing := [f for f in ("id", "chapter", "statement", "ours") if f not in item]:
        return ", ".join(missing), "every row needs id, chapter, statement and ours"
    if ("value" in item) == ("text" in item):
        return "value/text", "give one: the paper's number by name, or its words"
    if len([f for f in ("check", "asserted", "not_checkable") if item.get(f)]) != 1:
        return "check", "give one: a check, asserted, or not_checkable with the reason"
    if "value" in item and _unknown_paper(item["value"]):
        return "value", f"{item['value']!r}: {_PAPER_FIX}"
    if item.get("verdict", REPRODUCED) not in _ROW_VERDICTS:
        return "verdict", "use one of: " + ", ".join(_ROW_VERDICTS)
    also = item.get("also", [])
    if not isinstance(also, list) or item["chapter"] in also:
        return "also", "list the other chapters whose keys the row reads"
    alts = [("alternatives", a.get("check", "")) for a in item.get("alternatives", [])]
    for field, check in [("check", item.get("check")), *alts]:
        try:
            check_keys(check)
        except ClaimError as error:
            return field, str(error)
    return None


def load_claims(path: str | Path | None = None) -> list[Claim]:
    """Read and validate the ledger's rows. Chapter: *Reproduction ledger*."""
    import yaml

    path = Path(path) if path is not None else DEFAULT_CLAIMS
    rows = yaml.safe_load(path.read_text(encoding="utf-8"))["claims"]
    for k, item in enumerate(rows):
        if problem := _row_problem(item):
            where = f"{path} row {k + 1} ({item.get('id')!r})"
            raise ClaimError(f"{where}, field {problem[0]}: {problem[1]}")
    ids = [item["id"] for item in rows]
    if twice := sorted({i for i in ids if ids.count(i) > 1}):
        raise ClaimError(f"{path}: ids {twice} are used twice; give each row its own")
    return [Claim(**item) for item in rows]


def as_number(value: Any) -> float | None:
    """A glued value as a float (``"66%"``: 0.66). Chapter: *Reproduction ledger*."""
    try:  # str() first: True, None and lists are not numbers
        text = str(value).strip()
        return float(text.rstrip("%")) / 100 if text.endswith("%") else float(text)
    except ValueError:
        return None


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return repr(x) if isinstance(x, str) else str(x)


def evaluate_check(check: str, results: Mapping[str, Any]) -> tuple[bool, str]:
    """(passed, the values it read and the outcome). Chapter: *Reproduction ledger*."""
    numbers, read = {}, []
    for key in check_keys(check):  # every key is checked before evaluating
        if key not in results:
            raise ClaimError(f"check {check!r} reads {key!r}, which the results lack")
        x = numbers[key] = math.nan if (y := as_number(results[key])) is None else y
        shown = f"{_fmt(results[key])} is not a number" if math.isnan(x) else _fmt(x)
        read.append(f"{key} = {shown}")
    papers = dict.fromkeys(re.findall(r"\bpaper\.(\w+)", check))
    read += [f"paper.{name} = {_fmt(paper_value(name))}" for name in papers]
    get, tree = numbers.__getitem__, ast.parse(check, mode="eval").body
    parts = tree.values if isinstance(getattr(tree, "op", None), ast.And) else []
    failed = [ast.get_source_segment(check, p) for p in parts if not _value(p, get)]
    outcome = "fails at " + "; ".join(failed) if failed else "fails"  # which parts
    passed = _value(tree, get)
    return passed, f"{check} with {', '.join(read)}: {'holds' if passed else outcome}"


def render(text: str, results: Mapping[str, Any] | None) -> tuple[str, list[str]]:
    """(filled template, missing keys: shown ``?``). Chapter: *Reproduction ledger*."""
    missing: list[str] = []

    def one(match: re.Match) -> str:
        key, spec = match.group(1), match.group(2)
        if results is None or key not in results:
            missing.append(key)
            return "?"
        try:
            return format(results[key], spec or "")
        except (TypeError, ValueError):
            return str(results[key])

    return _TEMPLATE.sub(one, text or ""), missing


def scale_label(payload: Mapping[str, Any] | None, profile: str) -> str:
    """A run's profile, cap, stand-in or pending. Chapter: *Reproduction ledger*."""
    if payload is None:
        return _pending(profile)
    prov = payload.get("provenance", {}) or {}
    ran = prov.get("profile") or payload.get("parameters", {}).get("profile")
    ran = ran or "unknown"
    if (cap := prov.get("cap")) is not None:
        return f"capped CPU run (cap {cap}) of the {ran} profile, not {ran} scale"
    if ran == profile:
        return f"{ran} profile"
    return f"{ran} profile results standing in for {profile}"


def _provenance(payload: Mapping[str, Any] | None, profile: str) -> dict[str, Any]:
    prov = (payload or {}).get("provenance", {}) or {}
    commit = prov.get("commit")
    dirty = " (dirty)" if prov.get("dirty") else ""
    return {
        "scale": scale_label(payload, profile),
        "device": prov.get("device_name") or "",
        "commit": commit[:7] + dirty if commit else "",
        "date": (prov.get("finished") or "")[:10],
    }


def rule_text(claim: Claim) -> str:
    """The row's check, or what the chapter asserts. Chapter: *Reproduction ledger*."""
    asserted = claim.asserted and f"asserted by the chapter: {claim.asserted}"
    return asserted or claim.check or "-"


def _sentences(*parts: str) -> str:
    kept = [p.strip().rstrip(".").strip() for p in parts if p and p.strip()]
    kept = [p if "_" in p.split(" ")[0] else p[:1].upper() + p[1:] for p in kept]
    return ". ".join(kept) + ("." if kept else "")


def read_claim_run(folder: str | Path | None, claim: Claim) -> dict[str, Any] | None:
    """A row's run, with ``claim.also``'s results. Chapter: *Reproduction ledger*."""
    payload = read_run(folder, claim.chapter)
    others = [read_run(folder, chapter) for chapter in claim.also]
    if payload is None or None in others:
        return None
    results, read = dict(payload["results"]), set(claim.keys())
    for chapter, other in zip(claim.also, others):
        for key, value in other["results"].items():
            if key in results and results[key] != value and key in read:
                raise ClaimError(
                    f"row {claim.id!r}: {chapter} and another chapter glue {key!r} "
                    "with different values; rename one of them"
                )
            results.setdefault(key, value)
    return {**payload, "results": results}


def _outcome(ours: str, verdict: str, evidence: str = "", check: str = "") -> dict:
    return {"ours": ours, "verdict": verdict, "evidence": evidence, "check": check}


def _alternative(alt: Mapping[str, Any], results: Mapping[str, Any]) -> tuple[str, str]:
    """The verdict and words of an alternative definition that holds."""
    values = [as_number(results.get(key)) for key in alt.get("matches", ())]
    shared = values and None not in values and math.prod(values) >= 2
    text = "it holds " + render(alt["definition"], results)[0]
    if shared:  # a search match that chance explains
        text += (
            f"; about {math.prod(values):,.0f} settings of the search match as "
            "well, so the match does not tell which definition the paper used"
        )
    return (NOT_IDENTIFIABLE if shared else DIFFERENT_DEFINITION), text


def judge(
    claim: Claim, payload: Mapping[str, Any] | None, profile: str
) -> dict[str, str]:
    """A row's ours, verdict, evidence and check. Chapter: *Reproduction ledger*."""
    results = payload["results"] if payload is not None else None
    ours, missing = render(claim.ours, results)
    if claim.not_checkable:
        shown = ours if results is not None and not missing else ""
        return _outcome(shown, NOT_CHECKABLE, claim.not_checkable)
    if results is None:
        return _outcome("", _pending(profile))
    checks = [claim.check, *(alt["check"] for alt in claim.alternatives)]
    needed = dict.fromkeys(k for c in checks for k in check_keys(c))  # every check's
    if absent := [k for k in needed if k not in results]:
        return _outcome(ours, MISSING, "", f"missing key(s) {absent} in results.json")
    evidence = render(claim.evidence, results)[0]
    if claim.asserted:
        held = "the chapter ran to completion, so its assertion held"
        passed, message = True, f"{held}: {claim.asserted}"
    else:
        passed, message = evaluate_check(claim.check, results)
    if passed:
        own = claim.verdict != REPRODUCED
        definition = render(claim.definition, results)[0] if own else ""
        return _outcome(ours, claim.verdict, _sentences(definition, evidence), message)
    tried = [message]
    for alt in claim.alternatives:
        passed, message = evaluate_check(alt["check"], results)
        tried.append(message)
        if passed:
            verdict, text = _alternative(alt, results)
            failed = "As the paper defines it, the check fails"
            evidence = _sentences(failed, text, evidence)
            return _outcome(ours, verdict, evidence, "; ".join(tried))
    return _outcome(ours, DIFFERS, _sentences(evidence), "; ".join(tried))


def _paper_shown(claim: Claim) -> str:
    """A count as an integer, other numbers to 4 digits, or the paper's words."""
    if claim.value is None:
        return claim.text or ""
    value = paper_value(claim.value)
    whole = claim.value in REPORTED and value.is_integer() and value > 1
    return f"{value:.0f}" if whole else f"{value:.4g}"


def build_ledger(
    results_dirs: Mapping[str, str | Path | None],
    claims: list[Claim] | None = None,
    profiles: tuple[str, ...] = LEDGER_PROFILES,
) -> Any:
    """A row per claim, verdicts per profile. Chapter: *Reproduction ledger*."""
    import pandas as pd

    records = []
    for claim in load_claims() if claims is None else claims:
        payloads = {p: read_claim_run(results_dirs.get(p), claim) for p in profiles}
        first = next((payloads[p] for p in profiles if payloads[p] is not None), None)
        keys = " + ".join((claim.chapter, *claim.also)) + ": " + ", ".join(claim.keys())
        record = {"id": claim.id, "claim": claim.statement, "headline": claim.headline}
        record |= {"paper": _paper_shown(claim), "chapter": claim.chapter}
        record["quantity"] = render(claim.quantity, (first or {}).get("results"))[0]
        record |= {"keys": keys, "rule": rule_text(claim)}
        for p in profiles:
            outcome = judge(claim, payloads[p], p) | _provenance(payloads[p], p)
            record |= {f"{name} ({p})": value for name, value in outcome.items()}
        records.append(record)
    return pd.DataFrame(records).set_index("id")


def provenance_table(
    results_dirs: Mapping[str, str | Path | None],
    profiles: tuple[str, ...] = LEDGER_PROFILES,
) -> Any:
    """One row per (profile, chapter) run. Chapter: *Reproduction ledger*."""
    import pandas as pd

    records = []
    for p in profiles:
        folder = Path(results_dirs[p]) if results_dirs.get(p) else None
        files = folder.glob("*/results.json") if folder else []
        found = sorted(q.parent.name for q in files)
        if not found:
            records.append({"profile": p, "chapter": "(all)", "scale": _pending(p)})
        for chapter in found:
            payload = read_run(folder, chapter)
            seconds = ((payload or {}).get("provenance") or {}).get("wall_seconds")
            row = {"profile": p, "chapter": chapter} | _provenance(payload, p)
            records.append(row | {"wall time (s)": seconds})
    return pd.DataFrame(records).set_index(["profile", "chapter"])


def verdict_counts(ledger: Any, profile: str) -> dict[str, int]:
    """Rows per verdict (zeros too) at ``profile``. Chapter: *Reproduction ledger*."""
    column = ledger[f"verdict ({profile})"]
    states = [*VERDICTS, _pending(profile), MISSING]
    return {state: int((column == state).sum()) for state in states}

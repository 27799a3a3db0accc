"""The reproduction ledger: each claim of Cirrincione (2026), our number and a verdict.

Chapter: *Reproduction ledger*. Rows: ``book/paper_claims.yaml``. A ``check`` on glued
keys is ``{key, op, value | other | paper, factor, offset}`` (``key op factor * rhs +
offset``), ``{key, op: between, low, high}``, ``{asserted: TEXT}`` (the chapter asserts
it), ``{all: [...]}`` or ``{any: [...]}``; ``op``: ``< <= > >= == !=`` (``==``/``!=``
within ``tol + rtol |y|``)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
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
OPS = {"<": float.__lt__, "<=": float.__le__, ">": float.__gt__, ">=": float.__ge__}
_TEMPLATE = re.compile(r"\{([A-Za-z0-9_\-]+)(?::([^{}]*))?\}")
_ROW_VERDICTS = (REPRODUCED, DIFFERENT_DEFINITION, BY_CONSTRUCTION)
_PAPER_FIX = "name a key of posgeom_utils.repro.paper.REPORTED, or 'key_a / key_b'"
_CHECK_FORM = (
    "write {key, op, value | other | paper} (op: < <= > >= == !=), "
    "{key, op: between, low, high}, {asserted: TEXT}, {all: [...]} or {any: [...]}"
)


class ClaimError(ValueError):
    """A malformed row of the ledger. Chapter: *Reproduction ledger*."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """One row of ``book/paper_claims.yaml``. Chapter: *Reproduction ledger*."""

    id: str
    chapter: str
    statement: str
    ours: str
    check: dict[str, Any] | None = None
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
        checks = [c for c in [self.check, *(a["check"] for a in alts)] if c]
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


def _leaves(check: Any) -> list[Any]:
    for mode in ("all", "any"):
        if isinstance(check, Mapping) and mode in check:
            return [leaf for sub in check[mode] for leaf in _leaves(sub)]
    return [check]


def check_keys(check: Mapping[str, Any]) -> list[str]:
    """The glued keys a check reads, in order, once. Chapter: *Reproduction ledger*."""
    leaves = _leaves(check)
    return list(dict.fromkeys(c[n] for c in leaves for n in ("key", "other") if n in c))


def _leaf_problem(leaf: Any) -> str | None:
    """What is wrong with one comparison of a check, and the fix; None if nothing."""
    if not isinstance(leaf, Mapping):
        return f"{leaf!r}: {_CHECK_FORM}"
    if "asserted" in leaf:
        return None
    op, sides = leaf.get("op"), set(leaf) & {"value", "other", "paper", "low", "high"}
    one_side = sides in ({"value"}, {"other"}, {"paper"})
    between = op == "between" and sides == {"low", "high"}
    if "key" not in leaf or not (between or one_side and op in (*OPS, "==", "!=")):
        return f"{leaf!r}: {_CHECK_FORM}"
    if "paper" in leaf and _unknown_paper(leaf["paper"]):
        return f"paper {leaf['paper']!r}: {_PAPER_FIX}"
    return None


def _row_problem(item: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first wrong field of a row and its fix; None if the row is right."""
    if unknown := sorted(set(item) - {f.name for f in dataclasses.fields(Claim)}):
        return ", ".join(unknown), "not a field; the header of the file lists them"
    if missing := [f for f in ("id", "chapter", "statement", "ours") if f not in item]:
        return ", ".join(missing), "every row needs id, chapter, statement and ours"
    if ("value" in item) == ("text" in item):
        return "value/text", "give one: the paper's number by name, or its words"
    if ("check" in item) == bool(item.get("not_checkable")):
        return "check", "give a check, or not_checkable with the reason (not both)"
    if "value" in item and _unknown_paper(item["value"]):
        return "value", f"{item['value']!r}: {_PAPER_FIX}"
    if item.get("verdict", REPRODUCED) not in _ROW_VERDICTS:
        return "verdict", "use one of: " + ", ".join(_ROW_VERDICTS)
    also = item.get("also", [])
    if not isinstance(also, list) or item["chapter"] in also:
        return "also", "list the other chapters whose keys the row reads"
    checks = [("check", item["check"])] if "check" in item else []
    checks += [("alternatives", a["check"]) for a in item.get("alternatives", [])]
    for field, check in checks:
        for leaf in _leaves(check):
            if problem := _leaf_problem(leaf):
                return field, problem
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


def _number(name: str, results: Mapping[str, Any]) -> float | None:
    x = as_number(results.get(name))
    return None if x is None or math.isnan(x) else x


def _not_a_number(name: str, results: Mapping[str, Any]) -> tuple[bool, str]:
    return False, f"{name} = {_fmt(results.get(name, 'missing'))} is not a number"


def evaluate_check(
    check: Mapping[str, Any], results: Mapping[str, Any]
) -> tuple[bool, str]:
    """(passed, what was compared). Chapter: *Reproduction ledger*."""
    for mode, combine, joiner in (("all", all, " and "), ("any", any, " or ")):
        if mode in check:
            subs = [evaluate_check(c, results) for c in check[mode]]
            return combine(p for p, _ in subs), joiner.join(f"[{m}]" for _, m in subs)
    if "asserted" in check:
        held = "the chapter ran to completion, so its assertion held"
        return True, f"{held}: {check['asserted']}"
    key, op = check["key"], check["op"]
    if (x := _number(key, results)) is None:
        return _not_a_number(key, results)
    if op == "between":
        passed = check["low"] <= x <= check["high"]
        where = f"{'within' if passed else 'outside'} [{check['low']}, {check['high']}]"
        return passed, f"{key} = {_fmt(x)} {where}"
    if "value" in check:
        base, name = float(check["value"]), _fmt(check["value"])
    elif "other" in check:
        name = check["other"]
        if (base := _number(name, results)) is None:
            return _not_a_number(name, results)
    else:
        base, name = paper_value(check["paper"]), f"paper {check['paper']}"
    factor, offset = check.get("factor", 1), check.get("offset", 0)
    y = factor * base + offset
    rhs = (f"{_fmt(factor)} * " if factor != 1 else "") + name
    rhs += f" {offset:+g}" if offset else ""
    rhs += f" = {_fmt(y)}" if (factor != 1 or offset or "paper" in check) else ""
    if op in OPS:
        passed, within = OPS[op](x, float(y)), ""
    else:
        tol, diff = check.get("tol", 0.0) + check.get("rtol", 0.0) * abs(y), abs(x - y)
        passed = (diff <= tol) == (op == "==")
        compared = "<=" if diff <= tol else ">"
        within = f" (|diff| {_fmt(diff)} {compared} tol {_fmt(tol)})"
    verdict = "holds" if passed else "fails"
    return passed, f"{key} = {_fmt(x)} {op} {rhs}{within}: {verdict}"


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
    """The row's verdict rule in words. Chapter: *Reproduction ledger*."""
    check = claim.check
    if check is None:
        return "-"
    if "asserted" in check:
        return f"asserted by the chapter: {check['asserted']}"
    if "paper" in check and check["op"] == "==":
        rtol = check.get("rtol")
        parts = [f"{rtol:.0%} of the paper's value"] if rtol else []
        if check.get("tol") or not parts:
            parts.append(f"{check.get('tol', 0):g}")
        return "|ours - paper| <= " + " + ".join(parts)
    return "qualitative check on our keys: " + ", ".join(check_keys(check))


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
    if absent := [k for k in check_keys(claim.check) if k not in results]:
        return _outcome(ours, MISSING, "", f"missing key(s) {absent} in results.json")
    evidence = render(claim.evidence, results)[0]
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

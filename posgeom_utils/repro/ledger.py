"""The reproduction ledger: every claim of Cirrincione (2026) beside our number and a
computed verdict.

Chapter: *Reproduction ledger*. The rows are ``book/paper_claims.yaml`` (its header
documents the fields): the paper's statement and value (from
:data:`~posgeom_utils.repro.paper.REPORTED`, never typed), how our number is shown (a
template over the chapter's glued keys, ``"{sst2_sin_raw:.0f}"``) and a ``check`` on our
glued values that turns the two into a verdict. A check is a mapping: ``{key, op,
value}`` (a constant), ``{key, op, other, factor, offset}`` (another key, ``factor *
other + offset``), ``{key, op, paper, factor, offset}`` (the paper's value), ``{key, op:
between, low, high}``, ``{asserted: TEXT}`` (the chapter asserts it), or ``{all:
[...]}`` / ``{any: [...]}``; ``op`` is one of ``< <= > >= == !=`` (``==``/``!=`` within
``tol + rtol |y|``). The claims the chapters make about their own numbers are not here:
each is an ``assert`` beside its sentence, so a run that breaks it fails."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..cache import read_json
from .paper import REPORTED

REPRODUCED = "reproduced"
DIFFERENT_DEFINITION = "reproduced with a different definition"
BY_CONSTRUCTION = "holds by construction"
DIFFERS = "differs"
NOT_CHECKABLE = "not checkable here"
NOT_IDENTIFIABLE = "not identifiable"
VERDICTS = (
    REPRODUCED,
    DIFFERENT_DEFINITION,
    NOT_IDENTIFIABLE,
    BY_CONSTRUCTION,
    DIFFERS,
    NOT_CHECKABLE,
)
#: the verdict when a chapter's results for a profile are absent, or lack a key the check needs
PENDING = {p: f"pending a {p} run" for p in ("smoke", "default", "reference")} | {
    "paper": "pending a GPU run"
}
MISSING = "missing result"
LEDGER_PROFILES = ("reference", "paper")
#: where the rows live
DEFAULT_CLAIMS = Path(__file__).resolve().parents[2] / "book" / "paper_claims.yaml"

FIELDS = (
    "id",
    "headline",
    "chapter",
    "also",
    "statement",
    "check",
    "value",
    "text",
    "quantity",
    "ours",
    "verdict",
    "definition",
    "alternatives",
    "not_checkable",
    "evidence",
)
OPS = {"<": float.__lt__, "<=": float.__le__, ">": float.__gt__, ">=": float.__ge__}
_TEMPLATE = re.compile(r"\{([A-Za-z0-9_\-]+)(?::([^{}]*))?\}")


class ClaimError(ValueError):
    """A malformed row of the ledger: the message names the row and what is wrong.
    Chapter: *Reproduction ledger*."""


@dataclass(frozen=True)
class Claim:
    """One claim of the paper: what it says (``value``: a REPORTED key or ``"a / b"``;
    or ``text``), how ours is shown and judged. Chapter: *Reproduction ledger*."""

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
    alternatives: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    not_checkable: str = ""
    evidence: str = ""
    headline: str = ""
    also: tuple[str, ...] = ()

    def keys(self) -> list[str]:
        """Every glued key the row reads (checks, then templates), without repeats.
        Chapter: *Reproduction ledger*."""
        keys = [
            k
            for c in [self.check, *(a["check"] for a in self.alternatives)]
            if c
            for k in check_keys(c)
        ]
        texts = (
            self.ours,
            self.quantity,
            self.evidence,
            self.definition,
            *(a["definition"] for a in self.alternatives),
        )
        return list(
            dict.fromkeys(
                keys + [m.group(1) for t in texts for m in _TEMPLATE.finditer(t)]
            )
        )


def paper_value(ref: str) -> float:
    """The paper's number for a reference: a REPORTED key, or the ratio ``"a / b"`` of
    two. Chapter: *Reproduction ledger*."""
    names = [part.strip() for part in ref.split("/")]
    unknown = [n for n in names if n not in REPORTED]
    if unknown or len(names) > 2:
        raise ClaimError(
            f"paper value {ref!r}: {unknown or ref} not in "
            "posgeom_utils.repro.paper.REPORTED"
        )
    values = [float(REPORTED[n][0]) for n in names]
    return values[0] / values[1] if len(values) == 2 else values[0]


def _leaves(check: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    for mode in ("all", "any"):
        if mode in check:
            return [leaf for sub in check[mode] for leaf in _leaves(sub)]
    return [check]


def check_keys(check: Mapping[str, Any]) -> list[str]:
    """The glued keys a check reads, in order, without repeats. Chapter: *Reproduction
    ledger*."""
    return list(
        dict.fromkeys(c[n] for c in _leaves(check) for n in ("key", "other") if n in c)
    )


def _validate(check: Any) -> None:
    for leaf in _leaves(check) if isinstance(check, Mapping) else [check]:
        if not isinstance(leaf, Mapping):
            raise ClaimError(f"a check is a mapping, got {leaf!r}")
        if "asserted" in leaf:
            continue
        op = leaf.get("op")
        if op not in (*OPS, "==", "!=", "between") or "key" not in leaf:
            raise ClaimError(
                f"a check needs 'key' and an op in < <= > >= == != between, got {leaf}"
            )
        sides = [s for s in ("value", "other", "paper") if s in leaf]
        if (op == "between") != (not sides) or len(sides) > 1:
            raise ClaimError(
                f"op {op!r} compares with exactly one of value/other/paper, got {leaf}"
            )
        if "paper" in leaf:
            paper_value(leaf["paper"])


def _row(item: Mapping[str, Any]) -> Claim:
    """One row of the YAML file as a :class:`Claim`, validated (a :class:`ClaimError`
    says what is wrong)."""
    unknown = set(item) - set(FIELDS)
    if unknown or not {"id", "chapter", "statement", "ours"} <= set(item):
        raise ClaimError(
            f"fields {sorted(unknown)} unknown, or id/chapter/statement/ours missing"
        )
    if ("value" in item) == ("text" in item) or ("check" in item) == bool(
        item.get("not_checkable")
    ):
        raise ClaimError("give one of value/text, and a check unless not_checkable")
    for check in [
        item.get("check"),
        *(a["check"] for a in item.get("alternatives", [])),
    ]:
        if check is not None:
            _validate(check)
    if item.get("value"):
        paper_value(item["value"])
    if item.get("verdict", REPRODUCED) not in (
        REPRODUCED,
        DIFFERENT_DEFINITION,
        BY_CONSTRUCTION,
    ):
        raise ClaimError(
            f"verdict must be {REPRODUCED}, {DIFFERENT_DEFINITION} or {BY_CONSTRUCTION}"
        )
    text = {k: " ".join(str(v).split()) for k, v in item.items() if isinstance(v, str)}
    alternatives = tuple(
        {
            "check": a["check"],
            "definition": " ".join(a["definition"].split()),
            "matches": tuple(a.get("matches", ())),
        }
        for a in item.get("alternatives", [])
    )
    also = item.get("also", [])
    if not isinstance(also, list) or item["chapter"] in also:
        raise ClaimError("also lists the other chapters whose keys the row reads")
    return Claim(**{**item, **text, "alternatives": alternatives, "also": tuple(also)})


def load_claims(path: str | Path | None = None) -> list[Claim]:
    """Read and validate the ledger's rows (default ``book/paper_claims.yaml``).
    Chapter: *Reproduction ledger*."""
    import yaml

    path = Path(path) if path is not None else DEFAULT_CLAIMS
    claims: list[Claim] = []
    for k, item in enumerate(
        yaml.safe_load(path.read_text(encoding="utf-8"))["claims"]
    ):
        try:
            claims.append(_row(item))
        except ClaimError as exc:
            raise ClaimError(
                f"{path} row {k + 1} ({item.get('id')!r}): {exc}"
            ) from None
    if len({c.id for c in claims}) != len(claims):
        raise ClaimError(f"{path}: duplicate ids")
    return claims


def as_number(value: Any) -> float | None:
    """A glued value as a float (``"66%"`` is 0.66); ``None`` for booleans, words and
    lists. Chapter: *Reproduction ledger*."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        text = str(value).strip()
        return float(text.rstrip("%")) / 100 if text.endswith("%") else float(text)
    except ValueError:
        return None


def _fmt(x: Any) -> str:
    return (
        f"{x:.6g}"
        if isinstance(x, float)
        else repr(x)
        if isinstance(x, str)
        else str(x)
    )


def evaluate_check(
    check: Mapping[str, Any], results: Mapping[str, Any]
) -> tuple[bool, str]:
    """Evaluate a check on one chapter's glued ``results``: (passed, what was compared).
    Chapter: *Reproduction ledger*."""
    for mode, combine in (("all", all), ("any", any)):
        if mode in check:
            subs = [evaluate_check(c, results) for c in check[mode]]
            joiner = " and " if mode == "all" else " or "
            return combine(p for p, _ in subs), joiner.join(f"[{m}]" for _, m in subs)
    if "asserted" in check:
        return (
            True,
            "the chapter ran to completion, so its assertion held: "
            f"{check['asserted']}",
        )
    key, op = check["key"], check["op"]
    x = as_number(results.get(key))
    if x is None or math.isnan(x):
        return False, f"{key} = {_fmt(results.get(key, 'missing'))} is not a number"
    if op == "between":
        passed = check["low"] <= x <= check["high"]
        return (
            passed,
            f"{key} = {_fmt(x)} {'within' if passed else 'outside'} [{check['low']}, "
            f"{check['high']}]",
        )
    if "value" in check:
        base, name = float(check["value"]), _fmt(check["value"])
    elif "other" in check:
        base, name = as_number(results.get(check["other"])), check["other"]
        if base is None or math.isnan(base):
            return (
                False,
                f"{name} = {_fmt(results.get(name, 'missing'))} is not a number",
            )
    else:
        base, name = paper_value(check["paper"]), f"paper {check['paper']}"
    factor, offset = check.get("factor", 1), check.get("offset", 0)
    y = factor * base + offset
    rhs = (
        (f"{_fmt(factor)} * " if factor != 1 else "")
        + name
        + (f" {offset:+g}" if offset else "")
    )
    rhs += f" = {_fmt(y)}" if (factor != 1 or offset or "paper" in check) else ""
    if op in OPS:
        passed = OPS[op](x, float(y))
        return passed, f"{key} = {_fmt(x)} {op} {rhs}: {'holds' if passed else 'fails'}"
    tol, diff = check.get("tol", 0.0) + check.get("rtol", 0.0) * abs(y), abs(x - y)
    passed = (diff <= tol) == (op == "==")
    return passed, (
        f"{key} = {_fmt(x)} {op} {rhs} (|diff| {_fmt(diff)} "
        f"{'<=' if diff <= tol else '>'} tol "
        f"{_fmt(tol)}): {'holds' if passed else 'fails'}"
    )


def render(text: str, results: Mapping[str, Any] | None) -> tuple[str, list[str]]:
    """Fill a template with glued values: (text, missing keys); a missing key leaves
    ``?``. Chapter: *Reproduction ledger*."""
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


def read_run(folder: str | Path | None, chapter: str) -> dict[str, Any] | None:
    """The ``results.json`` of ``chapter`` under ``folder`` (``None`` when absent or
    unreadable). Chapter: *Reproduction ledger*."""
    payload = (
        read_json(Path(folder) / chapter / "results.json")
        if folder is not None
        else None
    )
    return (
        payload
        if payload is not None and isinstance(payload.get("results"), dict)
        else None
    )


def scale_label(payload: Mapping[str, Any] | None, profile: str) -> str:
    """What a run is: ``"reference profile"``, a capped CPU run (never paper scale), a
    stand-in of another profile, or pending. Chapter: *Reproduction ledger*."""
    if payload is None:
        return PENDING.get(profile, f"pending a {profile} run")
    prov = payload.get("provenance", {}) or {}
    ran = (
        prov.get("profile") or payload.get("parameters", {}).get("profile") or "unknown"
    )
    if prov.get("cap") is not None:
        return (
            f"capped CPU run (cap {prov['cap']}) of the {ran} profile, not {ran} scale"
        )
    return (
        f"{ran} profile"
        if ran == profile
        else f"{ran} profile results standing in for {profile}"
    )


def _provenance(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    payload = payload or {}
    prov, params = (
        payload.get("provenance", {}) or {},
        payload.get("parameters", {}) or {},
    )
    results = payload.get("results", {}) or {}
    model = (
        params.get("model_name")
        or results.get("model")
        or results.get("tokenizer_name")
    )
    corpora = "/".join(
        str(params[k]) for k in ("dataset", "other_dataset") if params.get(k)
    )
    data = (
        [corpora + (f" {params['split']}" if params.get("split") and corpora else "")]
        if corpora
        else []
    )
    if "sample_size" in params:
        data.append(
            "all texts"
            if params["sample_size"] is None
            else f"{params['sample_size']} texts"
        )
    data += [
        f"{k}={params[k]}" for k in ("n", "min_count", "special_tokens") if k in params
    ]
    commit = prov.get("commit")
    return {
        "model": str(model or ("all-MiniLM-L6-v2 (packaged)" if payload else "")),
        "data": ", ".join(data) or ("synthetic" if payload else ""),
        "device": prov.get("device_name") or "",
        "commit": (commit[:7] + (" (dirty)" if prov.get("dirty") else ""))
        if commit
        else "",
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
        parts = (
            [f"{check['rtol']:.0%} of the paper's value"] if check.get("rtol") else []
        )
        if check.get("tol") or not parts:
            parts.append(f"{check.get('tol', 0):g}")
        return "|ours - paper| <= " + " + ".join(parts)
    return "qualitative check on our keys: " + ", ".join(check_keys(check))


def _sentences(*parts: str) -> str:
    kept = [p.strip().rstrip(".").strip() for p in parts if p and p.strip()]
    kept = [p if "_" in p.split(" ")[0] else p[:1].upper() + p[1:] for p in kept]
    return ". ".join(kept) + ("." if kept else "")


def search_matches(keys: tuple[str, ...], results: Mapping[str, Any]) -> float | None:
    """How many settings of a definition search match the paper's number(s): the
    product of the glued ``keys`` (a count of settings times the fractions that match),
    or None when the alternative came from no search. A match is *identifiable* only
    when fewer than 2 settings match. Chapter: *Reproduction ledger*."""
    if not keys:
        return None
    found = 1.0
    for key in keys:
        value = as_number(results.get(key))
        if value is None:
            return None
        found *= value
    return found


def read_claim_run(folder: str | Path | None, claim: Claim) -> dict[str, Any] | None:
    """The run of ``claim.chapter`` under ``folder`` with the results of the chapters
    in ``claim.also`` added (``None`` when any is absent); a key the row reads that two
    of them glue with different values is a :class:`ClaimError` (other keys keep the
    first chapter's value). Chapter: *Reproduction ledger*."""
    payload = read_run(folder, claim.chapter)
    others = [read_run(folder, chapter) for chapter in claim.also]
    if payload is None or any(o is None for o in others):
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


def _alternative(
    claim: Claim, results: Mapping[str, Any], ours: str, evidence: str, tried: list
) -> dict[str, str] | None:
    """The outcome of the first alternative of ``claim`` that holds (None if none):
    *reproduced with a different definition*, or *not identifiable* when 2 or more
    settings of a definition search match (``tried`` collects the checks' messages)."""
    for alt in claim.alternatives:
        passed, message = evaluate_check(alt["check"], results)
        tried.append(message)
        if not passed:
            continue
        found = search_matches(alt["matches"], results)
        shared = found is not None and found >= 2  # a search match that chance explains
        text = "it holds " + render(alt["definition"], results)[0]
        if shared:
            text += (
                f"; about {found:,.0f} settings of the search match as well, so the "
                "match does not tell which definition the paper used"
            )
        failed = "As the paper defines it, the check fails"
        verdict = NOT_IDENTIFIABLE if shared else DIFFERENT_DEFINITION
        return _outcome(
            ours, verdict, _sentences(failed, text, evidence), "; ".join(tried)
        )
    return None


def judge(
    claim: Claim, payload: Mapping[str, Any] | None, profile: str
) -> dict[str, str]:
    """The verdict of ``claim`` on one profile's results of its chapter: ``{"ours",
    "verdict", "evidence", "check"}`` (the evidence in sentences, the check as
    computed); when the check fails, an alternative that holds gives *reproduced with a
    different definition*, or *not identifiable* when it is a match of a definition
    search that many settings share. Chapter: *Reproduction ledger*."""
    results = payload["results"] if payload is not None else None
    ours, missing = render(claim.ours, results)
    if claim.not_checkable:
        shown = ours if results is not None and not missing else ""
        return _outcome(shown, NOT_CHECKABLE, claim.not_checkable)
    if results is None:
        return _outcome("", PENDING.get(profile, f"pending a {profile} run"))
    absent = [k for k in check_keys(claim.check) if k not in results]
    if absent:
        return _outcome(ours, MISSING, "", f"missing key(s) {absent} in results.json")
    evidence = render(claim.evidence, results)[0]
    passed, message = evaluate_check(claim.check, results)
    if passed:
        definition = (
            render(claim.definition, results)[0] if claim.verdict != REPRODUCED else ""
        )
        return _outcome(ours, claim.verdict, _sentences(definition, evidence), message)
    tried = [message]
    found = _alternative(claim, results, ours, evidence, tried)
    if found is not None:
        return found
    return _outcome(ours, DIFFERS, _sentences(evidence), "; ".join(tried))


def paper_shown(claim: Claim) -> str:
    """The paper's value as shown: a whole count as an integer, other numbers to 4
    digits, or its words. Chapter: *Reproduction ledger*."""
    if claim.value is None:
        return claim.text or ""
    value = paper_value(claim.value)
    return (
        f"{value:.0f}"
        if claim.value in REPORTED and value.is_integer() and value > 1
        else f"{value:.4g}"
    )


def build_ledger(
    results_dirs: Mapping[str, str | Path | None],
    claims: list[Claim] | None = None,
    profiles: tuple[str, ...] = LEDGER_PROFILES,
) -> Any:
    """One row per claim of the paper, indexed by id: the paper's value, what ours is,
    the rule, and per profile (``results_dirs[profile]``: a ``posgeom run`` output
    folder) our value, the verdict, the evidence, the run's scale and provenance.
    Chapter: *Reproduction ledger*."""
    import pandas as pd

    records = []
    for claim in load_claims() if claims is None else claims:
        payloads = {p: read_claim_run(results_dirs.get(p), claim) for p in profiles}
        first = next((payloads[p] for p in profiles if payloads[p] is not None), None)
        record: dict[str, Any] = {
            "id": claim.id,
            "claim": claim.statement,
            "headline": claim.headline,
            "paper": paper_shown(claim),
            "chapter": claim.chapter,
            "quantity": render(claim.quantity, (first or {}).get("results"))[0],
            "keys": " + ".join((claim.chapter, *claim.also))
            + ": "
            + ", ".join(claim.keys()),
            "rule": rule_text(claim),
        }
        for p in profiles:
            outcome = judge(claim, payloads[p], p)
            record |= {f"{name} ({p})": value for name, value in outcome.items()}
            record[f"scale ({p})"] = scale_label(payloads[p], p)
            record |= {
                f"{name} ({p})": value
                for name, value in _provenance(payloads[p]).items()
            }
        records.append(record)
    return pd.DataFrame(records).set_index("id")


def provenance_table(
    results_dirs: Mapping[str, str | Path | None],
    profiles: tuple[str, ...] = LEDGER_PROFILES,
) -> Any:
    """One row per (profile, chapter) with results: scale, commit, date, device, cap,
    wall time and library versions; a profile without results gets one pending row.
    Chapter: *Reproduction ledger*."""
    import pandas as pd

    records = []
    for p in profiles:
        folder = Path(results_dirs[p]) if results_dirs.get(p) else None
        found = (
            sorted(q.parent.name for q in folder.glob("*/results.json"))
            if folder
            else []
        )
        if not found:
            records.append(
                {"profile": p, "chapter": "(all)", "scale": PENDING.get(p, "pending")}
            )
        for chapter in found:
            payload = read_run(folder, chapter)
            prov = (payload or {}).get("provenance", {}) or {}
            libs = prov.get("libraries", {}) or {}
            records.append(
                {
                    "profile": p,
                    "chapter": chapter,
                    "scale": scale_label(payload, p),
                    "run profile": prov.get("profile", ""),
                    **_provenance(payload),
                    "cap": "" if prov.get("cap") is None else prov["cap"],
                    "wall time (s)": prov.get("wall_seconds"),
                    "started": prov.get("started", ""),
                    "versions": ", ".join(
                        f"{k} {libs[k]}"
                        for k in ("python", "torch", "transformers", "numpy")
                        if libs.get(k)
                    ),
                }
            )
    return pd.DataFrame(records).set_index(["profile", "chapter"])


def verdict_counts(ledger: Any, profile: str) -> dict[str, int]:
    """How many rows got each verdict at ``profile`` (pending and missing included,
    zeros too). Chapter: *Reproduction ledger*."""
    column = ledger[f"verdict ({profile})"]
    states = [*VERDICTS, PENDING.get(profile, f"pending a {profile} run"), MISSING]
    return {state: int((column == state).sum()) for state in states}

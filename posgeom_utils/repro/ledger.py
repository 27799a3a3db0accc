"""The reproduction ledger: every claim of Cirrincione (2026) beside our number and a computed verdict.

Chapter: *Reproduction ledger* (``book/ledger.md``). The rows live in ``book/ledger.yaml`` (format documented
at its top): the paper's statement, its value (from :data:`posgeom_utils.repro.paper.REPORTED`, never typed), the
chapter and glued key(s) holding ours, how to show our value, and the rule that turns the two into a verdict:

- ``reproduced``: within the row's stated tolerance, or the qualitative check passes;
- ``reproduced with a different definition``: the same holds for a quantity defined differently (named);
- ``differs``: outside the tolerance, or the check fails (the row's evidence says which numbers);
- ``not checkable here``: the row says why.

:func:`build_ledger` reads ``<dir>/<chapter>/results.json`` (written by ``posgeom run``) for each profile
(``default`` and ``paper``) and computes every verdict from the values. A profile whose results are absent is
*pending* (for ``paper``: pending a GPU run); results whose provenance has a ``cap`` come from a capped CPU run
and are labelled so, never as paper scale.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..cache import read_json
from .claims import ClaimError, as_number, check_keys, evaluate_check, validate_check
from .paper import REPORTED

REPRODUCED = "reproduced"
DIFFERENT_DEFINITION = "reproduced with a different definition"
DIFFERS = "differs"
NOT_CHECKABLE = "not checkable here"
#: the four verdicts a row can get from its rule
VERDICTS = (REPRODUCED, DIFFERENT_DEFINITION, DIFFERS, NOT_CHECKABLE)
#: the verdict when the chapter's results for a profile are absent
PENDING = {"paper": "pending a GPU run", "default": "pending a default run", "smoke": "pending a smoke run"}
#: the verdict when a key the row needs is missing from the chapter's results
MISSING = "missing result"
#: the profiles the ledger compares, in column order
LEDGER_PROFILES = ("default", "paper")

RULE_KINDS = ("tolerance", "check", "asserted", "not_checkable")
ROW_FIELDS = ("id", "claim", "paper", "paper_text", "chapter", "quantity", "ours", "rule", "evidence")
_RULE_FIELDS = {
    "tolerance": {"kind", "key", "rtol", "atol", "pass", "definition", "alternatives"},
    "check": {"kind", "check", "pass", "definition"},
    "asserted": {"kind", "assertion", "pass"},
    "not_checkable": {"kind", "why"},
}
_TEMPLATE = re.compile(r"\{([A-Za-z0-9_\-]+)(?::([^{}]*))?\}")
_PAPER_RATIO = re.compile(r"^\s*(\w+)\s*/\s*(\w+)\s*$")

#: where the book keeps the ledger rows
DEFAULT_LEDGER = Path(__file__).resolve().parents[2] / "book" / "ledger.yaml"


@dataclass(frozen=True)
class LedgerRow:
    """One claim of the paper and how our results are checked against it. Chapter: *Reproduction ledger*."""

    id: str
    claim: str
    chapter: str
    rule: dict[str, Any]
    paper: str | None = None
    paper_text: str | None = None
    quantity: str = ""
    ours: str = ""
    evidence: str = ""

    def paper_value(self) -> float | None:
        """The paper's number (a REPORTED value, or the ratio of two); ``None`` for a qualitative claim."""
        if self.paper is None:
            return None
        ratio = _PAPER_RATIO.match(self.paper)
        if ratio:
            return REPORTED[ratio.group(1)][0] / REPORTED[ratio.group(2)][0]
        return float(REPORTED[self.paper][0])

    def paper_keys(self) -> list[str]:
        """The :data:`~posgeom_utils.repro.paper.REPORTED` keys the row quotes."""
        if self.paper is None:
            return []
        ratio = _PAPER_RATIO.match(self.paper)
        return [ratio.group(1), ratio.group(2)] if ratio else [self.paper]

    def keys(self) -> list[str]:
        """Every glued key of the chapter the row reads (rule keys first, then the text templates)."""
        keys: list[str] = []
        rule = self.rule
        if rule["kind"] == "tolerance":
            keys += [rule["key"], *(a["key"] for a in rule.get("alternatives", []))]
        elif rule["kind"] == "check":
            keys += check_keys(rule["check"])
        for text in (self.ours, self.quantity, self.evidence, rule.get("definition", "")):
            keys += template_keys(text)
        return list(dict.fromkeys(keys))


# --------------------------------------------------------------------------- loading

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


def validate_rows(raw: Any) -> list[LedgerRow]:
    """Turn the parsed ``ledger.yaml`` into :class:`LedgerRow` objects, raising :class:`ClaimError` on an
    unknown field or rule kind, a paper key not in REPORTED, a malformed check, or a duplicate id."""
    items = raw.get("rows") if isinstance(raw, Mapping) else raw
    if not isinstance(items, list):
        raise ClaimError("ledger.yaml must hold a list under 'rows'")
    rows, seen = [], set()
    for k, item in enumerate(items):
        where = f"row #{k + 1}" + (f" ({item.get('id')!r})" if isinstance(item, Mapping) and "id" in item else "")
        if not isinstance(item, Mapping):
            raise ClaimError(f"{where}: a row must be a mapping")
        unknown = sorted(set(item) - set(ROW_FIELDS))
        if unknown:
            raise ClaimError(f"{where}: unknown field(s) {unknown}; a row has {list(ROW_FIELDS)}")
        for name in ("id", "claim", "chapter", "rule"):
            if name not in item:
                raise ClaimError(f"{where}: missing field {name!r}")
        if item["id"] in seen:
            raise ClaimError(f"{where}: duplicate id {item['id']!r}")
        seen.add(item["id"])
        if ("paper" in item) == ("paper_text" in item):
            raise ClaimError(f"{where}: give exactly one of 'paper' (a REPORTED key) or 'paper_text'")
        if "paper" in item:
            ratio = _PAPER_RATIO.match(str(item["paper"]))
            for key in ([ratio.group(1), ratio.group(2)] if ratio else [item["paper"]]):
                if key not in REPORTED:
                    raise ClaimError(f"{where}: paper key {key!r} is not in posgeom_utils.repro.paper.REPORTED "
                                     f"(known: {sorted(REPORTED)})")
        rule = item["rule"]
        if not isinstance(rule, Mapping) or rule.get("kind") not in RULE_KINDS:
            raise ClaimError(f"{where}: rule.kind must be one of {list(RULE_KINDS)}")
        extra = set(rule) - _RULE_FIELDS[rule["kind"]]
        if extra:
            raise ClaimError(f"{where}: rule field(s) {sorted(extra)} do not apply to kind {rule['kind']!r}")
        if rule.get("pass", REPRODUCED) not in (REPRODUCED, DIFFERENT_DEFINITION):
            raise ClaimError(f"{where}: rule.pass must be {REPRODUCED!r} or {DIFFERENT_DEFINITION!r}")
        if rule.get("pass") == DIFFERENT_DEFINITION and not rule.get("definition"):
            raise ClaimError(f"{where}: a 'reproduced with a different definition' rule must say which (definition)")
        if rule["kind"] == "tolerance":
            if "paper" not in item:
                raise ClaimError(f"{where}: a tolerance rule needs a numeric 'paper' value")
            if not isinstance(rule.get("key"), str):
                raise ClaimError(f"{where}: a tolerance rule needs 'key'")
            if "rtol" not in rule and "atol" not in rule:
                raise ClaimError(f"{where}: a tolerance rule needs 'rtol' and/or 'atol'")
            for name in ("rtol", "atol"):
                if name in rule and (not isinstance(rule[name], (int, float)) or rule[name] < 0):
                    raise ClaimError(f"{where}: {name} must be a number >= 0")
            for alt in rule.get("alternatives", []):
                if not isinstance(alt, Mapping) or set(alt) != {"key", "definition"}:
                    raise ClaimError(f"{where}: each alternative is {{key, definition}}")
        elif rule["kind"] == "check":
            validate_check(rule.get("check"), f"{where}: rule.check")
        elif rule["kind"] == "asserted" and not rule.get("assertion"):
            raise ClaimError(f"{where}: an asserted rule must quote the chapter's assertion")
        elif rule["kind"] == "not_checkable" and not rule.get("why"):
            raise ClaimError(f"{where}: a not_checkable rule must say why")
        rows.append(LedgerRow(
            id=str(item["id"]), claim=" ".join(str(item["claim"]).split()), chapter=str(item["chapter"]),
            rule=dict(rule), paper=item.get("paper"), paper_text=item.get("paper_text"),
            quantity=" ".join(str(item.get("quantity", "")).split()), ours=str(item.get("ours", "")),
            evidence=" ".join(str(item.get("evidence", "")).split())))
    return rows


def load_rows(path: str | Path | None = None) -> list[LedgerRow]:
    """Read and validate ``book/ledger.yaml`` (or ``path``). Chapter: *Reproduction ledger*."""
    import yaml

    path = Path(path) if path is not None else DEFAULT_LEDGER
    try:
        return validate_rows(yaml.safe_load(path.read_text(encoding="utf-8")))
    except ClaimError as exc:
        raise ClaimError(f"{path}: {exc}") from None


# --------------------------------------------------------------------------- reading runs

def read_run(folder: str | Path | None, chapter: str) -> dict[str, Any] | None:
    """The ``results.json`` payload of ``chapter`` under ``folder`` (``None`` when absent or unreadable)."""
    if folder is None:
        return None
    payload = read_json(Path(folder) / chapter / "results.json")
    return payload if payload is not None and isinstance(payload.get("results"), dict) else None


def scale_label(payload: Mapping[str, Any] | None, profile: str) -> str:
    """What a run is: ``"default profile"``, ``"paper profile"``, ``"capped CPU run (cap N), not paper scale"``,
    a stand-in of another profile, or the pending text when there is no run."""
    if payload is None:
        return PENDING.get(profile, f"pending a {profile} run")
    prov = payload.get("provenance", {}) or {}
    ran = prov.get("profile") or payload.get("parameters", {}).get("profile") or "unknown"
    cap = prov.get("cap")
    label = f"{ran} profile"
    if ran != profile:
        label = f"{ran} profile results standing in for {profile}"
    if cap is not None:
        label = f"capped CPU run (cap {cap}) of the {ran} profile, not {'paper' if ran == 'paper' else ran} scale"
    return label


def _model(payload: Mapping[str, Any]) -> str:
    params, results = payload.get("parameters", {}) or {}, payload.get("results", {}) or {}
    name = params.get("model_name")
    if name:
        return str(name)
    return str(results.get("model") or results.get("tokenizer_name") or "all-MiniLM-L6-v2 (packaged)")


def _data(payload: Mapping[str, Any]) -> str:
    p = payload.get("parameters", {}) or {}
    corpora = [str(p[k]) for k in ("dataset", "other_dataset") if p.get(k)]
    parts = []
    if corpora:
        parts.append("/".join(corpora) + (f" {p['split']}" if p.get("split") else ""))
    if "sample_size" in p:
        parts.append("all texts" if p["sample_size"] is None else f"{p['sample_size']} texts")
    for key in ("n", "min_count", "special_tokens"):
        if key in p:
            parts.append(f"{key}={p[key]}")
    return ", ".join(parts) or "synthetic"


def _provenance(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    prov = (payload or {}).get("provenance", {}) or {}
    commit = prov.get("commit")
    return {
        "model": _model(payload) if payload else "",
        "data": _data(payload) if payload else "",
        "device": prov.get("device_name") or "",
        "commit": (commit[:10] + (" (dirty)" if prov.get("dirty") else "")) if commit else "",
        "date": (prov.get("finished") or "")[:10],
    }


# --------------------------------------------------------------------------- verdicts

def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _tolerance(rule: Mapping[str, Any], paper: float) -> float:
    return float(rule.get("atol", 0.0)) + float(rule.get("rtol", 0.0)) * abs(paper)


def rule_text(row: LedgerRow) -> str:
    """The row's verdict rule, in words."""
    rule = row.rule
    kind = rule["kind"]
    if kind == "tolerance":
        parts = []
        if rule.get("rtol"):
            parts.append(f"{rule['rtol']:.0%} of the paper's value")
        if rule.get("atol") or not parts:
            parts.append(f"{rule.get('atol', 0):g}")
        return "|ours - paper| <= " + " + ".join(parts)
    if kind == "check":
        return "qualitative check on our keys: " + ", ".join(check_keys(rule["check"]))
    if kind == "asserted":
        return f"asserted by the chapter: {rule['assertion']}"
    return "-"


def judge(row: LedgerRow, payload: Mapping[str, Any] | None, profile: str) -> dict[str, str]:
    """The verdict of ``row`` on one profile's results of its chapter: ``{"ours", "verdict", "evidence"}``.

    Numeric rows are judged from the values (``|ours - paper| <= tolerance``), qualitative rows by their check;
    absent results give the pending verdict, a missing key :data:`MISSING`.
    """
    rule, kind = row.rule, row.rule["kind"]
    results = (payload or {}).get("results") if payload is not None else None
    ours, missing_ours = render(row.ours, results)
    evidence, _ = render(row.evidence, results)
    definition, _ = render(rule.get("definition", ""), results)
    if not row.ours and kind == "tolerance" and results is not None and rule["key"] in results:
        ours = str(results[rule["key"]])
    if kind == "not_checkable":
        why = rule["why"]
        return {"ours": ours if results is not None and not missing_ours else "",
                "verdict": NOT_CHECKABLE, "evidence": " ".join(why.split())}
    if payload is None:
        return {"ours": "", "verdict": PENDING.get(profile, f"pending a {profile} run"), "evidence": ""}
    passed_verdict = rule.get("pass", REPRODUCED)
    with_definition = f" ({definition})" if definition and passed_verdict == DIFFERENT_DEFINITION else ""
    if kind == "asserted":
        return {"ours": ours, "verdict": passed_verdict,
                "evidence": _join(f"the chapter ran to completion, so its assertion held: {rule['assertion']}",
                                  evidence)}
    if kind == "check":
        needed = [k for k in check_keys(rule["check"]) if k not in results]
        if needed:
            return {"ours": ours, "verdict": MISSING, "evidence": f"missing key(s) {needed} in results.json"}
        passed, message = evaluate_check(rule["check"], results)
        verdict = passed_verdict if passed else DIFFERS
        lead = (definition + "; " if passed and passed_verdict == DIFFERENT_DEFINITION and definition else "")
        return {"ours": ours, "verdict": verdict, "evidence": _join(lead + message, evidence)}
    # tolerance
    paper = row.paper_value()
    assert paper is not None  # validated
    tol = _tolerance(rule, paper)
    value = as_number(results.get(rule["key"])) if rule["key"] in results else None
    if value is None or math.isnan(value):
        return {"ours": ours, "verdict": MISSING,
                "evidence": f"key {rule['key']!r} missing or not a number in results.json"}
    diff = abs(value - paper)
    head = f"{rule['key']} = {_fmt(value)} vs paper {_fmt(paper)}: |diff| = {_fmt(diff)}"
    if diff <= tol:
        return {"ours": ours, "verdict": passed_verdict,
                "evidence": _join(f"{head} <= tolerance {_fmt(tol)}{with_definition}", evidence)}
    for alt in rule.get("alternatives", []):
        alt_value = as_number(results.get(alt["key"]))
        if alt_value is not None and not math.isnan(alt_value) and abs(alt_value - paper) <= tol:
            alt_definition, _ = render(alt["definition"], results)
            return {"ours": ours, "verdict": DIFFERENT_DEFINITION,
                    "evidence": _join(f"{head} > tolerance {_fmt(tol)}, but {alt['key']} = {_fmt(alt_value)} is "
                                      f"within it: {alt_definition}", evidence)}
    alts = "".join(f"; {a['key']} = {_fmt(as_number(results.get(a['key'])) or float('nan'))}"
                   for a in rule.get("alternatives", []))
    return {"ours": ours, "verdict": DIFFERS,
            "evidence": _join(f"{head} > tolerance {_fmt(tol)}{alts}", evidence)}


def _join(*parts: str) -> str:
    kept = [p.strip().rstrip(".").strip() for p in parts if p and p.strip()]
    # sentences start upper-case, unless they start with a key name (which keeps its case)
    kept = [p if "_" in p.split(" ")[0] else p[:1].upper() + p[1:] for p in kept]
    return ". ".join(kept) + ("." if kept else "")


def _paper_shown(row: LedgerRow) -> str:
    value = row.paper_value()
    if value is None:
        return row.paper_text or ""
    if row.paper in REPORTED and float(value).is_integer() and value > 1:
        return f"{value:.0f}"
    return f"{value:.4g}"


def build_ledger(results_dirs: Mapping[str, str | Path | None], rows: list[LedgerRow] | None = None,
                 profiles: tuple[str, ...] = LEDGER_PROFILES) -> "pd.DataFrame":
    """One row per claim of the paper, indexed by row id, with the paper's value, what our number is, the
    verdict rule, and for each profile in ``profiles`` (``results_dirs[profile]`` is a ``posgeom run`` output
    folder, or absent/``None``): our value, the verdict computed from it, the evidence, what the run is
    (``scale``: profile, capped CPU run or pending) and its provenance (model, data, device, commit, date).
    Chapter: *Reproduction ledger*.
    """
    import pandas as pd

    rows = load_rows() if rows is None else rows
    records = []
    for row in rows:
        payloads = {p: read_run(results_dirs.get(p), row.chapter) for p in profiles}
        first = next((payloads[p] for p in profiles if payloads[p] is not None), None)
        quantity, _ = render(row.quantity, (first or {}).get("results"))
        record: dict[str, Any] = {
            "id": row.id, "claim": row.claim, "paper": _paper_shown(row), "chapter": row.chapter,
            "quantity": quantity, "keys": ", ".join(f"{row.chapter}:{k}" for k in row.keys()),
            "rule": rule_text(row),
        }
        for p in profiles:
            outcome = judge(row, payloads[p], p)
            record[f"ours ({p})"] = outcome["ours"]
            record[f"verdict ({p})"] = outcome["verdict"]
            record[f"evidence ({p})"] = outcome["evidence"]
            record[f"scale ({p})"] = scale_label(payloads[p], p)
            for name, value in _provenance(payloads[p]).items():
                record[f"{name} ({p})"] = value
        records.append(record)
    return pd.DataFrame(records).set_index("id")


def provenance_table(results_dirs: Mapping[str, str | Path | None],
                     profiles: tuple[str, ...] = LEDGER_PROFILES,
                     chapters: list[str] | None = None) -> "pd.DataFrame":
    """One row per (profile, chapter) with results: the run's scale, commit, date, device, cap, wall time and
    library versions; profiles without any results get one ``pending`` row. Chapter: *Reproduction ledger*."""
    import pandas as pd

    records = []
    for p in profiles:
        folder = results_dirs.get(p)
        found = sorted(q.parent.name for q in Path(folder).glob("*/results.json")) if folder and Path(folder).is_dir() else []
        names = [c for c in (chapters or found) if c in found] if chapters else found
        if not names:
            records.append({"profile": p, "chapter": "(all)", "scale": PENDING.get(p, "pending")})
            continue
        for chapter in names:
            payload = read_run(folder, chapter)
            prov = (payload or {}).get("provenance", {}) or {}
            libs = prov.get("libraries", {}) or {}
            records.append({
                "profile": p, "chapter": chapter, "scale": scale_label(payload, p),
                "run profile": prov.get("profile") or (payload or {}).get("parameters", {}).get("profile", ""),
                **_provenance(payload),
                "cap": "" if prov.get("cap") is None else prov["cap"],
                "wall time (s)": prov.get("wall_seconds"),
                "started": prov.get("started", ""),
                "versions": ", ".join(f"{k} {libs[k]}" for k in ("python", "torch", "transformers", "numpy")
                                      if libs.get(k)),
            })
    return pd.DataFrame(records).set_index(["profile", "chapter"])


def verdict_counts(ledger: "pd.DataFrame", profile: str) -> dict[str, int]:
    """How many rows got each verdict at ``profile`` (every verdict and pending state, zeros included)."""
    column = ledger[f"verdict ({profile})"]
    states = [*VERDICTS, PENDING.get(profile, f"pending a {profile} run"), MISSING]
    return {state: int((column == state).sum()) for state in states}

"""The reproduction ledger: every claim of Cirrincione (2026) beside our number and a computed verdict.

Chapter: *Reproduction ledger* (``book/ledger.md``). The ledger's rows are the claims of ``book/claims.yaml``
that have a ``paper`` block (:mod:`.claims` documents the one schema, and loads, validates and evaluates every
claim): the paper's statement, its value (from :data:`posgeom_utils.repro.paper.REPORTED`, never typed), the
chapter and glued key(s) holding ours, how to show our value, and the check that turns the two into a verdict:

- ``reproduced``: the check holds (for a number: within the stated tolerance of the paper's value);
- ``reproduced with a different definition``: the same holds for a quantity defined differently (named), either
  by the claim's own verdict or because one of its alternatives holds;
- ``differs``: the check and every alternative fail (the evidence says which numbers);
- ``not checkable here``: the claim says why.

:func:`build_ledger` reads ``<dir>/<chapter>/results.json`` (written by ``posgeom run``) for each profile
(``default`` and ``paper``) and computes every verdict from the values with :func:`.claims.evaluate_check`. A
profile whose results are absent is *pending* (for ``paper``: pending a GPU run); a claim whose check needs a
key absent from the results gets :data:`MISSING`; results whose provenance has a ``cap`` come from a capped CPU
run and are labelled so, never as paper scale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..cache import read_json
from .claims import (REPRODUCED, DIFFERENT_DEFINITION, DIFFERS, NOT_CHECKABLE, VERDICTS, Claim, check_keys, evaluate_check,
                     load_claims, render)
from .paper import REPORTED

#: the verdict when the chapter's results for a profile are absent
PENDING = {"paper": "pending a GPU run", "reference": "pending a reference run", "default": "pending a default run",
           "smoke": "pending a smoke run"}
#: the verdict when a key the claim's check needs is missing from the chapter's results
MISSING = "missing result"
#: the profiles the ledger compares, in column order
LEDGER_PROFILES = ("default", "reference", "paper")


def paper_claims(claims: list[Claim] | None = None) -> list[Claim]:
    """The ledger's rows: the claims (default: :func:`.claims.load_claims`) that compare with the paper."""
    return [c for c in (load_claims() if claims is None else claims) if c.paper is not None]


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

def rule_text(claim: Claim) -> str:
    """The claim's verdict rule, in words: a tolerance around the paper's value, a qualitative check, an
    assertion of the chapter, or ``-`` when it cannot be checked."""
    check = claim.check
    if check is None:
        return "-"
    if "asserted" in check:
        return f"asserted by the chapter: {check['asserted']}"
    if "paper" in check and check["op"] == "==":
        parts = [f"{check['rtol']:.0%} of the paper's value"] if check.get("rtol") else []
        if check.get("tol") or not parts:
            parts.append(f"{check.get('tol', 0):g}")
        return "|ours - paper| <= " + " + ".join(parts)
    return "qualitative check on our keys: " + ", ".join(check_keys(check))


def judge(claim: Claim, payload: Mapping[str, Any] | None, profile: str) -> dict[str, str]:
    """The verdict of a paper claim on one profile's results of its chapter: ``{"ours", "verdict",
    "evidence"}``, from :func:`.claims.evaluate_check` on the claim's check and, when it fails, its
    alternatives. Absent results give the pending verdict, a key the check needs but the results lack
    :data:`MISSING`.
    """
    paper = claim.paper
    assert paper is not None, f"{claim.id} does not compare with the paper"
    results = payload["results"] if payload is not None else None
    ours, missing_ours = render(paper.ours, results)
    if paper.not_checkable:
        return {"ours": ours if results is not None and not missing_ours else "", "verdict": NOT_CHECKABLE,
                "evidence": paper.not_checkable}
    if results is None:
        return {"ours": "", "verdict": PENDING.get(profile, f"pending a {profile} run"), "evidence": ""}
    absent = [k for k in check_keys(claim.check) if k not in results]
    if absent:
        return {"ours": ours, "verdict": MISSING, "evidence": f"missing key(s) {absent} in results.json"}
    evidence, _ = render(paper.evidence, results)
    passed, message = evaluate_check(claim.check, results)
    if passed:
        definition, _ = render(paper.definition, results)
        lead = f"{definition}; " if paper.verdict != REPRODUCED and definition else ""
        return {"ours": ours, "verdict": paper.verdict, "evidence": _join(lead + message, evidence)}
    alternatives = [(alt, *evaluate_check(alt.check, results)) for alt in paper.alternatives]
    for alt, alt_passed, alt_message in alternatives:
        if alt_passed:
            definition, _ = render(alt.definition, results)
            return {"ours": ours, "verdict": DIFFERENT_DEFINITION,
                    "evidence": _join(f"{message}, but {alt_message} ({definition})", evidence)}
    tried = "; ".join([message, *(alt_message for _, _, alt_message in alternatives)])
    return {"ours": ours, "verdict": DIFFERS, "evidence": _join(tried, evidence)}


def _join(*parts: str) -> str:
    """Sentences from text parts: stripped, capitalised (unless they start with a key name), full stops."""
    kept = [p.strip().rstrip(".").strip() for p in parts if p and p.strip()]
    kept = [p if "_" in p.split(" ")[0] else p[:1].upper() + p[1:] for p in kept]
    return ". ".join(kept) + ("." if kept else "")


def paper_shown(claim: Claim) -> str:
    """The paper's value as the ledger shows it: a whole count as an integer, other numbers to 4 digits, the
    paper's words for a qualitative claim."""
    paper = claim.paper
    assert paper is not None, f"{claim.id} does not compare with the paper"
    value = paper.number()
    if value is None:
        return paper.text or ""
    if paper.value in REPORTED and float(value).is_integer() and value > 1:
        return f"{value:.0f}"
    return f"{value:.4g}"


def build_ledger(results_dirs: Mapping[str, str | Path | None], claims: list[Claim] | None = None,
                 profiles: tuple[str, ...] = LEDGER_PROFILES) -> "pd.DataFrame":
    """One row per claim of the paper (the claims with a ``paper`` block among ``claims``, default
    :func:`.claims.load_claims`), indexed by claim id, with the paper's value, what our number is, the verdict
    rule, and for each profile in ``profiles`` (``results_dirs[profile]`` is a ``posgeom run`` output folder,
    or absent/``None``): our value, the verdict computed from it, the evidence, what the run is (``scale``:
    profile, capped CPU run or pending) and its provenance (model, data, device, commit, date).
    Chapter: *Reproduction ledger*.
    """
    import pandas as pd

    records = []
    for claim in paper_claims(claims):
        payloads = {p: read_run(results_dirs.get(p), claim.chapter) for p in profiles}
        first = next((payloads[p] for p in profiles if payloads[p] is not None), None)
        quantity, _ = render(claim.paper.quantity, (first or {}).get("results"))
        record: dict[str, Any] = {
            "id": claim.id, "claim": claim.statement, "paper": paper_shown(claim), "chapter": claim.chapter,
            "quantity": quantity, "keys": ", ".join(f"{claim.chapter}:{k}" for k in claim.keys()),
            "rule": rule_text(claim),
        }
        for p in profiles:
            outcome = judge(claim, payloads[p], p)
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

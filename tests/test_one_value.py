"""One quantity, one value: a number the book shows in two places must be shown the same way.

- No two glued keys of the committed reference results (within a chapter or across chapters) hold the same
  estimate, to full precision, with different intervals: that is one quantity with two intervals.
- Every interval the ledger shows (``book/paper_claims.yaml``) is its estimate's own: ``{a} ± {a_hw}``,
  ``{a} [{a_low}, {a_high}]``, never another key's half-width or bounds.
- Where a chapter's summary box (*In short*) or prose states a key with a half-width, the ledger states it
  with that half-width (a key may have two, e.g. over seeds and over seeds and the evaluation pool).
- No page types a duration (minutes, hours, seconds) in its prose: a time is measured, so it is glued from the
  committed results (``provenance.wall_seconds``, the stored runs' ``result["seconds"]``), or the page
  refers to the one that shows it. The few words that name a unit without stating a time are listed with
  the reason.

Each check is a function of plain data, tested first on a planted case it must catch. Cheap: no kernel.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from posgeom_utils.repro.ledger import _TEMPLATE, load_claims

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "book" / "results" / "reference"
NOTEBOOKS = ROOT / "notebooks"
INTERVAL_SUFFIXES = ("_hw", "_low", "_high")


def reference_results(folder: Path = REFERENCE) -> dict[str, dict[str, Any]]:
    """``{chapter: results}`` of every committed ``results.json`` in ``folder``."""
    return {p.parent.name: json.loads(p.read_text())["results"] for p in sorted(folder.glob("*/results.json"))}


# ------------------------------------------------------------------ one estimate, one interval


def is_estimate(key: str, value: Any) -> bool:
    """A value that could only repeat by being the same quantity: a finite non-integer float with more than
    four significant digits (0.5, 0.88 or a learning rate 0.001 recur by coincidence or by design), and not
    itself an interval's half-width or bound."""
    if not isinstance(value, float) or not math.isfinite(value) or value.is_integer():
        return False
    if key.endswith(INTERVAL_SUFFIXES):
        return False
    digits = repr(abs(value)).split("e")[0].replace(".", "").lstrip("0")
    return len(digits) > 4


def same(value: float) -> float:
    """``value`` to 12 significant digits: two reruns of one estimate differ by rounding noise (1e-16)."""
    return float(f"{value:.12g}")


def conflicts(by_chapter: Mapping[str, Mapping[str, Any]]) -> dict[frozenset[tuple[str, str]], list[str]]:
    """``{the (chapter, key) pairs of one estimate: what differs}`` for every estimate glued under two keys
    (in any chapters) whose ``_hw``, ``_low`` or ``_high`` differ."""
    holders: dict[float, list[tuple[str, str]]] = defaultdict(list)
    for chapter, results in by_chapter.items():
        for key, value in results.items():
            if is_estimate(key, value) and any(key + s in results for s in INTERVAL_SUFFIXES):
                holders[same(value)].append((chapter, key))  # one estimate, to rounding noise
    found: dict[frozenset[tuple[str, str]], list[str]] = {}
    for value, keys in holders.items():
        for suffix in INTERVAL_SUFFIXES:
            shown = {(c, k): by_chapter[c][k + suffix] for c, k in keys if k + suffix in by_chapter[c]}
            if len({same(v) for v in shown.values()}) > 1:
                text = ", ".join(f"{c}:{k}{suffix} = {v!r}" for (c, k), v in shown.items())
                found.setdefault(frozenset(keys), []).append(f"{value!r}: {text}")
    return found


def conflicting_intervals(by_chapter: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per estimate glued under two keys with different intervals."""
    return [line for lines in conflicts(by_chapter).values() for line in lines]


#: estimates that two chapters glue with intervals of their own, each from its own bootstrap of the same
#: corpus (so the bounds differ in the last digits): {(chapter, key) pairs: why it stands}. One glue per quantity
#: needs a code-cell change in one chapter and its reference rerun; until then a page may show the interval
#: of one of the two keys only (test_a_known_duplicate_shows_one_interval).
KNOWN = {
    frozenset({("low_rank", "sst2_share_3"), ("mds_optimality", "sst2_top3_mass")}):
        "top-3 share of B, SST-2: bootstraps of low_rank (shown) and mds_optimality (not shown)",
    frozenset({("low_rank", "imdb_share_3"), ("mds_optimality", "imdb_top3_mass")}):
        "top-3 share of B, IMDB: bootstraps of low_rank (shown) and mds_optimality (not shown)",
}


def test_planted_duplicate_estimate_with_two_half_widths_is_caught() -> None:
    value = 0.8723775940337224
    planted = {"necessity": {"probe": value, "probe_hw": 0.0059, "other": value, "other_hw": 0.0165}}
    assert len(conflicting_intervals(planted)) == 1
    across = {"a": {"x": value, "x_hw": 0.0059}, "b": {"y": value, "y_hw": 0.0165}}  # across chapters too
    assert len(conflicting_intervals(across)) == 1
    noisy = {"a": {"x": value, "x_hw": 0.0059}, "b": {"y": value + 1e-16, "y_hw": 0.0165}}  # rerun noise
    assert len(conflicting_intervals(noisy)) == 1
    bounds = {"a": {"x": value, "x_low": 0.86, "y": value, "y_low": 0.85}}
    assert len(conflicting_intervals(bounds)) == 1
    # the same interval twice, integers, round numbers and keys without an interval are no conflict
    assert not conflicting_intervals({"a": {"x": value, "x_hw": 0.1, "y": value, "y_hw": 0.1}})
    assert not conflicting_intervals({"a": {"n": 8.0, "n_hw": 1.0, "m": 8.0, "m_hw": 2.0}})
    assert not conflicting_intervals({"a": {"p": 0.51, "p_hw": 0.03, "q": 0.51, "q_hw": 0.02}})
    assert not conflicting_intervals({"a": {"x": value, "x_hw": 0.1, "y": value}})


def test_a_perturbed_copy_of_the_committed_results_fails() -> None:
    results = reference_results()
    assert results, "no committed reference results"
    copy = {c: dict(r) for c, r in results.items()}
    copy["necessity"]["planted"] = copy["necessity"]["probe_intact"]  # the same estimate, another interval
    copy["necessity"]["planted_hw"] = copy["necessity"]["probe_intact_pool_hw"]
    assert any("planted" in p for p in conflicting_intervals(copy))


def test_no_estimate_is_glued_with_two_intervals() -> None:
    results = reference_results()
    assert results, "no committed reference results"
    found = conflicts(results)
    new = [line for keys, lines in found.items() if keys not in KNOWN for line in lines]
    assert not new, "one quantity with two intervals:\n" + "\n".join(new)
    gone = [why for keys, why in KNOWN.items() if keys not in found]
    assert not gone, f"resolved, drop from KNOWN: {gone}"


def shown_intervals(source: str) -> set[str]:
    """The keys whose interval (``_hw``, ``_low``, ``_high``, a further ``_..._hw``) a page glues in its prose
    or a ledger template formats."""
    glued = re.findall(r"\{glue:text\}`([A-Za-z0-9_\-]+)", source) + [k for k, _ in _TEMPLATE.findall(source)]
    owners = set()
    for key in glued:
        for suffix in INTERVAL_SUFFIXES:
            if key.endswith(suffix):
                owners.add(key[: -len(suffix)])
    return owners


def test_a_known_duplicate_shows_one_interval() -> None:
    """Of the keys of a KNOWN estimate, the pages (chapters' prose, ledger) show one interval at most."""
    shown = {c: shown_intervals(page.read_text(encoding="utf-8")) for c, page in
             ((p.stem, p) for p in NOTEBOOKS.glob("*.md"))}
    ledger_keys = defaultdict(set)
    for claim in load_claims():
        for chapter in (claim.chapter, *claim.also):
            ledger_keys[chapter] |= shown_intervals(" ".join(templates(claim)))
    for keys, why in KNOWN.items():
        with_interval = [(c, k) for c, k in sorted(keys)
                         if any(k == o or o.startswith(k + "_") for o in shown.get(c, set()) | ledger_keys[c])]
        assert len(with_interval) <= 1, f"{why}: two intervals shown, {with_interval}"


# ------------------------------------------------------------------ the ledger's intervals


_FIELD = r"\{([A-Za-z0-9_\-]+)(?::[^{}]*)?\}"
_PLUS_MINUS = re.compile(rf"(?:{_FIELD}\s*)?±\s*{_FIELD}")  # {a} ± {a_hw}; a bare ± {x_hw} too
_BRACKET = re.compile(rf"{_FIELD}\s*\[\s*{_FIELD}\s*,\s*{_FIELD}\s*\]")  # {a} [{a_low}, {a_high}]
_BOUNDS = re.compile(rf"{_FIELD}\s*(?:,|to|–|-)\s*{_FIELD}")  # {a_low} to {a_high}, [{a_low}, {a_high}]
_INTERVAL_WORD = re.compile(rf"\binterval\s+{_FIELD}")  # {a}, interval {a_low} to {a_high}


def half_width_owner(half_width: str, estimate: str, results: Mapping[str, Any]) -> bool:
    """Whether ``half_width`` is ``estimate``'s: ``estimate_hw``, or a further half-width of it
    (``estimate_pool_hw``) that is not another glued key's ``_hw`` (``estimate_drift_hw``)."""
    if not half_width.endswith("hw"):
        return False
    owner = half_width[:-3]
    if owner in results:
        return owner == estimate
    return half_width.startswith(estimate + "_")


def foreign_intervals(template: str, results: Mapping[str, Any]) -> list[str]:
    """The intervals of a ledger template that are not their estimate's own."""
    problems = []
    for m in _PLUS_MINUS.finditer(template):
        estimate, half_width = m.group(1), m.group(2)
        if estimate is None:
            problems.append(f"± {{{half_width}}} follows no glued estimate")
        elif not half_width_owner(half_width, estimate, results):
            problems.append(f"{{{estimate}}} ± {{{half_width}}}: another key's half-width")
    for m in _BRACKET.finditer(template):
        estimate, low, high = m.groups()
        if estimate.endswith(INTERVAL_SUFFIXES):
            continue  # two intervals side by side: the bounds rule below judges them
        if (low, high) != (estimate + "_low", estimate + "_high"):
            problems.append(f"{{{estimate}}} [{{{low}}}, {{{high}}}]: not its own bounds")
    for m in _BOUNDS.finditer(template):
        low, high = m.groups()
        if low.endswith("_low") and high.endswith("_high") and low[:-4] != high[:-5]:
            problems.append(f"{{{low}}} to {{{high}}}: the bounds of two keys")
    for m in _INTERVAL_WORD.finditer(template):
        before = [k for k in _TEMPLATE.findall(template[: m.start()]) if not k[0].endswith(INTERVAL_SUFFIXES)]
        low = m.group(1)
        if before and low.endswith(INTERVAL_SUFFIXES) and not low.startswith(before[-1][0] + "_"):
            problems.append(f"{{{before[-1][0]}}} ... interval {{{low}}}: another key's interval")
    return problems


def templates(claim) -> list[str]:
    """Every field of a ledger row that shows glued numbers."""
    return [claim.ours, claim.quantity, claim.evidence, claim.definition,
            *(alt.get("definition", "") for alt in claim.alternatives)]


def row_results(claim, by_chapter: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for chapter in (*claim.also, claim.chapter):  # the row's own chapter wins
        merged |= by_chapter.get(chapter, {})
    return merged


def test_planted_foreign_intervals_are_caught() -> None:
    results = {"gap_drift": 0.48, "gap_drift_hw": 0.17, "gap_stationary": 0.49, "gap_stationary_hw": 0.19,
               "probe": 0.87, "probe_hw": 0.006, "probe_pool_hw": 0.017, "probe_low": 0.86, "probe_high": 0.88,
               "other_low": 0.1, "other_high": 0.2}
    assert foreign_intervals("{gap_drift:.2f} ± {gap_stationary_hw:.2f}", results)
    assert foreign_intervals("{probe:.3f} [{probe_low:.3f}, {other_high:.3f}]", results)
    assert foreign_intervals("{probe:.3f} [{other_low:.3f}, {other_high:.3f}]", results)
    assert foreign_intervals("[{probe_low:.3f}, {other_high:.3f}]", results)
    assert foreign_intervals("{probe:.3f}, interval {other_low:.3f} to {other_high:.3f}", results)
    assert foreign_intervals("0.87 ± {probe_hw:.3f}", results)  # a typed estimate
    # an estimate's own intervals, a second half-width of its own included, pass
    ok = ("{gap_drift:.2f} ± {gap_drift_hw:.2f}; {probe:.3f} ± {probe_pool_hw:.3f} (seeds alone"
          " {probe:.3f} ± {probe_hw:.3f}); {probe:.3f} [{probe_low:.3f}, {probe_high:.3f}], peak [{other_low:.2f},"
          " {other_high:.2f}]; {probe:.1%} of them, interval {probe_low:.3f} to {probe_high:.3f}")
    assert foreign_intervals(ok, results) == []


def test_every_ledger_interval_is_its_estimates_own() -> None:
    by_chapter = reference_results()
    problems = [f"{claim.id}: {p}" for claim in load_claims() for t in templates(claim)
                for p in foreign_intervals(t, row_results(claim, by_chapter))]
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ the chapter's half-width


_GLUE_PAIR = re.compile(r"\{glue:text\}`([A-Za-z0-9_\-]+)(?::[^`]*)?`\s*±\s*\{glue:text\}`([A-Za-z0-9_\-]+)")
_BOX = re.compile(r"^```\{admonition\} In short\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def stated_half_widths(source: str) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The half-widths a chapter states each estimate with, read from its ``{glue:text}`a` ±
    {glue:text}`a_hw``` pairs: (in its *In short* box, anywhere on the page)."""
    box: dict[str, set[str]] = defaultdict(set)
    everywhere: dict[str, set[str]] = defaultdict(set)
    for part, found in (("".join(_BOX.findall(source)), box), (source, everywhere)):
        for estimate, half_width in _GLUE_PAIR.findall(part):
            found[estimate].add(half_width)
    return dict(box), dict(everywhere)


def half_width_mismatches(template: str, source: str) -> list[str]:
    """The ``{a} ± {b}`` of a ledger template whose ``b`` is not the half-width the chapter states ``a``
    with: its summary box's where the box states ``a``, else one its prose uses."""
    box, everywhere = stated_half_widths(source)
    problems = []
    for m in _PLUS_MINUS.finditer(template):
        estimate, half_width = m.group(1), m.group(2)
        stated = box.get(estimate) or everywhere.get(estimate)
        if estimate is not None and stated and half_width not in stated:
            where = "summary box" if estimate in box else "prose"
            problems.append(f"{{{estimate}}} ± {{{half_width}}}, the chapter's {where} ± {sorted(stated)}")
    return problems


def test_planted_half_width_other_than_the_chapters_is_caught() -> None:
    source = ("```{admonition} In short\n:class: tip\n\nAccuracy {glue:text}`probe:.3f` ±\n"
              "{glue:text}`probe_pool_hw:.3f`.\n```\n\nOver seeds alone {glue:text}`probe:.3f` ± "
              "{glue:text}`probe_hw:.3f`; {glue:text}`gap:.2f` ± {glue:text}`gap_hw:.2f`.\n")
    assert half_width_mismatches("{probe:.3f} ± {probe_hw:.3f}", source)  # the box says pool_hw
    assert half_width_mismatches("{gap:.2f} ± {gap_pool_hw:.2f}", source)  # the prose says gap_hw
    assert not half_width_mismatches("{probe:.3f} ± {probe_pool_hw:.3f}; {gap:.2f} ± {gap_hw:.2f}", source)
    # the ledger's row as it was: the probe over seeds alone, the chapter's box with the pool's noise
    real = (NOTEBOOKS / "necessity.md").read_text(encoding="utf-8")
    assert half_width_mismatches("{probe_intact:.3f} ± {probe_intact_hw:.3f} intact", real)


def test_the_ledger_states_each_interval_as_its_chapter_does() -> None:
    problems = []
    for claim in load_claims():
        for chapter in (claim.chapter, *claim.also):
            source = (NOTEBOOKS / f"{chapter}.md").read_text(encoding="utf-8")
            problems += [f"{claim.id} ({chapter}): {p}" for t in templates(claim)
                         for p in half_width_mismatches(t, source)]
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ no typed durations

#: words that name a unit of time in prose without typing a duration: (page, text, why it is not a time)
ALLOWED = (
    ("book/course.md", "words a minute", "a reading speed, glued from teaching.WORDS_PER_MINUTE"),
    ("book/course.md", "The minutes in class are computed", "names the computed column, states no time"),
    ("book/course.md", "Wall-clock seconds of each chapter", "the unit of the measured table above it"),
    ("book/scale_out.md", "core-hours", "the unit of the cost the cell computes from measured throughput"),
)

_DURATION = re.compile(
    r"\b(?:half an hour|(?:minutes?|hours?|hrs?|mins?|seconds)\b)"  # words (not "second": an ordinal)
    r"|(?<![\w.])\d+(?:\.\d+)?\s?(?:s|h|min)\b",  # a typed number with a unit: "26 s", "2.5 h"
    re.IGNORECASE,
)
_GLUED_BEFORE = re.compile(r"GLUED[\s\-]*(?:to\s+GLUED[\s\-]*)?$")  # "{glue:text}`t` s", "GLUED to GLUED min"
_FENCE = re.compile(r"^(`{3,}|~{3,}|:{3,})\s*(\S*)")


def _closes(fence: re.Match | None, mark: str) -> bool:
    """Whether the fence line ``fence`` closes the block opened by ``mark`` (same character, as long)."""
    return (fence is not None and fence.group(2) == "" and fence.group(1)[0] == mark[0]
            and len(fence.group(1)) >= len(mark))


def prose(source: str) -> list[tuple[int, str]]:
    """(line number, text) of a MyST page's prose: front matter, code cells, code blocks, math blocks and
    directive options removed (a directive's body, such as an admonition's, is prose); glue roles become
    ``GLUED``, other roles, inline code and inline math placeholders."""
    lines = source.splitlines()
    start = 0
    if lines and lines[0] == "---":  # front matter
        start = next((k for k in range(1, len(lines)) if lines[k] == "---"), 0) + 1
    kept: list[tuple[int, str]] = []
    skip: str | None = None  # the fence of the code cell or block being skipped
    directives: list[str] = []  # the fences of the open directives, innermost last
    in_math = False
    for number, line in enumerate(lines[start:], start + 1):
        stripped = line.strip()
        fence = _FENCE.match(stripped)
        if skip is not None:
            if _closes(fence, skip):
                skip = None
            continue
        if fence:
            mark, info = fence.groups()
            if directives and _closes(fence, directives[-1]):
                directives.pop()
            elif info.startswith("{") and not info.startswith(("{code-cell}", "{math}")):
                directives.append(mark)  # a directive: its body is prose
            else:
                skip = mark  # a code cell, a code block, a math directive
            continue
        if re.match(r"^:[\w-]+:", stripped) or re.match(r"^\([\w:-]+\)=$", stripped):  # option, label
            continue
        if stripped.startswith("$$") or stripped.endswith("$$"):
            if stripped.count("$$") == 1:
                in_math = not in_math
            continue
        if in_math:
            continue
        text = re.sub(r"\{glue(?::\w+)?\}`[^`]*`", "GLUED", line)
        text = re.sub(r"\{[\w:-]+\}`[^`]*`", "ROLE", text)
        text = re.sub(r"`[^`]*`", "CODE", text)
        text = re.sub(r"\$[^$]*\$", "MATH", text)
        text = re.sub(r"\\[A-Za-z]+", "TEX", text)  # a LaTeX command (\min) of math broken across lines
        kept.append((number, text))
    return kept


def typed_durations(source: str, allowed: Iterable[str] = ()) -> list[tuple[int, str]]:
    """(line, text) of each duration typed in the prose of ``source``: a unit of time not right after a
    glued number, outside the ``allowed`` texts."""
    found = []
    for number, text in prose(source):
        for phrase in allowed:
            text = text.replace(phrase, "ALLOWED")
        for m in _DURATION.finditer(text):
            if m.group(0)[0].isdigit() or not _GLUED_BEFORE.search(text[: m.start()]):
                found.append((number, text.strip()))
                break
    return found


def test_planted_typed_durations_are_caught() -> None:
    page = ("---\nkernelspec: {}\n---\n# Page\n\nThe runs take about half an hour on a laptop.\n\n"
            "Each chapter runs in a few minutes; the smoke profile in seconds.\n\n"
            "The reference runs took 26 s, the store 2.5 h.\n\n"
            "They took {glue:text}`hours:.1f` h and {glue:text}`lo:.0f` to {glue:text}`hi:.0f` s; "
            "{glue:text}`m` minutes in class, at {glue:text}`wpm` words a minute.\n\n"
            "```{code-cell} ipython3\nglue('hours', seconds / 3600)  # 3600 seconds an hour\n```\n\n"
            "```bash\nsleep 5  # five minutes\n```\n\n"
            "```{admonition} In short\n:class: tip\nIt took an hour.\n```\n\n"
            "$t = 60\\,\\text{min}$ and the second corpus.\n")
    lines = [number for number, _ in typed_durations(page, allowed=["words a minute"])]
    assert lines == [6, 8, 10, 24], typed_durations(page)  # glued times, code and math pass
    assert [n for n, _ in typed_durations(page)] == [6, 8, 10, 12, 24]  # "a minute" without the allowance


PAGES = sorted(p.relative_to(ROOT).as_posix() for p in [*(ROOT / "book").glob("*.md"), *NOTEBOOKS.glob("*.md")])


@pytest.mark.parametrize("page", PAGES)
def test_no_page_types_a_duration(page: str) -> None:
    allowed = [text for where, text, _ in ALLOWED if where == page]
    source = (ROOT / page).read_text(encoding="utf-8")
    found = typed_durations(source, allowed)
    assert not found, "typed durations (glue the measured time, or refer to the page that shows it):\n" + \
        "\n".join(f"{page}:{n}: {t}" for n, t in found)


def test_every_allowance_is_still_needed() -> None:
    """An allowance the scan would not flag without it is removed, so the list stays the short list of
    reasons."""
    for page, text, why in ALLOWED:
        source = (ROOT / page).read_text(encoding="utf-8")
        others = [t for where, t, _ in ALLOWED if where == page and t != text]
        assert len(typed_durations(source, others)) > len(typed_durations(source, [*others, text])), \
            f"{page}: {text!r} ({why}) is no longer flagged; drop it from ALLOWED"

"""The plans section of the page: one readable row per plan (strategy, cap, budget, what it draws), then every
setting and statistic ``plan.json`` records, folded away, and what the repetition cap did."""

from __future__ import annotations

from collections.abc import Mapping

from clusterclip.report import html as h
from clusterclip.report.model import PlanSection

INTRO = (
    "Each plan is one ordered list of document indices for the whole training run. Strategy "
    "<i>random</i> follows the corpus's natural mixture, <i>uniform</i> balances clusters, "
    "<i>temperature</i> flattens the mixture by its exponent &tau;, <i>clusterclip</i> balances clusters with "
    "a per-document repetition cap."
)
COLUMNS = (
    h.Column("plan"),
    h.Column("strategy"),
    h.Column("repetition cap", numeric=True, tip="most times one document may be drawn (max_repeat)"),
    h.Column("budget", numeric=True, tip="draws (documents) or tokens the plan was asked for"),
    h.Column("order", tip="how the draws are spread over the run"),
    h.Column("seed", numeric=True),
    h.Column("draws", numeric=True, tip="length of the plan"),
    h.Column("documents drawn", numeric=True, tip="documents drawn at least once, and their share of the corpus"),
    h.Column("repeats", numeric=True, tip="mean and largest number of times a drawn document is drawn"),
    h.Column("clusters exhausted", numeric=True,
             tip="clusters whose every document reached the cap, and the draw where the first did"),
)


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _count(v: object, suffix: str = "") -> h.Cell | str:
    n = _number(v)
    return "–" if n is None else h.Cell(h.esc(f"{h.fmt_num(n)}{suffix}"), sort=n, numeric=True)


def _strategy(f: Mapping[str, object]) -> str:
    text = str(f.get("strategy") or "–")
    if _number(f.get("tau")) is not None:
        text += f", τ = {h.fmt_num(_number(f['tau']))}"
    if f.get("weights"):
        text += ", custom weights"
    return text


def _budget(f: Mapping[str, object]) -> h.Cell | str:
    budget = _number(f.get("budget"))
    if budget is None:
        return "–"
    text = f"{h.fmt_num(budget)} {f.get('budget_unit') or 'docs'}"
    if _number(f.get("epochs")) is not None:
        text += f" ({h.fmt_num(_number(f['epochs']))} epochs)"
    return h.Cell(h.esc(text), sort=budget, numeric=True)


def _drawn(f: Mapping[str, object]) -> h.Cell | str:
    unique = _number(f.get("unique_docs", f.get("unique")))
    if unique is None:
        return "–"
    share = _number(f.get("coverage"))
    text = h.fmt_num(unique) + (f" ({share:.1%})" if share is not None else "")
    return h.Cell(h.esc(text), sort=unique, numeric=True)


def _repeats(f: Mapping[str, object]) -> h.Cell | str:
    mean, most = _number(f.get("mean_repeat")), _number(f.get("max_repeat_observed"))
    if mean is None and most is None:
        return "–"
    parts = ([f"mean {mean:.2f}"] if mean is not None else []) + ([f"max {most:,.0f}"] if most is not None else [])
    return h.Cell(h.esc(", ".join(parts)), sort=most if most is not None else mean, numeric=True)


def _exhausted(f: Mapping[str, object]) -> h.Cell | str:
    n, first = _number(f.get("clusters exhausted")), _number(f.get("first_exhausted_at"))
    if n is None:
        return "–"
    text = h.fmt_num(n) + (f" (first at draw {h.fmt_num(first)})" if n and first is not None and first >= 0 else "")
    return h.Cell(h.esc(text), sort=n, numeric=True)


def plan_row(plan: PlanSection) -> list[object]:
    """The readable row of one plan."""
    f = dict(plan.facts)
    cap = _number(f.get("max_repeat"))
    return [
        h.Cell(f"<b>{h.esc(plan.name)}</b>", sort=plan.name),
        _strategy(f),
        _count(cap) if cap is not None else h.Cell("none", sort=float("inf"), numeric=True),
        _budget(f),
        str(f.get("order") or "–"),
        _count(f.get("seed")),
        _count(f.get("draws")),
        _drawn(f),
        _repeats(f),
        _exhausted(f),
    ]


def _recorded(plans: tuple[PlanSection, ...]) -> str:
    """Every option and statistic as ``plan.json`` names it, one column per plan, folded away."""
    fields = list(dict.fromkeys(key for p in plans for key, _ in p.facts))
    facts = [dict(p.facts) for p in plans]
    rows = [[h.Cell(f"<b>{h.esc(f)}</b>"), *(h.plain(f_of.get(f)) for f_of in facts)] for f in fields]
    table = h.table([h.Column("")] + [h.Column(p.name) for p in plans], rows, "plan-record-table")
    return (f"<details><summary>Every setting and statistic recorded in plan.json</summary>"
            f'<div class="scroll">{table}</div></details>')


def plans_section(plans: tuple[PlanSection, ...]) -> str:
    """The plans section: the readable table, the recorded values folded away, what each cap did."""
    title = "Plans"
    if not plans:
        return h.section("plans", title, h.note("No plans in this run directory (plans/*/plan.json)."))
    duplicates = [str(dict(p.facts).get("duplicates") or "none") for p in plans]
    columns, rows = list(COLUMNS), [plan_row(p) for p in plans]
    if any(d != "none" for d in duplicates):
        columns.append(h.Column("duplicates", tip="how near-duplicate groups are treated"))
        rows = [[*row, d] for row, d in zip(rows, duplicates, strict=True)]
    table = h.table(columns, rows, "plan-table", sortable=True)
    clips = "".join(f"<li><b>{h.esc(p.name)}</b>: {h.esc(p.clip)}</li>" for p in plans if p.clip)
    clip = f'<p>What the repetition cap did:</p><ul class="clip">{clips}</ul>' if clips else ""
    return h.section("plans", title, f'<div class="scroll">{table}</div>{_recorded(plans)}{clip}', INTRO)

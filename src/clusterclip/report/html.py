"""HTML building blocks of the report: escaping, tables, figures, sections and the page shell.

The page is one self-contained file: inline CSS, ``<img>`` tags pointing at PNGs in the same folder
and a few lines of vanilla JavaScript (:mod:`clusterclip.report.page_script`): sortable and filterable tables,
``<body data-ready="1">`` once they are wired (so a headless browser can tell the script ran), and after loading
``data-broken-images`` = the number of charts that failed to load, each replaced by a note saying the
PNGs must stay beside the page. Nothing is fetched from a network.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from clusterclip.charts.style import Chart
from clusterclip.report.page_script import JS

CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --soft:#f6f8fa; --accent:#4e79a7; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.5 -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif;
       color:var(--fg); background:var(--bg); }
header { padding:18px 32px 10px; border-bottom:1px solid var(--line); background:var(--soft); }
header h1 { margin:0 0 4px; font-size:22px; }
header .meta { color:var(--muted); font-size:13px; word-break:break-all; }
nav { margin-top:10px; display:flex; flex-wrap:wrap; gap:6px 14px; font-size:13px; }
nav a { color:var(--accent); text-decoration:none; }
nav a:hover { text-decoration:underline; }
main { padding:8px 32px 48px; max-width:1400px; }
section { margin-top:26px; }
h2 { font-size:18px; margin:0 0 6px; padding-bottom:4px; border-bottom:1px solid var(--line); }
h3 { font-size:15px; margin:18px 0 6px; }
p.intro { color:var(--muted); margin:4px 0 12px; max-width:100ch; }
.note { background:#fff8c5; border:1px solid #e9d98a; padding:8px 12px; border-radius:6px; max-width:100ch; }
.cards { display:flex; flex-wrap:wrap; gap:10px; margin:10px 0; }
.card { border:1px solid var(--line); border-radius:8px; padding:8px 14px; min-width:130px; background:var(--soft); }
.card .v { font-size:19px; font-weight:600; }
.card .k { color:var(--muted); font-size:12px; }
table { border-collapse:collapse; margin:8px 0 14px; font-size:13px; }
th, td { border-bottom:1px solid var(--line); padding:5px 9px; text-align:left; vertical-align:top; }
th { background:var(--soft); position:sticky; top:0; z-index:1; }
th.num { max-width:9em; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
td.num { white-space:nowrap; }
table.sortable th { cursor:pointer; user-select:none; }
table.sortable th::after { content:" \\2195"; color:#aab3bd; font-size:11px; }
table.sortable th[aria-sort=ascending]::after { content:" \\25B2"; color:var(--fg); }
table.sortable th[aria-sort=descending]::after { content:" \\25BC"; color:var(--fg); }
tr:target td { background:#fff3bf; }
.kw { color:#0b4f8a; }
.badge { display:inline-block; font-size:11px; padding:0 6px; border-radius:9px; margin-left:4px;
         color:#fff; vertical-align:1px; }
.badge.large { background:#e15759; } .badge.small { background:#59a14f; }
details summary { cursor:pointer; color:var(--muted); }
details ol { margin:4px 0 0; padding-left:18px; max-width:70ch; }
td.kw { min-width:220px; max-width:320px; }
td.examples { min-width:260px; max-width:440px; font-size:12px; }
th.draws { min-width:9.5em; }
th .plan { font-size:11px; font-weight:normal; color:var(--muted); overflow-wrap:anywhere; }
#cluster-table { width:100%; }
figure { margin:10px 0 18px; }
figure img { max-width:100%; height:auto; border:1px solid var(--line); border-radius:6px; }
figcaption { color:var(--muted); font-size:12px; }
table.kv { max-width:620px; }
table.kv td:first-child { white-space:nowrap; }
table.kv td:last-child { word-break:break-word; }
.grid { display:flex; flex-wrap:wrap; gap:16px; align-items:flex-start; }
.grid figure { flex:0 1 560px; }
.toolbar { display:flex; gap:12px; align-items:center; flex-wrap:wrap; margin:6px 0; }
.toolbar input { padding:4px 8px; border:1px solid var(--line); border-radius:6px; min-width:260px; }
.quick a { color:var(--accent); text-decoration:none; margin-right:8px; }
.scroll { max-height:80vh; max-width:100%; overflow:auto; border:1px solid var(--line); border-radius:6px; }
.pick-off { display:none; }
p.more { color:var(--muted); margin:6px 0; }
p.more button, .toolbar select { font:inherit; padding:1px 8px; border:1px solid var(--line); border-radius:6px;
                                 background:var(--soft); cursor:pointer; }
table.stacked, table.stacked thead, table.stacked tbody { display:block; }
table.stacked thead { position:sticky; top:0; z-index:1; } table.stacked th { position:static; }
table.stacked tr { display:grid; grid-template-columns:var(--cols); border-bottom:1px solid var(--line); }
table.stacked tr[hidden] { display:none; }
table.stacked th, table.stacked td { padding:4px 5px; border:0; min-width:0; max-width:none; }
table.stacked tr > :nth-last-child(2) { grid-column:1 / var(--mid); }
table.stacked tr > :last-child { grid-column:var(--mid) / -1; }
@media (max-width: 700px) { header, main, footer { padding-left:12px; padding-right:12px; }
  .toolbar input { min-width:0; width:100%; } }
.scroll table { margin:0; }
footer { color:var(--muted); font-size:12px; padding:12px 32px 24px; border-top:1px solid var(--line); }
"""

def esc(value: object) -> str:
    """HTML-escape ``str(value)`` (quotes included, so it is safe in attributes too)."""
    return html.escape(str(value), quote=True)


def fmt_num(x: float | int | None, digits: int = 3) -> str:
    """Human-friendly number: thousands separators for integers, ``digits`` significant figures else."""
    if x is None:
        return "–"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 1000):
        return f"{int(x):,}"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:,.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"


def fmt_seconds(s: float | None) -> str:
    """Seconds as ``1.2 s``, ``3 min 4 s`` or ``2 h 5 min``."""
    if s is None:
        return "–"
    s = float(s)
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


@dataclass
class Cell:
    """A table cell: its inner HTML (already escaped), an optional sort key, numeric alignment, CSS class."""

    html: str
    sort: float | str | None = None
    numeric: bool = False
    cls: str = ""


@dataclass
class Column:
    """A table column header; ``numeric`` sorts by number (largest first) and right-aligns it."""

    title: str
    numeric: bool = False
    tip: str = ""
    ascending_first: bool = False
    cls: str = ""
    plan: str = ""
    """A plan's name under the title, in small type that breaks anywhere (a name has no spaces)."""


def plain(v: object) -> object:
    """A JSON value as a cell shows it: integral floats as integers, lists and objects as "custom"."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return int(v)
    if isinstance(v, (dict, list)):
        return "custom" if v else "–"
    return v


def cell(value: object, numeric: bool | None = None, digits: int = 3) -> Cell:
    """A cell from a plain value: numbers formatted and sortable, everything else escaped text."""
    if isinstance(value, Cell):
        return value
    if isinstance(value, bool) or value is None:
        return Cell(esc("–" if value is None else value))
    if isinstance(value, numbers.Integral):
        value = int(value)
    elif isinstance(value, numbers.Real):
        value = float(value)
    if isinstance(value, (int, float)):
        return Cell(esc(fmt_num(value, digits)), sort=value, numeric=True if numeric is None else numeric)
    return Cell(esc(value), numeric=bool(numeric))


def _th(c: Column) -> str:
    classes = " ".join(x for x in ("num" if c.numeric else "", c.cls) if x)
    attrs = f' class="{classes}"' if classes else ""
    attrs += ' data-type="num"' if c.numeric else ""
    if c.ascending_first:
        attrs += ' data-first="ascending"'
    if c.tip:
        attrs += f' title="{esc(c.tip)}"'
    plan = f'<br><span class="plan">{esc(c.plan)}</span>' if c.plan else ""
    return f"<th{attrs}>{esc(c.title)}{plan}</th>"


def table(
    columns: Sequence[Column | str],
    rows: Iterable[Sequence[object]],
    table_id: str | None = None,
    sortable: bool = False,
    row_ids: Sequence[str] | None = None,
    css: str = "",
    limit: int | None = None,
) -> str:
    """An HTML table; with ``sortable`` clicking a header sorts by that column (numeric ones by value).

    ``limit`` (with ``table_id``) lets the page show only the first ``limit`` rows (after any sort) until the
    reader asks for all of them: see :func:`more_rows`.
    """
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    attrs = f' id="{esc(table_id)}"' if table_id else ""
    rows = list(rows)
    if limit and len(rows) > limit:
        attrs += f' data-limit="{int(limit)}"'
    classes = " ".join(x for x in ("sortable" if sortable else "", css) if x)
    cls = f' class="{classes}"' if classes else ""
    head = "".join(_th(c) for c in cols)
    body = []
    for r, row in enumerate(rows):
        rid = f' id="{esc(row_ids[r])}"' if row_ids else ""
        tds = []
        for value in row:
            c = cell(value)
            sort = f' data-v="{esc(c.sort)}"' if c.sort is not None else ""
            classes = " ".join(x for x in ("num" if c.numeric else "", c.cls) if x)
            klass = f' class="{classes}"' if classes else ""
            tds.append(f"<td{klass}{sort}>{c.html}</td>")
        body.append(f"<tr{rid}>{''.join(tds)}</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if cols else ""
    return f"<table{attrs}{cls}>{thead}<tbody>\n" + "\n".join(body) + "\n</tbody></table>"


def more_rows(table_id: str, total: int, limit: int, noun: str = "rows") -> str:
    """The note above a table of ``total`` rows that shows ``limit`` of them, with a button to show all (shown
    by the page's script, which is also what hides the rows: without it every row shows)."""
    if total <= limit:
        return ""
    return (f'<p class="more" data-more="{esc(table_id)}" hidden>Showing the first {limit:,} of {total:,} {esc(noun)} '
            f"({total - limit:,} more; sorting and filtering look at all of them). "
            '<button type="button">show all</button></p>')


def key_values(pairs: Iterable[tuple[str, object]]) -> str:
    """A two-column table of labelled values, left-aligned."""
    rows = [(Cell(f"<b>{esc(k)}</b>"), Cell(cell(v).html)) for k, v in pairs]
    return table([], rows, css="kv")


def cards(items: Iterable[tuple[str, str]]) -> str:
    """Big-number cards: (label, already formatted value)."""
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>' for k, v in items
        )
        + "</div>"
    )


def figure(chart: Chart, src: str, alt: str | None = None) -> str:
    """An ``<img>`` of a chart with its caption; ``src`` is relative to the HTML file."""
    caption = f"<figcaption>{esc(chart.caption)}</figcaption>" if chart.caption else ""
    return f'<figure><img src="{esc(src)}" alt="{esc(alt or chart.title)}">{caption}</figure>'


def note(text: str) -> str:
    """A highlighted remark, e.g. why a section is empty."""
    return f'<p class="note">{esc(text)}</p>'


def section(section_id: str, title: str, body: str, intro: str = "") -> str:
    """A report section with a stable id (linked from the navigation bar and checked by tests)."""
    intro_html = f'<p class="intro">{intro}</p>' if intro else ""
    return f'<section id="{esc(section_id)}">\n<h2>{esc(title)}</h2>\n{intro_html}\n{body}\n</section>'


def page(title: str, meta: str, sections: Sequence[tuple[str, str, str]], footer: str) -> str:
    """The whole document; ``sections`` are (id, nav label, section HTML)."""
    nav = "".join(f'<a href="#{esc(sid)}">{esc(label)}</a>' for sid, label, _ in sections)
    body = "\n".join(s for _, _, s in sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{CSS}</style>
</head>
<body>
<header>
<h1>{esc(title)}</h1>
<div class="meta">{meta}</div>
<nav>{nav}</nav>
</header>
<main>
{body}
</main>
<footer>{footer}</footer>
<script>{JS}</script>
</body>
</html>
"""

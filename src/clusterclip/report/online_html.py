"""The online mixing section as HTML: per chain of continuations, its weights chart and a table of its updates."""

from __future__ import annotations

from collections.abc import Mapping

from clusterclip.charts.style import Chart
from clusterclip.report import html as h
from clusterclip.report.online import OnlineChain, OnlineSection, OnlineUpdate

ONLINE_ROWS = 25
"""Updates a chain's table shows until the reader asks for all of them."""
COLUMNS = (
    h.Column("position", numeric=True, ascending_first=True, tip="training position the weights hold from"),
    h.Column("plan"),
    h.Column("rule"),
    h.Column("step", numeric=True, tip="the controller's update count"),
    h.Column("gained most", tip="clusters whose weight grew most at this update: weight before -> after"),
    h.Column("lost most", tip="clusters whose weight fell most at this update: weight before -> after"),
    h.Column("mean window loss", numeric=True, tip="mean loss of the samples reported since the previous update"),
    h.Column("samples", numeric=True, tip="samples in that window"),
    h.Column("effective clusters", numeric=True, tip="exp(entropy) of the weights: K when uniform"),
    h.Column("realised vs weights", numeric=True,
             tip="total variation between the weights and the mixture the plan realised until the next update "
                 "(0: the same; from the plan's recorded windows)"),
)


def _share(w: float) -> str:
    return f"{100 * w:.3g}"


def _moves(moves: tuple[tuple[int, float, float], ...], changed: bool = True) -> h.Cell:
    if not moves:
        return h.Cell("–" if changed else "unchanged")
    text = "<br>".join(f"#{c} {_share(a)} → {_share(b)} %" for c, a, b in moves)
    return h.Cell(text, sort=abs(moves[0][2] - moves[0][1]))


def _row(u: OnlineUpdate) -> list[object]:
    plan = h.Cell(f'<code style="word-break:break-all">{h.esc(u.plan)}</code>', sort=u.plan)
    return [u.position, plan, u.rule, u.step, _moves(u.gained, u.changed), _moves(u.lost, u.changed), u.window_loss,
            u.samples,
            u.effective, u.realised_tv]


def _chain(i: int, chain: OnlineChain, made: Mapping[str, Chart]) -> str:
    updates = [u for u in chain.updates if u.step]
    facts = [("updates", f"{len(updates):,}"), ("rule", updates[0].rule if updates else "–"),
             ("every", f"{chain.every:,} positions" if chain.every else "–"), ("run length", f"{chain.end:,}"),
             ("clusters", f"{chain.track.k:,}")]
    if chain.unchanged:
        facts.append(("weights left unchanged by", chain.unchanged))
    table_id = f"online-table-{i}"
    rows = [_row(u) for u in chain.updates]
    table = h.table(COLUMNS, rows, table_id, sortable=True, limit=ONLINE_ROWS)
    more = h.more_rows(table_id, len(rows), ONLINE_ROWS, "updates")
    figure = h.figure(made[chain.chart], chain.chart) if chain.chart in made else ""
    return (f"<h3>{h.esc(chain.root)} → {h.esc(chain.leaf)}</h3>" + h.cards(facts) + figure + more
            + f'<div class="scroll">{table}</div>')


def online_html(section: OnlineSection, made: Mapping[str, Chart]) -> str:
    """The section: one chart and table per chain (what was left out is in the page's notes)."""
    intro = (
        "Cluster weights chosen by <code>clusterclip.online</code> while training ran, one chain per root plan and "
        "its online continuations (<code>plans/*/online.json</code>). Above, the share of the weight held by the "
        "clusters whose weight moved most and by all others (grey); below, their weight relative to uniform "
        "(1 = 1/K), the band of all clusters, and as dots the share each actually got until the next update. "
        "Position 0 is the controller's uniform start, trained on the root plan's own strategy."
    )
    chains = "".join(_chain(i, c, made) for i, c in enumerate(section.chains))
    body = chains or h.note("No online record could be read (see Notes).")
    return h.section("online", "Online mixing", body, intro)

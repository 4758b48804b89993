"""The report of ``sgmc run``: the table of the methods, the marks of rows without a result, the coefficients."""

from __future__ import annotations

from typing import Any

#: How _mark writes a runaway finding's factor, by kind (sgmc.diagnostics.runaway).
_RUNAWAY_UNITS = {"scale": " x sqrt(d) sd", "spread": " x the posterior's sd"}


def _mark(r: dict) -> str | None:
    """What a row that holds no result says instead, or None for a result."""
    if "diverged" in r:
        return f"diverged at iteration {r['diverged']}, h = {r['h']:.3g}"
    if "interrupted" in r:
        where = "in its set-up" if r["interrupted"] == 0 else f"at iteration {r['interrupted']} of {r['of']}"
        return f"interrupted {where} (Ctrl-C); no result"
    if "runaway" in r:
        w = r["runaway"]
        what = {"scale": "far outside the Laplace scale", "spread": "spread far wider than the posterior"}.get(
            w["kind"], "growing without bound")
        return (f"ran away: chain {w['chain']} {what} from iteration {w['iteration']} "
                f"({w['factor']:.3g}{_RUNAWAY_UNITS.get(w['kind'], '-fold')}), h = {r['h']:.3g}; no result")
    if "unmixed" in r:
        return f"NOT MIXED (*): {r['unmixed']['reasons'][0]}, h = {r['h']:.3g}; no result"
    return None


def _coefficient_table(label: str, trace: Any) -> str:
    """The posterior of the coefficients by name: mean, sd, 89% HDI, bulk and tail ESS and R-hat (sgmc.diagnostics)."""
    table = trace.summary()
    cols = [c for c in table.columns if c in ("mean", "sd", "ess_bulk", "ess_tail", "r_hat") or c.startswith("hdi")]
    width = max(len("coefficient"), *(len(n) for n in table.index))
    rhat = "" if "r_hat" in cols else "; R-hat needs --chains 2 or more"
    lines = [f"posterior of the coefficients, {label} ({trace.n_chains} chain(s) x {trace.n_draws} kept draws{rhat}):",
             f"{'coefficient':<{width}}" + "".join(f"{c:>11}" for c in cols)]
    for i, name in enumerate(table.index):
        cells = [f"{float(table[c][i]):>11.0f}" if c.startswith("ess") else f"{float(table[c][i]):>11.4g}" for c in cols]
        lines.append(f"{name:<{width}}" + "".join(cells))
    return "\n".join(lines)


def _format_table(rows: list, metric: str) -> str:
    head = ("method", "h", "time (s)", "data passes", metric, "mean error")
    body = [
        (r["method"], f"{r['h']:.3g}", f"{r['time']:.2f}", f"{r['passes']:.1f}", f"{r['log_loss']:.4f}",
         f"{r['mean_error']:.3g}")
        for r in rows if _mark(r) is None
    ]
    widths = [max([len(head[i])] + [len(b[i]) for b in body]) for i in range(len(head))]
    widths[0] = max([widths[0]] + [len(r["method"]) for r in rows])
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    )
    lines, ok = [], iter(body)
    for r in rows:
        mark = _mark(r)
        lines.append(line(next(ok)) if mark is None else f"{r['method'].ljust(widths[0])}  {mark}")
    return "\n".join([line(head), line(["-" * w for w in widths]), *lines])

"""Write the documentation's tables from the results files, or check that they are up to date.

A table generated from a results file sits in a page (README.md or docs/*.md) between two markers::

    <!-- results: docs/results/peer_sgld.json#sgld -->
    | ... the table ... |
    <!-- end results -->

``python docs/render_tables.py`` rewrites every such block from its file: the table, the file's notes
for it (if any) and one line naming the file, the command that wrote it, when, on what machine and
under what load. ``python docs/render_tables.py --check`` changes nothing and exits with status 1 when
a block is stale, names a missing file or table, a results file lacks its provenance or records a
command with absolute paths (one that would not run from a fresh clone), or a table
with numbers in it sits outside any block (a table of words only may stay as it is). A table of numbers
quoted from a publication, not measured here, carries ``<!-- quoted: WHERE FROM -->`` on a line of its
own just before it (blank lines between are allowed) and is not checked.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

try:  # imported as docs.render_tables (tests) or run as a script from docs/
    from docs._results import absolute_paths
except ImportError:
    from _results import absolute_paths
REQUIRED = ("command", "created", "machine", "load", "versions", "tables")

_BLOCK = re.compile(
    r"(?P<open><!--\s*results:\s*(?P<src>[^#\s]+)#(?P<tid>[^\s>]+)\s*-->)\n(?P<body>.*?)(?P<close><!--\s*end results\s*-->)",
    re.S,
)
_OPEN = re.compile(r"<!--\s*results:")
_QUOTED = re.compile(r"^\s*<!--\s*quoted:\s*\S.*-->\s*$")
_CODE = re.compile(r"`[^`]*`")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_UNIT = r"(?:s|ms|us|µs|ns|min|h|x|×|%|[kKMG]i?B|GB/s|MB/s|it/s)"
_NUMBER = re.compile(r"[~≈<>±+\-−]?\d[\d,_]*(?:\.\d+)?(?:[eE][+-]?\d+)?\s*" + _UNIT + r"?(?![\w])")
_SYMBOLS = re.compile(r"^[\s/±×x\-−–,;:()~<>≈=+*^]*$")


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and every docs/*.md page."""
    out = [root / "README.md"] if (root / "README.md").exists() else []
    return out + sorted((root / "docs").glob("*.md"))


def format_cell(value, spec: str | None = None) -> str:
    """One table cell: strings as they are, None as an en dash, numbers by ``spec`` or 3 significant digits."""
    if value is None:
        return "–"
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if spec:
        return format(value, spec)
    if isinstance(value, int):
        return str(value)
    a = abs(value)
    if a == 0:
        return "0"
    if 1e-3 <= a < 1000:
        return f"{value:.3g}"
    if 1000 <= a < 1e7:
        return f"{value:.0f}"
    return f"{value:.2e}"


def render(src: str, tid: str, record: dict) -> str:
    """The markdown of table ``tid`` of a results file (without the markers)."""
    table = record["tables"][tid]
    cols, specs = table["columns"], table.get("formats") or [None] * len(table["columns"])
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for row in table["rows"]:
        lines.append("| " + " | ".join(esc(format_cell(v, s)) for v, s in zip(row, specs)) + " |")
    m, load = record["machine"], record["load"]
    where = f"{m.get('cpu', '?')}, {m.get('cores_usable', '?')} of {m.get('cores', '?')} cores"
    text = "\n".join(lines) + "\n\n"
    if table.get("notes"):
        text += table["notes"].strip() + "\n\n"
    text += (
        f"Source: `{src}` (table `{tid}`), written by `{record['command']}` on {record['created'][:10]} "
        f"({where}; load average {load['start'][0]:.2f} at start, {load['end'][0]:.2f} at end).\n"
    )
    return text


def _load(root: Path, src: str, cache: dict) -> tuple[dict | None, str | None]:
    if src in cache:
        return cache[src]
    path = root / src
    if not src.startswith("docs/results/") or not src.endswith(".json"):
        out = (None, f"source {src!r} is not a docs/results/*.json file")
    elif not path.is_file():
        out = (None, f"results file {src} does not exist")
    else:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            out = (None, f"results file {src} cannot be read: {exc}")
        else:
            missing = [k for k in REQUIRED if k not in record]
            out = (None, f"results file {src} lacks {', '.join(missing)}") if missing else (record, None)
            scratch = [] if missing else absolute_paths(str(record["command"]))
            if scratch:
                out = (None, f"results file {src} records a command with absolute path(s) {scratch}: it does not run "
                             "from a fresh clone; record paths relative to the repository root")
    cache[src] = out
    return out


def numeric_cell(cell: str) -> bool:
    """Whether a table cell states a number (code spans and link targets do not count)."""
    text = _LINK.sub(r"\1", _CODE.sub("", cell)).replace("**", "").strip()
    if not any(c.isdigit() for c in text):
        return False
    return bool(_SYMBOLS.match(_NUMBER.sub("", text)))


def loose_tables(text: str) -> list[tuple[int, str]]:
    """(line number, first line) of each markdown table outside any results block with a numeric cell."""
    blanked = _BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    lines, out, i = blanked.splitlines(), [], 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        if in_fence or not line.lstrip().startswith("|"):
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i].lstrip().startswith("|"):
            i += 1
        rows = lines[start:i]
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        if before >= 0 and _QUOTED.match(lines[before]):
            continue
        if len(rows) < 2 or not re.match(r"^\s*\|?\s*:?-{3,}", rows[1]):
            continue
        cells = [c for r in rows[2:] for c in r.strip().strip("|").split("|")]
        if any(numeric_cell(c) for c in cells):
            out.append((start + 1, rows[0].strip()))
    return out


def process(root: Path = ROOT, write: bool = False) -> list[str]:
    """Render (``write=True``) or check every page; return the problems found."""
    problems, cache = [], {}
    for page in pages(root):
        rel = page.relative_to(root)
        text = page.read_text(encoding="utf-8")
        n_open = len(_OPEN.findall(text))
        blocks = list(_BLOCK.finditer(text))
        if n_open != len(blocks):
            problems.append(f"{rel}: {n_open} results markers but {len(blocks)} complete blocks (each needs <!-- end results -->)")

        def replace(m):
            src, tid = m.group("src"), m.group("tid")
            line = text.count("\n", 0, m.start()) + 1
            record, err = _load(root, src, cache)
            if err is None and tid not in record["tables"]:
                err = f"results file {src} has no table {tid!r} (it has {', '.join(record['tables'])})"
            if err is not None:
                problems.append(f"{rel}:{line}: {err}")
                return m.group(0)
            body = render(src, tid, record)
            if body != m.group("body"):
                if not write:
                    problems.append(f"{rel}:{line}: table {src}#{tid} is stale; run python docs/render_tables.py")
                return m.group("open") + "\n" + body + m.group("close")
            return m.group(0)

        new = _BLOCK.sub(replace, text)
        if write and new != text:
            page.write_text(new, encoding="utf-8")
        for line, head in loose_tables(new):
            problems.append(
                f"{rel}:{line}: a table with numbers outside any results block ({head[:60]}); "
                "generate it from a results file or state it without numbers"
            )
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any table is stale or unsourced")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    problems = process(args.root, write=not args.check)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"render_tables: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

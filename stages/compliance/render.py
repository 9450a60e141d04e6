"""Documents to markdown and to one print-ready HTML page, every value with its source.

Why footnotes: a reader of the printed page (an authority, a downstream provider) must be able to check any
figure against the run's records. In markdown each value carries a footnote naming the manifest field or
config key (one per distinct source, so repeated sources share a number); table columns carry one footnote
each (the row's key shown as <row>). In HTML each value also shows its exact source on hover (title).

Output is a pure function of the documents: no clock, no paths of this machine, sorted where order is not
given, so regenerating from unchanged records gives byte-identical files.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from stages.compliance.document import Document, Item, Section, Table, Text
from stages.compliance.facts import Fact, labelled

OPEN_MARK = "OPEN"


def source_text(fact: Fact) -> str:
    s = "; ".join(labelled(src) for src in fact.sources)
    return f"{s} ({fact.method})" if fact.method and s else (s or fact.method)


def recipients_text(item: Item) -> str:
    return f" [{', '.join(item.recipients)}]" if item.recipients else ""


def open_text(fact: Fact) -> str:
    return f"{OPEN_MARK}: needs {'; '.join(fact.needs) or 'a record'} (listed in open_items.md)"


def column_source(table: Table, col: int) -> str:
    """One source line for a table column: the cells' sources with each row's key replaced by <row>."""
    patterns: dict[str, None] = {}
    methods: dict[str, None] = {}
    for row in table.rows:
        key, cell = row[0].text, row[col]
        for s in cell.sources:
            patterns[s.replace(f".{key}.", ".<row>.").replace(f".{key}", ".<row>") if key else s] = None
        if cell.method:
            methods[cell.method] = None
    s = "; ".join(labelled(p) for p in patterns)
    return f"{s} ({'; '.join(methods)})" if methods else s


@dataclass
class Footnotes:
    texts: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def number(self, text: str) -> int:
        if text not in self.index:
            self.texts.append(text)
            self.index[text] = len(self.texts)
        return self.index[text]


# --- markdown -------------------------------------------------------------------------------------------
def _md_escape(text: str) -> str:
    return text.replace("\r", "").replace("\n", " ").replace("|", "\\|")


def _md_value(fact: Fact, notes: Footnotes) -> str:
    if fact.is_open:
        return f"**{_md_escape(open_text(fact))}**"
    src = source_text(fact)
    return _md_escape(fact.text) + (f" [^{notes.number(src)}]" if src else "")


def to_markdown(doc: Document) -> str:
    notes = Footnotes()
    lines = [f"# {doc.title}", "", f"*{doc.purpose}*", ""]

    def section(s: Section, level: int) -> None:
        lines.extend([f"{'#' * level} {s.heading}", ""])
        for b in s.blocks:
            if isinstance(b, Item):
                lines.append(f"- **{_md_escape(b.label)}**{_md_escape(recipients_text(b))}: {_md_value(b.fact, notes)}")
            elif isinstance(b, Text):
                _end_list()
                lines.extend([_md_escape(b.text), ""])
            elif isinstance(b, Table):
                _end_list()
                lines.extend([f"*{_md_escape(b.caption)}*", ""])
                lines.append("| " + " | ".join(_md_escape(c) for c in b.columns) + " |")
                lines.append("|" + "|".join("---:" if i in b.numeric else "---" for i in range(len(b.columns))) + "|")
                for row in b.rows:
                    cells = [_md_escape(row[0].text)] + [_md_escape(f"{OPEN_MARK}" if c.is_open else c.text) for c in row[1:]]
                    lines.append("| " + " | ".join(cells) + " |")
                if not b.rows:
                    lines.append("| " + " | ".join(["(none)"] + [""] * (len(b.columns) - 1)) + " |")
                srcs = [f"{_md_escape(c)} [^{notes.number(column_source(b, i))}]" for i, c in enumerate(b.columns) if i and b.rows and column_source(b, i)]
                if srcs:
                    lines.extend(["", "Sources: " + "; ".join(srcs)])
                lines.append("")
            elif isinstance(b, Section):
                _end_list()
                section(b, level + 1)
        _end_list()

    def _end_list() -> None:
        if lines and lines[-1].startswith("- "):
            lines.append("")

    for s in doc.sections:
        section(s, 2)
    if notes.texts:
        lines.extend(["---", ""] + [f"[^{i}]: {_md_escape(t)}" for i, t in enumerate(notes.texts, start=1)] + [""])
    out = "\n".join(lines)
    while "\n\n\n" in out:
        out = out.replace("\n\n\n", "\n\n")
    return out.rstrip("\n") + "\n"


# --- HTML -----------------------------------------------------------------------------------------------
_CSS = """
body { font: 11pt/1.45 "Source Serif Pro", Georgia, serif; max-width: 60em; margin: 2em auto; padding: 0 1.5em; color: #111; }
h1 { font-size: 1.6em; border-bottom: 2px solid #333; } h2 { font-size: 1.25em; margin-top: 1.6em; } h3, h4, h5 { font-size: 1.05em; }
nav ul { columns: 2; } .purpose { font-style: italic; color: #444; }
dl.items { display: grid; grid-template-columns: 16em 1fr; gap: .25em 1em; } dl.items dt { font-weight: 600; }
dl.items dd { margin: 0; } .v { border-bottom: 1px dotted #888; } sup.fn a { text-decoration: none; font-size: .75em; }
.open { color: #a00; font-weight: 700; } table { border-collapse: collapse; margin: .5em 0 1em; font-size: .92em; }
th, td { border: 1px solid #bbb; padding: .15em .5em; vertical-align: top; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-style: italic; padding-bottom: .2em; } ol.notes { font-size: .82em; color: #333; word-break: break-word; }
.doclinks { font-size: .9em; }
@media print { body { max-width: none; margin: 0; font-size: 10pt; } nav { page-break-after: always; }
  section.doc { page-break-before: always; } a { color: inherit; text-decoration: none; } table, dl.items { page-break-inside: avoid; } }
"""


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _html_value(fact: Fact, notes: Footnotes, doc_id: str) -> str:
    if fact.is_open:
        return f'<span class="open">{_e(open_text(fact))}</span>'
    src = source_text(fact)
    if not src:
        return _e(fact.text)
    n = notes.number(src)
    return f'<span class="v" title="{_e(src)}">{_e(fact.text)}</span><sup class="fn"><a href="#{doc_id}-fn-{n}">{n}</a></sup>'


def document_html(doc: Document, files: list[str]) -> str:
    notes = Footnotes()
    out = [f'<section class="doc" id="{doc.id}">', f"<h1>{_e(doc.title)}</h1>", f'<p class="purpose">{_e(doc.purpose)}</p>',
           '<p class="doclinks">As files: ' + ", ".join(f'<a href="{_e(f)}">{_e(f)}</a>' for f in files) + "</p>"]

    def section(s: Section, level: int) -> None:
        anchor = f"{doc.id}-{s.id or s.title}".replace(" ", "-")
        out.append(f'<h{min(level, 6)} id="{_e(anchor)}">{_e(s.heading)}</h{min(level, 6)}>')
        items: list[str] = []

        def flush() -> None:
            if items:
                out.append('<dl class="items">' + "".join(items) + "</dl>")
                items.clear()

        for b in s.blocks:
            if isinstance(b, Item):
                items.append(f"<dt>{_e(b.label)}{_e(recipients_text(b))}</dt><dd>{_html_value(b.fact, notes, doc.id)}</dd>")
                continue
            flush()
            if isinstance(b, Text):
                out.append(f"<p>{_e(b.text)}</p>")
            elif isinstance(b, Table):
                head = "".join(f"<th>{_e(c)}</th>" for c in b.columns)
                rows = []
                for row in b.rows:
                    cells = [f"<th>{_e(row[0].text)}</th>"]
                    for i, c in enumerate(row[1:], start=1):
                        cls = ' class="n"' if i in b.numeric else ""
                        body = f'<span class="open">{OPEN_MARK}</span>' if c.is_open else f'<span title="{_e(source_text(c))}">{_e(c.text)}</span>'
                        cells.append(f"<td{cls}>{body}</td>")
                    rows.append("<tr>" + "".join(cells) + "</tr>")
                srcs = [f'{_e(c)}<sup class="fn"><a href="#{doc.id}-fn-{notes.number(column_source(b, i))}">{notes.number(column_source(b, i))}</a></sup>'
                        for i, c in enumerate(b.columns) if i and b.rows and column_source(b, i)]
                caption = _e(b.caption) + (" (sources: " + ", ".join(srcs) + ")" if srcs else "")
                out.append(f"<table><caption>{caption}</caption><thead><tr>{head}</tr></thead><tbody>{''.join(rows) or '<tr><td>(none)</td></tr>'}</tbody></table>")
            elif isinstance(b, Section):
                section(b, level + 1)
        flush()

    for s in doc.sections:
        section(s, 2)
    if notes.texts:
        out.append('<h2>Sources</h2><ol class="notes">' + "".join(
            f'<li id="{doc.id}-fn-{i}">{_e(t)}</li>' for i, t in enumerate(notes.texts, start=1)) + "</ol>")
    out.append("</section>")
    return "\n".join(out)


def index_html(title: str, intro: list[str], docs: list[tuple[Document, list[str]]], extra_files: list[str]) -> str:
    """One page with every document, a table of contents, and links to the markdown and JSON files."""
    def link(f: str) -> str:
        return f'<a href="{_e(f)}">{_e(f)}</a>'

    toc = "".join(f'<li><a href="#{d.id}">{_e(d.title)}</a> ({", ".join(link(f) for f in files)})</li>' for d, files in docs)
    extra = "".join(f"<li>{link(f)}</li>" for f in extra_files)
    body = "\n".join(document_html(d, files) for d, files in docs)
    paras = "".join(f"<p>{_e(p)}</p>" for p in intro)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            f"<nav><h1>{_e(title)}</h1>{paras}<h2>Documents</h2><ul>{toc}</ul><h2>Records</h2><ul>{extra}</ul></nav>\n"
            f"{body}\n</body>\n</html>\n")

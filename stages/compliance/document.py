"""The shape every compliance document is built in: sections of labelled facts, tables of facts, fixed prose.

Why one small model instead of writing markdown directly: the same document is rendered to markdown and to
HTML, its facts go to provenance.json and its open facts to open_items.md; building it once as data keeps the
four in step, and lets the tests ask "is item 1.1(d) of Annex XI present and traced to a record?".

Ids: an item's id is "<section id>.<key>" (e.g. "1.1.d.total_params"); a table cell's id is
"<table id>[<row key>].<column>". Ids are stable across runs: they key provenance.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Union

from stages.compliance.facts import Fact


RECIPIENTS = ("AIO", "NCAs", "DPs")  # the Model Documentation Form's columns: AI Office, national authorities, downstream providers


@dataclass
class Item:
    key: str
    label: str
    fact: Fact
    recipients: tuple[str, ...] = ()  # empty: the document's readers; else a subset of RECIPIENTS


@dataclass
class Table:
    key: str
    caption: str
    columns: list[str]
    rows: list[list[Fact]]  # the first cell of a row is its key
    numeric: tuple[int, ...] = ()  # columns aligned right


@dataclass
class Text:
    """Prose fixed by this code (what a value means, what the law asks); it carries no figures."""

    text: str


Block = Union[Item, Table, Text, "Section"]


@dataclass
class Section:
    id: str  # e.g. "1.1" or "2.3"; "" for an unnumbered section
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, block: Block) -> Block:
        self.blocks.append(block)
        return block

    def item(self, key: str, label: str, fact: Fact, recipients: tuple[str, ...] = ()) -> Item:
        return self.add(Item(key, label, fact, recipients))  # type: ignore[return-value]

    def text(self, text: str) -> None:
        self.blocks.append(Text(text))

    def section(self, id: str, title: str) -> Section:
        return self.add(Section(id, title))  # type: ignore[return-value]

    @property
    def heading(self) -> str:
        """Numbered sections (ids starting with a digit, as in the law) show their number."""
        return f"{self.id} {self.title}" if self.id[:1].isdigit() else self.title


@dataclass
class Document:
    id: str  # file stem: <id>.md
    title: str
    purpose: str  # one line: which obligation it serves
    sections: list[Section] = field(default_factory=list)

    def section(self, id: str, title: str) -> Section:
        s = Section(id, title)
        self.sections.append(s)
        return s

    def facts(self) -> Iterator[tuple[str, str, Fact]]:
        """(id, label, fact) for every item and table cell, in document order."""
        def walk(section: Section) -> Iterator[tuple[str, str, Fact]]:
            prefix = section.id or _slug(section.title)
            for b in section.blocks:
                if isinstance(b, Item):
                    yield f"{prefix}.{b.key}", f"{section.heading}: {b.label}", b.fact
                elif isinstance(b, Table):
                    for row in b.rows:
                        row_key = row[0].text
                        for col, cell in zip(b.columns[1:], row[1:]):
                            yield f"{prefix}.{b.key}[{row_key}].{col}", f"{section.heading}: {b.caption} ({row_key}, {col})", cell
                elif isinstance(b, Section):
                    yield from walk(b)
        for s in self.sections:
            yield from walk(s)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")

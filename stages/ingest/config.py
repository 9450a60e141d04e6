"""Settings of the ingest stage: `[ingest]` and its `[[ingest.sources]]` in the run config."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from pipeline.config import StrictModel, check_languages, resolve_config_path
from pipeline.languages import PLACEHOLDERS
from stages.ingest.blocklist import BlocklistConfig
from stages.ingest.langid import LangIdConfig
from stages.ingest.minhash import DedupConfig
from stages.ingest.normalize import NormalizeConfig
from stages.ingest.pii import PiiConfig
from stages.ingest.quality import QualityConfig

SourceKind = Literal["jsonl", "parquet", "text", "huggingface", "udhr"]
# The AI Office template's categories of training data (Public Summary, section 2).
SourceCategory = Literal[
    "public_dataset", "private_licensed", "private_third_party", "crawled", "user_data", "synthetic", "other"
]
_PLACEHOLDERS = set(PLACEHOLDERS)


class OptOutConfig(StrictModel):
    """How text-and-data-mining reservations were honoured for a source (Art. 4(3) DSM Directive).

    `protocols` records what the collector honoured (e.g. robots.txt per RFC 9309, TDMRep, ai.txt);
    `domains` / `domains_file` list domains whose rightsholders reserved their rights: documents from them
    are dropped here with the reason `tdm_opt_out`, so a late reservation still takes effect.
    """

    protocols: list[str] = Field(default_factory=list, description="Opt-out protocols honoured when the data was collected.")
    honoured_by: Literal["provider", "third_party", "not_applicable"] = Field(
        "not_applicable", description="Who honoured them: we (provider), the dataset's publisher, or nobody needed to."
    )
    domains: list[str] = Field(default_factory=list, description="Registrable domains whose documents are dropped.")
    domains_file: str | None = Field(None, description="File with one opted-out domain per line (# comments allowed).")
    notes: str = ""

    @field_validator("domains_file")
    @classmethod
    def _resolve(cls, v: str | None, info: ValidationInfo) -> str | None:
        return _resolve_path(v, info)


class SourceConfig(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Short unique name; recorded on every document.")
    kind: SourceKind
    languages: list[str] = Field(default_factory=lambda: ["all"], description='Languages this source provides, or ["all"].')
    path: str | None = Field(
        None,
        description="Files (glob) for jsonl/parquet/text, or the UDHR declaration folder. May contain "
        "{lang}, {iso3}, {flores}, {udhr}, {fineweb2}; relative to the config file.",
    )
    text_unit: Literal["file", "paragraph", "line"] = Field(
        "file", description="kind text: one document per file, per blank-line-separated paragraph, or per line."
    )
    text_field: str = Field("text", description="Column/key holding the text (jsonl, parquet, huggingface).")
    id_field: str | None = Field(None, description="Column/key with the source's own document id, if any.")
    url_field: str | None = Field("url", description="Column/key with the document URL, if any.")
    repo: str | None = Field(None, description="Hugging Face dataset repo id, e.g. HuggingFaceFW/fineweb-2 (or a local folder laid out like one).")
    hf_config: str | None = Field(None, description="Dataset config; may contain placeholders, e.g. {fineweb2} (FineWeb-2's names: ekk_Latn for Estonian).")
    split: str = "train"
    revision: str | None = Field(None, description="Hub revision (commit, tag or branch); pin a commit so that reruns read the same files.")
    local_dir: str | None = Field(
        None, description="A local copy of the Hub repo (e.g. `hf download <repo> --repo-type dataset --local-dir DIR`): its data "
        "files are listed and read there; ids and provenance stay those of `repo`.")
    token_env: str | None = Field(None, description="Name of the environment variable holding a Hub token (never the token).")
    max_documents: int | None = Field(
        None, ge=1, description="Read at most this many documents per language (for trial runs: the language's inputs then form one unit).")
    dump: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="The crawl dump this source holds (e.g. "
        "CC-MAIN-2024-10): with [ingest.dedup] scope = \"dump\" its documents are deduplicated only against the same "
        "dump's, in any source. Required by that scope; one source per dump (FineWeb publishes one folder per dump).")
    optional: bool = Field(
        False, description="The source may yield nothing for a language (recorded as a skipped input); otherwise planning fails (exit 2).")
    # provenance, carried into every document and the manifest
    licence: str = Field(description="Licence of the text (SPDX id or a short statement).")
    homepage: str | None = Field(None, description="Where the source is described / obtained.")
    collected: str = Field(description="Date (YYYY-MM or YYYY-MM-DD) the data was collected (downloaded), as the compliance "
                           "summary needs; when the content itself was written or crawled is `content_period`.")
    version: str | None = Field(None, description="The dataset's version or revision that was read (a release number, a Hub "
                                "commit): the compliance documents name it, and a version the reader finds in the data "
                                "itself (the udhr package's package.json) must match it.")
    content_period: str | None = Field(None, description="When the content was created or crawled, where the source says so "
                                       "(e.g. \"2013-06 to 2024-04\", or its Common Crawl snapshots), apart from `collected`.")
    category: SourceCategory = "public_dataset"
    domain: str | None = Field(None, description="Domain to record for documents without a URL.")
    opt_out: OptOutConfig = Field(default_factory=OptOutConfig)

    @field_validator("languages")
    @classmethod
    def _languages(cls, v: list[str]) -> list[str]:
        return check_languages(v)

    @field_validator("collected")
    @classmethod
    def _date(cls, v: str) -> str:
        if not re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", v):
            raise ValueError("must be a date like 2025-07 or 2025-07-31")
        return v

    @field_validator("path")
    @classmethod
    def _resolve(cls, v: str | None, info: ValidationInfo) -> str | None:
        _check_placeholders(v)
        return _resolve_path(v, info)

    @field_validator("hf_config")
    @classmethod
    def _config_placeholders(cls, v: str | None) -> str | None:
        _check_placeholders(v)
        return v

    @field_validator("local_dir")
    @classmethod
    def _resolve_local(cls, v: str | None, info: ValidationInfo) -> str | None:
        return _resolve_path(v, info)

    @model_validator(mode="after")
    def _fineweb2_languages(self) -> SourceConfig:
        from pipeline.languages import LANGUAGES

        uses = [v for v in (self.path, self.hf_config) if v and "{fineweb2}" in v]
        missing = [code for code in self.languages if LANGUAGES[code].fineweb2 is None]
        if uses and missing:
            raise ValueError(f"source {self.name!r}: {{fineweb2}} names no FineWeb-2 config for {', '.join(missing)} "
                             f"(FineWeb-2 is non-English); list the source's languages without {', '.join(missing)}")
        return self

    @model_validator(mode="after")
    def _kind_needs(self) -> SourceConfig:
        if self.kind == "huggingface":
            if not self.repo:
                raise ValueError(f"source {self.name!r}: kind huggingface needs repo = \"owner/dataset\"")
        elif not self.path:
            raise ValueError(f"source {self.name!r}: kind {self.kind} needs path = \"...\"")
        return self


class DecontaminateConfig(StrictModel):
    """An evaluation set whose texts must not be trained on ([[ingest.decontaminate]]): a document sharing a word
    13-gram with one of its lines is removed (reason evaluation_overlap)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Short name, e.g. flores-devtest.")
    path: str = Field(description="Folder of the files, one text per line; relative to the config file.")
    pattern: str = Field("{flores}.devtest", description="File name per language; placeholders {lang}, {iso3}, {flores}. "
                         "A language without a file is not checked against this set.")

    @field_validator("path")
    @classmethod
    def _resolve(cls, v: str, info: ValidationInfo) -> str:
        return _resolve_path(v, info)


class IngestConfig(StrictModel):
    sources: list[SourceConfig] = Field(default_factory=list, description="Where the text comes from ([[ingest.sources]]).")
    blocklists: list[BlocklistConfig] = Field(
        default_factory=list, description="URL/domain block lists ([[ingest.blocklists]]): documents from listed sites are "
        "removed (reason blocklist), counted per list (stages/ingest/blocklist.py).")
    on_error: Literal["skip", "fail"] = Field(
        "skip", description="Bad input (unreadable file, malformed line): skip it and record why, or fail before publishing."
    )
    keep_rejected: bool = Field(True, description="Write removed documents with their reason to rejected/<lang>/.")
    files_per_unit: int = Field(16, ge=1, description="Input files per unit of work (a language x a batch of files) at most.")
    max_unit_bytes: int = Field(
        256 * 2**20, ge=1, description="Input bytes per unit of work at most: small files are batched up to it, a larger file is "
        "split (JSONL and line/paragraph text at line starts, Parquet by row groups); 256 MiB-1 GiB at scale.")
    max_rows_per_file: int = Field(50_000, ge=1, description="Rows per output Parquet file at most.")
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    langid: LangIdConfig = Field(default_factory=LangIdConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    pii: PiiConfig = Field(default_factory=PiiConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    decontaminate: list[DecontaminateConfig] = Field(
        default_factory=list, description="Evaluation sets to keep out of the training data ([[ingest.decontaminate]]): "
        "documents sharing a word 13-gram with one of their lines are removed (reason evaluation_overlap).")

    @model_validator(mode="after")
    def _unique_sources(self) -> IngestConfig:
        names = [s.name for s in self.sources]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"source name {sorted(dup)[0]!r} is used twice; names must be unique")
        lists = [b.name for b in self.blocklists]
        dup = {n for n in lists if lists.count(n) > 1}
        if dup:
            raise ValueError(f"block list name {sorted(dup)[0]!r} is used twice; names must be unique")
        undated = [s.name for s in self.sources if s.dump is None]
        if self.dedup.scope == "dump" and undated:
            raise ValueError(f"[ingest.dedup] scope = \"dump\" needs each source's dump, and source {undated[0]!r} has "
                             "none: add dump = \"<crawl id>\" to its [[ingest.sources]] table, or choose scope = "
                             "\"source\" or \"language\"")
        return self


_resolve_path = resolve_config_path


def _check_placeholders(v: str | None) -> None:
    if v is not None:
        unknown = set(re.findall(r"{(\w+)}", v)) - _PLACEHOLDERS
        if unknown:
            raise ValueError(f"unknown placeholder {{{sorted(unknown)[0]}}}; allowed: {', '.join(sorted(_PLACEHOLDERS))}")

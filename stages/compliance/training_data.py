"""Facts about the training content, from the ingest, tokenizer and shards records.

Why shared: the public summary, Annex XI 2(c), Annex XII 2(c) and the Model Documentation Form all describe
the same data; reading it in one place keeps their figures identical.

Which count is "the training data size": the tokens of the training split in the shards record
(`statistics.totals.train_tokens`): the text the model is trained from, once each (the validation split is
held out; the mixture may repeat or subsample languages, which is reported as mixture weights).
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.compliance.facts import Fact, Records, Traced, constant, derive, open_fact, show
from stages.compliance.numbers import percent, sci, text_size_bin, with_sig2
from stages.ingest.record import SOURCE_KEY
from stages.ingest.record import BLOCKLIST, EMPTY, EXACT_DUP, LANGID_REASONS, NEAR_DUP, OPT_OUT, PII_KINDS

CATEGORY_LABELS = {
    "public_dataset": "publicly available dataset",
    "private_licensed": "private dataset licensed from rightsholders",
    "private_third_party": "private dataset obtained from another third party",
    "crawled": "crawled by or for the provider",
    "user_data": "user data",
    "synthetic": "synthetic data",
    "other": "other source",
}
MODALITY_SOURCE = "pipeline code: the ingest stage reads text only (stages/ingest/readers.py)"


def source_key(field: str) -> str:
    """The declaration a per-source field copies, for any source: run config [[ingest.sources]] ... <field>."""
    return f"run config {SOURCE_KEY.format(key='<source>')} {field}"


@dataclass(frozen=True)
class SourceRecord:
    name: str
    record: Traced  # ingest statistics.per_source.<name>

    def fact(self, key: str, fmt=show) -> Fact:
        """A field of the source's record, e.g. "licence" or "opt_out.protocols"."""
        field = self.record
        for k in key.split("."):
            field = getattr(field, k)
        return field.fact(fmt)

    def count(self, key: str) -> Fact:
        """A counter entry; counters record only what occurred, so an absent key is 0."""
        entry = self.record.counts[key]
        value = int(entry.value or 0)
        return Fact(value, show(value), (entry.where,), "" if entry.value is not None else "absent from the counter: 0")

    @property
    def category(self) -> str:
        return self.record.category.value or "other"


def version(src: SourceRecord) -> Fact:
    """The version read from the data where the reader can tell (evidence), else the declared one."""
    found = src.record.version_found
    if found.value:
        return found.fact()
    if src.record.version.value:
        return src.fact("version")
    return Fact("", "not declared", (src.record.version.cited,))


def content_period(src: SourceRecord) -> Fact:
    period = src.record.content_period
    return period.fact() if period.value else Fact("", "not declared", (period.cited,))


def sources(rec: Records) -> list[SourceRecord]:
    per_source = rec.ingest.per_source
    return [SourceRecord(name, per_source[name]) for name in sorted(per_source.keys())]


def sources_fact(rec: Records) -> Fact:
    """The source list itself (for yes/no answers); open without an ingest record."""
    return rec.ingest.per_source.fact(lambda v: ", ".join(sorted(v)) or "none")


def category_used(rec: Records, category: str) -> Fact:
    per_source = sources_fact(rec)
    return derive(lambda ps: any(r["category"] == category for r in ps.values()), per_source,
                  method=f"whether any source has category {category!r}")


def category_modality(rec: Records, category: str) -> Fact:
    """The template asks the modality of each category: text when the category is used, else not applicable."""
    used = category_used(rec, category)
    return derive(lambda u, m: m if u else "not applicable (no data of this category)", used, modality(),
                  method=f"text (the pipeline reads text only) when a source has category {category!r}", fmt=str)


def crawled_domain_bytes(rec: Records) -> Fact:
    """Bytes read per registrable domain over the crawled sources, before any filter (template 2.3's ranking)."""
    crawled = [s for s in sources(rec) if s.category == "crawled"]
    if not crawled:
        return open_fact(f"{rec.ingest.per_source.where}.<source>.domain_bytes_in (no crawled source)")
    facts = [s.record.domain_bytes_in.fact() for s in crawled]

    def merged(*per_source: dict) -> dict:
        out: dict[str, int] = {}
        for d in per_source:
            for k, v in d.items():
                out[k] = out.get(k, 0) + int(v)
        return out

    return derive(merged, *facts, method="bytes read per URL domain, summed over the crawled sources, before filtering")


def tokenizer_text(rec: Records) -> Fact:
    """Which tokenizer counted the tokens of 1.3 (the template asks)."""
    kind, vocab = rec.tokenizer.model.type.fact(), rec.tokenizer.model.vocab_size.fact()
    return derive(lambda t, v: f"the run's own SentencePiece {t.upper()} tokenizer with {v:,} pieces (tokenizer/tokenizer.model), "
                               "the one the model is trained with", kind, vocab, method="tokenizer statistics.model", fmt=str)


def description(rec: Records, name: str) -> Fact:
    d = rec.settings.data.source_descriptions
    if d is None or name not in d:
        return open_fact(f"set [compliance.data] source_descriptions.{name} in the run config (what the source contains)")
    return Fact(d[name], d[name], (f"run config [compliance.data] source_descriptions.{name}",))


def train_tokens(rec: Records) -> Fact:
    return rec.shards.totals.train_tokens.fact(with_sig2)


def size_bin(rec: Records) -> Fact:
    return derive(text_size_bin, train_tokens(rec), method="training-split tokens binned by the template's edges", fmt=str)


def latest_collection(rec: Records) -> Fact:
    """MM/YYYY of the newest `collected` date over all sources."""
    dates = [(s.record.collected.value, s.record.collected.cited) for s in sources(rec) if s.record.collected.value]
    if not dates:
        return open_fact(f"{source_key('collected')} (no source declares a date)")
    newest, where = max(dates)
    y, m = newest[:4], newest[5:7]
    return Fact(f"{m}/{y}", f"{m}/{y}", (where,), "the latest collection date over all sources")


def languages(rec: Records) -> list[str]:
    return sorted(rec.shards.per_language.keys())


def language_rows(rec: Records) -> list[list[Fact]]:
    """Per language: tokens in the training split, their share, the mixture weight, documents kept."""
    total = train_tokens(rec)
    rows = []
    for lang in languages(rec):
        tokens = rec.shards.per_language[lang].train_tokens.fact()
        share = derive(lambda t, n: t / n if n else None, tokens, total,
                       method="train_tokens of the language / statistics.totals.train_tokens", fmt=percent)
        weight = rec.shards.mixture.languages[lang].weight.fact(percent)
        docs = rec.ingest.per_language[lang].kept.fact()
        rows.append([constant(lang, source=rec.shards.per_language.where), tokens, share, weight, docs])
    return rows


def language_mix_text(rec: Records) -> Fact:
    """The languages as trained (the mixture's weights), each with its share of the training split beside it: the two
    differ whenever the mixture repeats or subsamples languages, and a reader must not take one for the other."""
    per_lang, weights, policy = rec.shards.per_language.fact(), rec.shards.mixture.languages.fact(), rec.shards.mixture.policy.fact()
    total = train_tokens(rec)

    def text(pl: dict, mix: dict, pol: str, n: int) -> str:
        rows = sorted(((lang, mix.get(lang, {}).get("weight", 0.0), v.get("train_tokens", 0) / n if n else 0.0)
                       for lang, v in pl.items()), key=lambda r: (-r[1], -r[2], r[0]))
        return (f"{len(pl)} languages, trained at the mixture's weights ({pol}; share of the training split in brackets): "
                + ", ".join(f"{lang} {percent(w)} ({percent(s)})" for lang, w, s in rows))

    return derive(text, per_lang, weights, policy, total,
                  method="mixture weight per language; its train_tokens / total train_tokens in brackets", fmt=str)


def passes(rec: Records) -> Fact:
    """Tokens seen in training against the training split: how often the model saw its text on average."""
    seen = rec.pretrain.training.tokens_seen.fact()
    return derive(lambda s, n: round(s / n, 4) if n else None, seen, train_tokens(rec),
                  method="tokens_seen / training-split tokens (the mixture decides which languages repeat)",
                  fmt=lambda p: f"{p:.2f} passes over the training split on average")


def documents_kept(rec: Records) -> Fact:
    return rec.ingest.totals.kept.fact(lambda v: f"{v:,} documents")


def data_points(rec: Records) -> Fact:
    kept, train, val = documents_kept(rec), train_tokens(rec), rec.shards.totals.val_tokens.fact()
    return derive(lambda k, t, v: {"documents": k, "train_tokens": t, "validation_tokens": v}, kept, train, val,
                  method="documents kept by ingest; tokens of the training and validation splits",
                  fmt=lambda d: f"{d['documents']:,} documents; {d['train_tokens']:,} training tokens ({sci(d['train_tokens'])}); "
                                f"{d['validation_tokens']:,} validation tokens")


def provenance_text(rec: Records) -> Fact:
    """One line per source: name, category, licence, where from."""
    per_source = sources_fact(rec)

    def text(ps: dict) -> str:
        parts = []
        for name, r in sorted(ps.items()):
            where = r.get("repo") or r.get("homepage") or "no link recorded"
            parts.append(f"{name} ({CATEGORY_LABELS.get(r.get('category'), r.get('category'))}; licence {r.get('licence') or 'not declared'}; "
                         f"{where}; collected {r.get('collected')})")
        return "; ".join(parts) or "no sources"

    return derive(text, per_source, method="ingest per-source records", fmt=str)


def rehydration_text(rec: Records) -> Fact:
    """Whether the training split repeats documents by their duplicate cluster size, and what that added."""
    if not rec.has("shards"):
        return rec.shards.rehydration.fact()
    r = rec.shards.rehydration
    if r.value is None:
        return Fact("none", "none: every training document is in the training split once", (r.where,),
                    "rehydration absent in the shards record")
    rows, table = r.rows.value, r.table.value

    def text(rows_: list, added: int, tokens: int) -> str:
        which = "FineWeb-2's published table" if table == "fineweb-2" else "the provider's table"
        spans = ", ".join(f"{_size_span(rows_, i)} -> {c}" for i, (_, c) in enumerate(rows_))
        return (f"each kept document is written into the training split as many times as {which} gives for the size "
                f"of its duplicate cluster (cluster size -> copies: {spans}): {added:,} documents and {tokens:,} tokens "
                "added, included in the training-split tokens")

    return derive(text, r.rows.fact(), r.docs_added.fact(), r.tokens_added.fact(),
                  method="the shards record's rehydration", fmt=str)


def _size_span(rows: list[list[int]], i: int) -> str:
    """Row i's cluster sizes: "5-99", "2", or "1000+" for the last row."""
    lo = rows[i][0]
    if i == len(rows) - 1:
        return f"{lo}+"
    hi = rows[i + 1][0] - 1
    return f"{lo}-{hi}" if hi > lo else str(lo)


def curation_text(rec: Records) -> Fact:
    """The curation steps as configured for ingest, with what each removed."""
    cfg = rec.manifest_field("ingest", "config")
    per_filter = rec.ingest.per_filter.fact()

    def text(c: dict, pf: dict) -> str:
        removed = sum(v for v in pf.values() if isinstance(v, int))
        langid, dedup, pii, norm = c.get("langid", {}), c.get("dedup", {}), c.get("pii", {}), c.get("normalize", {})
        not_quality = {EMPTY, OPT_OUT, BLOCKLIST, *LANGID_REASONS, EXACT_DUP, NEAR_DUP}
        quality = sum(v for k, v in pf.items() if k not in not_quality)
        lists = c.get("blocklists") or []
        steps = [
            f"Unicode {norm.get('form', '?')} normalisation" + (", mojibake repair" if norm.get("fix_mojibake") else ""),
            f"opt-out domains dropped ({pf.get(OPT_OUT, 0):,} documents)",
            (f"URL/domain block lists {', '.join(b['name'] for b in lists)} ({pf.get(BLOCKLIST, 0):,} documents removed)"
             if lists else "no URL/domain block list"),
            f"language identification (cld2, min score {langid.get('min_score')}; "
            f"{sum(pf.get(k, 0) for k in LANGID_REASONS):,} documents removed)",
            f"Gopher/FineWeb-2 quality filters ({quality:,} documents removed)",
            "PII redaction (" + ", ".join(k for k in PII_KINDS if pii.get(k)) + ")" if pii.get("enabled") else "no PII redaction",
            f"deduplication: exact {'on' if dedup.get('exact') else 'off'}, MinHash near-duplicates "
            f"{'on (threshold ' + str(dedup.get('threshold')) + ')' if dedup.get('near') else 'off'}, "
            f"{SCOPE_WORDS.get(dedup.get('scope', 'language'), '?')} "
            f"({pf.get(EXACT_DUP, 0) + pf.get(NEAR_DUP, 0):,} documents removed)",
        ]
        return "; ".join(steps) + f". {removed:,} documents removed in all."

    code = constant("ingest chain", source="pipeline code: stages/ingest/ (normalize.py, blocklist.py, langid.py: cld2, quality.py: "
                                           "Gopher/FineWeb-2 filters, pii.py, minhash.py)")
    return derive(lambda c, pf, _: text(c, pf), cfg, per_filter, code, method="ingest config and statistics.per_filter", fmt=str)


SCOPE_WORDS = {"language": "across all sources of each language", "source": "within each source of each language",
               "dump": "within each crawl dump of each language"}  # [ingest.dedup] scope


def filter_rows(rec: Records) -> list[list[Fact]]:
    per_filter = rec.ingest.per_filter
    return [[constant(k, source=per_filter.where), per_filter[k].fact()] for k in per_filter.keys()]


def pii_rows(rec: Records) -> list[list[Fact]]:
    """Per kind of personal data: whether redaction was on, and how many were redacted."""
    rows = []
    counts = rec.ingest.pii_redactions
    for kind in PII_KINDS:
        enabled = derive(lambda on, k: bool(on and k), rec.manifest_field("ingest", "config.pii.enabled"),
                         rec.manifest_field("ingest", f"config.pii.{kind}"), method="config.pii.enabled and the kind's switch")
        if rec.has("ingest"):
            n = int(counts[kind].value or 0)
            count = Fact(n, show(n), (counts[kind].where,), "" if counts[kind].value is not None else "absent from the counter: 0")
        else:
            count = counts[kind].fact()
        rows.append([constant(kind, source="stages/ingest/record.py PII_KINDS"), enabled, count])
    return rows


def bias_measures(rec: Records) -> Fact:
    """What the records show about identifiable biases across languages: tokenizer parity, per-language evaluation."""
    metrics = rec.tokenizer.metrics.fact()
    evaluated = rec.evaluate.per_language.fact()
    flagged = rec.evaluate.flagged.fact()
    tok_policy = rec.tokenizer.sample.policy.fact()
    mix_policy = rec.shards.mixture.policy.fact()
    fair = rec.tokenizer.fairness.fact()
    balance = rec.tokenizer.balance.fact()

    def text(m: dict, ev: dict, fl: list, tp: str, mp: str, fa: dict | None, bal: dict | None) -> str:
        parities = {lang: v.get("parity") for lang, v in m.items() if isinstance(v, dict) and v.get("parity") is not None}
        s = f"Language balance: {tp} sampling of the tokenizer's training text, {mp} training mixture. "
        method = bal.get("method") if isinstance(bal, dict) else None
        if method and method != "none":
            rounds = len(bal.get("rounds") or [])
            s += (f"The tokenizer was trained for parity ([tokenizer.balance] method {method}"
                  + (f", {rounds} weight round(s), round {bal.get('chosen_round')} kept" if "weights" in method else "")
                  + (f", {sum((bal.get('merges') or {}).get('chosen_for', {}).values())} merges chosen for the "
                     "worst-compressed language" if "merges" in method and isinstance(bal.get("merges"), dict) else "")
                  + "). ")
        if parities:
            worst = max(parities, key=parities.__getitem__)
            s += f"Tokenizer parity (tokens relative to English on parallel text) measured for {len(parities)} languages, worst {worst} {parities[worst]:.2f}"
            if isinstance(fa, dict) and fa.get("parity_gini") is not None:
                s += f"; Gini coefficient of the per-language token counts {fa['parity_gini']:.3f} (0 = equal cost)"
            s += ". "
            if isinstance(fa, dict) and fa.get("mean_fertility") is not None:
                s += f"Mean fertility {fa['mean_fertility']:.2f} tokens per word. "
        else:
            s += "Tokenizer parity not measured (no parallel text configured). "
        bpb = {lang: v.get("val_bits_per_byte") for lang, v in ev.items() if isinstance(v, dict) and isinstance(v.get("val_bits_per_byte"), (int, float))}
        s += f"Validation loss and bits per byte evaluated per language for {len(ev)} languages"
        if bpb:
            best, worst = min(bpb, key=bpb.__getitem__), max(bpb, key=bpb.__getitem__)
            s += f" (bits per byte: best {best} {bpb[best]:.3f}, worst {worst} {bpb[worst]:.3f})"
        s += f"; flagged for a regression between evaluated checkpoints: {', '.join(fl)}." if fl else "; no language flagged for a regression."
        return s

    return derive(text, metrics, evaluated, flagged, tok_policy, mix_policy, fair, balance,
                  method="tokenizer statistics.sample.policy, metrics.<lang>.parity, fairness and balance; shards statistics.mixture.policy; evaluate statistics.per_language.<lang>.val_bits_per_byte "
                         "and flagged", fmt=str)


def unsuitable_measures(rec: Records) -> Fact:
    """Which checks reject unsuitable sources and documents, with what they rejected."""
    per_filter = rec.ingest.per_filter.fact()
    per_source = sources_fact(rec)

    def text(pf: dict, ps: dict) -> str:
        lang = pf.get("lang_not_eu", 0) + pf.get("lang_low_score", 0) + pf.get("lang_mismatch", 0)
        return (f"Every source is recorded with its licence, category, collection date and opt-out handling ({len(ps)} source(s)). "
                f"Documents are rejected when their domain reserved TDM rights ({pf.get('tdm_opt_out', 0):,}), when their URL or "
                f"domain is on a configured block list ({pf.get('blocklist', 0):,}), when they are not in "
                f"an EU language or not in the language declared by the source ({lang:,}), when they are empty ({pf.get('empty', 0):,}) "
                f"or fail a quality heuristic for boilerplate, spam, lists or repetition (see curation); a source whose documents are "
                f"mostly rejected shows in the per-source counts of the ingest record.")

    return derive(text, per_filter, per_source, method="ingest statistics.per_filter and per_source", fmt=str)


def modality() -> Fact:
    return constant("text", source=MODALITY_SOURCE)


def blocklist_rows(rec: Records) -> list[list[Fact]]:
    """Per block list that ran at ingest: its name, what it is, entries, documents removed."""
    lists = rec.ingest.blocklists
    rows = []
    for name in lists.keys():
        b = lists[name]
        rows.append([constant(name, source=lists.where), b.description.fact() if b.description.value else
                     Fact(b.path.value, b.path.value.rsplit("/", 1)[-1], (b.path.where,)),
                     b.entries.fact(), b.removed.fact(), b.sha256.fact(lambda h: h[:16] + "...")])
    return rows


def selection_text(rec: Records) -> Fact:
    """How the data was obtained (each source's reader) and selected (filters, then the training mixture)."""
    per_source = sources_fact(rec)
    policy = rec.shards.mixture.policy.fact()
    max_epochs = rec.shards.mixture.max_epochs.fact()

    def text(ps: dict, pol: str, ep: float) -> str:
        read = ", ".join(f"{n} ({r.get('kind')}{', ' + r['repo'] if r.get('repo') else ''})" for n, r in sorted(ps.items()))
        return (f"Obtained by reading the configured sources: {read}. Selected by the ingest filters (see curation), then "
                f"sampled for training by the {pol} language mixture, each language repeated at most {ep:g} times.")

    return derive(text, per_source, policy, max_epochs, method="ingest per-source kinds; shards statistics.mixture", fmt=str)


def validation_text(rec: Records) -> Fact:
    """The testing/validation data: the held-out split and what the evaluation stage measured on it."""
    val = rec.shards.totals.val_tokens.fact()
    val_docs = rec.shards.totals.val_docs.fact()
    sets = rec.evaluate.eval_sets.fact()
    step = rec.evaluate.latest_step.fact()
    code = constant("split by id hash", source="pipeline code: stages/shards/tokenize.py split_hash (train/validation by document id)")
    return derive(lambda v, d, s, st, _: f"Validation split held out by a hash of the document id: {d:,} documents, {v:,} tokens. "
                                         f"Evaluation sets: {', '.join(map(str, s)) or 'none'}; latest checkpoint evaluated: step {st:,}.",
                  val, val_docs, sets, step, code, method="shards statistics.totals; evaluate statistics", fmt=str)

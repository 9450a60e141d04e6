"""The ingest stage: declared sources -> clean, deduplicated Parquet per language, with a full record.

Waves of units on the task runner, each unit bounded, crash-safe and skipped when done:
    documents   language x source x pieces of input files (<= max_unit_bytes; inputs.py): the document chain
                (process.py) -> kept.parquet (rows + dedup keys) and removed parts
    signatures  per documents unit: its dedup keys by band partition (dedup/signatures.py)
    merge-NNN   only a group of more documents units than dedup.fan_in: runs of at most fan_in keys folders merged
                into one, in levels until at most fan_in are left (dedup/merge.py)
    buckets     per dedup group x band partition: exact duplicates and verified near-duplicate pairs (dedup/exact.py,
                dedup/buckets.py); partitions = ceil(kept documents of the group / dedup.partition_docs)
    clusters    per dedup group: which documents in pairs are dropped, for whom (dedup/clusters.py)
    gather-NNN  only a group of more partitions than dedup.fan_in: runs of at most fan_in partitions' drops merged,
                in levels, so a filter unit reads at most fan_in drops folders (dedup/gather.py)
    filter      per documents unit: its kept parts minus duplicates, duplicates with reason and duplicate_of, its
                kept bytes per domain (dedup/filter.py)
A dedup group is the documents compared with each other ([ingest.dedup] scope): a language, or one source or
one dump of it. A document's place in its group is (unit rank, row), the rank being the unit's position among
the group's documents units in id order, so the first occurrence in that order is kept whatever ran where and when.
finalize only links the units' parts into data/<lang>/ and rejected/<lang>/ in unit order and sums the record.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterator

from pipeline import progress
from pipeline.manifest import Manifest
from pipeline.stage import InputError, StageContext, StageError, StageOutcome, Step, StepResults, Unit, UnitStage
from stages.ingest.config import IngestConfig
from stages.ingest.inputs import HubUnavailable, hub_root, list_files, split_files
from stages.ingest.process import KEPT, InputFailed, process_unit
from stages.ingest.readers import version_found
from stages.ingest.reasons import ALL_REASONS, EXACT_DUP, NEAR_DUP
from stages.ingest.record import (BlocklistRecord, BucketRecord, ClusterRecord, IngestRecord, LanguageCounts,
                                  MergeLevels, OptOut, SourceRecord, Totals)
from stages.ingest.units import (BUCKETS, CLUSTERS, COMPONENTS, COMPONENTS_MERGE, DOCUMENTS, FILTER, GATHER, MERGE,
                                 SIGNATURES, BucketsPayload, BucketsResult, ClustersPayload, ClustersResult,
                                 DocumentsPayload, DocumentsResult, DocumentStats, FilterResult, GatherPayload,
                                 GatherResult, MergePayload, MergeResult, PartFile, Piece,
                                 Problem, RankedUnitPayload, RoundMergePayload, RoundPayload, RoundResult,
                                 SignaturesResult)

Ctx = StageContext[IngestConfig]
EXACT_DIR, PAIRS_DIR = "exact", "pairs"  # a buckets unit's two outputs (steps 2a and 2b of dedup/)
MAX_UNITS = 100_000  # per language and source: unit ids have 5 digits (their order is the dedup order)
# Pieces of one file at most: each piece after the first finds its first line from the file's start (line numbers
# are part of document ids), so a file cut into p pieces is read ~p/2 times; a 50 MB file at max_unit_bytes = 1000
# planned 50,813 units, nearly all empty.
MAX_PIECES_PER_FILE = 1000


class IngestStage(UnitStage[IngestConfig]):
    name = "ingest"
    code_version = "5"
    config_model = IngestConfig
    steps = (DOCUMENTS, SIGNATURES, MERGE, BUCKETS, COMPONENTS, COMPONENTS_MERGE, CLUSTERS, GATHER, FILTER)

    def iter_steps(self, ctx: Ctx, done: StepResults) -> Iterator[Step[Any, Any]]:
        """The steps in order, with as many merge levels as the group with the most documents units needs (merge-001
        merges step-1 folders, each level the one before), and as many rounds of components as the groups
        clustered in rounds need: components-000 scatters their pairs by node, and a round is planned while one of
        them has not found its star forest."""
        yield from (DOCUMENTS, SIGNATURES)
        levels = max((len(self._levels(ctx, uids)) for uids in self._ranked_units(ctx, done).values()), default=0)
        for level in range(1, levels + 1):
            yield MERGE.round(level)
        yield BUCKETS
        rnd = 0
        while unconverged := self._unconverged(ctx, done):
            yield COMPONENTS.round(rnd)
            if self._unconverged(ctx, done):  # another round follows: it opens at most fan_in folders of this one
                levels = max(len(self._round_levels(ctx, partitions)) for partitions in unconverged.values())
                for level in range(1, levels + 1):
                    yield COMPONENTS_MERGE.round(rnd * 100 + level)
            rnd += 1
        yield CLUSTERS
        in_rounds = self._in_rounds(ctx, done)
        levels = max((len(self._gather_levels(ctx, key in in_rounds, self._partitions(ctx, done, uids)))
                      for key, uids in self._ranked_units(ctx, done).items()), default=0)
        for level in range(1, levels + 1):
            yield GATHER.round(level)
        yield FILTER

    @staticmethod
    def _gather_levels(ctx: Ctx, in_rounds: bool, partitions: int) -> list[int]:
        """The gather levels of a group's drops: none when its filter units read at most fan_in drops folders,
        or only its one clusters folder (exact dedup off, near drops not per partition)."""
        from stages.ingest.dedup.merge import merge_levels

        cfg = ctx.settings.dedup
        if not (cfg.exact or (cfg.near and in_rounds)):
            return []
        return merge_levels(partitions, cfg.fan_in)

    def _unconverged(self, ctx: Ctx, done: StepResults) -> dict[str, int]:
        """The groups clustered in rounds whose last round has not found a star forest: their partitions."""
        return {group: partitions for (_, group), (_, partitions) in self._in_rounds(ctx, done).items()
                if self._converged_round(done, group, partitions) is None}

    @staticmethod
    def _round_levels(ctx: Ctx, partitions: int) -> list[int]:
        from stages.ingest.dedup.merge import merge_levels

        return merge_levels(partitions, ctx.settings.dedup.fan_in)

    def _round_inputs(self, ctx: Ctx, group: str, partitions: int, rnd: int) -> list[Path]:
        """The folders holding round `rnd`'s edges of a group for the round after it: the round's own, or those of
        its last merge level."""
        levels = self._round_levels(ctx, partitions)
        step = COMPONENTS_MERGE.round(rnd * 100 + len(levels)).name if levels else COMPONENTS.round(rnd).name
        return [ctx.unit_dir(step, f"{group}-{q:05d}") for q in range(levels[-1] if levels else partitions)]

    # --- planning -----------------------------------------------------------------------------------
    def input_signature(self, ctx: Ctx) -> Any:
        """Size and modification time of every local input file: a changed corpus makes the stage stale. A Hub
        repo enters by name, config and revision (pin a revision to make it exact): `europa status` must not
        list the Hub."""
        sig: list[Any] = [_decontaminate_signature(ctx)]
        for source in ctx.settings.sources:
            hub_local = source.kind == "huggingface" and hub_root(source)[2]
            for lang in self._languages(ctx, source):
                if source.kind == "huggingface" and not hub_local:
                    sig.append((source.repo, source.revision, source.hf_config, source.split, lang))
                    continue
                try:
                    files, _ = list_files(source, lang, exclude=ctx.run_dir.path)
                except (InputError, OSError, ValueError) as e:  # reported when planning; a signature never fails
                    sig.append((source.name, lang, str(e)))
                    continue
                root = hub_root(source)[1] if hub_local else ""
                for f in files:
                    try:
                        st = os.stat(os.path.join(root, f.ref))
                        sig.append((f.key, st.st_size, st.st_mtime_ns))
                    except OSError:
                        sig.append((f.key, None, None))
            if source.opt_out.domains_file:
                st = os.stat(source.opt_out.domains_file) if os.path.exists(source.opt_out.domains_file) else None
                sig.append((source.opt_out.domains_file, st and st.st_size, st and st.st_mtime_ns))
        sig.extend(_blocklist_signature(ctx.settings))
        return sig

    def plan(self, ctx: Ctx, step: Step[Any, Any], done: StepResults) -> list[Unit]:
        if step is DOCUMENTS:
            _check_decontaminate(ctx)
            return self._plan_documents(ctx)
        documents = DOCUMENTS.results(done)
        units: list[Unit] = []
        rnd = COMPONENTS.round_of(step.name)
        level = MERGE.round_of(step.name)
        if (number := COMPONENTS_MERGE.round_of(step.name)) is not None:
            return self._plan_round_merge(ctx, done, *divmod(number, 100))
        gather_level = GATHER.round_of(step.name)
        in_rounds = (self._in_rounds(ctx, done) if step in (CLUSTERS, FILTER) or rnd is not None or gather_level is not None
                     else {})
        for (lang, group), uids in self._ranked_units(ctx, done).items():
            partitions = self._partitions(ctx, done, uids)
            kept = {uid: documents[uid].stats.kept for uid in uids}  # what each step's cost follows
            rounds = (lang, group) in in_rounds
            key_step, key_units = self._key_units(ctx, group, uids)
            gathered = self._gather_levels(ctx, rounds, partitions)
            if level is not None:
                units += self._plan_merge(ctx, lang, group, uids, level, partitions, kept)
            elif gather_level is not None:
                units += self._plan_gather(ctx, lang, group, gather_level, gathered, partitions, rounds, kept)
            elif step is SIGNATURES or step is FILTER:
                units += [step.unit(uid, RankedUnitPayload(lang=lang, group=group, rank=rank, partitions=partitions,
                                                           kept=kept[uid], near_parts=partitions if rounds else 0,
                                                           gathered=gathered[-1] if gathered and step is FILTER else 0))
                          for rank, uid in enumerate(uids)]
            elif rnd is not None and rounds:
                if self._converged_round(done, group, partitions) is None:  # else its labels are final
                    units += [step.unit(f"{group}-{p:05d}", RoundPayload(
                        lang=lang, group=group, partition=p, partitions=partitions, round=rnd,
                        kept=sum(kept.values()) / partitions)) for p in range(partitions)]
            elif step is CLUSTERS and ctx.settings.dedup.near and rounds:
                converged = self._converged_round(done, group, partitions)
                units += [CLUSTERS.unit(f"{group}-{p:05d}", ClustersPayload(
                    lang=lang, group=group, partitions=partitions, units=key_units, key_step=key_step,
                    kept=sum(kept.values()) // partitions, partition=p, rounds=converged)) for p in range(partitions)]
            elif step is BUCKETS:
                units += [BUCKETS.unit(f"{group}-{p:05d}", BucketsPayload(
                    lang=lang, group=group, partition=p, partitions=partitions, units=key_units, key_step=key_step,
                    kept=sum(kept.values()) / partitions)) for p in range(partitions)]
            elif step is CLUSTERS and ctx.settings.dedup.near:
                units.append(CLUSTERS.unit(group, ClustersPayload(lang=lang, group=group, partitions=partitions,
                                                                  units=key_units, key_step=key_step,
                                                                  kept=sum(kept.values()))))
        return units

    @staticmethod
    def _levels(ctx: Ctx, uids: list[str]) -> list[int]:
        from stages.ingest.dedup.merge import merge_levels

        return merge_levels(len(uids), ctx.settings.dedup.fan_in)

    def _key_units(self, ctx: Ctx, group: str, uids: list[str]) -> tuple[str, list[str]]:
        """The step and units whose folders hold a group's keys for the buckets and clusters steps: its
        documents units' step-1 folders, or the folders of its last merge level."""
        levels = self._levels(ctx, uids)
        if not levels:
            return SIGNATURES.name, uids
        return MERGE.round(len(levels)).name, [f"{group}-{i:05d}" for i in range(levels[-1])]

    def _merge_records(self, ctx: Ctx, done: StepResults) -> dict[str, MergeLevels]:
        in_rounds, out = self._in_rounds(ctx, done), {}
        for key, uids in self._ranked_units(ctx, done).items():
            partitions = self._partitions(ctx, done, uids)
            levels = MergeLevels(keys=self._levels(ctx, uids),
                                 rounds=self._round_levels(ctx, partitions) if key in in_rounds else [],
                                 drops=self._gather_levels(ctx, key in in_rounds, partitions))
            if levels.keys or levels.rounds or levels.drops:
                out[key[1]] = levels
        return out

    def _plan_gather(self, ctx: Ctx, lang: str, group: str, level: int, levels: list[int], partitions: int,
                     rounds: bool, kept: dict[str, int]) -> list[Unit]:
        """Level `level`'s gather units of a group: runs of fan_in partitions' drops folders (level 1) or of the
        level below's; unit i holds the partitions from i * fan_in^level."""
        if level > len(levels):
            return []
        fan_in, step = ctx.settings.dedup.fan_in, GATHER.round(level)
        below = partitions if level == 1 else levels[level - 2]
        span = fan_in ** level
        return [step.unit(f"{group}-{i:05d}", GatherPayload(
            lang=lang, group=group, level=level, first_partition=i * span,
            inputs=min(fan_in, below - i * fan_in), partitions=partitions, near=rounds,
            kept=sum(kept.values()) * min(span, partitions - i * span) / partitions)) for i in range(levels[level - 1])]

    def _gather_dirs(self, ctx: Ctx, group: str, level: int, first: int, count: int,
                     near: bool) -> tuple[list[Path], list[Path]]:
        """(exact, near) drops folders a gather unit of `level` reads: `count` of the level below from `first`."""
        if level == 1:
            exact = [ctx.unit_dir(BUCKETS.name, f"{group}-{q:05d}") / EXACT_DIR for q in range(first, first + count)]
            return (exact if ctx.settings.dedup.exact else [],
                    [ctx.unit_dir(CLUSTERS.name, f"{group}-{q:05d}") for q in range(first, first + count)] if near else [])
        j = first // ctx.settings.dedup.fan_in ** (level - 1)
        dirs = [ctx.unit_dir(GATHER.round(level - 1).name, f"{group}-{k:05d}") for k in range(j, j + count)]
        return dirs if ctx.settings.dedup.exact else [], dirs if near else []

    def _plan_round_merge(self, ctx: Ctx, done: StepResults, rnd: int, level: int) -> list[Unit]:
        """Level `level`'s merges of round `rnd`'s folders, for each group that ran that round and goes on."""
        units: list[Unit] = []
        fan_in, step = ctx.settings.dedup.fan_in, COMPONENTS_MERGE.round(rnd * 100 + level)
        ran = done.get(COMPONENTS.round(rnd).name, {})
        for (lang, group), (_, partitions) in self._in_rounds(ctx, done).items():
            levels = self._round_levels(ctx, partitions)
            if level > len(levels) or f"{group}-00000" not in ran or self._converged_round(done, group, partitions) \
                    is not None:
                continue
            below_step = COMPONENTS.round(rnd).name if level == 1 else COMPONENTS_MERGE.round(rnd * 100 + level - 1).name
            below = [f"{group}-{q:05d}" for q in range(partitions if level == 1 else levels[level - 2])]
            units += [step.unit(f"{group}-{i:05d}", RoundMergePayload(
                lang=lang, group=group, round=rnd, level=level, input_step=below_step,
                inputs=below[i * fan_in:(i + 1) * fan_in], partitions=partitions,
                kept=float(len(below[i * fan_in:(i + 1) * fan_in])))) for i in range(levels[level - 1])]
        return units

    def _plan_merge(self, ctx: Ctx, lang: str, group: str, uids: list[str], level: int, partitions: int,
                    kept: dict[str, int]) -> list[Unit]:
        """Level `level`'s merge units of a group: runs of fan_in folders of the level below; unit i holds the
        ranks from i * fan_in^level."""
        levels, fan_in = self._levels(ctx, uids), ctx.settings.dedup.fan_in
        if level > len(levels):
            return []
        below = uids if level == 1 else [f"{group}-{i:05d}" for i in range(levels[level - 2])]
        below_step = SIGNATURES.name if level == 1 else MERGE.round(level - 1).name
        span = fan_in ** level  # ranks per unit of this level
        step = MERGE.round(level)
        return [step.unit(f"{group}-{i:05d}", MergePayload(
            lang=lang, group=group, level=level, input_step=below_step, inputs=below[i * fan_in:(i + 1) * fan_in],
            first_rank=i * span, partitions=partitions, kept=sum(kept[u] for u in uids[i * span:(i + 1) * span])))
            for i in range(levels[level - 1])]

    def preflight(self, ctx: Ctx) -> None:
        """The documents plan, made once before any engine starts: no sources, a missing block list, an
        unreadable input folder, a required source with no file, a file cut into too many pieces are exit 2 at
        once. It reads no input; a Hub source is listed (the plan lists it again)."""
        _blocklist_signature(ctx.settings)
        _check_decontaminate(ctx)
        self._plan_documents(ctx)
        inside = [s.name for s in ctx.settings.sources if s.path and _reaches_into(s.path, ctx.run_dir.path)]
        if inside:
            progress.note(self.name, f"source {inside[0]}'s path reaches into the run directory {ctx.run_dir.path}; "
                                     "the run's own files there are not read as input")

    def _plan_documents(self, ctx: Ctx) -> list[Unit]:
        settings = ctx.settings
        if not settings.sources:
            raise InputError("stage ingest: the config declares no source; add an [[ingest.sources]] table "
                             "(configs/demo.toml has one)")
        units = []
        for source in settings.sources:
            for lang in self._languages(ctx, source):
                try:
                    files, pattern = list_files(source, lang, exclude=ctx.run_dir.path)
                    problem = ("no_inputs", f"source {source.name}: no input for language {lang} ({pattern!r} matched no "
                                            f"file; the source is optional)")
                except HubUnavailable as e:  # a Hub repo that cannot be listed: an optional one is recorded, unless
                    if not source.optional or e.transient:  # it may work on a second try (then planning fails)
                        raise
                    files, pattern, problem = [], source.repo or "", ("dataset_unavailable", f"{e} (the source is optional)")
                if not files:
                    if not source.optional:
                        raise InputError(
                            f"stage ingest: source {source.name} yields nothing for language {lang}: {pattern!r} matched no "
                            f"file; fix the source's path / hf_config, take {lang} out of its languages, or set "
                            f"optional = true to record it and go on")
                    units.append(DOCUMENTS.unit(f"{lang}-{source.name}-00000", DocumentsPayload(
                        lang=lang, source=source.name, pieces=[], pattern=pattern, problem=problem)))
                    continue
                pieces = split_files(files, settings.max_unit_bytes)
                _refuse_splinters(source.name, pieces, settings.max_unit_bytes)
                groups = [pieces] if source.max_documents else _pack(pieces, settings.max_unit_bytes, settings.files_per_unit)
                if len(groups) > MAX_UNITS:
                    raise InputError(f"stage ingest: source {source.name} makes {len(groups)} units for {lang} (at most "
                                     f"{MAX_UNITS:,}); raise [ingest] max_unit_bytes / files_per_unit")
                units += [DOCUMENTS.unit(f"{lang}-{source.name}-{i:05d}", DocumentsPayload(
                    lang=lang, source=source.name, pieces=group))
                    for i, group in enumerate(groups)]
        return units

    @staticmethod
    def _ranked_units(ctx: Ctx, done: StepResults) -> dict[tuple[str, str], list[str]]:
        """Per (language, dedup group), its documents units that read documents, in id order (their rank in the
        dedup order). The group is the language itself, or `<lang>-<source>` / `<lang>-dump-<dump>` by
        [ingest.dedup] scope: documents of different groups are never compared."""
        out: dict[tuple[str, str], list[str]] = {}
        for uid, r in sorted(DOCUMENTS.results(done).items()):
            if r.read_documents:
                out.setdefault((r.lang, dedup_group(ctx.settings, r.lang, r.source)), []).append(uid)
        return out

    def _in_rounds(self, ctx: Ctx, done: StepResults) -> dict[tuple[str, str], tuple[list[str], int]]:
        """The groups clustered in rounds (more verified pairs than cluster_unit_pairs): their documents units and
        partitions. Known once the buckets step is done."""
        cfg = ctx.settings.dedup
        buckets = BUCKETS.results(done)
        if not cfg.near or not buckets:
            return {}
        out = {}
        for key, uids in self._ranked_units(ctx, done).items():
            p = self._partitions(ctx, done, uids)
            pairs = sum(buckets[f"{key[1]}-{q:05d}"].pairs.verified for q in range(p))
            if pairs > cfg.cluster_unit_pairs:
                out[key] = (uids, p)
        return out

    @staticmethod
    def _converged_round(done: StepResults, group: str, partitions: int) -> int | None:
        """The round whose units of `group` all read a star forest, or None while there is none yet: the last
        round that has units of the group (a group converged has none in later rounds), its results read once."""
        ids = [f"{group}-{p:05d}" for p in range(partitions)]
        rnd, last = 1, None
        while (results := done.get(COMPONENTS.round(rnd).name)) is not None and ids[0] in results:
            rnd, last = rnd + 1, results
        return rnd - 1 if last is not None and all(last[i].violations == 0 for i in ids) else None

    @staticmethod
    def _partitions(ctx: Ctx, done: StepResults, uids: list[str]) -> int:
        documents = DOCUMENTS.results(done)
        kept = sum(documents[u].stats.kept for u in uids)
        return max(1, math.ceil(kept / ctx.settings.dedup.partition_docs))

    # --- one unit -----------------------------------------------------------------------------------
    def run_unit(self, ctx: Ctx, unit: Unit, out_dir: Path) -> Any:
        settings = ctx.settings
        if unit.step == DOCUMENTS.name:
            return self._documents(settings, DOCUMENTS.payload_of(unit), out_dir)
        cfg = settings.dedup
        if unit.step == SIGNATURES.name:
            from stages.ingest.dedup.signatures import write_signatures

            p = SIGNATURES.payload_of(unit)
            stats = write_signatures(ctx.unit_dir(DOCUMENTS.name, unit.id) / KEPT, out_dir, cfg, p.partitions)
            return SignaturesResult(lang=p.lang, **dict(stats))
        if (level := MERGE.round_of(unit.step)) is not None:
            from stages.ingest.dedup.merge import merge_key_folders

            m = MERGE.round(level).payload_of(unit)
            stats = merge_key_folders([ctx.unit_dir(m.input_step, u) for u in m.inputs], m.first_rank, out_dir, cfg,
                                      m.partitions)
            return MergeResult(lang=m.lang, group=m.group, **dict(stats))
        if unit.step == BUCKETS.name:
            from stages.ingest.dedup.buckets import find_candidate_pairs
            from stages.ingest.dedup.exact import find_exact_duplicates

            b = BUCKETS.payload_of(unit)
            step1 = [ctx.unit_dir(b.key_step, u) for u in b.units]
            exact = find_exact_duplicates(step1, b.partition, out_dir / EXACT_DIR, cfg, b.partitions)
            pairs = find_candidate_pairs(step1, b.partition, out_dir / PAIRS_DIR, cfg, b.partitions)
            return BucketsResult(lang=b.lang, exact=exact, pairs=pairs)
        if (rnd := COMPONENTS.round_of(unit.step)) is not None:
            from stages.ingest.dedup.components import scatter_pairs, star_round
            from stages.ingest.dedup.files import read_pair_chunks

            r = COMPONENTS.round(rnd).payload_of(unit)
            if rnd == 0:  # the pairs of one buckets unit, by node partition
                pairs_dir = ctx.unit_dir(BUCKETS.name, unit.id) / PAIRS_DIR
                stats = scatter_pairs(read_pair_chunks(pairs_dir), out_dir, r.partitions, partition=r.partition)
            else:
                stats = star_round(self._round_inputs(ctx, r.group, r.partitions, rnd - 1), r.partition, r.partitions,
                                   out_dir, rnd)
            return RoundResult(lang=r.lang, group=r.group, **dict(stats))
        if (number := COMPONENTS_MERGE.round_of(unit.step)) is not None:
            from stages.ingest.dedup.components import merge_round_folders

            m = COMPONENTS_MERGE.round(number).payload_of(unit)
            stats = merge_round_folders([ctx.unit_dir(m.input_step, i) for i in m.inputs], out_dir, m.partitions, m.round,
                                        int(unit.id.rsplit("-", 1)[1]))
            return RoundResult(lang=m.lang, group=m.group, **dict(stats))
        if unit.step == CLUSTERS.name:
            from stages.ingest.dedup.clusters import resolve_clusters, resolve_from_rounds

            c = CLUSTERS.payload_of(unit)
            step1 = [ctx.unit_dir(c.key_step, u) for u in c.units]
            if c.partition is not None:
                labels = ctx.unit_dir(COMPONENTS.round(c.rounds).name, unit.id)
                first = ctx.unit_dir(COMPONENTS.round(1).name, unit.id)
                clusters = resolve_from_rounds(step1, labels, first, out_dir, cfg, c.partitions, c.rounds)
            else:
                pair_dirs = [ctx.unit_dir(BUCKETS.name, f"{c.group}-{q:05d}") / PAIRS_DIR for q in range(c.partitions)]
                clusters = resolve_clusters(step1, pair_dirs, out_dir, cfg, c.partitions, rule=cfg.rule)
            return ClustersResult(lang=c.lang, group=c.group, in_rounds=c.partition is not None, **dict(clusters))
        if (gather_level := GATHER.round_of(unit.step)) is not None:
            from stages.ingest.dedup.gather import gather_drops

            g = GATHER.round(gather_level).payload_of(unit)
            exact_in, near_in = self._gather_dirs(ctx, g.group, g.level, g.first_partition, g.inputs, g.near)
            gathered = gather_drops(exact_in, near_in, g.first_partition, out_dir, cfg, g.partitions)
            return GatherResult(lang=g.lang, group=g.group, **dict(gathered))
        if unit.step == FILTER.name:
            from stages.ingest.dedup.filter import filter_unit

            f = FILTER.payload_of(unit)
            exact_dirs = [ctx.unit_dir(BUCKETS.name, f"{f.group}-{q:05d}") / EXACT_DIR for q in range(f.partitions)]
            near_dirs = ([] if not cfg.near else [ctx.unit_dir(CLUSTERS.name, f.group)] if not f.near_parts else
                         [ctx.unit_dir(CLUSTERS.name, f"{f.group}-{q:05d}") for q in range(f.near_parts)])
            if f.gathered:  # the group's drops, gathered into at most fan_in folders
                top = GATHER.round(len(self._gather_levels(ctx, bool(f.near_parts), f.partitions))).name
                dirs = [ctx.unit_dir(top, f"{f.group}-{i:05d}") for i in range(f.gathered)]
                exact_dirs = dirs if cfg.exact else []
                near_dirs = dirs if f.near_parts else near_dirs
            filtered = filter_unit(ctx.unit_dir(DOCUMENTS.name, unit.id) / KEPT, ctx.unit_dir(SIGNATURES.name, unit.id),
                                   f.rank, exact_dirs, near_dirs, out_dir, cfg, f.partitions,
                                   part_rows=settings.max_rows_per_file, keep_duplicates=settings.keep_rejected)
            return FilterResult(lang=f.lang, **dict(filtered))
        raise StageError(f"stage ingest: unknown step {unit.step!r}")

    @staticmethod
    def _documents(settings: IngestConfig, p: DocumentsPayload, out_dir: Path) -> DocumentsResult:
        source = next(s for s in settings.sources if s.name == p.source)
        if not p.pieces:  # an optional source without input for this language: recorded, not fatal
            reason, message = p.problem or ("no_inputs", "")
            problem = Problem(source=source.name, lang=p.lang, input=p.pattern or "", line=None, reason=reason,
                              message=message)
            return DocumentsResult(lang=p.lang, source=source.name, stats=DocumentStats(problems=[problem]))
        try:
            stats, removed_parts = process_unit(settings, source, p.lang, p.pieces, out_dir)
        except InputFailed as e:
            raise InputError(f"stage ingest: {e}") from None
        return DocumentsResult(lang=p.lang, source=source.name, stats=stats, removed_parts=removed_parts)

    def unit_cost(self, unit: Unit) -> float:
        """Bytes to read (documents), else the documents the unit's language or unit kept (the dedup steps)."""
        if unit.step == DOCUMENTS.name:
            return float(sum(piece.bytes for piece in DOCUMENTS.payload_of(unit).pieces))
        payload = unit.payload
        assert isinstance(payload, (RankedUnitPayload, MergePayload, BucketsPayload, ClustersPayload, RoundPayload,
                                    RoundMergePayload, GatherPayload)), unit.step
        return float(payload.kept)

    def unit_work(self, unit: Unit, result: Any) -> tuple[float, str] | None:
        """For the progress line's rate: MB read (documents), documents (the dedup steps per unit)."""
        if isinstance(result, DocumentsResult):
            return float(result.stats.bytes_in) / 1e6, "MB"
        if isinstance(result, (SignaturesResult, MergeResult, FilterResult)):
            return float(result.docs), "docs"
        return None

    # --- publish ------------------------------------------------------------------------------------
    def finalize(self, ctx: Ctx, done: StepResults, out_dir: Path) -> StageOutcome:
        """Link the units' parts into place in unit order and sum the record; no document is read here."""
        import pyarrow.parquet as pq

        from stages.ingest.dedup import files
        from stages.ingest.report import write_report

        settings = ctx.settings
        documents, filtered = DOCUMENTS.results(done), FILTER.results(done)
        per_lang: dict[str, LanguageCounts] = {}
        per_source: dict[str, Counter] = defaultdict(Counter)
        per_domain: Counter = Counter()
        removed_by_reason: Counter = Counter()
        pii: Counter = Counter()
        blocked: Counter = Counter()
        crawled_domains: dict[str, Counter] = defaultdict(Counter)
        skipped: list[Problem] = []
        rows_out: dict[str, int] = {}
        checksums: dict[str, str] = {}

        for lang in ctx.config.run.languages:
            read: list[tuple[DocumentsResult, FilterResult]] = []  # the units that read documents, in unit order
            removed: Counter = Counter()
            data_parts: list[tuple[Path, PartFile]] = []
            removed_parts: list[tuple[Path, PartFile]] = []
            duplicate_parts: list[tuple[Path, PartFile]] = []
            for uid in sorted(u for u, r in documents.items() if r.lang == lang):
                d = documents[uid]
                st = d.stats
                skipped.extend(st.problems)
                if not d.read_documents:
                    continue
                f = filtered[uid]
                read.append((d, f))
                removed.update(st.removed)
                removed.update({EXACT_DUP: f.exact_duplicate, NEAR_DUP: f.near_duplicate})
                pii.update(st.pii)
                blocked.update(st.blocklist)
                crawled_domains[d.source].update(st.domain_bytes_in)
                src = per_source[d.source]
                src.update({"docs_in": st.docs_in, "bytes_in": st.bytes_in, "kept": f.kept, "kept_bytes": f.kept_bytes})
                src.update({f"removed_{k}": v for k, v in st.removed.items()})
                fdir = ctx.unit_dir(FILTER.name, uid)
                data_parts += [(fdir / part.file, part) for part in f.parts]
                removed_parts += [(ctx.unit_dir(DOCUMENTS.name, uid) / part.file, part) for part in d.removed_parts]
                duplicate_parts += [(fdir / part.file, part) for part in f.duplicate_parts]
                domains = pq.read_table(fdir / files.DOMAINS)
                per_domain.update(dict(zip(domains.column("domain").to_pylist(), domains.column("bytes").to_pylist())))
            removed = +removed

            self._publish_parts(data_parts, out_dir / "data" / lang, out_dir, rows_out, checksums, "data")
            if settings.keep_rejected:
                self._publish_parts(removed_parts + duplicate_parts, out_dir / "rejected" / lang, out_dir, rows_out,
                                    checksums, "rejected")
            removed_by_reason.update(removed)
            per_lang[lang] = LanguageCounts(
                docs_in=sum(d.stats.docs_in or 0 for d, _ in read), bytes_in=sum(d.stats.bytes_in for d, _ in read),
                kept=sum(f.kept for _, f in read), kept_bytes=sum(f.kept_bytes for _, f in read),
                kept_chars=sum(f.kept_chars for _, f in read), kept_words=sum(f.kept_words for _, f in read),
                mojibake_fixed=sum(d.stats.mojibake_fixed for d, _ in read), removed=dict(sorted(removed.items())))

        empty = [lang for lang, c in per_lang.items() if c.kept == 0]
        counts = per_lang.values()
        totals = Totals(docs_in=sum(c.docs_in for c in counts), bytes_in=sum(c.bytes_in for c in counts),
                        kept=sum(c.kept for c in counts), kept_bytes=sum(c.kept_bytes for c in counts))
        statistics = IngestRecord(
            totals=totals,
            per_language=per_lang,
            per_filter=_per_filter_counts(removed_by_reason),
            per_domain_bytes=_largest_first(per_domain),
            per_source={name: self._source_record(settings, name, n, crawled_domains[name])
                        for name, n in sorted(per_source.items())},
            pii_redactions=dict(sorted(pii.items())),
            blocklists=_blocklist_records(settings, blocked),
            languages_without_documents=empty,
            dedup_scope=settings.dedup.scope,
            dedup_groups=_groups_by_language(self._ranked_units(ctx, done)),
            dedup_clusters=_cluster_records(CLUSTERS.results(done)),
            dedup_buckets=_bucket_records(BUCKETS.results(done)) if settings.dedup.near else {},
            dedup_merges=self._merge_records(ctx, done),
        )
        write_report(out_dir, statistics)  # after the parts: it reads its examples back from rejected/
        summary = {"languages": len(per_lang) - len(empty), "docs in": totals.docs_in, "kept": totals.kept,
                   "MB kept": round(totals.kept_bytes / 1e6, 2), "skipped inputs": len(skipped)}
        return StageOutcome(statistics=statistics, summary=summary, skipped=[p.model_dump(mode="json") for p in skipped],
                            rows=rows_out, checksums=checksums)

    @staticmethod
    def _publish_parts(parts: list[tuple[Path, PartFile]], folder: Path, stage_dir: Path, rows: dict[str, int],
                       checksums: dict[str, str], kind: str) -> None:
        """part-00000.parquet, ... in `folder`: the units' parts in order, linked (at least one, possibly empty)."""
        from stages.ingest.schema import DOCUMENT_SCHEMA, REJECTED_SCHEMA

        folder.mkdir(parents=True, exist_ok=True)
        if not parts:
            import pyarrow.parquet as pq

            path = folder / "part-00000.parquet"
            pq.write_table((DOCUMENT_SCHEMA if kind == "data" else REJECTED_SCHEMA).empty_table(), path, compression="zstd")
            rows[path.relative_to(stage_dir).as_posix()] = 0
            return
        for i, (src, part) in enumerate(parts):
            dst = folder / f"part-{i:05d}.parquet"
            _link_part(src, dst)
            rel = dst.relative_to(stage_dir).as_posix()
            rows[rel], checksums[rel] = part.rows, part.sha256

    def summary_markdown(self, manifest: Manifest) -> str:
        r = IngestRecord.model_validate(manifest.statistics)
        lines = [f"# ingest: {r.totals.kept:,} of {r.totals.docs_in:,} documents kept", "",
                 "| language | docs in | kept | kept MB | removed (top reasons) |", "|---|---:|---:|---:|---|"]
        for lang, c in r.per_language.items():
            top = ", ".join(f"{k} {v}" for k, v in sorted(c.removed.items(), key=lambda kv: -kv[1])[:3])
            lines.append(f"| {lang} | {c.docs_in:,} | {c.kept:,} | {c.kept_bytes / 1e6:.2f} | {top} |")
        lines += ["", "| filter | removed |", "|---|---:|"]
        lines += [f"| {k} | {v:,} |" for k, v in r.per_filter.items() if v]
        if r.blocklists:
            lines += ["", "| block list | entries | removed |", "|---|---:|---:|"]
            lines += [f"| {name} | {b.entries:,} | {b.removed:,} |" for name, b in r.blocklists.items()]
        if manifest.skipped:
            first = Problem.model_validate(manifest.skipped[0])
            lines += ["", f"**{len(manifest.skipped)} input problem(s) skipped**, e.g.: {first.message}"]
        if r.languages_without_documents:
            lines += ["", f"**No documents kept for:** {', '.join(r.languages_without_documents)}"]
        return "\n".join(lines) + "\n"

    # --- helpers ------------------------------------------------------------------------------------
    @staticmethod
    def _languages(ctx: Ctx, source) -> list[str]:
        return [lang for lang in ctx.config.run.languages if lang in source.languages]

    @staticmethod
    def _source_record(settings: IngestConfig, name: str, counts: Counter, domain_bytes_in: Counter) -> SourceRecord:
        source = next(s for s in settings.sources if s.name == name)
        return SourceRecord(
            kind=source.kind, category=source.category, licence=source.licence, homepage=source.homepage,
            collected=source.collected, version=source.version, version_found=version_found(source),
            content_period=source.content_period, repo=source.repo, hf_config=source.hf_config,
            opt_out=OptOut.model_validate(source.opt_out.model_dump(mode="json")), counts=dict(sorted(counts.items())),
            domain_bytes_in=_largest_first(domain_bytes_in))


def _pack(pieces: list[Piece], max_bytes: int, max_files: int) -> list[list[Piece]]:
    """Consecutive pieces into units of at most `max_bytes` and `max_files` files (a bigger piece is a unit alone)."""
    groups: list[list[Piece]] = []
    size = 0
    for piece in pieces:
        group = groups[-1] if groups else None
        if group is None or size + piece.bytes > max_bytes or len({p.ref for p in group} | {piece.ref}) > max_files:
            groups.append([piece])
            size = piece.bytes
        else:
            group.append(piece)
            size += piece.bytes
    return groups


def _link_part(src: Path, dst: Path) -> None:
    """A hard link (the unit's file becomes the published one, no copy); a copy where links are not possible."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _largest_first(counts: Counter) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _per_filter_counts(removed: Counter) -> dict[str, int]:
    """Every known filter gets a row, zero included, so a filter that never fired is visible as such."""
    out = {n: int(removed.get(n, 0)) for n in ALL_REASONS}
    out.update({k: int(v) for k, v in removed.items() if k not in out})
    return out


def _bucket_records(results) -> dict[str, BucketRecord]:
    """Per group (a buckets unit is `<group>-<partition>`), its partitions' bucket statistics."""
    by_group: dict[str, list[Any]] = defaultdict(list)
    for uid, r in sorted(results.items()):
        by_group[uid.rsplit("-", 1)[0]].append(r.pairs)
    return {group: BucketRecord(largest_bucket=max(p.largest_bucket for p in ps),
                                capped_buckets=sum(p.capped_buckets for p in ps),
                                uncompared_pairs=sum(p.uncompared for p in ps)) for group, ps in by_group.items()}


def _cluster_records(results) -> dict[str, ClusterRecord]:
    """Per group, its clusters unit's statistics, or the sums over its partitions when clustered in rounds."""
    by_group: dict[str, list[Any]] = defaultdict(list)
    for r in results.values():
        by_group[r.group].append(r)
    out = {}
    for group, rs in sorted(by_group.items()):
        out[group] = ClusterRecord(
            rule=rs[0].rule, in_rounds=rs[0].in_rounds, rounds=rs[0].rounds,
            pairs=sum(r.pairs for r in rs), docs_in_pairs=sum(r.docs_in_pairs for r in rs),
            components=sum(r.components for r in rs), largest_component=max(r.largest_component for r in rs),
            dropped=sum(r.dropped for r in rs), kept_by_greedy_not_by_components=rs[0].kept_by_greedy_not_by_components)
    return out


def _groups_by_language(ranked: dict[tuple[str, str], list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for lang, group in sorted(ranked):
        out.setdefault(lang, []).append(group)
    return out


def dedup_group(settings: IngestConfig, lang: str, source: str) -> str:
    """The name of the documents a documents unit's are compared with ([ingest.dedup] scope); the language's own
    code under the default scope, so unit ids stay as they were."""
    scope = settings.dedup.scope
    if scope == "language":
        return lang
    if scope == "source":
        return f"{lang}-{source}"
    dump = next(s.dump for s in settings.sources if s.name == source)
    return f"{lang}-dump-{dump}"


def _reaches_into(path: str, run_dir: Path) -> bool:
    """Whether a source's path (a glob) starts above or in the run directory."""
    head = re.split(r"[*?\[]", path, maxsplit=1)[0]
    base = os.path.abspath(os.path.dirname(head) if head != path else head)
    return os.path.commonpath([base, os.path.abspath(run_dir)]) == base


def _refuse_splinters(source: str, pieces: list[Piece], max_unit_bytes: int) -> None:
    most = max(pieces, key=lambda p: p.parts, default=None)
    if most is not None and most.parts > MAX_PIECES_PER_FILE:
        need = math.ceil(most.size / MAX_PIECES_PER_FILE)
        raise InputError(f"stage ingest: source {source}: {most.ref} ({most.size:,} bytes) would be cut into "
                         f"{most.parts:,} units of max_unit_bytes = {max_unit_bytes:,} (at most "
                         f"{MAX_PIECES_PER_FILE:,} per file); raise [ingest] max_unit_bytes to {need:,} or more")


def _blocklist_signature(settings: IngestConfig) -> list[tuple]:
    """Size and modification time of every block list file: a new version of a list makes the stage stale."""
    from stages.ingest.blocklist import list_files as blocklist_files

    sig = []
    for b in settings.blocklists:
        try:
            files = blocklist_files(b.path)
        except ValueError as e:
            raise InputError(f"stage ingest: [[ingest.blocklists]] {b.name}: {e}") from None
        sig.extend((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return sig


def _blocklist_records(settings: IngestConfig, removed: Counter) -> dict[str, BlocklistRecord]:
    """Per block list: where it was read, its version (sha256), its entries and the documents it removed."""
    from stages.ingest.blocklist import load

    out = {}
    for cfg in settings.blocklists:
        bl = load(cfg)
        out[cfg.name] = BlocklistRecord(path=cfg.path, description=cfg.description, sha256=bl.sha256,
                                        domains=len(bl.domains), urls=len(bl.urls), entries=bl.entries,
                                        removed=int(removed.get(cfg.name, 0)))
    return out


def _decontaminate_files(ctx: Ctx) -> list[tuple[str, str, Path]]:
    from pipeline.languages import expand_template

    return [(s.name, lang, Path(s.path) / expand_template(s.pattern, lang))
            for s in ctx.settings.decontaminate for lang in ctx.config.run.languages]


def _decontaminate_signature(ctx: Ctx) -> list[Any]:
    """Size and time of each declared evaluation file: a changed set makes the stage stale."""
    out = []
    for name, lang, path in _decontaminate_files(ctx):
        st = path.stat() if path.is_file() else None
        out.append([name, lang, st.st_size if st else None, st.st_mtime_ns if st else None])
    return out


def _check_decontaminate(ctx: Ctx) -> None:
    """Each [[ingest.decontaminate]] set is a folder with at least one language's file, in UTF-8: exit 2 before
    any input is read otherwise."""
    for s in ctx.settings.decontaminate:
        if not Path(s.path).is_dir():
            raise InputError(f"[[ingest.decontaminate]] {s.name!r}: path {s.path} is not a folder; point it at the "
                             "evaluation set's folder (one file per language, e.g. flores200/devtest)")
    found = {}
    for name, lang, path in _decontaminate_files(ctx):
        if path.is_file():
            found[name] = True
            try:
                path.read_text(encoding="utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"[[ingest.decontaminate]] {name!r}: {path} is not UTF-8 text (byte {e.start}); "
                                 "convert it to UTF-8") from None
    for s in ctx.settings.decontaminate:
        if s.name not in found:
            raise InputError(f"[[ingest.decontaminate]] {s.name!r}: no file matches pattern {s.pattern!r} in {s.path} "
                             "for any language of the run; fix the pattern (placeholders {lang}, {iso3}, {flores})")

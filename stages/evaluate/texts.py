"""What is evaluated: per language, token sequences and the UTF-8 bytes of the text they encode.

Bits per byte (total negative log-likelihood / (UTF-8 bytes x ln 2)) compares models across tokenizers, so
each evaluated text carries its byte count: for the shards' validation split, the bytes of the decoded document
(the exact text the ingest stage kept); for an external set, the bytes of each line. Both are bounded by
`max_tokens_per_language`, taking texts in a fixed order, so every checkpoint sees exactly the same texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.languages import expand_template


@dataclass
class EvalTexts:
    set: str
    lang: str
    docs: list[np.ndarray] = field(default_factory=list)  # token ids, each ending with EOS
    doc_bytes: list[int] = field(default_factory=list)  # UTF-8 bytes of the text each encodes
    source: str = ""

    @property
    def n_tokens(self) -> int:
        return sum(len(d) for d in self.docs)

    @property
    def n_bytes(self) -> int:
        return sum(self.doc_bytes)


def validation_texts(shards_dir: Path, languages: list[str], sp, max_tokens: int) -> tuple[dict[str, EvalTexts], list[str]]:
    """The shards stage's held-out documents per language; languages without any are returned as missing."""
    from europa_model.data.streams import open_shards

    _, by_lang = open_shards(shards_dir, "val", languages)
    eos = sp.eos_id()
    out, missing = {}, []
    for lang in languages:
        texts = EvalTexts("val", lang, source=f"{shards_dir}/val/{lang}")
        for shard in by_lang.get(lang, []):
            for i in range(len(shard)):
                doc = np.asarray(shard.doc(i), dtype=np.int64)
                if texts.n_tokens + len(doc) > max_tokens and texts.docs:
                    break
                body = doc[:-1] if len(doc) and doc[-1] == eos else doc
                texts.docs.append(doc)
                texts.doc_bytes.append(len(sp.decode(body.tolist()).encode("utf-8")))
        if texts.docs:
            out[lang] = texts
        else:
            missing.append(lang)
    return out, missing


def external_texts(name: str, folder: str, pattern: str, languages: list[str], sp, max_tokens: int) -> tuple[dict[str, EvalTexts], list[str]]:
    """An evaluation set in the FLORES-200 layout; languages whose file is absent are returned as missing."""
    eos = sp.eos_id()
    out, missing = {}, []
    for lang in languages:
        path = Path(folder) / expand_template(pattern, lang)
        if not path.is_file():
            missing.append(lang)
            continue
        texts = EvalTexts(name, lang, source=str(path))
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise ValueError(f"evaluation set {name}: {path} is not UTF-8 text (byte {e.start}); convert it to UTF-8") from None
        for line in lines:
            if not line.strip():
                continue
            doc = np.asarray(sp.encode(line) + [eos], dtype=np.int64)
            if texts.n_tokens + len(doc) > max_tokens and texts.docs:
                break
            texts.docs.append(doc)
            texts.doc_bytes.append(len(line.encode("utf-8")))
        if texts.docs:
            out[lang] = texts
        else:
            missing.append(lang)
    return out, missing


def load_eval_texts(run_dir, config, settings, sp=None):
    """Every set's texts for the run's languages: {set: ({lang: EvalTexts}, [missing languages])}, the shards'
    held-out split as "val" (when enabled) then the [[evaluate.sets]], with the run's SentencePiece model;
    returns (sp, sets). Deterministic, so every rank of a distributed evaluation builds the same."""
    import sentencepiece as spm

    if sp is None:
        sp = spm.SentencePieceProcessor(model_file=str(run_dir.stage_dir("tokenizer") / "tokenizer.model"))
    languages = list(config.run.languages)
    sets: dict[str, tuple[dict[str, EvalTexts], list[str]]] = {}
    if settings.validation_split:
        sets["val"] = validation_texts(run_dir.stage_dir("shards"), languages, sp, settings.max_tokens_per_language)
    for s in settings.sets:
        sets[s.name] = external_texts(s.name, s.path, s.pattern, languages, sp, settings.max_tokens_per_language)
    return sp, sets

"""Tiny local datasets in the layouts of two lm-eval task families, so the real task names (belebele_<flores>,
multiblimp_<iso3>) run offline through [[evaluate.tasks]] dataset_path: a folder laid out like the Hub
repository (README.md whose YAML header lists one config per language, data files under data/), which
`datasets.load_dataset(folder, name=<config>)` reads as it reads a downloaded snapshot."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.languages import LANGUAGES


def _write(folder: Path, configs: dict[str, list[dict]], split: str) -> Path:
    (folder / "data").mkdir(parents=True, exist_ok=True)
    header = ["---", "configs:"]
    for name, rows in configs.items():
        (folder / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                                      encoding="utf-8")
        header += [f"- config_name: {name}", "  data_files:", f"  - split: {split}", f"    path: data/{name}.jsonl"]
    (folder / "README.md").write_text("\n".join(header + ["---", ""]), encoding="utf-8")
    return folder


def belebele(folder: Path, langs: list[str], passages: dict[str, str], n: int = 3) -> Path:
    """facebook/belebele's layout: one config per FLORES code, split test, a passage and four answers."""
    rows = {LANGUAGES[lang].flores: [
        {"link": f"local/{i}", "question_number": i, "flores_passage": passages[lang], "question": f"{i}?",
         "mc_answer1": passages[lang][:20], "mc_answer2": "1", "mc_answer3": "2", "mc_answer4": "3",
         "correct_answer_num": str(1 + i % 4), "dialect": LANGUAGES[lang].flores, "ds": "2023-01-01"}
        for i in range(n)] for lang in langs}
    return _write(folder, rows, "test")


def multiblimp(folder: Path, langs: list[str], sentences: dict[str, list[str]]) -> Path:
    """jumelet/multiblimp's layout: one config per ISO 639-3 code, split train, a sentence and a wrong one."""
    rows = {LANGUAGES[lang].iso3: [{"sen": s, "wrong_sen": " ".join(reversed(s.split()))} for s in sentences[lang]]
            for lang in langs}
    return _write(folder, rows, "train")

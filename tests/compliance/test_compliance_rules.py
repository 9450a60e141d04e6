"""The pinned rules: two significant figures, the size bins and their edges, the domain list, training time."""
# europa-1t: 9.5e11 total ("500B-1T"), 3.3e10 active ("15B-50B"); the demo's tiny model "1-500M".

from __future__ import annotations

import pytest

from stages.compliance.domains import domains_to_list, top_domains
from stages.compliance.numbers import (order_of_magnitude, parameter_bin, sci, sig2, text_size_bin, training_time_range,
                                       with_sig2)


@pytest.mark.parametrize("value, expected", [
    (948_700_000_000, "9.5e11"),   # europa-1t total parameters
    (32_810_000_000, "3.3e10"),    # europa-1t active parameters
    (945_000_000_000, "9.5e11"),   # half-up, not half-even
    (9.45e11, "9.5e11"),           # a float is taken at its shortest repr, so no binary round-down
    (125, "1.3e2"),
    (135, "1.4e2"),
    (9.96e24, "1.0e25"),           # the carry moves into the exponent
    (1e25, "1.0e25"),
    (812_352, "8.1e5"),
    (0.95, "9.5e-1"),
    (7, "7.0e0"),
    (0, "0.0e0"),
])
def test_two_significant_figures(value, expected):
    assert sig2(value) == expected


def test_people_format_and_order_of_magnitude():
    assert sci(948_700_000_000) == "9.5 × 10^11"
    assert with_sig2(948_700_000_000) == "948,700,000,000 (9.5 × 10^11)"
    assert order_of_magnitude(9.96e24) == 25 and order_of_magnitude(3.2e24) == 24


@pytest.mark.parametrize("tokens, expected", [
    (0, "less than 1 billion tokens"),
    (999_999_999, "less than 1 billion tokens"),
    (1_000_000_000, "1 billion to 10 trillion tokens"),        # the lower edge belongs to the middle bin
    (10_000_000_000_000, "1 billion to 10 trillion tokens"),   # so does the upper edge ("1 billion to 10 trillion")
    (10_000_000_000_001, "more than 10 trillion tokens"),
])
def test_text_size_bin_edges(tokens, expected):
    assert text_size_bin(tokens) == expected


@pytest.mark.parametrize("params, expected", [
    # the Model Documentation Form's ranges; each includes its upper edge
    (1, "1-500M"), (812_352, "1-500M"), (500_000_000, "1-500M"), (500_000_001, "500M-5B"), (5_000_000_000, "500M-5B"),
    (5_000_000_001, "5B-15B"), (15_000_000_000, "5B-15B"), (15_000_000_001, "15B-50B"), (32_810_000_000, "15B-50B"),
    (50_000_000_000, "15B-50B"), (50_000_000_001, "50B-100B"), (100_000_000_000, "50B-100B"),
    (100_000_000_001, "100B-500B"), (500_000_000_000, "100B-500B"), (500_000_000_001, "500B-1T"),
    (948_700_000_000, "500B-1T"), (1_000_000_000_000, "500B-1T"), (1_000_000_000_001, ">1T"),
])
def test_parameter_bin_edges(params, expected):
    assert parameter_bin(params) == expected


def test_parameter_bins_are_the_forms_and_no_others():
    from stages.compliance.model_form import FIELDS
    from stages.compliance.numbers import PARAMETER_BINS

    labels = ["1-500M", "500M-5B", "5B-15B", "15B-50B", "50B-100B", "100B-500B", "500B-1T", ">1T"]
    assert [label for _, label in PARAMETER_BINS] == labels
    for field in ("parameter_size_range", "active_parameter_size_range"):
        assert FIELDS["model_properties"][field][0]["enum"] == [*labels, None]


def test_training_time_ranges():
    month = 365.25 / 12 * 86_400
    assert training_time_range(95) == "<1 month"
    assert training_time_range(month * 0.999) == "<1 month"
    assert training_time_range(month) == "1-3 months"
    assert training_time_range(3 * month) == "1-3 months"
    assert training_time_range(3 * month + 1) == "3-6 months"
    assert training_time_range(6 * month + 1) == ">6 months"


@pytest.mark.parametrize("n, sme, expected", [
    (0, False, 0), (1, False, 1), (9, False, 1), (10, False, 1), (11, False, 2), (30, False, 3), (31, False, 4),
    (1_000_000, False, 100_000),
    # SMEs: top 5% (rounded up), at most 1,000 domains
    (1, True, 1), (20, True, 1), (21, True, 2), (10_000, True, 500), (19_999, True, 1_000), (20_001, True, 1_000),
    (40_000, True, 1_000),
])
def test_domain_count_rule_rounds_up(n, sme, expected):
    assert domains_to_list(n, sme=sme) == expected


def test_top_domains_ranking_ties_and_no_domain():
    per_domain = {"b.eu": 50, "a.eu": 50, "c.eu": 70, "(none)": 999, **{f"d{i:02d}.eu": 10 - i % 5 for i in range(8)}}
    listed, ranked, no_domain = top_domains(per_domain, sme=False)
    assert ranked == 11 and no_domain == 999   # "(none)" is never a domain
    assert listed == [("c.eu", 70), ("a.eu", 50)]  # ceil(1.1) = 2; equal sizes by name
    listed, _, _ = top_domains(per_domain, sme=True)
    assert listed == [("c.eu", 70)]

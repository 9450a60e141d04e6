"""The template's "most relevant domain names": which domains the public summary must list.

AI Office template, section 2.3 ("data crawled and scraped from online sources by or on behalf of the
provider"): the top 10% of all domain names (registrable domains) ranked by the size of the content scraped; for
SMEs the top 5% or the top 1,000 domains, whichever is fewer. The population is that category only: the domains
of the crawled sources' document URLs, counted in bytes read before any filter (ingest records them per crawled
source); public datasets are listed in 2.1 and a source's configured fallback domain is never a crawled domain.

Pinned rounding rule: the number listed is ceil(share x number of domains), at least 1 when there is any
domain, so a share is never rounded away (11 domains at 10% list 2, not 1). Ranking: bytes descending,
then domain name ascending for equal sizes, so the cut is deterministic.
"(none)" (documents without a URL or domain) is not a domain and is never ranked; its bytes are reported apart.
"""

from __future__ import annotations

NO_DOMAIN = "(none)"
PER_DOMAINS = 10  # 10% = 1 in 10
SME_PER_DOMAINS = 20  # 5% = 1 in 20
SME_MAX = 1_000


def domains_to_list(n_domains: int, *, sme: bool) -> int:
    """ceil(share x n) in integer arithmetic (0.1 x 30 is 3.0000000000000004 in floating point)."""
    if n_domains <= 0:
        return 0
    if sme:
        return min(-(-n_domains // SME_PER_DOMAINS), SME_MAX)
    return -(-n_domains // PER_DOMAINS)


def rule_text(sme: bool) -> str:
    if sme:
        return ("top 5% of the crawled domains (rounded up), at most 1,000, ranked by size of content scraped (bytes read "
                "before filtering) (SME rule)")
    return "top 10% of the crawled domains (rounded up), ranked by size of content scraped (bytes read before filtering)"


def top_domains(per_domain_bytes: dict[str, int], *, sme: bool) -> tuple[list[tuple[str, int]], int, int]:
    """(listed domains with bytes, number of domains ranked, bytes without a domain)."""
    ranked = sorted(((d, int(b)) for d, b in per_domain_bytes.items() if d != NO_DOMAIN), key=lambda kv: (-kv[1], kv[0]))
    k = domains_to_list(len(ranked), sme=sme)
    return ranked[:k], len(ranked), int(per_domain_bytes.get(NO_DOMAIN, 0))

"""Block lists (stages/ingest/blocklist.py): matching rules, and removals counted per list in the ingest record."""

from __future__ import annotations

import json

import pytest

from stages.ingest.blocklist import BlocklistConfig, first_match, load


def write_list(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_domains_block_subdomains_and_urls_block_the_pages_under_them(tmp_path):
    bl = load(BlocklistConfig(name="t", path=str(write_list(tmp_path / "list.txt", [
        "# a test list", "bad.example", "WWW.Shady.Example", "ok.example/private/  # a URL entry"]))))
    assert (len(bl.domains), len(bl.urls), bl.entries) == (2, 1, 3)
    assert bl.matches("https://bad.example/", None) and bl.matches("http://a.b.bad.example/x?q=1", None)
    assert bl.matches("https://user@shady.example:8443/", None)  # www. and case ignored in the list
    assert not bl.matches("https://notbad.example/", None) and not bl.matches("https://bad.example.org/", None)
    assert bl.matches("https://www.ok.example/private", None) and bl.matches("https://ok.example/private/page.html", None)
    assert not bl.matches("https://ok.example/privateer", None) and not bl.matches("https://ok.example/", None)
    # no URL: the source's domain decides
    assert bl.matches(None, "bad.example") and not bl.matches(None, "ok.example") and not bl.matches(None, None)


def test_ut1_folder_and_the_first_list_wins(tmp_path):
    ut1 = tmp_path / "adult"
    ut1.mkdir()
    write_list(ut1 / "domains", ["porn.example", "both.example"])
    write_list(ut1 / "urls", ["host.example/adult"])
    other = load(BlocklistConfig(name="other", path=str(write_list(tmp_path / "o.txt", ["both.example"]))))
    adult = load(BlocklistConfig(name="adult", path=str(ut1)))
    assert adult.entries == 3
    assert first_match([adult, other], "https://both.example/", None) == "adult"
    assert first_match([other, adult], "https://both.example/", None) == "other"
    assert first_match([other, adult], "https://host.example/adult/1", None) == "adult"
    assert first_match([other, adult], "https://clean.example/", None) is None
    with pytest.raises(ValueError, match="neither a 'domains' nor a 'urls' file"):
        load(BlocklistConfig(name="x", path=str(tmp_path)))
    with pytest.raises(ValueError, match="does not exist; fix \\[\\[ingest.blocklists\\]\\] path"):
        load(BlocklistConfig(name="x", path=str(tmp_path / "missing.txt")))


def test_ingest_removes_blocked_documents_and_records_each_list(tmp_path, udhr_dir):
    from tests.ingest.test_ingest_stage import jsonl_source, manifest, read_lang, run_ingest, udhr_docs
    from tests.conftest import write_config

    it = [t for t in udhr_docs(udhr_dir, "it") if len(t.split()) >= 30][:4]
    urls = ["https://www.good-site.eu/a", "https://cdn.bad-site.eu/b", "https://good-site.eu/private/c", "https://other-site.eu/d"]
    src = tmp_path / "src"
    src.mkdir()
    (src / "it.jsonl").write_text("\n".join(json.dumps({"text": t, "url": u}) for t, u in zip(it, urls)) + "\n", encoding="utf-8")
    write_list(tmp_path / "domains.txt", ["bad-site.eu"])
    write_list(tmp_path / "urls.txt", ["good-site.eu/private", "never-site.eu"])
    extra = ('[[ingest.blocklists]]\nname = "test-domains"\npath = "domains.txt"\ndescription = "a test list"\n'
             '[[ingest.blocklists]]\nname = "test-urls"\npath = "urls.txt"\n'
             "[ingest.quality]\nmin_words = 10\n")
    cfg = write_config(tmp_path, jsonl_source("web", f"{src}/*.jsonl", extra), languages='["it"]')
    run_dir = tmp_path / "run"
    assert run_ingest(cfg, run_dir) == 0
    assert {r["url"] for r in read_lang(run_dir, "it")} == {urls[0], urls[3]}
    assert {r["url"]: r["reason"] for r in read_lang(run_dir, "it", "rejected")} == {urls[1]: "blocklist", urls[2]: "blocklist"}
    s = manifest(run_dir)["statistics"]
    assert s["per_filter"]["blocklist"] == 2 and s["per_source"]["web"]["counts"]["removed_blocklist"] == 2
    lists = s["blocklists"]
    assert lists["test-domains"]["removed"] == 1 and lists["test-domains"]["entries"] == 1
    assert lists["test-domains"]["path"] == str(tmp_path / "domains.txt") and lists["test-domains"]["description"] == "a test list"
    assert lists["test-urls"] == {**lists["test-urls"], "removed": 1, "domains": 1, "urls": 1, "entries": 2}
    # the crawled source's domains by bytes read, before any filter (blocked documents included), from URLs only
    by_domain = s["per_source"]["web"]["domain_bytes_in"]
    assert set(by_domain) == {"good-site.eu", "bad-site.eu", "other-site.eu"}
    assert sum(by_domain.values()) == s["per_source"]["web"]["counts"]["bytes_in"]
    # a new version of a list makes ingest stale
    write_list(tmp_path / "domains.txt", ["bad-site.eu", "other-site.eu"])
    assert run_ingest(cfg, run_dir) == 0
    assert manifest(run_dir)["statistics"]["blocklists"]["test-domains"]["removed"] == 2

"""MinHash dedup: planted near duplicates found, distinct and translated documents kept, deterministic."""

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stages.ingest import minhash
from stages.ingest.minhash import (
    SENTINEL,
    DedupConfig,
    NearDuplicateIndex,
    exact_key,
    find_duplicates,
    minhash_signatures,
)

CFG = DedupConfig()
REPO = Path(__file__).resolve().parents[2]

TRANSLATIONS = [  # UDHR Article 1: parallel text must not be a near duplicate of itself in other languages
    "All human beings are born free and equal in dignity and rights. They are endowed with reason and "
    "conscience and should act towards one another in a spirit of brotherhood.",
    "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und Gewissen "
    "begabt und sollen einander im Geist der Brüderlichkeit begegnen.",
    "Alle mennesker er født frie og lige i værdighed og rettigheder. De er udstyret med fornuft og "
    "samvittighed, og de bør handle mod hverandre i en broderskabets ånd.",
    "Alla människor är födda fria och lika i värde och rättigheter. De har utrustats med förnuft och samvete "
    "och bör handla gentemot varandra i en anda av broderskap.",
    "Alle mensen worden vrij en gelijk in waardigheid en rechten geboren. Zij zijn begiftigd met verstand en "
    "geweten, en behoren zich jegens elkander in een geest van broederschap te gedragen.",
    "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de raison et de "
    "conscience et doivent agir les uns envers les autres dans un esprit de fraternité.",
    "Todos los seres humanos nacen libres e iguales en dignidad y derechos y, dotados como están de razón y "
    "conciencia, deben comportarse fraternalmente los unos con los otros.",
]


def corpus(n_docs: int, n_words: int = 160, seed: int = 0) -> list[str]:
    """Documents of words drawn from a Zipf-like vocabulary (frequent function words, long tail)."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    return [" ".join(rng.choices(vocab, weights, k=n_words)) for _ in range(n_docs)]


def shingle_jaccard(a: str, b: str, n: int = 5) -> float:
    def grams(t):
        w = t.lower().split()
        return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}

    ga, gb = grams(a), grams(b)
    return len(ga & gb) / len(ga | gb)


def near_copy(doc: str, rng: random.Random, fraction: float = 0.07) -> str:
    """Replace a contiguous span of words (an edited sentence): Jaccard ~0.8 on word 5-grams."""
    words = doc.split()
    k = max(1, int(len(words) * fraction))
    start = rng.randrange(0, len(words) - k)
    words[start : start + k] = [f"edit{rng.randrange(10**6)}" for _ in range(k)]
    return " ".join(words)


def test_shape_dtype_and_batch_independence():
    docs = corpus(20) + ["", "short doc", TRANSLATIONS[0]]
    sigs = minhash_signatures(docs, CFG)
    assert sigs.shape == (len(docs), CFG.num_perm) and sigs.dtype == np.uint32
    # a document's signature does not depend on its neighbours in the batch
    for i in (0, 7, 20, 21, 22):
        assert np.array_equal(sigs[i], minhash_signatures([docs[i]], CFG)[0])


@pytest.mark.parametrize("shingles_per_slice", [1, 70])
def test_slicing_does_not_change_signatures(monkeypatch, shingles_per_slice):
    """The numpy definition takes a slice of shingles at a time; documents cut by a slice get the same rows."""
    docs = corpus(30) + ["", "a few words"] + corpus(3, n_words=500, seed=9)
    expected = minhash._signatures_reference(docs, CFG)
    monkeypatch.setattr(minhash, "_CHUNK_ELEMENTS", CFG.num_perm * shingles_per_slice)  # documents get cut
    assert np.array_equal(minhash._signatures_reference(docs, CFG), expected)


def test_no_documents():
    sigs = minhash_signatures([], CFG)
    assert sigs.shape == (0, CFG.num_perm)
    assert find_duplicates(sigs, CFG).shape == (0,)


def test_planted_near_duplicates_found_distinct_kept():
    rng = random.Random(1)
    originals = corpus(300)
    picked = rng.sample(range(len(originals)), 100)
    copies = [near_copy(originals[i], rng) for i in picked]
    jaccards = [shingle_jaccard(originals[i], c) for i, c in zip(picked, copies)]
    assert 0.75 <= float(np.median(jaccards)) <= 0.85

    dup = find_duplicates(minhash_signatures(originals + copies, CFG), CFG)
    assert (dup[: len(originals)] == -1).all()  # no false positives among distinct documents
    found = dup[len(originals) :]
    recall = float(np.mean(found == np.array(picked)))  # attributed to the right original
    assert recall >= 0.9


def test_exact_and_first_occurrence_kept():
    docs = corpus(5)
    order = [docs[0], docs[1], docs[0], docs[2], docs[1], docs[0]]
    assert find_duplicates(minhash_signatures(order, CFG), CFG).tolist() == [-1, -1, 0, -1, 1, 0]


def test_parallel_translations_do_not_match():
    dup = find_duplicates(minhash_signatures(TRANSLATIONS, CFG), CFG)
    assert (dup == -1).all()


def test_empty_documents_never_match_short_ones_do():
    sigs = minhash_signatures(["", "  ...  ", "two words", "Two  WORDS!", "other words"], CFG)
    assert (sigs[0] == SENTINEL).all() and (sigs[1] == SENTINEL).all()
    assert find_duplicates(sigs, CFG).tolist() == [-1, -1, -1, 2, -1]


def test_index_is_incremental():
    rng = random.Random(2)
    docs = corpus(40, seed=3)
    docs += [near_copy(d, rng, 0.03) for d in docs[:10]]
    sigs = minhash_signatures(docs, CFG)
    index = NearDuplicateIndex(CFG)
    parts = [index.add(sigs[:25]), index.add(sigs[25:])]
    assert len(index) == len(docs)
    assert np.array_equal(np.concatenate(parts), find_duplicates(sigs, CFG))
    assert (np.concatenate(parts)[40:] == np.arange(10)).all()


def test_deterministic_across_processes():
    docs = corpus(3, seed=5) + TRANSLATIONS[:2]
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from stages.ingest.minhash import DedupConfig, minhash_signatures;"
        "print(json.dumps(minhash_signatures(json.loads(sys.stdin.read()), DedupConfig()).tolist()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO)],
        input=json.dumps(docs), capture_output=True, text=True, check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    ).stdout  # fmt: skip
    assert np.array_equal(np.array(json.loads(out), dtype=np.uint32), minhash_signatures(docs, CFG))


def test_seed_changes_signatures():
    docs = corpus(2)
    assert not np.array_equal(minhash_signatures(docs, CFG), minhash_signatures(docs, DedupConfig(seed=2)))


def test_exact_key():
    assert exact_key("Hello   World\n\nfoo") == exact_key("  hello world foo ")
    assert exact_key("Hello World") != exact_key("Hello World!")
    assert len(exact_key("")) == 32


def test_config_validation():
    assert DedupConfig(num_perm=64, bands=8, rows=8).num_perm == 64
    with pytest.raises(ValueError):
        DedupConfig(num_perm=128, bands=10, rows=8)
    with pytest.raises(ValueError):
        DedupConfig(threshold=0)
    with pytest.raises(ValueError):
        DedupConfig(shingle=5)


WORD_EDGE_CASES = [
    "", " \n\t ", "a", "İstanbul ΣΊΣΥΦΟΣ ß ǅ ﬁ", "snake_case __ _", "l'homme il-kelb 1,5 e.g.",
    "² ③ ٣٤ 𝐀𝐁 😀 𐍈𐍈 \u0915\u093f", "a\u00a0b\u2003c", "\ud800 lone \udfff surrogates", "x" * 3000,
    "ΟΔΟΣ ΟΔΟΣ. Σ ΑΣ.Σ", "words before İ and after", "words before 😀 and after", "𐐀𐐁 Deseret 𐐨",  # str.lower() ...
    "ẞ K Ω Ꭰ ǈ ᾈ Ⅻ Ⓐ",  # ... and single code points whose lower case is another block's
]


def _random_texts(n: int = 3000) -> list[str]:
    """Short texts over characters where lower-casing and word or space classes meet, mixed with plain words."""
    alphabet = ["a", "B", "Σ", "σ", "İ", "I", "ẞ", "K", "Ω", "Ꭰ", "ǅ", "_", "1", "٣", "'", "-", " ", "\u00a0", "\u3000",
                "\n", "\x1c", "\u0307", "😀", "𐐀", "\ud800", "word", "Wort", "λέξη"]
    rng = random.Random(3)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 15))) for _ in range(n)]


@pytest.mark.skipif(not minhash.COMPILED, reason="the C extension was not built (no C compiler)")
def test_compiled_dedup_keys_match_the_definitions(udhr_dir):
    """_dedupkeys.c against `_word_hashes_reference`, `_signatures_reference` and `exact_key` on the UDHR in its
    500+ languages (many scripts), with n-grams longer and shorter than some documents and other constants."""
    from tests.ingest.test_wordstats import udhr_texts

    texts = WORD_EDGE_CASES + ["\x1c\x1d\x1e\x1f\x85 \u3000end\u200b", "one two three four"] + udhr_texts(udhr_dir) + _random_texts()
    configs = [CFG, DedupConfig(ngram=1, num_perm=7, bands=7, rows=1, seed=5), DedupConfig(ngram=9, num_perm=64, bands=8, rows=8)]
    for i in range(0, len(texts), 97):
        batch = texts[i : i + 97]
        got, ref = minhash._word_hashes_compiled(batch), minhash._word_hashes_reference(batch)
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1]), batch[0][:80]
        keys = [exact_key(t) for t in batch]
        for cfg in configs:
            sigs = minhash._signatures_reference(batch, cfg)
            assert np.array_equal(minhash_signatures(batch, cfg), sigs), (cfg, batch[0][:80])
            both = minhash.dedup_keys(batch, cfg)
            assert both[0] == keys and np.array_equal(both[1], sigs), (cfg, batch[0][:80])
        assert minhash.exact_keys(batch) == keys, batch[0][:80]


def test_dedup_keys_compiled_where_a_compiler_exists():
    import shutil
    import sysconfig

    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine")
    assert minhash.COMPILED, "stages/ingest/_dedupkeys.c did not build: run `pip install -e .` and read its errors"

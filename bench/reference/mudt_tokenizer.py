"""Maltese word tokens for the datatrove reference, by the tokenization rules of the treebank Stanza learned.

datatrove gives Maltese (`mlt_Latn`) to Stanza, whose tokenizer model is downloaded on first use and cannot be
installed from a package registry, so the reference cannot run it offline. Its model is trained on UD Maltese
MUDT, whose rules are written down (universaldependencies.org/mt: "Tokenization and Word Segmentation"):
  - whitespace delimits tokens, punctuation is a token of its own;
  - the definite article keeps its hyphen and is a token: "il-" "Parlament", and so are its assimilated forms
    and the prepositions fused with it ("is-", "tal-", "fil-", "mill-", "għall-", ...);
  - the apostrophe closes the proclitic prepositions b', f', m', s', t' (and the particle "ta'");
  - a comma splits a number: "1,500" is "1" "," "500".
FineWeb-2's Maltese settings were computed on such tokens: its stop words are "l-", "tal-", "ta'", "il-",
"fl-", "fil-", "mill-", and its threshold on the share of tokens with a letter (0.823) assumes "il-" is one
token with a letter, not "il" and a "-".

This tokenizer is datatrove's own fallback (spaCy's multi-language "xx" tokenizer, WhitespaceTokenizer) with
those rules applied to its tokens. It is an approximation of the Stanza model, not the model: a learned
tokenizer can differ on rare forms (a hyphenated compound that is not an article, a quote closed by an
apostrophe). It runs only in the reference venv (it imports datatrove).
"""

from __future__ import annotations

import re

from datatrove.utils.word_tokenizers import WhitespaceTokenizer, strip_strings

# The article and its fused forms end in "l" or in the consonant it assimilates to (ċ d n r s t x ż z):
# il- l- is- s- iċ- tal- tas- fil- fl- fis- mill- mis- għall- lill- sal- mal- bħall- dal- ġol- ...
_ARTICLE = re.compile(r"(?i)^[^\W\d_]{0,5}(?:l|ċ|d|n|r|s|t|x|ż|z)$")
_PROCLITIC = re.compile(r"(?i)^(?:b|f|m|s|t|ta|sa|bħa|ma)$")
_APOSTROPHES = ("'", "\u2019")
_NUMBER_WITH_COMMAS = re.compile(r"^\d+(?:,\d+)+$")
_GLUED = re.compile(r"^([^\W\d_]{1,6})(-|'|\u2019)(\w.*)$")


def mudt_tokens(tokens: list[tuple[str, str]]) -> list[str]:
    """MUDT tokens from (token, whitespace after it) pairs of a finer tokenizer."""
    out: list[str] = []
    i, n = 0, len(tokens)
    while i < n:
        tok, ws = tokens[i]
        nxt = tokens[i + 1] if i + 1 < n else None
        if nxt is not None and not ws and nxt[0] == "-" and not nxt[1] and i + 2 < n and tokens[i + 2][0][:1].isalnum() \
                and _ARTICLE.match(tok):
            out.append(tok + "-")  # il - Parlament -> il- Parlament
            i += 2
            continue
        if nxt is not None and not ws and nxt[0] in _APOSTROPHES and _PROCLITIC.match(tok):
            out.append(tok + nxt[0])  # ta ' -> ta'; b ' -> b'
            i += 2
            continue
        glued = _GLUED.match(tok)  # spaCy keeps "fl-2020", "b'maġġoranza" whole
        if glued and (_ARTICLE.match(glued[1]) if glued[2] == "-" else _PROCLITIC.match(glued[1])):
            out += [glued[1] + glued[2], glued[3]]
        elif _NUMBER_WITH_COMMAS.match(tok):
            out.extend(part for piece in tok.split(",") for part in (piece, ","))
            out.pop()
        else:
            out.append(tok)
        i += 1
    return out


class MudtTokenizer(WhitespaceTokenizer):
    """datatrove's fallback word tokenizer with UD Maltese MUDT's token rules on top (see the module)."""

    def word_tokenize(self, text: str) -> list[str]:
        spacy_xx = self._spacy_xx
        nlp = spacy_xx.tokenizer
        with nlp.memory_zone():
            nlp.max_length = len(text) + 10
            pairs = [(t.text, t.whitespace_) for doc in spacy_xx._do_tokenize(text) for t in doc]
            return strip_strings(mudt_tokens(pairs))

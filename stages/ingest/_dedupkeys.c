/* The hashing behind the dedup keys of a batch of documents, in one pass over their characters each.

Why C: `minhash._word_hashes_reference` lower-cases each document, splits it with the regex `\w+` and takes
zlib.crc32 of each word's UTF-8 bytes, most of the signature's cost in Python. Here: str.lower() (CPython's
own, full case mapping), then one pass over the code points, encoding each word to UTF-8 and updating its CRC-32
on the fly. `signatures` goes on to the word n-grams and the MinHash permutations
(`minhash._signatures_reference`) without leaving C, one document's shingles at a time against the permutation
constants. `canonical_texts` is `minhash.exact_key`'s canonical form (" ".join(text.lower().split()) encoded as
UTF-8), which in Python builds a str per word. `dedup_keys` does both for the documents step in one pass per
text that lower-cases each code point through a table filled by str.lower() itself, without building the
lower-cased str (texts the table cannot answer, see keys_through_tables, take str.lower() as a whole).

Exactness: the Python functions are the definitions; tests compare both on the UDHR in its 500+ languages and on
edge cases. CPython's `re` defines `\w` for str patterns as Py_UNICODE_ISALNUM or '_' (is_word below), and
str.split() splits on Py_UNICODE_ISSPACE; the CRC is zlib's (CRC-32/ISO-HDLC: reflected polynomial 0xEDB88320,
initial and final value 0xFFFFFFFF); lone surrogates are never word characters and are encoded as
"surrogatepass" does (three bytes), so canonical bytes equal the Python ones. All MinHash arithmetic is
unsigned 64-bit, wrapping as numpy's uint64 does.

Build: an optional extension (pyproject.toml); without a C compiler the package uses the Python definitions.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_unicode_kinds.h"

static uint32_t crc_table[256];
static unsigned char bmp_word[0x10000];

static int classify(Py_UCS4 ch) { return ch == '_' || Py_UNICODE_ISALNUM(ch); }
static inline int is_word(Py_UCS4 ch) { return ch < 0x10000 ? bmp_word[ch] : classify(ch); }

static inline uint32_t crc_byte(uint32_t crc, unsigned char b) { return crc_table[(crc ^ b) & 0xFF] ^ (crc >> 8); }

static inline uint32_t crc_code_point(uint32_t crc, Py_UCS4 ch) {
    if (ch < 0x80) return crc_byte(crc, (unsigned char)ch);
    if (ch < 0x800) {
        crc = crc_byte(crc, (unsigned char)(0xC0 | (ch >> 6)));
        return crc_byte(crc, (unsigned char)(0x80 | (ch & 0x3F)));
    }
    if (ch < 0x10000) {
        crc = crc_byte(crc, (unsigned char)(0xE0 | (ch >> 12)));
        crc = crc_byte(crc, (unsigned char)(0x80 | ((ch >> 6) & 0x3F)));
        return crc_byte(crc, (unsigned char)(0x80 | (ch & 0x3F)));
    }
    crc = crc_byte(crc, (unsigned char)(0xF0 | (ch >> 18)));
    crc = crc_byte(crc, (unsigned char)(0x80 | ((ch >> 12) & 0x3F)));
    crc = crc_byte(crc, (unsigned char)(0x80 | ((ch >> 6) & 0x3F)));
    return crc_byte(crc, (unsigned char)(0x80 | (ch & 0x3F)));
}

typedef struct {
    uint32_t *data;
    Py_ssize_t len, cap;
} Buffer;

static int push(Buffer *b, uint32_t v) {
    if (b->len == b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : 4096;
        uint32_t *grown = PyMem_Realloc(b->data, cap * sizeof(uint32_t));
        if (!grown) return -1;
        b->data = grown;
        b->cap = cap;
    }
    b->data[b->len++] = v;
    return 0;
}

/* text.lower() of a list item that must be a str; NULL with an exception set otherwise. */
static PyObject *lowered(PyObject *text) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "expected a list of str");
        return NULL;
    }
    return PyObject_CallMethod(text, "lower", NULL);
}

/* Appends the CRC-32 of every \w+ word of `low` (a lower-cased str) to `hashes`; -1 with an exception set on
   failure. */
static int append_word_hashes_of(PyObject *low, Buffer *hashes) {
    int kind = PyUnicode_KIND(low);
    const void *data = PyUnicode_DATA(low);
    Py_ssize_t n = PyUnicode_GET_LENGTH(low), i = 0;
    while (i < n) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (!is_word(ch)) {
            i++;
            continue;
        }
        uint32_t crc = 0xFFFFFFFFu;
        while (i < n && is_word(ch = PyUnicode_READ(kind, data, i))) {
            crc = crc_code_point(crc, ch);
            i++;
        }
        if (push(hashes, crc ^ 0xFFFFFFFFu) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* Appends the CRC-32 of every \w+ word of text.lower() to `hashes`; -1 with an exception set on failure. */
static int append_word_hashes(PyObject *text, Buffer *hashes) {
    PyObject *low = lowered(text);
    if (!low) return -1;
    int rc = append_word_hashes_of(low, hashes);
    Py_DECREF(low);
    return rc;
}

/* word_hashes(texts: list[str]) -> (bytes of uint32 word hashes of all documents in order, bytes of int64 word
   counts per document) */
static PyObject *word_hashes(PyObject *self, PyObject *texts) {
    if (!PyList_Check(texts)) {
        PyErr_SetString(PyExc_TypeError, "word_hashes takes a list of str");
        return NULL;
    }
    Py_ssize_t n_docs = PyList_GET_SIZE(texts);
    PyObject *counts = PyBytes_FromStringAndSize(NULL, n_docs * (Py_ssize_t)sizeof(int64_t));
    if (!counts) return NULL;
    int64_t *count = (int64_t *)PyBytes_AS_STRING(counts);
    Buffer hashes = {NULL, 0, 0};
    for (Py_ssize_t d = 0; d < n_docs; d++) {
        Py_ssize_t before = hashes.len;
        if (append_word_hashes(PyList_GET_ITEM(texts, d), &hashes) < 0) goto fail;
        count[d] = (int64_t)(hashes.len - before);
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)hashes.data, hashes.len * (Py_ssize_t)sizeof(uint32_t));
    PyMem_Free(hashes.data);
    if (!out) {
        Py_DECREF(counts);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, out, counts);
    Py_DECREF(out);
    Py_DECREF(counts);
    return result;
fail:
    PyMem_Free(hashes.data);
    Py_DECREF(counts);
    return NULL;
}

/* Permutation k of a 32-bit shingle s is the top 32 bits of a_k * s + b_k mod 2^64, and a signature entry is the
   minimum over the shingles. The top 32 bits are monotonic in the 64-bit value, so the minimum of the top halves
   is the top half of the minimum, and they follow from 32-bit halves of a_k = ah * 2^32 + al and b_k = bh * 2^32 + bl:
       t = al * s + bl               (< 2^64: no overflow)
       top = ah * s + bh + (t >> 32)  mod 2^32
   one widening 32 x 32 -> 64 multiply and one 32-bit multiply per entry, which compilers vectorise on every common
   target (SSE2/AVX2 pmuludq, NEON umull); a plain 64-bit multiply has no vector form before AVX-512. Built for
   AVX2 as well where the compiler supports function multiversioning: the CPU picks at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void permute_min(uint32_t s, Py_ssize_t num_perm, const uint32_t *restrict ah, const uint32_t *restrict al,
                        const uint32_t *restrict bh, const uint32_t *restrict bl, uint32_t *restrict minima) {
    for (Py_ssize_t k = 0; k < num_perm; k++) {
        uint64_t t = (uint64_t)al[k] * s + bl[k];
        uint32_t top = ah[k] * s + bh[k] + (uint32_t)(t >> 32);
        minima[k] = top < minima[k] ? top : minima[k];
    }
}

/* One document's signature from its word hashes: the minima are taken in place in `sig`, so it starts as the
   sentinel, which is what a document without words keeps. */
static void signature_of(const Buffer *words, Py_ssize_t ngram, const uint64_t *mult, Py_ssize_t num_perm,
                         const uint32_t *halves, uint32_t *sig) {
    const uint32_t *ah = halves, *al = ah + num_perm, *bh = al + num_perm, *bl = bh + num_perm;
    Py_ssize_t n = words->len;
    memset(sig, 0xFF, num_perm * sizeof(uint32_t));
    if (n == 0) return;
    Py_ssize_t windows = n >= ngram ? n - ngram + 1 : 1;
    for (Py_ssize_t p = 0; p < windows; p++) {
        uint64_t gram = 0;
        for (Py_ssize_t i = 0; i < ngram && p + i < n; i++) gram += (uint64_t)words->data[p + i] * mult[i];
        permute_min((uint32_t)(gram >> 32), num_perm, ah, al, bh, bl, sig);
    }
}

/* The checked arguments of signatures() and dedup_keys(): the constants split into 32-bit halves (ah, al, bh, bl
   of num_perm each, PyMem_Malloc'ed) and the output; 0, or -1 with an exception set. */
static int minhash_setup(PyObject *texts, Py_buffer *mult_buf, Py_buffer *a_buf, Py_buffer *b_buf, Py_buffer *out_buf,
                         const char *who, Py_ssize_t *ngram, Py_ssize_t *num_perm, uint32_t **halves) {
    *ngram = mult_buf->len / (Py_ssize_t)sizeof(uint64_t), *num_perm = a_buf->len / (Py_ssize_t)sizeof(uint64_t);
    if (*ngram < 1 || *num_perm < 1 || b_buf->len != a_buf->len || mult_buf->len % sizeof(uint64_t) ||
        a_buf->len % sizeof(uint64_t)) {
        PyErr_Format(PyExc_ValueError, "%s: word_mult and a, b must be non-empty uint64 arrays, a and b alike", who);
        return -1;
    }
    if (out_buf->len != PyList_GET_SIZE(texts) * *num_perm * (Py_ssize_t)sizeof(uint32_t)) {
        PyErr_Format(PyExc_ValueError, "%s: out must hold len(texts) x num_perm uint32 values", who);
        return -1;
    }
    uint32_t *h = PyMem_Malloc(4 * *num_perm * sizeof(uint32_t));
    if (!h) {
        PyErr_NoMemory();
        return -1;
    }
    const uint64_t *a = (const uint64_t *)a_buf->buf, *b = (const uint64_t *)b_buf->buf;
    Py_ssize_t np = *num_perm;
    for (Py_ssize_t k = 0; k < np; k++) {
        h[k] = (uint32_t)(a[k] >> 32), h[np + k] = (uint32_t)a[k], h[2 * np + k] = (uint32_t)(b[k] >> 32),
        h[3 * np + k] = (uint32_t)b[k];
    }
    *halves = h;
    return 0;
}

/* What signatures() and dedup_keys() hold until they return, given back on every path. */
static void minhash_release(Buffer *words, uint32_t *halves, Py_buffer *mult_buf, Py_buffer *a_buf, Py_buffer *b_buf,
                            Py_buffer *out_buf) {
    PyMem_Free(words->data);
    PyMem_Free(halves);
    PyBuffer_Release(mult_buf);
    PyBuffer_Release(a_buf);
    PyBuffer_Release(b_buf);
    PyBuffer_Release(out_buf);
}

/* signatures(texts: list[str], word_mult: bytes, a: bytes, b: bytes, out: writable buffer) -> None: fills `out`, a
   C-contiguous (len(texts), num_perm) uint32 array. word_mult: ngram uint64 n-gram multipliers; a, b: num_perm
   uint64 permutation constants (native byte order).
   A document's shingles are its windows of ngram words (one window of all its words when it has fewer), each
   sum_i crc(word_i) * word_mult[i] mod 2^64 shifted right by 32; an entry is the top 32 bits of the minimum of
   a_k * shingle + b_k mod 2^64; a document without words gets 0xFFFFFFFF everywhere. */
static PyObject *signatures(PyObject *self, PyObject *args) {
    PyObject *texts;
    Py_buffer mult_buf, a_buf, b_buf, out_buf;
    if (!PyArg_ParseTuple(args, "O!y*y*y*w*", &PyList_Type, &texts, &mult_buf, &a_buf, &b_buf, &out_buf)) return NULL;
    PyObject *result = NULL;
    uint32_t *halves = NULL;
    Buffer words = {NULL, 0, 0};
    Py_ssize_t ngram, num_perm;
    if (minhash_setup(texts, &mult_buf, &a_buf, &b_buf, &out_buf, "signatures", &ngram, &num_perm, &halves) < 0) goto done;
    uint32_t *sig = (uint32_t *)out_buf.buf;
    for (Py_ssize_t d = 0; d < PyList_GET_SIZE(texts); d++, sig += num_perm) {
        words.len = 0;
        if (append_word_hashes(PyList_GET_ITEM(texts, d), &words) < 0) goto done;
        signature_of(&words, ngram, (const uint64_t *)mult_buf.buf, num_perm, halves, sig);
    }
    result = Py_NewRef(Py_None);
done:
    minhash_release(&words, halves, &mult_buf, &a_buf, &b_buf, &out_buf);
    return result;
}

static inline char *put_utf8(char *o, Py_UCS4 ch) {
    if (ch < 0x80) {
        *o++ = (char)ch;
    } else if (ch < 0x800) {
        *o++ = (char)(0xC0 | (ch >> 6));
        *o++ = (char)(0x80 | (ch & 0x3F));
    } else if (ch < 0x10000) {
        *o++ = (char)(0xE0 | (ch >> 12));
        *o++ = (char)(0x80 | ((ch >> 6) & 0x3F));
        *o++ = (char)(0x80 | (ch & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (ch >> 18));
        *o++ = (char)(0x80 | ((ch >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((ch >> 6) & 0x3F));
        *o++ = (char)(0x80 | (ch & 0x3F));
    }
    return o;
}

/* Room in `*scratch` for the canonical text of n code points: at most 4 bytes each, spaces included. 0, or -1 with
   an exception set. */
static int reserve(char **scratch, Py_ssize_t *cap, Py_ssize_t n) {
    if (4 * n + 1 > *cap) {
        char *grown = PyMem_Realloc(*scratch, 4 * n + 1);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        *scratch = grown;
        *cap = 4 * n + 1;
    }
    return 0;
}

/* " ".join(low.split()).encode("utf-8", "surrogatepass") of a lower-cased str, built in `*scratch` (grown as
   needed); NULL with an exception set on failure. */
static PyObject *canonical_of(PyObject *low, char **scratch, Py_ssize_t *cap) {
    int kind = PyUnicode_KIND(low);
    const void *data = PyUnicode_DATA(low);
    Py_ssize_t n = PyUnicode_GET_LENGTH(low);
    if (reserve(scratch, cap, n) < 0) return NULL;
    char *o = *scratch;
    for (Py_ssize_t i = 0; i < n;) {
        while (i < n && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))) i++;
        if (i == n) break;
        if (o != *scratch) *o++ = ' ';
        Py_UCS4 ch;
        while (i < n && !Py_UNICODE_ISSPACE(ch = PyUnicode_READ(kind, data, i))) {
            o = put_utf8(o, ch);
            i++;
        }
    }
    return PyBytes_FromStringAndSize(*scratch, o - *scratch);
}

/* canonical_texts(texts: list[str]) -> list[bytes]: " ".join(text.lower().split()).encode("utf-8", "surrogatepass")
   of each text. */
static PyObject *canonical_texts(PyObject *self, PyObject *texts) {
    if (!PyList_Check(texts)) {
        PyErr_SetString(PyExc_TypeError, "canonical_texts takes a list of str");
        return NULL;
    }
    Py_ssize_t n_docs = PyList_GET_SIZE(texts);
    PyObject *result = PyList_New(n_docs);
    if (!result) return NULL;
    char *scratch = NULL;
    Py_ssize_t cap = 0;
    for (Py_ssize_t d = 0; d < n_docs; d++) {
        PyObject *low = lowered(PyList_GET_ITEM(texts, d));
        if (!low) goto fail;
        PyObject *bytes = canonical_of(low, &scratch, &cap);
        Py_DECREF(low);
        if (!bytes) goto fail;
        PyList_SET_ITEM(result, d, bytes);
    }
    PyMem_Free(scratch);
    return result;
fail:
    PyMem_Free(scratch);
    Py_DECREF(result);
    return NULL;
}

/* str.lower() a code point at a time, for dedup_keys: the lower case of each BMP code point on its own (lower_bmp)
   and the classes of that lower case (lower_flags: L_WORD for \w, L_SPACE for str.split), filled at import by
   asking str.lower() itself. L_NEEDS_STR marks what a table cannot stand in for: a lower case that is not one BMP
   code point ("İ" -> "i̇") and "Σ", whose lower case depends on its neighbours (final sigma); a text with one of
   them, or with a code point above the BMP, is lower-cased by str.lower() as a whole, as before. */
enum { L_WORD = 1, L_SPACE = 2, L_NEEDS_STR = 4 };
static uint16_t lower_bmp[0x10000];
static unsigned char lower_flags[0x10000];

static int fill_lower_tables(void) {
    for (Py_UCS4 ch = 0; ch < 0x10000; ch++) {
        PyObject *one = PyUnicode_FromOrdinal((int)ch);
        if (!one) return -1;
        PyObject *low = PyObject_CallMethod(one, "lower", NULL);
        Py_DECREF(one);
        if (!low) return -1;
        Py_UCS4 l = PyUnicode_GET_LENGTH(low) == 1 ? PyUnicode_READ_CHAR(low, 0) : 0x110000;
        Py_DECREF(low);
        if (l >= 0x10000 || ch == 0x3A3) {
            lower_flags[ch] = L_NEEDS_STR;
            continue;
        }
        lower_bmp[ch] = (uint16_t)l;
        lower_flags[ch] = (unsigned char)((is_word(l) ? L_WORD : 0) | (Py_UNICODE_ISSPACE(l) ? L_SPACE : 0));
    }
    return 0;
}

/* The word hashes (appended to `words`) and the canonical text (into `out`, room for 4 bytes a code point and
   one) of a text not lower-cased, each code point lower-cased through the tables in the same pass: what
   append_word_hashes_of() and canonical_of() give for text.lower(). 0 with the canonical text's length in *len;
   1, unfinished, when a code point needs str.lower(); -1 when out of memory (no exception set). */
SPECIALISED int keys_through_tables(int kind, const void *data, Py_ssize_t n, Buffer *words, char *out, Py_ssize_t *len) {
    char *o = out;
    int in_word = 0, space = 0;
    uint32_t crc = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (ch >= 0x10000 || (lower_flags[ch] & L_NEEDS_STR)) return 1;
        unsigned char f = lower_flags[ch];
        Py_UCS4 low = lower_bmp[ch];
        if (f & L_WORD) {
            if (!in_word) crc = 0xFFFFFFFFu, in_word = 1;
            crc = crc_code_point(crc, low);
        } else if (in_word) {
            if (push(words, crc ^ 0xFFFFFFFFu) < 0) return -1;
            in_word = 0;
        }
        if (f & L_SPACE) {
            space = o != out;
        } else {
            if (space) *o++ = ' ', space = 0;
            o = put_utf8(o, low);
        }
    }
    if (in_word && push(words, crc ^ 0xFFFFFFFFu) < 0) return -1;
    *len = o - out;
    return 0;
}

/* One text's canonical bytes, its word hashes in `words` (emptied first): through the tables, or through
   str.lower() where they cannot answer. NULL with an exception set on failure. */
static PyObject *keys_of(PyObject *text, Buffer *words, char **scratch, Py_ssize_t *cap) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "expected a list of str");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), len;
    if (reserve(scratch, cap, n) < 0) return NULL;
    words->len = 0;
    int rc = DISPATCH(keys_through_tables, PyUnicode_KIND(text), PyUnicode_DATA(text), n, words, *scratch, &len);
    if (rc < 0) return PyErr_NoMemory();
    if (rc == 0) return PyBytes_FromStringAndSize(*scratch, len);
    words->len = 0;
    PyObject *low = lowered(text);
    if (!low) return NULL;
    PyObject *bytes = append_word_hashes_of(low, words) < 0 ? NULL : canonical_of(low, scratch, cap);
    Py_DECREF(low);
    return bytes;
}

/* dedup_keys(texts, word_mult, a, b, out) -> list[bytes]: what signatures() and canonical_texts() give, in one
   pass over each text that lower-cases it on the way (keys_through_tables), instead of a lower-cased copy
   scanned twice. */
static PyObject *dedup_keys(PyObject *self, PyObject *args) {
    PyObject *texts;
    Py_buffer mult_buf, a_buf, b_buf, out_buf;
    if (!PyArg_ParseTuple(args, "O!y*y*y*w*", &PyList_Type, &texts, &mult_buf, &a_buf, &b_buf, &out_buf)) return NULL;
    PyObject *result = NULL, *canonical = NULL;
    uint32_t *halves = NULL;
    Buffer words = {NULL, 0, 0};
    char *scratch = NULL;
    Py_ssize_t ngram, num_perm, cap = 0, n_docs = PyList_GET_SIZE(texts);
    if (minhash_setup(texts, &mult_buf, &a_buf, &b_buf, &out_buf, "dedup_keys", &ngram, &num_perm, &halves) < 0) goto done;
    if (!(canonical = PyList_New(n_docs))) goto done;
    uint32_t *sig = (uint32_t *)out_buf.buf;
    for (Py_ssize_t d = 0; d < n_docs; d++, sig += num_perm) {
        PyObject *bytes = keys_of(PyList_GET_ITEM(texts, d), &words, &scratch, &cap);
        if (!bytes) goto done;
        PyList_SET_ITEM(canonical, d, bytes);
        signature_of(&words, ngram, (const uint64_t *)mult_buf.buf, num_perm, halves, sig);
    }
    result = canonical;
    canonical = NULL;
done:
    Py_XDECREF(canonical);
    PyMem_Free(scratch);
    minhash_release(&words, halves, &mult_buf, &a_buf, &b_buf, &out_buf);
    return result;
}

static PyMethodDef methods[] = {
    {"word_hashes", word_hashes, METH_O,
     "word_hashes(texts) -> (uint32 hashes, int64 counts): zlib.crc32 of the UTF-8 bytes of each \\w+ word of "
     "each text.lower(), all documents in order, and the number of words per document."},
    {"signatures", signatures, METH_VARARGS,
     "signatures(texts, word_mult, a, b, out) fills out, (len(texts), len(a) // 8) uint32, with the MinHash "
     "signatures over word n-grams (n = len(word_mult) // 8) that minhash._signatures_reference computes."},
    {"dedup_keys", dedup_keys, METH_VARARGS,
     "dedup_keys(texts, word_mult, a, b, out) -> canonical texts: signatures() into out and canonical_texts() "
     "returned, in one pass over each text."},
    {"canonical_texts", canonical_texts, METH_O,
     "canonical_texts(texts) -> list of ' '.join(text.lower().split()) as UTF-8 bytes (surrogatepass)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dedupkeys", NULL, -1, methods};

PyMODINIT_FUNC PyInit__dedupkeys(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    for (Py_UCS4 ch = 0; ch < 0x10000; ch++) bmp_word[ch] = (unsigned char)classify(ch);
    if (fill_lower_tables() < 0) return NULL;
    return PyModule_Create(&module);
}

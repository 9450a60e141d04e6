/* Word statistics of one document in a single pass over its characters: what the quality filters need.

Why C: counting words, their lengths and how often each occurs is the part of the ingest chain that runs per
word; in Python (str.split, one str method call per token, a Counter) it costs about as much as language
identification. Here it is one pass over the characters with a small hash table (bench/ingest_bench.py),
releasing the GIL on long texts.

Exactness: `wordstats.word_stats_reference` in Python is the definition; tests compare the two on the UDHR in its
500+ languages and on crafted edge cases. A word is a match of the regex `\w+(?:['’\-]\w+)*`: CPython's `re`
defines `\w` for str patterns as Py_UNICODE_ISALNUM or '_', which is what is_word() asks. Whitespace is
Py_UNICODE_ISSPACE, as for str.split(); a digit is Py_UNICODE_ISDIGIT, as for str.isdigit().

Build: an optional extension (pyproject.toml); without a C compiler the package uses the Python reference.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_ssize_t start, len, count;
    uint64_t hash;
} Entry;

typedef struct {
    Py_ssize_t n_tokens, n_words, word_chars, digit_words;
    Py_ssize_t distinct, distinct_chars, max_word_mass, repeated_run_chars;
} Stats;

/* Character classes of the Basic Multilingual Plane, filled once at import from CPython's own predicates
   (one table load per character instead of up to five Unicode database look-ups); other planes ask them. */
enum { WORD = 1, SPACE = 2, DIGIT = 4 };
static unsigned char bmp_class[0x10000];

static unsigned char classify(Py_UCS4 ch) {
    return (unsigned char)(((ch == '_' || Py_UNICODE_ISALNUM(ch)) ? WORD : 0) | (Py_UNICODE_ISSPACE(ch) ? SPACE : 0) |
                           (Py_UNICODE_ISDIGIT(ch) ? DIGIT : 0));
}

static inline unsigned char class_of(Py_UCS4 ch) { return ch < 0x10000 ? bmp_class[ch] : classify(ch); }
static inline int is_word(Py_UCS4 ch) { return class_of(ch) & WORD; }
static inline int is_joiner(Py_UCS4 ch) { return ch == '\'' || ch == 0x2019 || ch == '-'; }

/* Returns 0, or -1 when out of memory (no Python API is called: this runs without the GIL). */
static int scan(int kind, const void *data, Py_ssize_t n, Py_ssize_t run_length, Stats *s) {
    Py_ssize_t cap = 64, n_entries = 0, entries_cap = 32, occ_cap = 64, n_occ = 0;
    Py_ssize_t *table = PyMem_RawMalloc(cap * sizeof(Py_ssize_t)); /* entry index + 1; 0 = empty */
    Entry *entries = PyMem_RawMalloc(entries_cap * sizeof(Entry));
    Py_ssize_t *occ = PyMem_RawMalloc(occ_cap * sizeof(Py_ssize_t)); /* entry index of each word, in order */
    int rc = -1;
    if (!table || !entries || !occ) goto done;
    memset(table, 0, cap * sizeof(Py_ssize_t));

    int in_token = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        unsigned char c = class_of(ch);
        if (c & SPACE) {
            in_token = 0;
            i++;
            continue;
        }
        if (!in_token) {
            s->n_tokens++;
            in_token = 1;
        }
        if (!(c & WORD)) {
            i++;
            continue;
        }
        /* a word starts here: \w+ then (joiner \w+)* */
        Py_ssize_t start = i;
        uint64_t h = 1469598103934665603ULL; /* FNV-1a over code points */
        int all_digits = 1;
        for (;;) {
            while (i < n && ((c = class_of(ch = PyUnicode_READ(kind, data, i))) & WORD)) {
                h = (h ^ ch) * 1099511628211ULL;
                all_digits &= (c & DIGIT) ? 1 : 0;
                i++;
            }
            if (i + 1 < n && is_joiner(ch) && is_word(PyUnicode_READ(kind, data, i + 1))) {
                h = (h ^ ch) * 1099511628211ULL;
                all_digits = 0;
                i++;
                continue;
            }
            break;
        }
        Py_ssize_t len = i - start;
        s->n_words++;
        s->word_chars += len;
        s->digit_words += all_digits;

        /* find or add the entry for this word */
        Py_ssize_t mask = cap - 1, slot = (Py_ssize_t)(h & (uint64_t)mask), found = -1;
        while (table[slot]) {
            Entry *e = &entries[table[slot] - 1];
            const char *chars = (const char *)data;
            if (e->hash == h && e->len == len &&
                memcmp(chars + e->start * kind, chars + start * kind, (size_t)(len * kind)) == 0) {
                found = table[slot] - 1;
                break;
            }
            slot = (slot + 1) & mask;
        }
        if (found < 0) {
            if (n_entries == entries_cap) {
                entries_cap *= 2;
                Entry *grown = PyMem_RawRealloc(entries, entries_cap * sizeof(Entry));
                if (!grown) goto done;
                entries = grown;
            }
            entries[n_entries] = (Entry){start, len, 0, h};
            found = n_entries++;
            table[slot] = found + 1;
            if (2 * n_entries > cap) { /* keep the load below 1/2: rehash into a table twice as large */
                Py_ssize_t new_cap = cap * 2, new_mask = new_cap - 1;
                Py_ssize_t *grown = PyMem_RawMalloc(new_cap * sizeof(Py_ssize_t));
                if (!grown) goto done;
                memset(grown, 0, new_cap * sizeof(Py_ssize_t));
                for (Py_ssize_t k = 0; k < n_entries; k++) {
                    Py_ssize_t t = (Py_ssize_t)(entries[k].hash & (uint64_t)new_mask);
                    while (grown[t]) t = (t + 1) & new_mask;
                    grown[t] = k + 1;
                }
                PyMem_RawFree(table);
                table = grown;
                cap = new_cap;
            }
        }
        entries[found].count++;
        if (n_occ == occ_cap) {
            occ_cap *= 2;
            Py_ssize_t *grown = PyMem_RawRealloc(occ, occ_cap * sizeof(Py_ssize_t));
            if (!grown) goto done;
            occ = grown;
        }
        occ[n_occ++] = found;
        in_token = 1;
    }

    for (Py_ssize_t k = 0; k < n_entries; k++) {
        Py_ssize_t mass = entries[k].count * entries[k].len;
        s->distinct_chars += entries[k].len;
        if (mass > s->max_word_mass) s->max_word_mass = mass;
    }
    s->distinct = n_entries;

    /* characters of the words in runs of >= run_length consecutive words that each occur more than once */
    if (run_length > 0 && n_entries < n_occ) {
        Py_ssize_t run = 0, run_chars = 0;
        for (Py_ssize_t k = 0; k <= n_occ; k++) {
            if (k < n_occ && entries[occ[k]].count > 1) {
                run++;
                run_chars += entries[occ[k]].len;
                continue;
            }
            if (run >= run_length) s->repeated_run_chars += run_chars;
            run = run_chars = 0;
        }
    }
    rc = 0;
done:
    PyMem_RawFree(table);
    PyMem_RawFree(entries);
    PyMem_RawFree(occ);
    return rc;
}

static PyObject *word_stats(PyObject *self, PyObject *args) {
    PyObject *text;
    Py_ssize_t run_length;
    if (!PyArg_ParseTuple(args, "Un:word_stats", &text, &run_length)) return NULL;
    Stats s = {0};
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int rc;
    if (n < 4096) {
        rc = scan(kind, data, n, run_length, &s);
    } else { /* long enough to be worth letting other threads run (the str stays alive: we hold `args`) */
        Py_BEGIN_ALLOW_THREADS
        rc = scan(kind, data, n, run_length, &s);
        Py_END_ALLOW_THREADS
    }
    if (rc < 0) return PyErr_NoMemory();
    return Py_BuildValue("(nnnnnnnn)", s.n_tokens, s.n_words, s.word_chars, s.digit_words, s.distinct,
                         s.distinct_chars, s.max_word_mass, s.repeated_run_chars);
}

static PyMethodDef methods[] = {
    {"word_stats", word_stats, METH_VARARGS,
     "word_stats(text, run_length) -> (n_tokens, n_words, word_chars, digit_words, distinct, distinct_chars, "
     "max_word_mass, repeated_run_chars); see stages/ingest/wordstats.py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wordstats", NULL, -1, methods};

PyMODINIT_FUNC PyInit__wordstats(void) {
    for (Py_UCS4 ch = 0; ch < 0x10000; ch++) bmp_class[ch] = classify(ch);
    return PyModule_Create(&module);
}

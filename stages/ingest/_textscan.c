/* Whole-text scans that decide whether a slower step has anything to do, one pass over the code points each.

Why C: normalisation asks of every document whether it holds a control character or a mojibake marker, a code
point that Unicode normalisation may change, or whitespace at a line's end (`settled`); PII redaction where its
first digit is, whether a digit follows an IBAN country code, and whether an IPv6 address (":"), an IPv4 address
(three dots between digits) or a phone number ("+", a "0" that starts a number) can be in it. Nearly every
document has none of them (or its digits late), so Python reads each text to the end for each question (the
normalisation also a split and a join). A table look-up per code point here answers each group in one pass.
The quality filters' line counts (`line_stats`: lines that start with a
bullet or end with an ellipsis, whether two lines are equal) replace a split, a strip per line and a set.

Exactness: the regexes are the definitions (`normalize._SUSPECT`, and in pii `_DIGIT`, `_IBAN_HINT`,
`_IPV4_HINT`, `_FREE_ZERO`); their character classes reach C as tables that the Python modules build from the
same character sets, so nothing is spelt twice (`normalize._settled_classes` asks `unicodedata` and str.isspace()
the same way; `quality._line_classes` str.isspace() and the bullets). Tests compare both on the UDHR in its 500+
languages, on crafted edge cases and on random text.
Above the Basic Multilingual Plane, which the tables cover, `\d` of a str pattern
is Py_UNICODE_ISDECIMAL and `\w` Py_UNICODE_ISALNUM or "_" in CPython's `re`, as here.

Build: an optional extension (pyproject.toml); without a C compiler the package runs the regexes.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_unicode_kinds.h"

/* Bits of the suspect table (normalize._suspect_classes): one byte per code point of the Basic Multilingual
   Plane; code points above it are in no class. A_CIRC, I_DIAER, RAQUO, IQUEST are the single characters of the
   two literal markers ("â" + punctuation, "ï»¿"). */
enum { CONTROL = 1, LEAD = 2, CONT = 4, PUNCT = 8, A_CIRC = 16, I_DIAER = 32, RAQUO = 64, IQUEST = 128 };

/* The table argument: a bytes object of exactly `size` bytes; NULL with an exception set otherwise. */
static const unsigned char *table_of(PyObject *obj, Py_ssize_t size, const char *who) {
    if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != size) {
        PyErr_Format(PyExc_ValueError, "%s: the table must be %zd bytes", who, size);
        return NULL;
    }
    return (const unsigned char *)PyBytes_AS_STRING(obj);
}

SPECIALISED unsigned char class_at(const unsigned char *cls, int kind, const void *data, Py_ssize_t i) {
    Py_UCS4 ch = PyUnicode_READ(kind, data, i);
    return ch < 0x10000 ? cls[ch] : 0;
}

static int check_args(PyObject *const *args, Py_ssize_t nargs, const char *who) {
    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s(text: str, table: bytes)", who);
        return -1;
    }
    return 0;
}

/* Whether normalize._SUSPECT matches at i, whose classes are c. */
SPECIALISED int suspect_at(int kind, const void *data, Py_ssize_t n, const unsigned char *cls, Py_ssize_t i,
                           unsigned char c) {
    if (c & CONTROL) return 1;
    unsigned char next = i + 1 < n ? class_at(cls, kind, data, i + 1) : 0;
    unsigned char after = i + 2 < n ? class_at(cls, kind, data, i + 2) : 0;
    return ((c & LEAD) && (next & CONT)) || ((c & A_CIRC) && (next & PUNCT) && (after & CONT)) ||
           ((c & I_DIAER) && (next & RAQUO) && (after & IQUEST));
}

SPECIALISED int suspect_in(int kind, const void *data, Py_ssize_t n, const unsigned char *cls) {
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = class_at(cls, kind, data, i);
        if ((c & (CONTROL | LEAD | A_CIRC | I_DIAER)) && suspect_at(kind, data, n, cls, i, c)) return 1;
    }
    return 0;
}

/* suspect(text, classes) -> bool: whether normalize._SUSPECT matches somewhere in text, i.e. a control character,
   a lead character (U+00C2-U+00D3) followed by a continuation character, "â" followed by one of "€‚ƒ„\x80-\x84"
   and a continuation character, or "ï»¿" (`classes` says which character is which). */
static PyObject *suspect(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args(args, nargs, "suspect") < 0) return NULL;
    const unsigned char *cls = table_of(args[1], 0x10000, "suspect");
    if (!cls) return NULL;
    PyObject *text = args[0];
    int found = DISPATCH(suspect_in, PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), cls);
    return PyBool_FromLong(found);
}

/* Bits of the second normalisation table (normalize._settled_classes): SPACE for str.isspace(); NFC and NFKC for
   a code point that normalising to that form leaves alone wherever it stands (see there); MARKER where the
   suspect table has CONTROL, LEAD, A_CIRC or I_DIAER (where a _SUSPECT match can start); NEWLINE for "\n". The
   loop below reads one table for nearly every code point and looks closer only at those with MARKER, NEWLINE or
   without the form's bit: whitespace at a line's end is found from the "\n" after it (a branch per space
   character would cost more than the scan). */
enum { SPACE = 1, NFC = 2, NFKC = 4, MARKER = 8, NEWLINE = 16 };

SPECIALISED int settled_in(int kind, const void *data, Py_ssize_t n, const unsigned char *cls,
                           const unsigned char *norm, unsigned char form) {
    if (n == 0) return 1;
    Py_UCS4 last = PyUnicode_READ(kind, data, n - 1);
    if (PyUnicode_READ(kind, data, 0) == '\n' || last == '\n' || (last < 0x10000 && (norm[last] & SPACE))) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (ch >= 0x10000) return 0;
        unsigned char m = norm[ch];
        if ((m & (MARKER | NEWLINE | form)) == form) continue; /* nearly every code point */
        if (!(m & form)) return 0;
        if ((m & MARKER) && suspect_at(kind, data, n, cls, i, cls[ch])) return 0;
        if (m & NEWLINE) { /* i > 0: the text does not start with "\n" */
            Py_UCS4 before = PyUnicode_READ(kind, data, i - 1);
            if (before != '\n' && before < 0x10000 && (norm[before] & SPACE)) return 0;
        }
    }
    return 1;
}

/* settled(text, classes, norm, form) -> bool: whether normalize.normalize_text has nothing to change in text: no
   _SUSPECT match (`classes`), only code points that the normal form leaves alone wherever they stand (bit `form`
   of `norm`), no whitespace at a line's end and no newline at either end. False also where it cannot tell (a
   code point above the Basic Multilingual Plane): the caller then takes the long way. */
static PyObject *settled(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "settled(text: str, classes: bytes, norm: bytes, form: int)");
        return NULL;
    }
    const unsigned char *cls = table_of(args[1], 0x10000, "settled");
    const unsigned char *norm = cls ? table_of(args[2], 0x10000, "settled") : NULL;
    if (!norm) return NULL;
    long form = PyLong_AsLong(args[3]);
    if (form != NFC && form != NFKC) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "settled: form must be 2 (NFC) or 4 (NFKC)");
        return NULL;
    }
    PyObject *text = args[0];
    int ok = DISPATCH(settled_in, PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), cls, norm,
                      (unsigned char)form);
    return PyBool_FromLong(ok);
}

/* Bits of the PII table (pii._hint_classes), one byte per code point of the Basic Multilingual Plane: DECIMAL for
   `\d`, NUMBER for `[\w+\-./,]` (what may not stand right before the "0" that starts a national phone number).
   Above the plane `\d` is Py_UNICODE_ISDECIMAL and `\w` is Py_UNICODE_ISALNUM or "_", as in CPython's `re`. */
enum { H_DECIMAL = 1, H_NUMBER = 2 };
/* What pii_hints finds, as bits. */
enum { IBAN = 1, IPV6 = 2, IPV4 = 4, PHONE = 8 };

SPECIALISED unsigned char hint_class(const unsigned char *cls, Py_UCS4 ch) {
    if (ch < 0x10000) return cls[ch];
    int decimal = Py_UNICODE_ISDECIMAL(ch) != 0;
    return (unsigned char)((decimal ? H_DECIMAL : 0) | (Py_UNICODE_ISALNUM(ch) ? H_NUMBER : 0));
}

/* Whether pii._IPV4_HINT (`\.\d{1,3}\.\d{1,3}\.\d`) matches at index i, which holds a ".". Each group is the
   whole run of digits after its dot: with four or more, no choice of 1-3 of them is followed by a dot. */
SPECIALISED int ipv4_at(int kind, const void *data, Py_ssize_t n, const unsigned char *cls, Py_ssize_t i) {
    Py_ssize_t j = i + 1;
    for (int group = 0; group < 2; group++) {
        Py_ssize_t start = j;
        while (j < n && j - start < 4 && (hint_class(cls, PyUnicode_READ(kind, data, j)) & H_DECIMAL)) j++;
        if (j == start || j - start > 3 || j >= n || PyUnicode_READ(kind, data, j) != '.') return 0;
        j++;
    }
    return j < n && (hint_class(cls, PyUnicode_READ(kind, data, j)) & H_DECIMAL);
}

/* One pass: the first decimal digit's index (-1: none) in *first, and the bits of what was found. */
SPECIALISED int pii_scan(int kind, const void *data, Py_ssize_t n, const unsigned char *cls,
                         const unsigned char *pairs, Py_ssize_t *first) {
    int found = 0;
    Py_ssize_t colons = 0;
    Py_UCS4 before = 0, prev = 0; /* the two code points before i (0: none) */
    unsigned char prev_class = 0;  /* prev's classes (0: none) */
    *first = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        unsigned char c = hint_class(cls, ch);
        if (c & H_DECIMAL) {
            if (*first < 0) *first = i;
            if (!(found & IBAN) && before >= 'A' && before <= 'Z' && prev >= 'A' && prev <= 'Z' &&
                pairs[(before - 'A') * 26 + (prev - 'A')])
                found |= IBAN;
            if (ch == '0' && !(prev_class & H_NUMBER)) found |= PHONE;
        } else if (ch == ':') {
            colons++;
            if (i && prev == ':') found |= IPV6;
        } else if (ch == '.') {
            if (!(found & IPV4) && ipv4_at(kind, data, n, cls, i)) found |= IPV4;
        } else if (ch == '+') {
            found |= PHONE;
        }
        before = prev, prev = ch, prev_class = c;
    }
    if (colons >= 7) found |= IPV6;
    return *first < 0 ? 0 : found;
}

/* pii_hints(text, classes, pairs) -> (first, iban, ipv6, ipv4, phone): the index of the first decimal digit (-1
   when there is none, and then False for the rest: every kind below needs a digit), and whether
   - iban: a decimal digit follows two ASCII capitals that `pairs` lists (26 x 26 bytes, nonzero for a listed
     pair: the IBAN country codes), i.e. pii._IBAN_HINT.search(text, first);
   - ipv6: "::" in text or text.count(":") >= 7;
   - ipv4: pii._IPV4_HINT.search(text);
   - phone: "+" in text or pii._FREE_ZERO.search(text) (a "0" not right after a character of `[\w+\-./,]`). */
static PyObject *pii_hints(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "pii_hints(text: str, classes: bytes, pairs: bytes)");
        return NULL;
    }
    const unsigned char *cls = table_of(args[1], 0x10000, "pii_hints");
    const unsigned char *pairs = cls ? table_of(args[2], 26 * 26, "pii_hints") : NULL;
    if (!pairs) return NULL;
    PyObject *text = args[0];
    Py_ssize_t first;
    int found = DISPATCH(pii_scan, PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), cls, pairs, &first);
    return Py_BuildValue("(nOOOO)", first, found & IBAN ? Py_True : Py_False, found & IPV6 ? Py_True : Py_False,
                         found & IPV4 ? Py_True : Py_False, found & PHONE ? Py_True : Py_False);
}

/* Bits of the line table (quality._line_classes), one byte per code point of the Basic Multilingual Plane:
   L_SPACE for str.isspace() (what str.strip() removes), L_BULLET for a character of quality._BULLET_CHARS, L_MARK
   for what the scan counts or splits at (".", "#", "…", "\n"). Above the plane: Py_UNICODE_ISSPACE, as
   str.isspace(), and nothing else. */
enum { L_SPACE = 1, L_BULLET = 2, L_MARK = 4 };

SPECIALISED unsigned char line_class(const unsigned char *cls, Py_UCS4 ch) {
    return ch < 0x10000 ? cls[ch] : (Py_UNICODE_ISSPACE(ch) ? L_SPACE : 0);
}

typedef struct {
    Py_ssize_t hashes, ellipses, lines, bullets, ellipsis_ends;
    uint64_t *line_hash; /* one per non-empty line: equal lines have equal hashes */
    Py_ssize_t capacity;
    uint64_t first[256]; /* line_hash until a text has more lines */
} LineStats;

static int add_line_hash(LineStats *st, uint64_t h) {
    if (st->lines == st->capacity) {
        Py_ssize_t capacity = st->capacity * 2;
        uint64_t *grown = st->line_hash == st->first ? PyMem_Malloc(capacity * sizeof(uint64_t))
                                                     : PyMem_Realloc(st->line_hash, capacity * sizeof(uint64_t));
        if (!grown) return -1;
        if (st->line_hash == st->first) memcpy(grown, st->first, sizeof(st->first));
        st->line_hash = grown, st->capacity = capacity;
    }
    st->line_hash[st->lines] = h;
    return 0;
}

/* The line [s, e) of text (no "\n" in it), stripped and, when something is left, counted and hashed. */
SPECIALISED int add_line(int kind, const void *data, Py_ssize_t s, Py_ssize_t e, const unsigned char *cls,
                         LineStats *st) {
    while (s < e && (line_class(cls, PyUnicode_READ(kind, data, s)) & L_SPACE)) s++;
    while (e > s && (line_class(cls, PyUnicode_READ(kind, data, e - 1)) & L_SPACE)) e--;
    if (s == e) return 0;
    if (line_class(cls, PyUnicode_READ(kind, data, s)) & L_BULLET) st->bullets++;
    Py_UCS4 last = PyUnicode_READ(kind, data, e - 1);
    if (last == 0x2026 || (last == '.' && e - s >= 3 && PyUnicode_READ(kind, data, e - 2) == '.' &&
                           PyUnicode_READ(kind, data, e - 3) == '.'))
        st->ellipsis_ends++;
    /* A hash of the length and of the first and last 8 code points (FNV-1a): equal lines have equal hashes, and
       lines of prose rarely share all of these. Hashing every code point cost more than Python's split and set. */
    uint64_t h = 14695981039346656037ULL ^ (uint64_t)(e - s);
    for (Py_ssize_t i = s; i < e && i < s + 8; i++) h = (h ^ PyUnicode_READ(kind, data, i)) * 1099511628211ULL;
    for (Py_ssize_t i = e - 8 > s + 8 ? e - 8 : s + 8; i < e; i++) h = (h ^ PyUnicode_READ(kind, data, i)) * 1099511628211ULL;
    if (add_line_hash(st, h) < 0) return -1;
    st->lines++;
    return 0;
}

SPECIALISED int line_scan(int kind, const void *data, Py_ssize_t n, const unsigned char *cls, LineStats *st) {
    Py_ssize_t line_start = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (ch >= 0x10000 || !(cls[ch] & L_MARK)) continue; /* nearly every code point: one look-up */
        if (ch == '.') { /* str.count("...") in a run of dots: non-overlapping */
            Py_ssize_t j = i;
            while (j < n && PyUnicode_READ(kind, data, j) == '.') j++;
            st->ellipses += (j - i) / 3, i = j - 1;
        } else if (ch == '#') st->hashes++;
        else if (ch == 0x2026) st->ellipses++;
        else { /* "\n" */
            if (add_line(kind, data, line_start, i, cls, st) < 0) return -1;
            line_start = i + 1;
        }
    }
    return add_line(kind, data, line_start, n, cls, st);
}

static int compare_hashes(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* line_stats(text, classes) -> (hashes, ellipses, lines, bullet_lines, ellipsis_lines, distinct): what
   quality.check_quality asks of a text's lines (`lines` = the non-empty lines of text.split("\n"), each
   stripped), in one pass: text.count("#"), text.count("...") + text.count("…"), len(lines), how many lines start
   with a bullet (`classes`), how many end with "..." or "…", and True when no two lines are equal (False when two
   may be: equal hashes; the caller then compares the lines themselves). */
static PyObject *line_stats(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args(args, nargs, "line_stats") < 0) return NULL;
    const unsigned char *cls = table_of(args[1], 0x10000, "line_stats");
    if (!cls) return NULL;
    PyObject *text = args[0];
    LineStats st = {0};
    st.line_hash = st.first, st.capacity = 256;
    int failed = DISPATCH(line_scan, PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), cls, &st);
    int distinct = 1;
    if (!failed && st.lines > 1) {
        qsort(st.line_hash, (size_t)st.lines, sizeof(uint64_t), compare_hashes);
        for (Py_ssize_t i = 1; i < st.lines && distinct; i++) distinct = st.line_hash[i] != st.line_hash[i - 1];
    }
    if (st.line_hash != st.first) PyMem_Free(st.line_hash);
    if (failed) return PyErr_NoMemory();
    return Py_BuildValue("(nnnnnO)", st.hashes, st.ellipses, st.lines, st.bullets, st.ellipsis_ends,
                         distinct ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"suspect", (PyCFunction)(void (*)(void))suspect, METH_FASTCALL,
     "suspect(text, classes) -> bool: whether normalize._SUSPECT matches in text (classes: normalize._suspect_classes())."},
    {"settled", (PyCFunction)(void (*)(void))settled, METH_FASTCALL,
     "settled(text, classes, norm, form) -> bool: whether normalize.normalize_text leaves text as it is."},
    {"pii_hints", (PyCFunction)(void (*)(void))pii_hints, METH_FASTCALL,
     "pii_hints(text, classes, pairs) -> (index of the first decimal digit or -1, iban, ipv6, ipv4, phone): pii.pii_hints."},
    {"line_stats", (PyCFunction)(void (*)(void))line_stats, METH_FASTCALL,
     "line_stats(text, classes) -> (hashes, ellipses, lines, bullet_lines, ellipsis_lines, distinct): quality.line_stats."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_textscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__textscan(void) {
    return PyModule_Create(&module);
}

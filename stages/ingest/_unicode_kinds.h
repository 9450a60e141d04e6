/* A scan of a str written once for any of its storage kinds (1, 2 or 4 bytes per code point) and inlined with a
   constant kind per call site: the compiler then drops PyUnicode_READ's switch from the loop, which reading
   with a run-time kind cannot. Shared by the ingest C extensions (_textscan.c, _dedupkeys.c).

   SPECIALISED int scan(int kind, const void *data, Py_ssize_t n, ...) { ... PyUnicode_READ(kind, data, i) ... }
   int r = DISPATCH(scan, PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), ...); */
#ifndef EUROPA_UNICODE_KINDS_H
#define EUROPA_UNICODE_KINDS_H

#if defined(__GNUC__)
#define SPECIALISED static inline __attribute__((always_inline))
#else
#define SPECIALISED static inline
#endif

#define DISPATCH(scan, kind, ...)                                                        \
    ((kind) == PyUnicode_1BYTE_KIND   ? scan(PyUnicode_1BYTE_KIND, __VA_ARGS__)          \
     : (kind) == PyUnicode_2BYTE_KIND ? scan(PyUnicode_2BYTE_KIND, __VA_ARGS__)          \
                                      : scan(PyUnicode_4BYTE_KIND, __VA_ARGS__))

#endif

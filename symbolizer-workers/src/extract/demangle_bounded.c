/*
 * GNU's C++ demangler (libiberty's cp-demangle.c, the one c++filt runs)
 * with a bound on what it writes.
 *
 * A mangled name's substitutions can refer to earlier ones that hold
 * substitutions in turn, so its demangled text can double with every
 * few bytes of name: a 423-byte name demangles to 49 MB, one of 600 bytes
 * to more memory than a machine has. Names come from files users upload,
 * so a demangler that allocates the whole text cannot be handed them.
 * libiberty's callback entry point writes the text in pieces instead, and
 * works on the stack alone (no heap), so leaving it with longjmp once the
 * text passes the bound loses nothing.
 */
#include <setjmp.h>
#include <stddef.h>
#include <string.h>

#include <libiberty/demangle.h>

struct bounded_text {
    char *buf;
    size_t len;
    size_t cap;
    jmp_buf full;
};

static void append(const char *piece, size_t n, void *opaque) {
    struct bounded_text *text = opaque;
    if (n > text->cap - text->len)
        longjmp(text->full, 1);
    memcpy(text->buf + text->len, piece, n);
    text->len += n;
}

/*
 * Demangles the NUL-terminated `mangled` into `buf` (`cap` bytes, not
 * NUL-terminated), printed as `abi::__cxa_demangle` prints it (parameters
 * and type encodings). Returns 0 with the text's length in `*len`, -1 when
 * the text is longer than `cap`, -2 when `mangled` is not a C++ name.
 */
int kiln_demangle_bounded(const char *mangled, char *buf, size_t cap, size_t *len) {
    struct bounded_text text;
    text.buf = buf;
    text.len = 0;
    text.cap = cap;
    if (setjmp(text.full) != 0)
        return -1;
    if (!cplus_demangle_v3_callback(mangled, DMGL_PARAMS | DMGL_TYPES, append, &text))
        return -2;
    *len = text.len;
    return 0;
}

/*
 * GCC's C++ demangler with a bound on what it writes.
 *
 * A mangled name's substitutions can refer to earlier ones that hold
 * substitutions in turn, so its demangled text can double with every
 * few bytes of name: a 423-byte name demangles to 49 MB, one of 600 bytes
 * to more memory than a machine has. Names come from files users upload,
 * so `__cxa_demangle` (which allocates the whole text) cannot be handed
 * them. libiberty's callback entry point writes the text in pieces
 * instead, and works on the stack alone (no heap), so leaving it with
 * longjmp once the text passes the bound loses nothing.
 */
#include <setjmp.h>
#include <stddef.h>
#include <string.h>

/* libiberty's cp-demangle.c as libsupc++ exports it: 0 on success. */
int __gcclibcxx_demangle_callback(const char *mangled,
                                  void (*callback)(const char *, size_t, void *),
                                  void *opaque);

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
 * NUL-terminated). Returns 0 with the text's length in `*len`, -1 when
 * the text is longer than `cap`, -2 when `mangled` is not a C++ name.
 */
int kiln_demangle_bounded(const char *mangled, char *buf, size_t cap, size_t *len) {
    struct bounded_text text;
    text.buf = buf;
    text.len = 0;
    text.cap = cap;
    if (setjmp(text.full) != 0)
        return -1;
    if (__gcclibcxx_demangle_callback(mangled, append, &text) != 0)
        return -2;
    *len = text.len;
    return 0;
}

/* fo_buf: a growable byte buffer with a maximum set at creation, in the
 * manner of git's strbuf and curl's dynbuf. The data is always
 * NUL-terminated (the NUL is not counted in len). */
#ifndef FO_BUF_H
#define FO_BUF_H

#include <stddef.h>

#include "ledger/fo_err.h"

struct fo_buf {
    char *data; /* NULL until the first append; owned by the buffer */
    size_t len;
    size_t cap;
    size_t max; /* appends that would make len exceed max fail */
};

#define FO_BUF_UNLIMITED ((size_t)-1)

/* Initialises an empty buffer that may grow to max bytes (its allocation to
 * at most max + 1, the NUL included). No allocation. */
void fo_buf_init(struct fo_buf *b, size_t max);

/* Frees the data and leaves an empty buffer with the same max. NULL-safe. */
void fo_buf_release(struct fo_buf *b);

/* Empties the buffer, keeping its memory. */
void fo_buf_reset(struct fo_buf *b);

/* Append bytes. Return FO_OK, FO_E_TOO_LARGE (over max; the buffer is
 * unchanged) or FO_E_NOMEM. */
int fo_buf_append(struct fo_buf *b, const void *data, size_t len);
/* Makes room for n more bytes (at most up to the limit) in one allocation,
 * for a writer that knows the usual size. FO_E_NOMEM on no memory. */
int fo_buf_reserve(struct fo_buf *b, size_t n);
int fo_buf_putc(struct fo_buf *b, char c);
int fo_buf_puts(struct fo_buf *b, const char *s);
int fo_buf_printf(struct fo_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Hands the data to the caller (who frees it with free()) and empties the
 * buffer. Returns an allocated empty string for an empty buffer, or NULL when
 * out of memory. */
char *fo_buf_detach(struct fo_buf *b, size_t *len);

/* Hex helpers: lowercase hex of n bytes into out (2n+1 bytes with the NUL),
 * and the reverse (FO_E_INVALID unless exactly 2n hex digits). */
void fo_hex(const unsigned char *in, size_t n, char *out);
int fo_unhex(const char *hex, unsigned char *out, size_t n);

#include "ledger/banned.h"

#endif

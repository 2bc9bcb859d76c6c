/* fo_buf: growable bounded buffers and hex helpers. */
#include "ledger/fo_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fo_buf_init(struct fo_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void fo_buf_release(struct fo_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void fo_buf_reset(struct fo_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static int grow(struct fo_buf *b, size_t extra)
{
    if (extra > b->max || b->len > b->max - extra)
        return FO_E_TOO_LARGE;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return FO_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > ((size_t)-1) / 2 ? need : cap * 2;
    if (b->max != FO_BUF_UNLIMITED && cap > b->max + 1)
        cap = b->max + 1; /* never more room than the maximum needs */
    char *p = realloc(b->data, cap);
    if (!p)
        return FO_E_NOMEM;
    b->data = p;
    b->cap = cap;
    return FO_OK;
}

int fo_buf_reserve(struct fo_buf *b, size_t n)
{
    size_t room = b->max > b->len ? b->max - b->len : 0;
    int rc = grow(b, n < room ? n : room);
    return rc == FO_E_TOO_LARGE ? FO_OK : rc;
}

int fo_buf_append(struct fo_buf *b, const void *data, size_t len)
{
    int rc = grow(b, len);
    if (rc)
        return rc;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return FO_OK;
}

int fo_buf_putc(struct fo_buf *b, char c)
{
    return fo_buf_append(b, &c, 1);
}

int fo_buf_puts(struct fo_buf *b, const char *s)
{
    return fo_buf_append(b, s, strlen(s));
}

int fo_buf_printf(struct fo_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return FO_E_INVALID;
    if ((size_t)n < sizeof(small))
        return fo_buf_append(b, small, (size_t)n);
    int rc = grow(b, (size_t)n);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return FO_OK;
}

char *fo_buf_detach(struct fo_buf *b, size_t *len)
{
    char *p = b->data;
    if (!p) {
        p = malloc(1);
        if (!p)
            return NULL;
        p[0] = '\0';
    }
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}

void fo_hex(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int fo_unhex(const char *hex, unsigned char *out, size_t n)
{
    if (!hex || strlen(hex) != 2 * n)
        return FO_E_INVALID;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return FO_E_INVALID;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return FO_OK;
}

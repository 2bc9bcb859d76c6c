/* fo_ossl: an OpenSSL failure as a fo_err. */
#include "ledger/fo_ossl.h"

#include <stdio.h>

#include <openssl/err.h>

int fo_err_ossl(struct fo_err *err, const char *what)
{
    char buf[160];
    unsigned long e = ERR_peek_last_error();
    if (e)
        ERR_error_string_n(e, buf, sizeof(buf));
    else
        snprintf(buf, sizeof(buf), "unknown error");
    /* out of memory anywhere down the queue is not a bug of ours: say so
     * (the caller may retry); the message is the outermost error */
    int nomem = 0;
    unsigned long q;
    while ((q = ERR_get_error()) != 0)
        nomem |= ERR_GET_REASON(q) == ERR_R_MALLOC_FAILURE;
    return fo_err_set(err, nomem ? FO_E_NOMEM : FO_E_INTERNAL, "%s: %s", what,
                      buf);
}

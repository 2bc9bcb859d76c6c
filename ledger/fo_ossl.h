/* fo_ossl: OpenSSL's error queue as a fo_err. */
#ifndef FO_OSSL_H
#define FO_OSSL_H

#include "ledger/fo_err.h"

/* Sets err from the latest OpenSSL error ("what: <OpenSSL's message>"),
 * clears OpenSSL's queue, returns the code: FO_E_NOMEM when OpenSSL ran
 * out of memory, FO_E_INTERNAL otherwise. */
int fo_err_ossl(struct fo_err *err, const char *what);

#endif

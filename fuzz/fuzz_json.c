/* fuzz_json: the strict JSON reader and the RFC 8785 writer. Whatever
 * parses, its canonical form must parse again to the same bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    cJSON *v = NULL;
    if (fo_json_parse((const char *)data, n, &v, NULL) != FO_OK)
        return 0;
    struct fo_buf a, b;
    fo_buf_init(&a, FO_BUF_UNLIMITED);
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cJSON *w = NULL;
    if (fo_json_canon(v, &a, NULL) == FO_OK) {
        if (fo_json_parse(a.data, a.len, &w, NULL) != FO_OK)
            abort(); /* our own output does not read back */
        if (fo_json_canon(w, &b, NULL) != FO_OK || a.len != b.len ||
            memcmp(a.data, b.data, a.len) != 0)
            abort(); /* canonical form is not a fixed point */
    }
    cJSON_Delete(v);
    cJSON_Delete(w);
    fo_buf_release(&a);
    fo_buf_release(&b);
    return 0;
}

/* fuzz_otlp: the trace receiver's decoding (surfaces/otlp.h) on any body.
 * The first byte picks the encoding (bit 0: protobuf, else OTLP/JSON) and
 * whether the rest is gzipped (bit 1); the rest is the body. Decoding and
 * the span checks must end in a clear error or a batch; a batch's text
 * must be what the importer reads (any refusal but a parse error), and
 * the counts stay within the span cap. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/import.h"
#include "surfaces/otlp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static int take_batch(void *hook, struct ledger_append *reqs, size_t n,
                      struct fo_err *err)
{
    (void)hook;
    (void)err;
    for (size_t i = 0; i < n; i++) {
        reqs[i].rc = FO_OK;
        memset(&reqs[i].entry, 0, sizeof(reqs[i].entry));
        reqs[i].entry.seq = (int64_t)i;
        memcpy(reqs[i].entry.kind, reqs[i].kind, strlen(reqs[i].kind) + 1);
    }
    return FO_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    static struct ledger *l;
    if (!l) {
        char dir[] = "/tmp/fuzz-otlp-XXXXXX";
        if (!mkdtemp(dir) ||
            ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, NULL) != FO_OK)
            abort();
    }
    if (n < 1)
        return 0;
    int proto = data[0] & 1, gz = data[0] & 2;
    const uint8_t *body = data + 1;
    size_t len = n - 1;
    uint8_t *plain = NULL;
    struct fo_err err;
    if (gz) {
        if (otlp_gunzip(body, len, 1u << 20, &plain, &len, &err) != FO_OK)
            return 0;
        body = plain;
    }
    struct otlp_batch b;
    int rc =
        otlp_batch_make(proto, body ? (const void *)body : "", len, &b, &err);
    if (rc == FO_OK) {
        if (b.accepted + b.rejected > OTLP_MAX_SPANS ||
            (b.accepted > 0) != (b.json != NULL) || (b.rejected && !b.why[0]))
            abort();
        if (b.json) {
            struct import_source src = {
                .format = "otel", .data = b.json, .len = b.len};
            cJSON *out = NULL;
            int irc = import_run(l, take_batch, NULL, &src, &out, &err);
            if (irc == FO_E_JSON || (irc == FO_OK && !out))
                abort();
            cJSON_Delete(out);
        }
        otlp_batch_release(&b);
    } else if (!err.msg[0]) {
        abort(); /* every refusal says why */
    }
    free(plain);
    return 0;
}

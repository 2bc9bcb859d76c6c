/* fuzz_import: the trace importer's readers (OTLP/JSON, LangSmith, JSONL),
 * id checks and ordering. The first byte picks the format, the rest is the
 * source. The batch is checked, not written: every record must point back
 * to an earlier request of the same batch (its parent's, or the import
 * entry), and the import entry must come first without a parent. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/import.h"
#include "ledger/fo_buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static int check_batch(void *hook, struct ledger_append *reqs, size_t n,
                       struct fo_err *err)
{
    (void)hook;
    (void)err;
    if (n < 2 || reqs[0].parent_back != 0 ||
        reqs[0].parent != LEDGER_NO_PARENT || strcmp(reqs[0].kind, "import"))
        abort();
    for (size_t i = 0; i < n; i++) {
        if (i > 0 &&
            (reqs[i].parent_back < 1 || (size_t)reqs[i].parent_back > i))
            abort(); /* a parent after its child, or outside the batch */
        if (ledger_check_actor(reqs[i].actor, NULL) ||
            ledger_check_kind(reqs[i].kind, NULL))
            abort(); /* the batch would skip it and shift its children */
        reqs[i].rc = FO_OK;
        memset(&reqs[i].entry, 0, sizeof(reqs[i].entry));
        reqs[i].entry.seq = (int64_t)i;
        reqs[i].entry.parent =
            i ? (int64_t)(i - (size_t)reqs[i].parent_back) : -1;
        memcpy(reqs[i].entry.kind, reqs[i].kind, strlen(reqs[i].kind) + 1);
    }
    return FO_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    static struct ledger *l;
    static const char *const formats[] = {"otel", "langsmith", "jsonl"};
    if (!l) {
        char dir[] = "/tmp/fuzz-import-XXXXXX";
        if (!mkdtemp(dir) ||
            ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, NULL) != FO_OK)
            abort();
    }
    if (n < 1)
        return 0;
    struct import_source src = {.format = formats[data[0] % 3],
                                .data = (const char *)data + 1,
                                .len = n - 1};
    cJSON *out = NULL;
    struct fo_err err;
    if (import_run(l, check_batch, NULL, &src, &out, &err) == FO_OK && !out)
        abort();
    cJSON_Delete(out);
    return 0;
}

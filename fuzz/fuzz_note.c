/* fuzz_note: the signed-note, checkpoint, key and cosignature parsers, and
 * the proof bundle verifier, on arbitrary bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/cosig.h"
#include "ledger/fo_json.h"
#include "ledger/note.h"
#include "ledger/proof.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static const char vkey[] =
    "forum/fuzz+c0ffee01+AQ4ZsN3uGv0dJqyfqzdkyRzqgPXJkJxgF8jvpLsmjtmU";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    const char *s = (const char *)data;
    struct note_checkpoint cp;
    note_checkpoint_parse(s, n, &cp, NULL);
    struct note_verifier *v = NULL;
    if (note_verifier_parse(s, n, &v, NULL) == FO_OK)
        note_verifier_free(v);
    struct note_signer *sg = NULL;
    if (note_signer_parse(s, n, &sg, NULL) == FO_OK)
        note_signer_free(sg);
    uint8_t out[64];
    size_t ol = 0;
    note_b64_decode(s, n, out, sizeof(out), &ol);
    /* a bundle: any JSON object, verified against a fixed key */
    cJSON *b = NULL;
    if (fo_json_parse(s, n, &b, NULL) == FO_OK) {
        ledger_bundle_verify(b, vkey, strlen(vkey), NULL);
        cJSON_Delete(b);
    }
    return 0;
}

/* methods_proof: the handlers of ledger_checkpoint, ledger_prove and
 * ledger_consistency (rows in methods.c and surfaces/methods/). They map the
 * table's JSON onto ledger/proof.h and give the proof objects of
 * docs/LEDGER.md. */
#include "surfaces/surf_int.h"

#include <stdlib.h>
#include <string.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/note.h"
#include "ledger/proof.h"
#include "ledger/witness.h"

int surf_h_checkpoint(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                      struct fo_err *err)
{
    (void)in;
    struct ledger_checkpoint cp = {0};
    int rc = ledger_checkpoint_get(ctx->ledger, &cp, err);
    if (rc)
        return rc;
    /* Served with the witnesses' cosignatures appended to the note. */
    struct fo_buf note;
    fo_buf_init(&note, 2 * NOTE_MAX_LEN);
    size_t n = 0;
    rc = ledger_checkpoint_cosigned_n(ctx->ledger, cp.size, &note, &n, err);
    if (rc == FO_OK && n > 0) {
        free(cp.note);
        cp.note = fo_buf_detach(&note, NULL);
    }
    fo_buf_release(&note);
    *out = rc ? NULL : ledger_checkpoint_json(&cp);
    ledger_checkpoint_release(&cp);
    if (rc)
        return rc;
    return *out ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
}

int surf_h_cosign(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                  struct fo_err *err)
{
    const char *note = surf_in_str(in, "note");
    int rc = ledger_cosign(ctx->ledger, note, strlen(note), out, err);
    /* A refused cosignature is the caller's bad input (400, exit 2), not
     * a verification verdict (which methods answer with 200). */
    if (rc == FO_E_VERIFY)
        err->code = rc = FO_E_INVALID;
    return rc;
}

int surf_h_prove(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                 struct fo_err *err)
{
    struct ledger_inclusion *p = malloc(sizeof(*p));
    if (!p)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = ledger_prove_inclusion(ctx->ledger, surf_in_int(in, "seq", 0),
                                    surf_in_int(in, "size", -1), p, err);
    if (rc == FO_OK) {
        *out = ledger_inclusion_json(p);
        if (!*out)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    }
    free(p);
    return rc;
}

int surf_h_consistency(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                       struct fo_err *err)
{
    struct ledger_consistency *p = malloc(sizeof(*p));
    if (!p)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = ledger_prove_consistency(ctx->ledger, surf_in_int(in, "first", 0),
                                      surf_in_int(in, "second", -1), p, err);
    if (rc == FO_OK) {
        *out = ledger_consistency_json(p);
        if (!*out)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    }
    free(p);
    return rc;
}

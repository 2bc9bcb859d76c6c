/* orch_witness: one entry written and committed on the calling thread (the
 * blocking half of struct orch_witness), for callers outside the engine. */
#include "daemon/orch.h"

#include "daemon/orch_int.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

int orch_witness_json(const struct orch_witness *w, const char *actor,
                      const char *kind, int64_t parent, const cJSON *payload,
                      int64_t *seq, struct fo_err *err)
{
    struct fo_buf body;
    fo_buf_init(&body, ledger_max_body(w->ledger));
    int rc = fo_json_canon(payload, &body, err);
    if (rc == FO_E_TOO_LARGE)
        rc = fo_err_set(err, FO_E_TOO_LARGE,
                        "%s entry: over the ledger's %zu-byte body limit", kind,
                        ledger_max_body(w->ledger));
    if (!rc) {
        struct ledger_append req = {
            .actor = actor,
            .kind = kind,
            .parent = parent,
            .body = body.data ? body.data : "",
            .body_len = body.len,
            .sole_kinds = orch_gate_sole(kind),
        };
        rc = w->append ? w->append(w->hook, &req, err)
                       : ledger_append_batch(w->ledger, &req, 1, err);
        if (!rc && req.rc) {
            rc = req.rc;
            if (err)
                *err = req.err;
        }
        if (!rc && seq)
            *seq = req.entry.seq;
    }
    fo_buf_release(&body);
    return rc;
}

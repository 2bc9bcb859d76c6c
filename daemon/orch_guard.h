/* orch_guard: guardrails on what enters a model's context or the ledger.
 *
 * A scan finds secrets (API keys of the common providers, private key
 * blocks, bearer tokens, and the exact values the operator's
 * configuration holds: the daemon's token, each configured key
 * variable's value) and personal data (email addresses, phone numbers,
 * payment card numbers that pass the Luhn check), and replaces each with
 * a typed placeholder, "[redacted:email]". What was found is described by
 * kind and byte offset, never by value. */
#ifndef ORCH_GUARD_H
#define ORCH_GUARD_H

#include <stddef.h>

#include <cJSON.h>

#include "ledger/fo_buf.h"

#define ORCH_GUARD_SECRETS_MAX 32
#define ORCH_GUARD_SECRET_MIN 8 /* shorter values are not searched for */

struct orch_guard {
    char *secrets[ORCH_GUARD_SECRETS_MAX]; /* exact values, owned */
    size_t n;
};

/* Adds an exact value to look for (copied; "" and values shorter than
 * ORCH_GUARD_SECRET_MIN are ignored). FO_E_NOMEM, FO_E_TOO_LARGE when
 * full. */
int orch_guard_add_secret(struct orch_guard *g, const char *value);

/* Adds the values of the environment variables named (NULL-safe names
 * skipped). */
int orch_guard_add_env(struct orch_guard *g, const char *name);

void orch_guard_release(struct orch_guard *g);

/* Scans s (len bytes) and writes it to out with each finding replaced.
 * *found (created when NULL and something is found) gets one object per
 * kind: {"kind": "email", "count": n, "at": [offsets in s]}. Returns the
 * number of findings, or -1 when out of memory. g may be NULL (patterns
 * only). */
long orch_guard_scan(const struct orch_guard *g, const char *s, size_t len,
                     struct fo_buf *out, cJSON **found);

#endif

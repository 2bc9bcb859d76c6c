/* orch_lanes: proof lanes with scope grants, and vocabulary-gap receipts
 * (docs/COMPATIBILITY.md, "Proof lanes"). Deterministic, no model.
 *
 * A route claims a proof lane (what kind of work: observe, execute,
 * validate, synthesize, verify) with scopes (what it may do: read, run,
 * judge, combine, attest), and may name a domain lane (which body of work
 * it belongs to). Both vocabularies are closed: compiled in, never
 * widened at run time. A claim is judged on the vocabularies alone: an
 * unknown lane (which grants nothing), a scope the lane does not grant
 * (over-routing), or an unknown domain is a `lane_rejection`; the rest is
 * a `lane_route`. Either way the decision is witnessed, never dropped.
 *
 * When the router keeps escalating (no lane decided) on the same kind of
 * work, a `vocabulary_gap` receipt says so once, from the witnessed
 * `route` entries; it creates no lane.
 *
 * For the run engine: orch_lane_judge and orch_vocab_gap_derive build the
 * entry bodies without writing anything, so the engine can witness them
 * through its own append path (actor "router"); orch_lane_witness and
 * orch_vocab_gap_witness write them through an append function (the
 * daemon's group commit) or straight to a ledger. */
#ifndef ORCH_LANES_H
#define ORCH_LANES_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_err.h"
#include "ledger/ledger.h"

struct orch_proof_lane {
    const char *name, *authority;
    const char *const *scopes; /* NULL-terminated, sorted */
};

struct orch_domain_lane {
    const char *name, *charter;
};

const struct orch_proof_lane *orch_proof_lanes(size_t *n);
const struct orch_domain_lane *orch_domain_lanes(size_t *n);

/* {"proof_lanes": [{name, authority, scopes}], "domain_lanes": [{name,
 * charter}], "scopes": [every scope some lane grants]}. NULL: no memory. */
cJSON *orch_lanes_json(void);

/* A route claim. domain NULL: none. */
struct orch_lane_claim {
    const char *task, *lane, *domain;
    const char *const *scopes;
    size_t n_scopes;
    int has_confidence;
    double confidence;
};

#define ORCH_LANE_SCOPES_MAX 64

/* Judges a claim on the vocabularies: *kind "lane_route" or
 * "lane_rejection" (static), *body the entry's body: {task, lane,
 * domain, scopes (sorted, distinct), confidence}, and for a rejection
 * {violation: unknown_lane | over_routed | unknown_domain, excess (the
 * scopes at fault, sorted; every scope for an unknown lane), granted
 * (what the lane grants; [] for an unknown lane)}. The checks in that
 * order: a valid domain never excuses an over-reaching scope. FO_E_INVALID
 * only for a malformed claim (no task or lane, a scope that is not a
 * name, more than ORCH_LANE_SCOPES_MAX, a confidence not finite): that is
 * bad input, not a route, and nothing is to be witnessed. */
int orch_lane_judge(const struct orch_lane_claim *c, const char **kind,
                    cJSON **body, struct fo_err *err);

/* An append: ledger_append_batch of one, or a host's hook (the daemon's
 * group commit). */
typedef int (*orch_append_fn)(void *hook, struct ledger_append *req,
                              struct fo_err *err);

/* Judges and witnesses a claim (actor "router", parent as given or
 * LEDGER_NO_PARENT) through fn (NULL: straight to l). An accepted route:
 * FO_OK and *out {accepted: true, kind, seq, and the body's fields}. A
 * rejected one is witnessed first, then refused: FO_E_INVALID with a
 * message "lane_rejection seq N: VIOLATION: ..." and *out NULL. */
int orch_lane_witness(struct ledger *l, orch_append_fn fn, void *hook,
                      const struct orch_lane_claim *c, int64_t parent,
                      cJSON **out, struct fo_err *err);

/* One witnessed routing decision: decided 0 when the router escalated. */
struct orch_route_outcome {
    int64_t seq;
    int decided;
    double confidence;
};

#define ORCH_GAP_MIN_DEFAULT 3

/* The receipt of the trailing run of undecided routes, when it has at
 * least min of them: *gap {domain_signal, consecutive_escalations,
 * confidence_ceiling, first_seq, last_seq}; else *gap NULL. A decided
 * route ends a run. FO_E_INVALID for min < 1 or an empty signal. */
int orch_vocab_gap_derive(const struct orch_route_outcome *o, size_t n,
                          const char *signal, int min, cJSON **gap,
                          struct fo_err *err);

/* Reads the `route` entries from seq since on, derives the gap, and when
 * there is one witnesses it (a `vocabulary_gap` entry, actor "router",
 * parent the last escalation) through fn (NULL: straight to l). *out:
 * {"witnessed", "seq" (when witnessed), "gap" (or null), "routes_read",
 * "trailing_undecided", "min_escalations"}. */
int orch_vocab_gap_witness(struct ledger *l, orch_append_fn fn, void *hook,
                           int64_t since, const char *signal, int min,
                           cJSON **out, struct fo_err *err);

#endif

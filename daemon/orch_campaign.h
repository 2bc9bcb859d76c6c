/* orch_campaign: campaigns, a declared feature DAG across projects whose
 * state is reduced from the ledger, never stored (docs/COMPATIBILITY.md).
 *
 * Entries (actor "campaign", or "operator" for an ingested state):
 *   campaign_declared {campaign_id, title, projects: [{project_id, owner,
 *     priority, features: [{feature_id, title, agent, instruction,
 *     priority, depends_on, done_when}]}]}: once per campaign id.
 *   campaign_dispatch {campaign_id, project_id, feature_id, run}: a
 *     feature handed to a durable run (the run's request seq).
 *   feature_status {campaign_id, project_id, feature_id, status, source,
 *     reason} and project_status (the same without feature_id): what an
 *     outside project reports; only for a project not owned by "forum".
 *
 * A feature's state: done, failed or running from its dispatched run
 * (orch_run_get), runnable (forum-owned, every dependency done, not
 * dispatched), waiting (a dependency not done yet), blocked (a dependency
 * failed or blocked), or for an outside project's feature its last
 * reported status (done, in_progress, blocked, failed) or "unreported". */
#ifndef ORCH_CAMPAIGN_H
#define ORCH_CAMPAIGN_H

#include <stdint.h>

#include <cJSON.h>

#include "daemon/orch_lanes.h"
#include "ledger/fo_err.h"
#include "ledger/ledger.h"

#define ORCH_CAMPAIGN_FEATURES_MAX 1000 /* features in one campaign */
#define ORCH_CAMPAIGN_ID_MAX 128        /* bytes of an id */

/* 1 when s is an id: 1..ORCH_CAMPAIGN_ID_MAX bytes of A-Za-z0-9._- */
int orch_campaign_id_ok(const char *s);

/* Checks a campaign file: ids present, strings of 1..ORCH_CAMPAIGN_ID_MAX
 * bytes, distinct feature and project ids, every dependency a known
 * feature, no cycle. FO_E_INVALID names what is wrong (the unknown
 * dependency and who needs it; the features of a cycle, in order). */
int orch_campaign_validate(const cJSON *c, struct fo_err *err);

/* Validates, then witnesses c as one campaign_declared entry. Declaring
 * the same campaign again (same canonical bytes) writes nothing and
 * answers the first entry's seq with "existing": true; another body under
 * a declared id is FO_E_EXISTS. *out {campaign_id, seq, features,
 * existing}. */
int orch_campaign_declare(struct ledger *l, orch_append_fn fn, void *hook,
                          const cJSON *c, cJSON **out, struct fo_err *err);

/* The campaign's state reduced from the ledger (id NULL: the latest
 * declared campaign): {campaign_id, title, declared_seq, complete,
 * counts, features: [...], projects: [...]}. FO_E_NOT_FOUND when no such
 * campaign is declared. */
int orch_campaign_status(struct ledger *l, const char *id, cJSON **out,
                         struct fo_err *err);

/* From a status: {campaign_id, runnable: [{feature_id, project_id, agent,
 * priority, request}] (priority high first, then id), running: [{feature_id,
 * run}], unwitnessed: [{feature_id, run}] (runs started for a feature whose
 * dispatch was not witnessed: a crash between the two), blocked: [...]}. */
int orch_campaign_next(struct ledger *l, const char *id, cJSON **out,
                       struct fo_err *err);

/* The request text a feature's run gets: its first line names the
 * campaign and feature (how a run whose dispatch was not witnessed is
 * found again). Malloc'd; NULL when out of memory. */
char *orch_campaign_request(const char *campaign_id, const cJSON *feature);

/* Witnesses that feature's run is run (a campaign_dispatch entry). The
 * feature must be forum-owned and not yet dispatched (the same run again
 * is answered with "existing": true, nothing written); run must be a run. */
int orch_campaign_dispatch(struct ledger *l, orch_append_fn fn, void *hook,
                           const char *id, const char *feature, int64_t run,
                           cJSON **out, struct fo_err *err);

/* Records an outside project's state (feature NULL: the project's): a
 * feature_status or project_status entry, actor "operator". status is
 * done, in_progress, blocked or failed; source defaults to the project's
 * owner. A project owned by "forum" is refused: its state is its runs'. */
int orch_campaign_ingest(struct ledger *l, orch_append_fn fn, void *hook,
                         const char *id, const char *project,
                         const char *feature, const char *status,
                         const char *source, const char *reason, cJSON **out,
                         struct fo_err *err);

#endif

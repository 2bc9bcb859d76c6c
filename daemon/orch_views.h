/* orch_views: what an operator reads, computed from the ledger and the
 * orchestrator alone, deterministic and without a model: the context
 * capsule, the run room, the runtime inspection and the doctor
 * (orch_views.c, orch_doctor.c); and the prose helpers the reference
 * offers: delivery profiles, route frames, communication contracts and
 * humanize (orch_prose.c). The shapes follow the Python reference's
 * (docs/COMPATIBILITY.md): the same schema names and field names, forum's
 * own wording. */
#ifndef ORCH_VIEWS_H
#define ORCH_VIEWS_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"
#include "ledger/ledger.h"

struct orch;
struct orch_roster;
struct orch_route;

#define ORCH_VIEW_ITEMS_DEFAULT 8  /* task items a capsule keeps */
#define ORCH_VIEW_TEXT_DEFAULT 240 /* characters kept of each text field */
#define ORCH_VIEW_ITEMS_MAX 1000
#define ORCH_VIEW_TEXT_MAX 65536

/* ---- the capsule (orch_views.c) ---------------------------------------- */

/* A deterministic brief of the whole ledger (forum.context-capsule/v1):
 * {"schema", "checkpoint" (the live tree's root, hex), "verified" (the
 * chain verifies), "entry_range" [first, last] or [null, null], "counts"
 * by kind, "latest_request", "latest_answer", "tasks" (the last max_items
 * task results: {seq, id, agent, ok, model, output}), "signals" (counts
 * of failures and flags), "context_text_chars"}. Texts are cut to
 * max_text characters (code points) with "..." at the end. The same
 * ledger gives the same bytes: nothing depends on the time or the
 * process. One read of the entries; memory does not grow with the
 * ledger. */
int orch_capsule(struct ledger *l, int max_items, int max_text, cJSON **out,
                 struct fo_err *err);

/* The capsule as the plain text a later run could take as its context
 * (what context_text_chars counts). Appends to out. */
int orch_capsule_text(const cJSON *capsule, struct fo_buf *out);

/* ---- the run room (orch_views.c) --------------------------------------- */

/* One operator view of a run (forum.run-room/v1): run < 0 is the latest
 * run. {"schema", "run", "state", "checkpoint", "verified", "entry_range",
 * "counts" (the run's entries by kind), "request" {seq, text}, "route",
 * "plan" {seq, waves}, "tasks" [{seq, id, agent, instruction, done_when,
 * result {seq, ok, model, output}, verdict {ok, score, reason}}],
 * "checkpoints", "pending_gates", "answer" {seq, text} or null, "signals",
 * "next_actions" [{id, kind, priority, label, reason, target}]}. A ledger
 * without runs gives a room whose one next action is submit_request. A
 * gate waiting for a decision is a high-priority review_gate action. */
int orch_room(struct ledger *l, int64_t run, int max_text, cJSON **out,
              struct fo_err *err);

/* ---- runtime and doctor (orch_doctor.c) ------------------------------- */

/* What would run, without running anything (forum.runtime.inspect/v1):
 * {"schema", "ready", "default" {kind, id, source, detail}, "tiers"
 * {cheap, capable, frontier: the same shape}, "roster" {agents, tiers},
 * "policy" {max_parallel, allowed_categories, sandbox}, "issues"}. */
int orch_runtime_inspect(const struct orch *o, cJSON **out, struct fo_err *err);

/* The operator's checks, as the reference's flagship-action envelope
 * (project-telos.flagship-action/v1, command "doctor"): each configured
 * model provider answers one small call (a failure names the provider and
 * its URL), the sandbox can be made (when configured), the store opens
 * and its chain verifies, the token and the checkpoint key are not
 * readable by group or others, the data dir's disk has at least
 * ORCH_DOCTOR_DISK_MIN bytes free. status "MATCH" when every check passes,
 * else "DRIFT" with one diagnostic a failed check. Blocks for the
 * provider calls (each at most timeout_ms; 0: 15 s). */
#define ORCH_DOCTOR_DISK_MIN (64ll << 20)
int orch_doctor(const struct orch *o, struct ledger *l, int timeout_ms,
                cJSON **out, struct fo_err *err);

/* The reference's status envelope (command "status") around the ledger's
 * own figures: entries, checkpoint, runs by state among the last
 * ORCH_STATUS_RUNS runs, the gates waiting, the operator commands and
 * the MCP tool names of the reference that forum answers. */
#define ORCH_STATUS_RUNS 1000
int orch_operator_status(struct ledger *l, cJSON **out, struct fo_err *err);

/* The flagship envelope: {"schema", "tool", "tool_version", "command",
 * "status", "inputs", "outputs", "receipts", "native" (taken),
 * "next_actions", "diagnostics"}. NULL when out of memory (native is
 * freed). */
cJSON *orch_envelope(const char *command, const char *status, cJSON *native);

/* ---- prose (orch_prose.c) --------------------------------------------- */

/* The delivery profiles: operator (the default), engineer, researcher,
 * executive. 1 when name is one of them. */
int orch_profile_known(const char *name);

/* The list "operator, engineer, researcher, executive". */
extern const char orch_profiles_list[];

/* Checks text against a delivery profile (NULL: operator)
 * (forum.delivery-profile/v1): {"schema", "profile", "words", "sentences",
 * "mean_sentence_words", "filler_ratio", "flagged", "findings" [{code,
 * detail}]}. FO_E_INVALID for an unknown profile, naming the valid ones. */
int orch_profile_check(const char *text, const char *profile, cJSON **out,
                       struct fo_err *err);

/* The rules orch_profile_check holds text to, as a paragraph for a
 * model's prompt (the same thresholds and word lists), into out.
 * FO_E_INVALID for an unknown profile, FO_E_NOMEM. */
int orch_profile_guide(const char *profile, struct fo_buf *out,
                       struct fo_err *err);

/* Plainer wording for people, adding nothing (forum.prose-humanization/v1):
 * a model preamble removed, stock phrases shortened, spaces collapsed,
 * the first letter capitalised, a full stop added; {"schema", "audience",
 * "profile", "profile_check", "input_chars", "output_chars", "output",
 * "edits", "not_verified"}. FO_E_INVALID for empty text or an unknown
 * profile. */
int orch_humanize(const char *text, const char *audience, const char *profile,
                  cJSON **out, struct fo_err *err);

/* The route frame of a routed request (forum.route-frame/v1): {"schema",
 * "agent", "domain", "intent", "posture", "delivery_profile",
 * "model_tier", "executor", "proof_lane", "domain_lane",
 * "human_contract", "communication_contract", "signals"}, from the
 * request's words and the lane the router decided (rt may say it
 * escalated: agent null). */
cJSON *orch_route_frame(const struct orch_roster *r, const char *text,
                        const struct orch_route *rt);

/* The communication contract of a frame (forum.communication-contract/v1)
 * with profile (NULL: the frame's own). FO_E_INVALID for an unknown
 * profile. */
int orch_prose_contract(const cJSON *frame, const char *profile, cJSON **out,
                        struct fo_err *err);

/* The closed vocabularies: proof lanes (observe, execute, validate,
 * synthesize, verify) and domain lanes. 1 when name is one of them. */
int orch_proof_lane_known(const char *name);
int orch_domain_lane_known(const char *name);

#endif

/* surf_int: shared by the files of surfaces/ that hold handlers. */
#ifndef SURF_INT_H
#define SURF_INT_H

#include "surfaces/surf.h"

/* Reads an integer input field already validated by the schema; def when
 * absent. */
long long surf_in_int(const cJSON *in, const char *name, long long def);
/* A string input field, or NULL when absent. */
const char *surf_in_str(const cJSON *in, const char *name);
/* A boolean input field, def when absent. */
int surf_in_bool(const cJSON *in, const char *name, int def);

/* Proof handlers (methods_proof.c): ledger_checkpoint, ledger_prove,
 * ledger_consistency. */
int surf_h_checkpoint(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                      struct fo_err *err);
int surf_h_prove(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                 struct fo_err *err);
int surf_h_consistency(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                       struct fo_err *err);
/* ledger_cosign (methods_proof.c): witness cosignatures on a checkpoint. */
int surf_h_cosign(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                  struct fo_err *err);

/* Orchestrator handlers (methods_orch.c): route, plan_run, plan, submit. */
int surf_h_route(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                 struct fo_err *err);
/* run_start, run_get, run_cancel (methods_orch.c): background runs. */
/* The run engine's ways in (SURF_ON_RUN). */
int surf_s_plan_run(struct surf_ctx *ctx, const cJSON *in, surf_reply_fn reply,
                    void *arg, struct fo_err *err);
int surf_s_plan(struct surf_ctx *ctx, const cJSON *in, surf_reply_fn reply,
                void *arg, struct fo_err *err);
int surf_s_submit(struct surf_ctx *ctx, const cJSON *in, surf_reply_fn reply,
                  void *arg, struct fo_err *err);
int surf_s_run_start(struct surf_ctx *ctx, const cJSON *in, surf_reply_fn reply,
                     void *arg, struct fo_err *err);

int surf_h_run_get(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                   struct fo_err *err);
int surf_h_run_cancel(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                      struct fo_err *err);

/* Run views (methods_orch.c). */
int surf_h_run_list(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err);
int surf_h_run_show(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err);
int surf_h_gw_session(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                      struct fo_err *err);

/* Trace import and OTLP export (methods_import.c). */
int surf_h_import(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                  struct fo_err *err);
int surf_h_export_otel(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                       struct fo_err *err);
int surf_h_gw_session_otel(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                           struct fo_err *err);

/* Sessions (methods_orch.c). */
int surf_h_session_list(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                        struct fo_err *err);
int surf_h_session_show(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                        struct fo_err *err);
int surf_h_session_fork(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                        struct fo_err *err);
int surf_h_session_remember(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                            struct fo_err *err);
int surf_h_session_forget(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                          struct fo_err *err);
int surf_h_context_preflight(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                             struct fo_err *err);

/* Campaigns (methods_campaign.c). */
int surf_h_campaign_declare(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                            struct fo_err *err);
int surf_h_campaign_list(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                         struct fo_err *err);
int surf_h_campaign_status(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                           struct fo_err *err);
int surf_h_campaign_next(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                         struct fo_err *err);
int surf_h_campaign_dispatch(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                             struct fo_err *err);
int surf_h_campaign_ingest(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                           struct fo_err *err);

/* Approval gates (methods_orch.c). */
int surf_h_gate_list(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                     struct fo_err *err);
int surf_s_gate_approve(struct surf_ctx *ctx, const cJSON *in,
                        surf_reply_fn reply, void *arg, struct fo_err *err);
int surf_s_gate_edit(struct surf_ctx *ctx, const cJSON *in, surf_reply_fn reply,
                     void *arg, struct fo_err *err);
int surf_s_gate_reject(struct surf_ctx *ctx, const cJSON *in,
                       surf_reply_fn reply, void *arg, struct fo_err *err);

/* The reference's surface (methods_ref.c): the operator views, the prose
 * helpers, and context_preflight with the reference's fields. */
int surf_h_capsule(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                   struct fo_err *err);
int surf_h_room(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                struct fo_err *err);
int surf_h_runtime(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                   struct fo_err *err);
int surf_h_operator_status(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                           struct fo_err *err);
int surf_h_doctor(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                  struct fo_err *err);
int surf_h_humanize(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                    struct fo_err *err);
int surf_h_prose_contract(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                          struct fo_err *err);
int surf_h_context_preflight_ref(struct surf_ctx *ctx, const cJSON *in,
                                 cJSON **out, struct fo_err *err);
/* in's "context" with the reference's context_token_budget and
 * request_context_token_budget as its max_total_tokens and
 * max_request_tokens (forum's own fields win), into *ctxo (NULL when
 * neither is given; the caller deletes it). FO_E_NOMEM. */
int surf_ref_context(const cJSON *in, cJSON **ctxo);

/* Grading and proof lanes (methods_grade.c). */
int surf_h_grade(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                 struct fo_err *err);
int surf_h_export_gradable(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                           struct fo_err *err);
int surf_h_lanes(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                 struct fo_err *err);
int surf_h_lane_route(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                      struct fo_err *err);
int surf_h_vocab_gap(struct surf_ctx *ctx, const cJSON *in, cJSON **out,
                     struct fo_err *err);

#endif

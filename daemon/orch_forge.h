/* orch_forge: the forge layer of forum's own tool loop, between a model's
 * reply and the loop (docs/AGENTS.md, "The forge layer"): tool calls
 * written as text rescued into real calls (orch_rescue.h), the synthetic
 * respond tool, and the provider's bound on malformed calls. Part of the
 * run engine (orch_engine_int.h); it writes no entry itself: what it did
 * goes into the task's forge_note, which the turn's next entry carries. */
#ifndef ORCH_FORGE_H
#define ORCH_FORGE_H

#include "daemon/orch_engine_int.h"
#include "daemon/orch_rescue.h"

/* The name of the synthetic tool that ends the loop with an answer. */
#define OE_RESPOND_TOOL "respond"

/* What oe_forge_reply made of a reply. */
enum oe_forge_outcome {
    OE_FORGE_PASS = 0,      /* rep as it is now (calls rescued or not) */
    OE_FORGE_RESPOND = 1,   /* rep->text is the respond call's answer and
                               rep->tool_calls is gone: take the answer */
    OE_FORGE_MALFORMED = 2, /* a call written as text could not be read:
                               why says so, for the model */
};

/* The forge options of task t's current executor: of the provider that
 * answered (provider, rep->provider), or NULL: of the one asked first. */
void oe_forge_opts(const struct run *r, size_t t, const char *provider,
                   struct orch_forge *out);

/* Appends the respond tool to tools (the array tools_json builds) when
 * task t's provider offers it. 0, or -1 out of memory. */
int oe_forge_tools(const struct run *r, size_t t, cJSON *tools);

/* A model reply of task t's tool loop (rc FO_OK) through the forge layer:
 * rescue when it called no tool, then a respond call taken. Resets and
 * fills the task's forge_note. Returns an enum oe_forge_outcome, or minus
 * an error code (FO_E_NOMEM, err set). */
int oe_forge_reply(struct run *r, size_t t, struct orch_model_reply *rep,
                   char *why, size_t n, struct fo_err *err);

/* Appends to the system text of task t's conversation how to answer
 * when the respond tool is offered. FO_OK or the buffer's error. */
int oe_forge_system(const struct run *r, size_t t, struct fo_buf *sys);

/* 1 when call (a witnessed tool_call) is a respond call while respond is
 * offered: such a call reaches the ledger only when malformed (a good one
 * ends the loop at the reply), and why says what is wrong, for its
 * rejected result. 0: not respond. */
int oe_forge_respond_call(const struct run *r, size_t t, const cJSON *call,
                          char *why, size_t n);

/* 1 when task t's malformed calls in a row are past its provider's
 * malformed_retries: why says so, for the result. */
int oe_forge_bad_calls_spent(const struct run *r, size_t t, char *why,
                             size_t n);

/* What the model is told after a tool_rescue entry whose call could not
 * be read (its "error"), into b. FO_OK or the buffer's error. */
int oe_forge_fix_text(const cJSON *entry, struct fo_buf *b);

/* Moves the members of the task's forge_note into o (an entry's body) and
 * drops the note. 1, or 0 out of memory. */
int oe_forge_note_merge(struct task *s, cJSON *o);

#endif

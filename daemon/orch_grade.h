/* orch_grade: an outcome grade of a run read from its entries, and the run
 * as one forum.gradable-trajectory/1 row that anyone can re-derive from
 * the ledger (docs/COMPATIBILITY.md, "Grading").
 *
 * The ledger proves a run was recorded and not changed; it does not say
 * the run succeeded. The grade does, from the checks on record alone:
 * the entries of kind verdict, verification and intent_judgment. A check
 * counts only when it is independent: its actor produced no `result` or
 * `answer` in the run (a producer grading itself is set aside, listed in
 * self_graded). A check whose ok is not a boolean (nobody judged it, or a
 * verifier that did not run, or a redacted body) counts neither way.
 * reward = passed / (passed + refuted); the label is PASS when every
 * counted check passed and there are at least min_checks of them,
 * UNVERIFIABLE when none counts (a chain that verifies is not a success),
 * FAIL otherwise. */
#ifndef ORCH_GRADE_H
#define ORCH_GRADE_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "ledger/fo_err.h"
#include "ledger/ledger.h"

#define ORCH_GRADE_MIN_CHECKS 2 /* the default, as the reference's */
#define ORCH_GRADE_MIN_CHECKS_MAX 1000
#define ORCH_GRADE_MAX_ENTRIES 10000 /* entries of one graded run */
#define ORCH_GRADABLE_SCHEMA "forum.gradable-trajectory/1"

/* What is graded: root is a run's request (a root `request` entry) or an
 * import (a root `import` entry: `forum mine`), and every entry whose
 * parent chain reaches it. root < 0: the latest request. FO_E_NOT_A_RUN
 * for any other entry, FO_E_NOT_FOUND for none (or no request at all),
 * FO_E_TOO_LARGE past ORCH_GRADE_MAX_ENTRIES.
 *
 * An imported `event` is graded as what its source called it: its
 * record's kind, and its record's payload as the body (the reference's
 * generic trace: {actor, kind, id, parent, payload}).
 *
 * The grade: {"run", "reward", "label", "checks", "refuted", "producers"
 * (sorted), "graders" (in input order), "self_graded" (seqs set aside),
 * "grade_inputs" [{actor, ok, kind, seq, payload_hash}] (verdicts, then
 * verifications, then intent judgments, each in seq order), "min_checks",
 * "derivation"}. Deterministic: the same entries give the same bytes. */
int orch_grade(struct ledger *l, int64_t root, int min_checks, cJSON **out,
               struct fo_err *err);

/* The run as a forum.gradable-trajectory/1 row: {"schema", "run",
 * "task_id" (16 hex of the SHA-256 of the prompt, spaces collapsed,
 * lower-cased), "prompt", "trajectory" {plan_hash, answer, entries (the
 * served entries, with their hash)}, "grade" {reward, label, checks,
 * refuted, producers, graders, derivation}, "oracle" {kind
 * "ledger-inclusion", size, root (the tree root at size, hex),
 * checkpoint (the signed note of that size, or null), verified (the
 * chain verified at export: forum's own word, not the proof), grade_inputs,
 * check_payloads [{seq, payload_hash, body}] (the checks' bodies, which
 * hash to their entries' payloads), inclusion [one proof per entry, at
 * size], recheck}, "budget" {model_calls, payload_bytes, entries},
 * "row_hash" (SHA-256 hex of the row's canonical JSON without
 * row_hash)}. size is the latest signed checkpoint's when it covers the
 * run, else the current tree's. */
int orch_gradable(struct ledger *l, int64_t root, int min_checks, cJSON **out,
                  struct fo_err *err);

/* Re-derives a row with no ledger and no trust in forum: the row hash;
 * each entry's hash from its fields; each inclusion proof against
 * oracle.root; each check payload's body against a witnessed entry's
 * payload hash; and the grade recomputed from those bound bodies (the
 * entries' actors, never the row's labels). FO_OK when all hold;
 * FO_E_VERIFY saying the first that does not; FO_E_INVALID for a row that
 * is malformed. Comparing oracle.root with the ledger's root at
 * oracle.size (or a checkpoint's signature) is the caller's. */
int orch_gradable_check(const cJSON *row, struct fo_err *err);

#endif

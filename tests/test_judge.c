/* test_judge: judgement beside the control loop (daemon/orch_judge.c,
 * orch_wavecp.c), end to end through the engine (tu_submit) against the
 * scripted fake model: same-tier informed retries before a tier escalation, the
 * intent judge's witnessed verdict and its fold, the action receipt re-derived
 * from the ledger, a signed checkpoint after every wave, and the ledger's
 * capsule as a run's context. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include <criterion/criterion.h>

#include "daemon/orch.h"
#include "daemon/orch_grade.h"
#include "daemon/orch_model.h"
#include "daemon/orch_sandbox.h"
#include "daemon/orch_views.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"
#include "ledger/ledger.h"
#include "ledger/proof.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"

#define KEY "sk-test-SECRET-judge-0123456789"
#define KEY_ENV "FORUM_TEST_JUDGE_KEY"

/* writer retries twice on its tier before an escalation; coder never */
static const char roster[] =
    "{\"lanes\":["
    "{\"name\":\"writer\",\"category\":\"c\",\"domain\":\"writes prose\","
    "\"keywords\":[\"write\",\"essay\"],\"model_tier\":\"cheap\","
    "\"executor\":\"chat\",\"max_retries\":2},"
    "{\"name\":\"coder\",\"category\":\"c\",\"domain\":\"writes code\","
    "\"keywords\":[\"code\",\"function\"],\"model_tier\":\"cheap\","
    "\"executor\":\"chat\"},"
    "{\"name\":\"echo\",\"category\":\"c\",\"domain\":\"echoes\","
    "\"keywords\":[\"echo\"],\"model_tier\":\"cheap\","
    "\"executor\":\"stub\"}]}";

struct env {
    struct fake *f;
    char url[64];
    struct orch_model_provider p[3];
    struct orch_model_config mc;
    struct orch *o;
    char *dir;
    struct ledger *l;
    struct orch_witness w;
};

static void env_open(struct env *e, fake_fn fn)
{
    memset(e, 0, sizeof(*e));
    setenv(KEY_ENV, KEY, 1);
    struct fo_err err;
    struct orch_config cfg = {.roster_json = roster,
                              .roster_json_len = strlen(roster)};
    if (fn) {
        e->f = fake_start(fn);
        snprintf(e->url, sizeof(e->url), "http://127.0.0.1:%d", e->f->port);
        const char *names[3] = {"m-cheap", "m-capable", "m-frontier"};
        for (int t = 0; t < 3; t++)
            e->p[t] = (struct orch_model_provider){.api = ORCH_EXEC_CHAT,
                                                   .url = e->url,
                                                   .model = names[t],
                                                   .api_key_env = KEY_ENV,
                                                   .tier = t};
        e->mc = (struct orch_model_config){.providers = e->p,
                                           .n_providers = 3,
                                           .attempts = 1,
                                           .timeout_ms = 10000};
        cfg.models = &e->mc;
    }
    cr_assert_eq(orch_create(&cfg, &e->o, &err), FO_OK, "%s", err.msg);
    e->dir = tu_tmpdir();
    cr_assert_eq(ledger_open(e->dir, LEDGER_OPEN_CREATE, NULL, &e->l, &err),
                 FO_OK, "%s", err.msg);
    e->w = (struct orch_witness){.ledger = e->l};
}

static void env_close(struct env *e)
{
    struct fo_err err;
    struct ledger_verify_result v;
    cr_assert_eq(ledger_verify(e->l, LEDGER_VERIFY_DEEP, NULL, NULL, &v, &err),
                 FO_OK, "%s", err.msg);
    cr_assert(v.ok && v.deep == 1 && v.bodies_bad == 0);
    ledger_close(e->l);
    orch_free(e->o);
    if (e->f) {
        fake_stop(e->f);
        fake_free(e->f);
    }
    tu_rmrf(e->dir);
}

static void kinds(struct env *e, int64_t from, char *out, size_t size)
{
    struct fo_err err;
    out[0] = '\0';
    for (int64_t s = from;; s++) {
        struct ledger_entry en;
        if (ledger_get(e->l, s, &en, NULL, &err) != FO_OK)
            break;
        size_t n = strlen(out);
        snprintf(out + n, size - n, "%s ", en.kind);
    }
}

static cJSON *body_of(struct env *e, int64_t seq)
{
    struct fo_err err;
    char *b = NULL;
    size_t bl = 0;
    cr_assert_eq(ledger_body(e->l, seq, &b, &bl, &err), FO_OK, "%s", err.msg);
    cJSON *j = cJSON_Parse(b);
    free(b);
    return j;
}

/* The seq of the n-th (0-based) entry of kind from seq from, or -1. */
static int64_t nth_kind(struct env *e, int64_t from, const char *kind, int n)
{
    struct fo_err err;
    for (int64_t s = from;; s++) {
        struct ledger_entry en;
        if (ledger_get(e->l, s, &en, NULL, &err) != FO_OK)
            return -1;
        if (!strcmp(en.kind, kind) && n-- == 0)
            return s;
    }
}

static cJSON *submit_opts(struct env *e, const char *request,
                          const struct orch_submit_opts *opts)
{
    struct fo_err err;
    fo_err_clear(&err);
    cJSON *out = NULL;
    int rc = tu_submit(e->o, &e->w, request, opts, &out, &err);
    cr_assert_eq(rc, FO_OK, "rc %d: %s", rc, err.msg);
    return out;
}

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* ---- same-tier informed retries ------------------------------------------ */

static const char *cheap_never_passes(struct fake *f, const char *role, int n,
                                      const char *model, const char *prompt)
{
    (void)f, (void)n, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write the token\",\"done_when\":"
               "[{\"contains\":\"OK-DONE\"}]}]}";
    if (!strcmp(role, "synthesizer"))
        return "the token is OK-DONE";
    cr_assert_str_eq(role, "task");
    return !strcmp(model, "m-cheap") ? "nope" : "OK-DONE";
}

/* A failed check is retried on the same tier max_retries (2) times, each
 * retry witnessed with its reason and the failed checks in the next
 * prompt; then the tier escalation as before. */
Test(judge, failed_checks_retry_on_the_tier_then_escalate)
{
    struct env e;
    env_open(&e, cheap_never_passes);
    struct orch_submit_opts o = {0};
    cJSON *out = submit_opts(&e, "write the token", &o);
    cr_assert(cJSON_IsTrue(get(out, "ok")));
    cr_assert_eq(tu_num(out, "retries"), 2);
    cr_assert_eq(tu_num(out, "escalations"), 1);
    char k[1024];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict "
                        "retry task result verdict "
                        "retry task result verdict "
                        "tier_escalation task result verdict answer ");
    cr_assert_str_eq(e.f->log, "coordinator:m-capable task:m-cheap "
                               "task:m-cheap task:m-cheap task:m-capable "
                               "synthesizer:m-capable ");
    /* each retry names its reason and the failed check; its task is the
     * retry's child, on the same tier */
    for (int i = 0; i < 2; i++) {
        int64_t rs = nth_kind(&e, 0, "retry", i);
        cJSON *rb = body_of(&e, rs);
        cr_assert_eq(tu_num(rb, "attempt"), i + 1);
        cr_assert_eq(tu_num(rb, "max_retries"), 2);
        cr_assert_str_eq(tu_str(rb, "tier"), "cheap");
        cr_assert_str_eq(tu_str(rb, "reason"), "its checks failed");
        const cJSON *because = get(rb, "because");
        cr_assert(
            strstr(cJSON_GetArrayItem(because, 0)->valuestring, "OK-DONE"));
        cJSON_Delete(rb);
        struct ledger_entry t;
        struct fo_err err;
        cr_assert_eq(ledger_get(e.l, rs + 1, &t, NULL, &err), FO_OK);
        cr_assert_str_eq(t.kind, "task");
        cr_assert_eq(t.parent, rs);
        /* the fake model got the failed check with the retry */
        const char *p = e.f->prompts[2 + i];
        cr_assert(strstr(p, "a previous attempt did not pass") &&
                      strstr(p, "contains \"OK-DONE\""),
                  "%s", p);
    }
    /* the first attempt had no feedback */
    cr_assert_null(strstr(e.f->prompts[1], "a previous attempt"));
    cJSON_Delete(out);
    env_close(&e);
}

static const char *passes_with_feedback(struct fake *f, const char *role, int n,
                                        const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write the token\",\"done_when\":"
               "[{\"contains\":\"OK-DONE\"}]}]}";
    if (!strcmp(role, "synthesizer"))
        return "the token is OK-DONE";
    /* only a prompt that says what failed gets it right */
    return strstr(prompt, "OK-DONE") && strstr(prompt, "previous attempt")
               ? "OK-DONE"
               : "nope";
}

Test(judge, a_retry_with_the_feedback_passes_on_the_same_tier)
{
    struct env e;
    env_open(&e, passes_with_feedback);
    struct orch_submit_opts o = {0};
    cJSON *out = submit_opts(&e, "write the token", &o);
    cr_assert(cJSON_IsTrue(get(out, "ok")));
    cr_assert_eq(tu_num(out, "retries"), 1);
    cr_assert_eq(tu_num(out, "escalations"), 0);
    cr_assert_str_eq(e.f->log, "coordinator:m-capable task:m-cheap "
                               "task:m-cheap synthesizer:m-capable ");
    /* the run's view folds the retry from the ledger */
    struct fo_err err;
    cJSON *view = NULL;
    cr_assert_eq(orch_run_fold(e.o, e.l, 0, &view, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(tu_num(view, "retries"), 1);
    cJSON_Delete(view);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- the intent judge ---------------------------------------------------- */

static const char *judged_partial(struct fake *f, const char *role, int n,
                                  const char *model, const char *prompt)
{
    (void)f, (void)model;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"coder\","
               "\"instruction\":\"write the function\",\"done_when\":"
               "[{\"contains\":\"def\"}]}]}";
    if (!strcmp(role, "synthesizer"))
        return "Here is the function: def add(a, b): return a + b";
    if (!strcmp(role, "judge")) {
        if (n == 0) /* then the correction, after the rejected reply */
            cr_assert(strstr(prompt, "add a function and its tests") &&
                          strstr(prompt, "def add(a, b)"),
                      "%s", prompt);
        /* the first reply is not a verdict: the judge is told and asked
         * again */
        return n == 0 ? "I think it mostly does."
                      : "{\"covers\": \"partial\", \"missing\": [\"the "
                        "tests\"], \"reason\": \"no tests were written\"}";
    }
    return "def add(a, b): return a + b";
}

Test(judge, the_intent_judge_witnesses_its_verdict_and_the_fold_shows_it)
{
    struct env e;
    env_open(&e, judged_partial);
    struct orch_submit_opts o = {.intent_judge = 1};
    cJSON *out = submit_opts(&e, "add a function and its tests", &o);
    char k[1024];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict answer "
                        "judge_attempt intent_judgment ");
    cr_assert_eq(e.f->count[R_JUDGE], 2);
    int64_t js = nth_kind(&e, 0, "intent_judgment", 0);
    int64_t as = nth_kind(&e, 0, "answer", 0);
    struct ledger_entry en;
    struct fo_err err;
    cr_assert_eq(ledger_get(e.l, js, &en, NULL, &err), FO_OK);
    cr_assert_eq(en.parent, as);
    cr_assert_str_eq(en.actor, "judge");
    cJSON *jb = body_of(&e, js);
    cr_assert_str_eq(tu_str(jb, "covers"), "partial");
    cr_assert(cJSON_IsFalse(get(jb, "ok")));
    cr_assert(cJSON_IsTrue(get(jb, "judged")));
    cr_assert_str_eq(cJSON_GetArrayItem(get(jb, "missing"), 0)->valuestring,
                     "the tests");
    cr_assert_str_eq(tu_str(jb, "model"), "m-cheap");
    cr_assert(cJSON_IsNumber(get(jb, "coverage_score")));
    cJSON_Delete(jb);
    /* the result and the folded view carry it; the calls count it */
    const cJSON *in = get(out, "intent");
    cr_assert_str_eq(tu_str(in, "covers"), "partial");
    cr_assert_eq(tu_num(out, "model_calls"), 5);
    cJSON *view = NULL;
    cr_assert_eq(orch_run_fold(e.o, e.l, 0, &view, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(tu_str(view, "phase"), "end");
    cr_assert_str_eq(tu_str(get(view, "intent"), "covers"), "partial");
    cr_assert_eq(tu_num(view, "model_calls"), 5);
    cJSON_Delete(view);
    cJSON *show = NULL; /* run show: the fold's verdict */
    cr_assert_eq(orch_run_show(e.o, e.l, 0, &show, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(tu_str(get(show, "intent"), "covers"), "partial");
    cJSON_Delete(show);
    /* a grade counts it: an independent check that refutes (the
     * verdict by assertions is the validator's, the judge's is its own) */
    cJSON *g = NULL;
    cr_assert_eq(orch_grade(e.l, 0, 2, &g, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(tu_str(g, "label"), "FAIL");
    char *gs = cJSON_PrintUnformatted(g);
    cr_assert(strstr(gs, "intent_judgment"), "%s", gs);
    free(gs);
    cJSON_Delete(g);
    /* the receipt's verdict names it */
    const cJSON *rv = get(get(out, "receipt"), "verdict");
    cr_assert_str_eq(tu_str(rv, "intent"), "partial");
    cr_assert_eq(tu_num(rv, "intent_seq"), js);
    cJSON_Delete(out);
    env_close(&e);
}

Test(judge, without_a_model_the_judge_is_skipped_and_says_so)
{
    struct env e;
    env_open(&e, NULL);
    struct orch_submit_opts o = {.intent_judge = 1};
    cJSON *out = submit_opts(&e, "echo hello", &o);
    char k[512];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict answer "
                        "intent_judgment ");
    cJSON *jb = body_of(&e, nth_kind(&e, 0, "intent_judgment", 0));
    cr_assert(cJSON_IsFalse(get(jb, "judged")));
    cr_assert_null(get(jb, "ok")); /* a grade counts it neither way */
    cr_assert(strstr(tu_str(jb, "skipped"), "no model provider"));
    cJSON_Delete(jb);
    cr_assert(cJSON_IsFalse(get(get(out, "intent"), "judged")));
    cJSON_Delete(out);
    /* not asked: no judgment at all */
    struct orch_submit_opts none = {0};
    out = submit_opts(&e, "echo again", &none);
    cr_assert(cJSON_IsNull(get(out, "intent")));
    cr_assert_eq(nth_kind(&e, 0, "intent_judgment", 1), -1);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- the action receipt ---------------------------------------------------
 */

/* Every field of the receipt is derived again from the ledger alone. */
Test(judge, the_receipt_rederives_from_the_ledger)
{
    struct env e;
    env_open(&e, judged_partial);
    struct orch_submit_opts o = {.intent_judge = 1};
    cJSON *out = submit_opts(&e, "add a function and its tests", &o);
    const cJSON *rc = get(out, "receipt");
    cr_assert_str_eq(tu_str(rc, "schema"), "forum.action-receipt/v1");
    int64_t run = tu_num(out, "request_seq");
    cr_assert_eq(tu_num(rc, "run_id"), run);
    cr_assert_eq(tu_num(rc, "first_seq"), run);
    cr_assert_eq(tu_num(rc, "answer_seq"), tu_num(out, "answer_seq"));
    /* last_seq: the run's last entry (its judgment) */
    struct fo_err err;
    struct ledger_entry en;
    int64_t count = 0;
    cr_assert_eq(ledger_count(e.l, &count, &err), FO_OK);
    cr_assert_eq(tu_num(rc, "last_seq"), count - 1);
    cr_assert_eq(ledger_get(e.l, count - 1, &en, NULL, &err), FO_OK);
    cr_assert_str_eq(en.kind, "intent_judgment");
    /* the payload hashes are the entries' */
    char hex[65];
    cr_assert_eq(ledger_get(e.l, run, &en, NULL, &err), FO_OK);
    fo_hex(en.payload, 32, hex);
    cr_assert_str_eq(tu_str(get(rc, "payload_hashes"), "request"), hex);
    cr_assert_eq(ledger_get(e.l, tu_num(out, "answer_seq"), &en, NULL, &err),
                 FO_OK);
    fo_hex(en.payload, 32, hex);
    cr_assert_str_eq(tu_str(get(rc, "payload_hashes"), "answer"), hex);
    /* the checkpoint is the tree at its size */
    const cJSON *cp = get(rc, "checkpoint");
    uint8_t root[32];
    cr_assert_eq(ledger_root(e.l, tu_num(cp, "size"), root, &err), FO_OK);
    fo_hex(root, 32, hex);
    cr_assert_str_eq(tu_str(cp, "root"), hex);
    cr_assert_str_eq(tu_str(out, "checkpoint"), hex);
    /* the models: the result's, the answer's and the judgment's, once */
    char models[256] = "";
    const cJSON *m;
    cJSON_ArrayForEach (m, get(rc, "models")) {
        size_t l = strlen(models);
        snprintf(models + l, sizeof(models) - l, "%s ", m->valuestring);
    }
    cJSON *res = body_of(&e, nth_kind(&e, 0, "result", 0));
    cJSON *ans = body_of(&e, tu_num(out, "answer_seq"));
    cJSON *jud = body_of(&e, nth_kind(&e, 0, "intent_judgment", 0));
    char want[256] = "";
    const char *each[] = {tu_str(res, "model"), tu_str(ans, "model"),
                          tu_str(jud, "model")};
    for (int i = 0; i < 3; i++) {
        char one[80];
        snprintf(one, sizeof(one), "%s ", each[i]);
        size_t l = strlen(want);
        if (!strstr(want, one))
            snprintf(want + l, sizeof(want) - l, "%s", one);
    }
    cr_assert_str_eq(models, want);
    cJSON_Delete(res);
    cJSON_Delete(ans);
    cJSON_Delete(jud);
    /* the budget: the calls the entries witness */
    const cJSON *bu = get(rc, "budget");
    cr_assert_eq(tu_num(bu, "model_calls"), tu_num(out, "model_calls"));
    cr_assert_eq(tu_num(bu, "max_model_calls"), 32);
    cr_assert(cJSON_IsFalse(get(get(rc, "verdict"), "ok")) ==
              cJSON_IsFalse(get(out, "ok")));
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- a signed checkpoint after every wave ----------------------------------
 */

static const char *three_waves(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":["
               "{\"id\":\"A\",\"agent\":\"coder\",\"instruction\":\"one\","
               "\"done_when\":[{\"contains\":\"x\"}]},"
               "{\"id\":\"B\",\"agent\":\"coder\",\"instruction\":\"two\","
               "\"depends_on\":[\"A\"],\"done_when\":[{\"contains\":\"x\"}]},"
               "{\"id\":\"C\",\"agent\":\"coder\",\"instruction\":\"three\","
               "\"depends_on\":[\"B\"],\"done_when\":[{\"contains\":\"x\"}]}"
               "]}";
    if (!strcmp(role, "synthesizer"))
        return "x x x";
    return "x";
}

Test(judge, three_waves_give_three_signed_checkpoints_that_verify)
{
    struct env e;
    env_open(&e, three_waves);
    struct orch_submit_opts o = {.checkpoint_each_wave = 1};
    cJSON *out = submit_opts(&e, "code in three steps", &o);
    cr_assert(cJSON_IsTrue(get(out, "ok")));
    char k[1024];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict "
                        "wave_checkpoint task result verdict wave_checkpoint "
                        "task result verdict wave_checkpoint answer ");
    struct fo_err err;
    char *vkey = NULL;
    cr_assert_eq(ledger_verifier_key(e.l, &vkey, &err), FO_OK, "%s", err.msg);
    const cJSON *list = get(out, "checkpoints");
    cr_assert_eq(cJSON_GetArraySize(list), 3);
    for (int w = 0; w < 3; w++) {
        int64_t s = nth_kind(&e, 0, "wave_checkpoint", w);
        cJSON *b = body_of(&e, s);
        cr_assert_eq(tu_num(b, "wave"), w);
        /* it signs the tree as the wave left it: through its verdict */
        cr_assert_eq(tu_num(b, "size"), s);
        const char *note = tu_str(b, "note");
        struct ledger_checkpoint_result res;
        cr_assert_eq(ledger_verify_checkpoint(e.l, 0, note, strlen(note), vkey,
                                              strlen(vkey), NULL, NULL, &res,
                                              &err),
                     FO_OK, "%s", err.msg);
        cr_assert(res.ok, "wave %d: %s", w, res.detail);
        cr_assert_eq(res.size, tu_num(b, "size"));
        const cJSON *x = cJSON_GetArrayItem(list, w);
        cr_assert_eq(tu_num(x, "seq"), s);
        cr_assert_str_eq(tu_str(x, "root"), tu_str(b, "root"));
        cJSON_Delete(b);
    }
    free(vkey);
    /* run show and the run room list them */
    cJSON *show = NULL, *room = NULL;
    int64_t run = tu_num(out, "request_seq");
    cr_assert_eq(orch_run_show(e.o, e.l, run, &show, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_eq(cJSON_GetArraySize(get(show, "checkpoints")), 3);
    cr_assert_eq(orch_room(e.l, run, ORCH_VIEW_TEXT_DEFAULT, &room, &err),
                 FO_OK, "%s", err.msg);
    const cJSON *rc = get(room, "checkpoints");
    cr_assert_eq(cJSON_GetArraySize(rc), 3);
    for (int w = 0; w < 3; w++)
        cr_assert_eq(tu_num(cJSON_GetArrayItem(rc, w), "seq"),
                     nth_kind(&e, 0, "wave_checkpoint", w));
    cJSON_Delete(show);
    cJSON_Delete(room);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- the capsule as the run's context -------------------------------------
 */

static const char *sees_context(struct fake *f, const char *role, int n,
                                const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"coder\","
               "\"instruction\":\"go on\",\"done_when\":[{\"contains\":"
               "\"x\"}]}]}";
    if (!strcmp(role, "synthesizer"))
        return "x";
    return "x";
}

Test(judge, the_capsule_hash_is_in_the_first_entry_and_the_models_see_it)
{
    struct env e;
    env_open(&e, sees_context);
    struct orch_submit_opts none = {0};
    cJSON *out = submit_opts(&e, "code for the parser", &none);
    cJSON_Delete(out);
    /* the capsule of the ledger as it is now */
    struct fo_err err;
    cJSON *cap = NULL;
    cr_assert_eq(orch_capsule(e.l, ORCH_VIEW_ITEMS_DEFAULT,
                              ORCH_VIEW_TEXT_DEFAULT, &cap, &err),
                 FO_OK, "%s", err.msg);
    struct fo_buf t;
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    cr_assert_eq(orch_capsule_text(cap, &t), FO_OK);
    cJSON_Delete(cap);
    uint8_t h[32];
    char hex[65];
    fo_sha256(t.data, t.len, h);
    fo_hex(h, 32, hex);
    int calls = e.f->n_prompts;
    struct orch_submit_opts o = {.use_capsule_context = 1};
    out = submit_opts(&e, "code to continue the parser", &o);
    int64_t run = tu_num(out, "request_seq");
    cJSON *rb = body_of(&e, run);
    const cJSON *c = get(rb, "capsule");
    cr_assert_str_eq(tu_str(c, "hash"), hex);
    cr_assert_str_eq(tu_str(c, "text"), t.data);
    cr_assert_eq(tu_num(c, "chars"), (long long)t.len);
    cJSON_Delete(rb);
    /* the coordinator was given the capsule before the request */
    const char *p = e.f->prompts[calls];
    cr_assert(strstr(p, hex) && strstr(p, "code for the parser") &&
                  strstr(p, "code to continue the parser"),
              "%s", p);
    cr_assert_str_eq(tu_str(out, "capsule_hash"), hex);
    fo_buf_release(&t);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- the context budget and the delivery profile -------------------------
 */

/* The run's context limits bound the capsule the models see: cut at a
 * character to max_request_tokens (4 bytes a token), the cut witnessed in
 * the request entry's capsule, the prompt saying it was cut. */
Test(judge, the_context_budget_cuts_the_capsule_and_says_how_much)
{
    struct env e;
    env_open(&e, sees_context);
    struct orch_submit_opts none = {0};
    cJSON *out = submit_opts(&e, "code for the parser", &none);
    cJSON_Delete(out);
    struct fo_err err;
    cJSON *cap = NULL;
    cr_assert_eq(orch_capsule(e.l, ORCH_VIEW_ITEMS_DEFAULT,
                              ORCH_VIEW_TEXT_DEFAULT, &cap, &err),
                 FO_OK, "%s", err.msg);
    struct fo_buf t;
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    cr_assert_eq(orch_capsule_text(cap, &t), FO_OK);
    cJSON_Delete(cap);
    cr_assert_gt(t.len, 40); /* more than the budget below admits */
    cJSON *lim = cJSON_Parse("{\"max_request_tokens\":10}");
    int calls = e.f->n_prompts;
    struct orch_submit_opts o = {.use_capsule_context = 1, .context = lim};
    out = submit_opts(&e, "code to continue the parser", &o);
    cJSON *rb = body_of(&e, tu_num(out, "request_seq"));
    const cJSON *c = get(rb, "capsule");
    const cJSON *b = get(c, "budget");
    cr_assert_str_eq(tu_str(b, "schema"), "forum.context-pressure/v1");
    cr_assert_str_eq(tu_str(b, "action"), "trimmed");
    cr_assert_str_eq(tu_str(b, "reason"), "max_request_tokens");
    cr_assert_eq(tu_num(b, "original_bytes"), (long long)t.len);
    cr_assert_eq(tu_num(b, "original_tokens"), (long long)(t.len + 3) / 4);
    cr_assert_eq(tu_num(b, "admitted_bytes"), 40);
    cr_assert_eq(tu_num(b, "admitted_tokens"), 10);
    /* the text kept is the capsule's first 40 bytes, and only they */
    cr_assert_eq(strlen(tu_str(c, "text")), 40);
    cr_assert_eq(strncmp(tu_str(c, "text"), t.data, 40), 0);
    cr_assert_eq(tu_num(c, "chars"), 40);
    const char *p = e.f->prompts[calls];
    cr_assert(strstr(p, "cut to the run's context budget") &&
                  strstr(p, tu_str(c, "text")) && !strstr(p, t.data),
              "%s", p);
    cJSON_Delete(rb);
    cJSON_Delete(out);
    /* the default limits keep a small capsule whole, and say so */
    struct orch_submit_opts whole = {.use_capsule_context = 1};
    out = submit_opts(&e, "code to finish the parser", &whole);
    rb = body_of(&e, tu_num(out, "request_seq"));
    cr_assert_str_eq(tu_str(get(get(rb, "capsule"), "budget"), "action"),
                     "retained");
    cJSON_Delete(rb);
    cJSON_Delete(out);
    cJSON_Delete(lim);
    fo_buf_release(&t);
    env_close(&e);
}

static const char *long_answer(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"coder\","
               "\"instruction\":\"write the code\",\"done_when\":"
               "[{\"contains\":\"x\"}]}]}";
    if (!strcmp(role, "synthesizer")) /* 130 words, no action verb */
        return "As an AI I think the answer is this: "
               "w w w w w w w w w w w w w w w w w w w w w w w w w w w w w w "
               "w w w w w w w w w w w w w w w w w w w w w w w w w w w w w w "
               "w w w w w w w w w w w w w w w w w w w w w w w w w w w w w w "
               "w w w w w w w w w w w w w w w w w w w w w w w w w w w w w w "
               "w w w w w w w w w w w w w w w w w w w w w w w w w w w w w w. "
               "Done.";
    if (!strcmp(role, "judge"))
        return "{\"covers\": \"yes\", \"missing\": []}";
    return "x";
}

/* delivery_profile: the profile's rules in the synthesizer's prompt, then a
 * delivery_profile_check of the answer under it (before the intent judge),
 * the same as the prose check of that text; not asked, neither. */
Test(judge, the_delivery_profile_shapes_and_checks_the_answer)
{
    struct env e;
    env_open(&e, long_answer);
    struct orch_submit_opts o = {.delivery_profile = "executive",
                                 .intent_judge = 1};
    cJSON *out = submit_opts(&e, "write the code", &o);
    char k[1024];
    kinds(&e, 0, k, sizeof(k));
    cr_assert(strstr(k, " answer delivery_profile_check intent_judgment "),
              "%s", k);
    /* the synthesizer was told the executive profile's rules */
    cr_assert(e.f->seen &&
                  strstr(e.f->seen, "the executive delivery profile") &&
                  strstr(e.f->seen, "at most 120 words"),
              "%s", e.f->seen ? e.f->seen : "");
    int64_t as = nth_kind(&e, 0, "answer", 0);
    int64_t cs = nth_kind(&e, 0, "delivery_profile_check", 0);
    cJSON *cb = body_of(&e, cs);
    struct fo_err err;
    struct ledger_entry en;
    cr_assert_eq(ledger_get(e.l, cs, &en, NULL, &err), FO_OK);
    cr_assert_eq(en.parent, as);
    cr_assert_str_eq(en.actor, "delivery-profile");
    cr_assert_str_eq(tu_str(cb, "schema"), "forum.delivery-profile/v1");
    cr_assert_str_eq(tu_str(cb, "profile"), "executive");
    cr_assert(cJSON_IsTrue(get(cb, "flagged")));
    cr_assert_eq(tu_num(cb, "answer_seq"), as);
    /* the same as the prose check of the answer, recomputed */
    cJSON *ab = body_of(&e, as), *again = NULL;
    cr_assert_eq(
        orch_profile_check(tu_str(ab, "answer"), "executive", &again, &err),
        FO_OK);
    cr_assert(cJSON_Compare(get(cb, "findings"), get(again, "findings"), 1));
    char *codes = cJSON_PrintUnformatted(get(cb, "findings"));
    cr_assert(strstr(codes, "too_many_words") &&
                  strstr(codes, "model_preamble") &&
                  strstr(codes, "missing_action_verb"),
              "%s", codes);
    free(codes);
    cr_assert(cJSON_IsTrue(get(get(out, "delivery_profile"), "flagged")));
    cJSON_Delete(again);
    cJSON_Delete(ab);
    cJSON_Delete(cb);
    cJSON_Delete(out);
    /* not asked: no rules, no check */
    size_t seen = e.f->seen_len;
    struct orch_submit_opts none = {0};
    out = submit_opts(&e, "write the code", &none);
    cr_assert_eq(nth_kind(&e, 0, "delivery_profile_check", 1), -1);
    cr_assert_null(get(out, "delivery_profile"));
    cr_assert_null(strstr(e.f->seen + seen, "delivery profile"));
    cJSON_Delete(out);
    /* an unknown one is refused before anything is written */
    int64_t before = 0;
    cr_assert_eq(ledger_count(e.l, &before, &err), FO_OK);
    struct orch_submit_opts poet = {.delivery_profile = "poet"};
    out = NULL;
    cr_assert_eq(tu_submit(e.o, &e.w, "write", &poet, &out, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "delivery_profile") && strstr(err.msg, "poet"),
              "%s", err.msg);
    int64_t after = 0;
    cr_assert_eq(ledger_count(e.l, &after, &err), FO_OK);
    cr_assert_eq(after, before);
    env_close(&e);
}

/* claim_lane: the engine claims the route frame's proof lane for doing
 * tasks (read, run) before the plan: an execute frame (or none) is a
 * lane_route under the route; a verify frame grants no "run": a
 * lane_rejection on record, then the run fails saying so. */
Test(judge, the_engine_claims_a_proof_lane_when_asked)
{
    struct env e;
    env_open(&e, NULL);
    struct orch_submit_opts o = {.claim_lane = 1};
    cJSON *out = submit_opts(&e, "echo hello", &o);
    char k[1024];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route lane_route plan task result verdict "
                        "answer ");
    int64_t ls = nth_kind(&e, 0, "lane_route", 0);
    struct fo_err err;
    struct ledger_entry en;
    cr_assert_eq(ledger_get(e.l, ls, &en, NULL, &err), FO_OK);
    cr_assert_eq(en.parent, nth_kind(&e, 0, "route", 0));
    cr_assert_str_eq(en.actor, "router");
    cJSON *lb = body_of(&e, ls);
    cr_assert_str_eq(tu_str(lb, "lane"), "execute");
    cr_assert_str_eq(tu_str(lb, "task"), "echo hello");
    char *sc = cJSON_PrintUnformatted(get(lb, "scopes"));
    cr_assert_str_eq(sc, "[\"read\",\"run\"]");
    free(sc);
    cJSON_Delete(lb);
    cr_assert_str_eq(tu_str(get(out, "lane_claim"), "kind"), "lane_route");
    cr_assert_eq(tu_num(get(out, "lane_claim"), "seq"), ls);
    cJSON_Delete(out);
    /* a verify frame: the claim over-reaches, on record, then refused */
    int64_t from = 0;
    cr_assert_eq(ledger_count(e.l, &from, &err), FO_OK);
    out = NULL;
    int rc = tu_submit(e.o, &e.w, "verify the tests", &o, &out, &err);
    cr_assert_eq(rc, FO_E_INVALID, "rc %d: %s", rc, err.msg);
    cr_assert(strstr(err.msg, "lane_rejection seq") &&
                  strstr(err.msg, "over_routed") &&
                  strstr(err.msg, "attest, read"),
              "%s", err.msg);
    cJSON_Delete(out);
    kinds(&e, from, k, sizeof(k));
    cr_assert_str_eq(k, "request route lane_rejection error ");
    cJSON *rb = body_of(&e, nth_kind(&e, from, "lane_rejection", 0));
    cr_assert_str_eq(tu_str(rb, "lane"), "verify");
    cr_assert_str_eq(tu_str(rb, "domain"), "formal-proof");
    cr_assert_str_eq(tu_str(rb, "violation"), "over_routed");
    char *ex = cJSON_PrintUnformatted(get(rb, "excess"));
    cr_assert_str_eq(ex, "[\"run\"]");
    free(ex);
    cJSON_Delete(rb);
    /* not asked: no claim */
    struct orch_submit_opts none = {0};
    out = submit_opts(&e, "echo again", &none);
    cr_assert_null(get(out, "lane_claim"));
    cr_assert_eq(nth_kind(&e, 0, "lane_route", 1), -1);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- verifier and reviser hooks -------------------------------------------
 */

/* An orchestrator on the roster lanes (whose hook commands live in dir,
 * the ledger's dir too), commands unconfined. */
static void env_open_box(struct env *e, fake_fn fn, char *dir,
                         const char *lanes, int sandbox)
{
    memset(e, 0, sizeof(*e));
    setenv(KEY_ENV, KEY, 1);
    struct fo_err err;
    e->dir = dir;
    e->f = fake_start(fn);
    snprintf(e->url, sizeof(e->url), "http://127.0.0.1:%d", e->f->port);
    const char *names[3] = {"m-cheap", "m-capable", "m-frontier"};
    for (int t = 0; t < 3; t++)
        e->p[t] = (struct orch_model_provider){.api = ORCH_EXEC_CHAT,
                                               .url = e->url,
                                               .model = names[t],
                                               .api_key_env = KEY_ENV,
                                               .tier = t};
    e->mc = (struct orch_model_config){.providers = e->p,
                                       .n_providers = 3,
                                       .attempts = 1,
                                       .timeout_ms = 10000};
    struct orch_config cfg = {.roster_json = lanes,
                              .roster_json_len = strlen(lanes),
                              .models = &e->mc,
                              .sandbox = sandbox,
                              .data_dir = dir};
    cr_assert_eq(orch_create(&cfg, &e->o, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(ledger_open(e->dir, LEDGER_OPEN_CREATE, NULL, &e->l, &err),
                 FO_OK, "%s", err.msg);
    e->w = (struct orch_witness){.ledger = e->l};
}

static void env_open_hooks(struct env *e, fake_fn fn, char *dir,
                           const char *lanes)
{
    env_open_box(e, fn, dir, lanes, ORCH_SANDBOX_NONE);
}

/* An executable script dir/name; the path, malloc'd. */
static char *script(const char *dir, const char *name, const char *text)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    cr_assert_not_null(path);
    snprintf(path, n, "%s/%s", dir, name);
    cr_assert_eq(tu_write_file(path, text, strlen(text)), 0);
    cr_assert_eq(chmod(path, 0755), 0);
    return path;
}

/* The verifier passes only an answer that cites (its input is its last
 * argument, the task and answer as JSON). */
static const char verify_sh[] =
    "#!/bin/sh\n"
    "case \"$1\" in *forum.hook-input/v1*) ;; *) exit 3 ;; esac\n"
    "case \"$1\" in\n"
    "  *CITED*) echo '{\"ok\": true}' ;;\n"
    "  *) echo '{\"ok\": false, \"reason\": \"no citation\"}' ;;\n"
    "esac\n";

static const char *cites_on_capable(struct fake *f, const char *role, int n,
                                    const char *model, const char *prompt)
{
    (void)f, (void)n, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write the summary\",\"done_when\":"
               "[{\"contains\":\"summary\"}]}]}";
    if (!strcmp(role, "synthesizer"))
        return "the summary";
    return !strcmp(model, "m-capable") ? "summary CITED" : "summary";
}

/* A failing verifier is a failed check: witnessed, retried on the tier
 * with its reason in the prompt, then escalated. */
Test(judge, a_failing_verifier_is_a_failed_check_retried_then_escalated)
{
    char *dir = tu_tmpdir();
    char *v = script(dir, "verify.sh", verify_sh);
    char lanes[2048];
    snprintf(lanes, sizeof(lanes),
             "{\"lanes\":[{\"name\":\"writer\",\"category\":\"c\","
             "\"domain\":\"writes\",\"keywords\":[\"write\"],"
             "\"model_tier\":\"cheap\",\"executor\":\"chat\","
             "\"max_retries\":1,\"verifier\":{\"command\":[\"%s\"],"
             "\"timeout_s\":30}}]}",
             v);
    struct env e;
    env_open_hooks(&e, cites_on_capable, dir, lanes);
    struct orch_submit_opts o = {0};
    cJSON *out = submit_opts(&e, "write the summary", &o);
    cr_assert(cJSON_IsTrue(get(out, "ok")));
    cr_assert_eq(tu_num(out, "retries"), 1);
    cr_assert_eq(tu_num(out, "escalations"), 1);
    char k[1024];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict verification "
                        "retry task result verdict verification "
                        "tier_escalation task result verdict verification "
                        "answer ");
    int64_t vs = nth_kind(&e, 0, "verification", 0);
    cJSON *vb = body_of(&e, vs);
    cr_assert(cJSON_IsFalse(get(vb, "ok")));
    cr_assert_str_eq(tu_str(vb, "by"), "command");
    cr_assert_str_eq(tu_str(vb, "hook"), v);
    cr_assert_str_eq(cJSON_GetArrayItem(get(vb, "failed"), 0)->valuestring,
                     "verifier: no citation");
    cJSON_Delete(vb);
    struct ledger_entry en;
    struct fo_err err;
    cr_assert_eq(ledger_get(e.l, vs, &en, NULL, &err), FO_OK);
    cr_assert_str_eq(en.actor, "verifier");
    cr_assert_eq(ledger_get(e.l, vs + 1, &en, NULL, &err), FO_OK);
    cr_assert_str_eq(en.kind, "retry");
    cr_assert_eq(en.parent, vs); /* the retry answers the verification */
    /* the retry's prompt carries the verifier's reason */
    cr_assert(strstr(e.f->prompts[2], "verifier: no citation"), "%s",
              e.f->prompts[2]);
    cJSON *last = body_of(&e, nth_kind(&e, 0, "verification", 2));
    cr_assert(cJSON_IsTrue(get(last, "ok")));
    cJSON_Delete(last);
    free(v);
    cJSON_Delete(out);
    env_close(&e);
}

static const char revise_sh[] =
    "#!/bin/sh\n"
    "case \"$1\" in\n"
    "  *'\"hook\":\"reviser\"'*) echo '{\"answer\": \"draft, REVISED\"}' ;;\n"
    "  *) exit 4 ;;\n"
    "esac\n";

static const char *drafts(struct fake *f, const char *role, int n,
                          const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\","
               "\"instruction\":\"write the draft\",\"done_when\":"
               "[{\"contains\":\"REVISED\"}]}]}";
    if (!strcmp(role, "synthesizer")) {
        cr_assert(strstr(prompt, "draft, REVISED"), "%s", prompt);
        return "draft, REVISED";
    }
    return "draft";
}

/* The reviser rewrites the output before its verdict: the verdict judges
 * the revision, and the synthesizer gets it. */
Test(judge, the_reviser_rewrites_the_output_before_its_verdict)
{
    char *dir = tu_tmpdir();
    char *rv = script(dir, "revise.sh", revise_sh);
    char lanes[2048];
    snprintf(lanes, sizeof(lanes),
             "{\"lanes\":[{\"name\":\"writer\",\"category\":\"c\","
             "\"domain\":\"writes\",\"keywords\":[\"write\"],"
             "\"model_tier\":\"cheap\",\"executor\":\"chat\","
             "\"reviser\":{\"command\":[\"%s\"]}}]}",
             rv);
    struct env e;
    env_open_hooks(&e, drafts, dir, lanes);
    struct orch_submit_opts o = {0};
    cJSON *out = submit_opts(&e, "write the draft", &o);
    cr_assert(cJSON_IsTrue(get(out, "ok")));
    char k[1024];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result revision verdict "
                        "answer ");
    int64_t rs = nth_kind(&e, 0, "revision", 0);
    cJSON *rb = body_of(&e, rs);
    cr_assert(cJSON_IsTrue(get(rb, "ok")));
    cr_assert_str_eq(tu_str(rb, "output"), "draft, REVISED");
    cJSON_Delete(rb);
    struct ledger_entry en;
    struct fo_err err;
    cr_assert_eq(ledger_get(e.l, rs, &en, NULL, &err), FO_OK);
    cr_assert_eq(en.parent, rs - 1); /* the result */
    cr_assert_str_eq(en.actor, "reviser");
    free(rv);
    cJSON_Delete(out);
    env_close(&e);
}

static const char *stub_plan_on_checked(struct fake *f, const char *role, int n,
                                        const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"checked\","
               "\"instruction\":\"echo it\",\"done_when\":"
               "[{\"contains\":\"echo\"}]}]}";
    if (!strcmp(role, "synthesizer"))
        return "echoed";
    return "{\"id\": \"not a verdict\"}";
}

/* A URL verifier: the task and answer are POSTed; a reply that is not a
 * verdict is a failed check, witnessed (here the fake model server
 * answers it, in the chat shape: no "ok"). */
Test(judge, a_url_verifier_that_answers_no_verdict_fails_the_check)
{
    struct env e;
    char *dir = tu_tmpdir();
    /* the fake's port is known once it runs: a first server for the port,
     * then the roster naming it */
    struct fake *probe = fake_start(stub_plan_on_checked);
    char lanes[2048];
    snprintf(lanes, sizeof(lanes),
             "{\"lanes\":[{\"name\":\"checked\",\"category\":\"c\","
             "\"domain\":\"echoes\",\"keywords\":[\"echo\"],"
             "\"model_tier\":\"cheap\",\"executor\":\"stub\","
             "\"verifier\":{\"url\":\"http://127.0.0.1:%d/verify\"}}]}",
             probe->port);
    env_open_hooks(&e, stub_plan_on_checked, dir, lanes);
    struct orch_submit_opts o = {0};
    cJSON *out = submit_opts(&e, "echo it", &o);
    cr_assert(cJSON_IsFalse(get(out, "ok")));
    char k[1024];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict verification "
                        "answer ");
    cJSON *vb = body_of(&e, nth_kind(&e, 0, "verification", 0));
    cr_assert(cJSON_IsFalse(get(vb, "ok")));
    cr_assert_str_eq(tu_str(vb, "by"), "url");
    cr_assert(strstr(tu_str(vb, "reason"), "not a verdict"), "%s",
              tu_str(vb, "reason"));
    cJSON_Delete(vb);
    /* the verifier's server got the task and the answer */
    cr_assert(probe->seen && strstr(probe->seen, "forum.hook-input/v1") &&
                  strstr(probe->seen, "\"id\":\"T1\""),
              "%s", probe->seen ? probe->seen : "(nothing)");
    fake_stop(probe);
    fake_free(probe);
    cJSON_Delete(out);
    env_close(&e);
}

/* An https verifier on 127.0.0.1 (one child, one request per connection):
 * it passes an answer whose hook input it got whole over TLS. */
static pid_t serve_verifier_tls(SSL_CTX *tls, int *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    cr_assert(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
              listen(s, 16) == 0 &&
              getsockname(s, (struct sockaddr *)&a, &al) == 0);
    *port = ntohs(a.sin_port);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid > 0) {
        close(s);
        return pid;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* gone with a test that failed */
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0)
            continue;
        SSL *ssl = SSL_new(tls);
        SSL_set_fd(ssl, c);
        if (SSL_accept(ssl) != 1) { /* a client that refused us */
            SSL_free(ssl);
            close(c);
            continue;
        }
        static char req[256 * 1024];
        size_t n = 0;
        for (;;) { /* the headers, then Content-Length bytes of body */
            int k = SSL_read(ssl, req + n, (int)(sizeof(req) - 1 - n));
            if (k <= 0)
                break;
            n += (size_t)k;
            req[n] = '\0';
            const char *end = strstr(req, "\r\n\r\n");
            const char *cl = strstr(req, "Content-Length: ");
            if (end && cl &&
                n >= (size_t)(end + 4 - req) + strtoul(cl + 16, NULL, 10))
                break;
        }
        const char *body =
            strstr(req, "forum.hook-input/v1") && strstr(req, "POST /verify ")
                ? "{\"ok\": true}"
                : "{\"ok\": false, \"reason\": \"no input\"}";
        char resp[256];
        int h = snprintf(resp, sizeof(resp),
                         "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         strlen(body), body);
        SSL_write(ssl, resp, h);
        SSL_shutdown(ssl);
        SSL_free(ssl);
        close(c);
    }
}

/* An https verifier: trusted (SSL_CERT_FILE replaces the system store the
 * engine's hook TLS context is made from), its verdict is the check; not
 * trusted, the call is a failed check saying the certificate did not
 * verify. */
Test(judge, an_https_verifier_is_verified_against_the_system_store,
     .timeout = 60)
{
    signal(SIGPIPE, SIG_IGN);
    char *dir = tu_tmpdir();
    char pem[600], lanes[2048];
    snprintf(pem, sizeof(pem), "%s/ca.pem", dir);
    SSL_CTX *tls = tu_tls_server("IP:127.0.0.1", pem);
    int port = 0;
    pid_t srv = serve_verifier_tls(tls, &port);
    snprintf(lanes, sizeof(lanes),
             "{\"lanes\":[{\"name\":\"checked\",\"category\":\"c\","
             "\"domain\":\"echoes\",\"keywords\":[\"echo\"],"
             "\"model_tier\":\"cheap\",\"executor\":\"stub\","
             "\"verifier\":{\"url\":\"https://127.0.0.1:%d/verify\"}}]}",
             port);
    setenv("SSL_CERT_FILE", pem, 1);
    struct env e;
    env_open_hooks(&e, stub_plan_on_checked, dir, lanes);
    struct orch_submit_opts o = {0};
    cJSON *out = submit_opts(&e, "echo it", &o);
    cr_assert(cJSON_IsTrue(get(out, "ok")));
    char k[1024];
    kinds(&e, 0, k, sizeof(k));
    cr_assert_str_eq(k, "request route plan task result verdict verification "
                        "answer ");
    int64_t v1 = nth_kind(&e, 0, "verification", 0);
    cJSON *vb = body_of(&e, v1);
    cr_assert(cJSON_IsTrue(get(vb, "ok")));
    cr_assert_str_eq(tu_str(vb, "by"), "url");
    cJSON_Delete(vb);
    cJSON_Delete(out);
    /* the system store does not know the test CA: a run after (an engine
     * of its own) is refused by TLS */
    unsetenv("SSL_CERT_FILE");
    out = submit_opts(&e, "echo it", &o);
    cr_assert(cJSON_IsFalse(get(out, "ok")));
    vb = body_of(&e, nth_kind(&e, v1 + 1, "verification", 0));
    cr_assert(cJSON_IsFalse(get(vb, "ok")));
    cr_assert(strstr(tu_str(vb, "reason"), "did not verify"), "%s",
              tu_str(vb, "reason"));
    cJSON_Delete(vb);
    cJSON_Delete(out);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    SSL_CTX_free(tls);
    env_close(&e);
}

/* ---- the CLI ----------------------------------------------------------------
 */

/* `forum --json submit` with the three switches, on the stub: the receipt,
 * the skipped judgment, one checkpoint for its one wave, the capsule's hash
 * in the request entry. */
Test(judge, cli_submit_json_carries_the_receipt)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "submit", "--json",
                                "--intent-judge", "--checkpoint-each-wave",
                                "--use-capsule-context", "echo hello", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *out = tu_run_json(&r);
    const cJSON *rc = get(out, "receipt");
    cr_assert_str_eq(tu_str(rc, "schema"), "forum.action-receipt/v1");
    cr_assert_eq(tu_num(rc, "run_id"), tu_num(out, "request_seq"));
    cr_assert(cJSON_IsFalse(get(get(out, "intent"), "judged")));
    cr_assert_eq(cJSON_GetArraySize(get(out, "checkpoints")), 1);
    cr_assert_eq(strlen(tu_str(out, "capsule_hash")), 64);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "body", "0", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, tu_str(out, "capsule_hash")), "%s", r.out);
    tu_run_free(&r);
    cJSON_Delete(out);
    tu_rmrf(dir);
}

/* ---- the roster's fields ----------------------------------------------------
 */

static void roster_refused(const char *extra, const char *want)
{
    char json[1024];
    snprintf(json, sizeof(json),
             "{\"lanes\":[{\"name\":\"w\",\"category\":\"c\",\"domain\":\"d\","
             "\"keywords\":[\"write\"],\"model_tier\":\"cheap\","
             "\"executor\":\"stub\",%s}]}",
             extra);
    struct orch_roster *r = NULL;
    struct fo_err err;
    cr_assert_eq(orch_roster_parse(json, strlen(json), &r, &err), FO_E_INVALID,
                 "%s", extra);
    cr_assert(strstr(err.msg, want), "%s: %s", extra, err.msg);
}

Test(judge, bad_retries_and_hooks_are_refused_naming_the_lane_and_field)
{
    roster_refused("\"max_retries\":11", "lane \"w\": max_retries: must be");
    roster_refused("\"max_retries\":-1", "max_retries");
    roster_refused("\"verifier\":{\"command\":[]}", "verifier: command");
    roster_refused("\"verifier\":{\"command\":[\"a\"],\"url\":\"http://x\"}",
                   "verifier: must be");
    roster_refused("\"reviser\":{\"url\":\"ftp://x\"}", "reviser: url");
    roster_refused("\"verifier\":{\"command\":[\"a\"],\"timeout_s\":0}",
                   "verifier: timeout_s");
    roster_refused("\"verifier\":{\"command\":[\"a\"],\"env\":{}}",
                   "verifier: unknown key");
    /* a good one round-trips through the roster's JSON */
    const char good[] =
        "{\"lanes\":[{\"name\":\"w\",\"category\":\"c\",\"domain\":\"d\","
        "\"keywords\":[\"write\"],\"model_tier\":\"cheap\","
        "\"executor\":\"stub\",\"max_retries\":3,"
        "\"verifier\":{\"command\":[\"/bin/true\",\"-x\"]},"
        "\"reviser\":{\"url\":\"https://127.0.0.1:9/r\",\"timeout_s\":5}}]}";
    struct orch_roster *r = NULL;
    struct fo_err err;
    cr_assert_eq(orch_roster_parse(good, strlen(good), &r, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_eq(r->lanes[0].max_retries, 3);
    cr_assert_str_eq(r->lanes[0].verifier.argv[1], "-x");
    cr_assert_eq(r->lanes[0].verifier.timeout_ms, 60000);
    cr_assert_eq(r->lanes[0].reviser.timeout_ms, 5000);
    cJSON *j = orch_roster_json(r);
    const cJSON *l0 = cJSON_GetArrayItem(get(j, "lanes"), 0);
    cr_assert_eq(tu_num(l0, "max_retries"), 3);
    cr_assert_str_eq(tu_str(get(l0, "reviser"), "url"),
                     "https://127.0.0.1:9/r");
    cr_assert(r->lanes[0].reviser.tls && !r->lanes[0].verifier.tls);
    cr_assert_str_eq(
        cJSON_GetArrayItem(get(get(l0, "verifier"), "command"), 0)->valuestring,
        "/bin/true");
    cJSON_Delete(j);
    orch_roster_free(r);
}

/* A verifier command runs under the sandbox (the model profile): the data
 * dir's token is out of its reach (unconfined, the same script reads it:
 * checked by hand), and it still answers. */
Test(judge, a_verifier_command_runs_in_the_sandbox)
{
    char why[256];
    if (!orch_sandbox_available(why, sizeof(why)))
        cr_skip_test("no sandbox on this machine: %s", why);
    char *dir = tu_tmpdir();
    char *bin = tu_tmpdir(); /* the script, outside the data dir */
    char token[600], text[1400];
    snprintf(token, sizeof(token), "%s/token", dir);
    cr_assert_eq(tu_write_file(token, "TOKEN-SECRET", 12), 0);
    snprintf(text, sizeof(text),
             "#!/bin/sh\n"
             "if cat '%s' 2>/dev/null | grep -q SECRET; then\n"
             "  echo '{\"ok\": false, \"reason\": \"it read the token\"}'\n"
             "else\n"
             "  echo '{\"ok\": true, \"reason\": \"the token is out of "
             "reach\"}'\n"
             "fi\n",
             token);
    char *v = script(bin, "verify.sh", text);
    char lanes[2048];
    snprintf(lanes, sizeof(lanes),
             "{\"lanes\":[{\"name\":\"writer\",\"category\":\"c\","
             "\"domain\":\"writes\",\"keywords\":[\"write\"],"
             "\"model_tier\":\"cheap\",\"executor\":\"chat\","
             "\"verifier\":{\"command\":[\"%s\"]}}]}",
             v);
    struct env e;
    env_open_box(&e, cites_on_capable, dir, lanes, ORCH_SANDBOX_BWRAP);
    struct orch_submit_opts o = {0};
    cJSON *out = submit_opts(&e, "write the summary", &o);
    cJSON *vb = body_of(&e, nth_kind(&e, 0, "verification", 0));
    cr_assert(cJSON_IsTrue(get(vb, "ok")), "%s",
              tu_str(vb, "reason") ? tu_str(vb, "reason") : "?");
    cr_assert_str_eq(tu_str(vb, "reason"), "the token is out of reach");
    cJSON_Delete(vb);
    cr_assert(cJSON_IsTrue(get(out, "ok")));
    free(v);
    tu_rmrf(bin);
    cJSON_Delete(out);
    env_close(&e);
}

/* ---- through the daemon
 * ------------------------------------------------------ */

/* POST /submit with the three fields on the daemon (the group committer
 * witnesses; the checkpoints are signed on a worker with a handle of its
 * own): the receipt, a checkpoint that verifies, the capsule's hash in
 * the request entry, the skipped judgment in GET /runs/ID/show. */
Test(judge, the_daemon_acts_on_the_fields_of_submit, .timeout = 60)
{
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    tu_daemon_start(&d, dir, NULL);
    cJSON *first =
        tu_http_json(&d, "POST", "/submit", "{\"request\":\"echo one\"}", 200);
    cJSON_Delete(first);
    cJSON *out = tu_http_json(&d, "POST", "/submit",
                              "{\"request\":\"echo two\",\"intent_judge\":true,"
                              "\"checkpoint_each_wave\":true,"
                              "\"use_capsule_context\":true,"
                              "\"delivery_profile\":\"engineer\","
                              "\"context_token_budget\":5}",
                              200);
    cr_assert_str_eq(tu_str(get(out, "delivery_profile"), "profile"),
                     "engineer");
    /* claim_lane over HTTP: a verify frame's claim is refused, on record */
    cJSON *rej = tu_http_json(
        &d, "POST", "/submit",
        "{\"request\":\"verify the tests\",\"claim_lane\":true}", 400);
    cr_assert(strstr(tu_str(rej, "error"), "lane_rejection seq"), "%s",
              tu_str(rej, "error"));
    cJSON_Delete(rej);
    int64_t run = tu_num(out, "request_seq");
    const cJSON *rc = get(out, "receipt");
    cr_assert_eq(tu_num(rc, "run_id"), run);
    cr_assert_eq(cJSON_GetArraySize(get(out, "checkpoints")), 1);
    char path[64];
    snprintf(path, sizeof(path), "/runs/%lld/show", (long long)run);
    cJSON *show = tu_http_json(&d, "GET", path, NULL, 200);
    cr_assert(cJSON_IsFalse(get(get(show, "intent"), "judged")));
    cr_assert_str_eq(tu_str(show, "capsule_hash"), tu_str(out, "capsule_hash"));
    cJSON_Delete(show);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    /* on the ledger: the request's capsule, the checkpoint's note */
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    char *b = NULL;
    size_t bl = 0;
    cr_assert_eq(ledger_body(l, run, &b, &bl, &err), FO_OK);
    cJSON *req = cJSON_Parse(b);
    free(b);
    cr_assert_str_eq(tu_str(get(req, "capsule"), "hash"),
                     tu_str(out, "capsule_hash"));
    /* context_token_budget is the run's max_total_tokens: 5 tokens */
    const cJSON *bu = get(get(req, "capsule"), "budget");
    cr_assert_str_eq(tu_str(bu, "reason"), "max_total_tokens");
    cr_assert_eq(tu_num(bu, "admitted_tokens"), 5);
    cr_assert_str_eq(tu_str(req, "delivery_profile"), "engineer");
    cJSON_Delete(req);
    int64_t cs = tu_num(cJSON_GetArrayItem(get(out, "checkpoints"), 0), "seq");
    cr_assert_eq(ledger_body(l, cs, &b, &bl, &err), FO_OK);
    cJSON *cb = cJSON_Parse(b);
    free(b);
    char *vkey = NULL;
    cr_assert_eq(ledger_verifier_key(l, &vkey, &err), FO_OK, "%s", err.msg);
    const char *note = tu_str(cb, "note");
    struct ledger_checkpoint_result res;
    cr_assert_eq(ledger_verify_checkpoint(l, 0, note, strlen(note), vkey,
                                          strlen(vkey), NULL, NULL, &res, &err),
                 FO_OK, "%s", err.msg);
    cr_assert(res.ok, "%s", res.detail);
    free(vkey);
    cJSON_Delete(cb);
    ledger_close(l);
    cJSON_Delete(out);
    tu_rmrf(dir);
}

/* ---- the reference's task and upstream budgets -------------------------- */

static const char *two_tasks(struct fake *f, const char *role, int n,
                             const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model;
    static char big[2001];
    if (!big[0])
        memset(big, 'u', 2000);
    if (!strcmp(role, "coordinator"))
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"coder\","
               "\"instruction\":\"write the code\"},{\"id\":\"T2\","
               "\"agent\":\"coder\",\"instruction\":\"review the code\","
               "\"depends_on\":[\"T1\"]}]}";
    if (!strcmp(role, "task"))
        return strstr(prompt, "review the code") ? "reviewed" : big;
    if (!strcmp(role, "synthesizer"))
        return "done";
    return "x";
}

/* The prompt T2 was given (the last one holding its instruction). */
static const char *t2_prompt(struct fake *f)
{
    for (int i = f->n_prompts - 1; i >= 0; i--)
        if (f->prompts[i] && strstr(f->prompts[i], "review the code") &&
            strstr(f->prompts[i], "--- upstream T1 output ---"))
            return f->prompts[i];
    return NULL;
}

/* upstream_token_budget caps each upstream output in a task's prompt,
 * task_context_token_budget the prompt as a whole; each cut says which
 * budget made it, and the request entry keeps them for a resumed run. */
Test(judge, the_task_and_upstream_budgets_cut_upstream_outputs)
{
    struct env e;
    env_open(&e, two_tasks);
    cJSON *lim = cJSON_Parse("{\"max_upstream_tokens\":50}");
    struct orch_submit_opts o = {.context = lim};
    cJSON *out = submit_opts(&e, "code for the parser", &o);
    const char *p = t2_prompt(e.f);
    cr_assert_not_null(p, "T2 never ran with T1's output");
    cr_assert(
        strstr(p, "truncated at 200 of 2000 bytes: upstream_token_budget"),
        "%s", p);
    cJSON *rb = body_of(&e, tu_num(out, "request_seq"));
    cr_assert_eq(tu_num(rb, "max_upstream_tokens"), 50);
    cJSON_Delete(rb);
    cJSON_Delete(out);
    cJSON_Delete(lim);
    /* the task's budget binds first when it leaves less */
    lim = cJSON_Parse("{\"max_task_tokens\":20,\"max_upstream_tokens\":50}");
    o.context = lim;
    out = submit_opts(&e, "code for the lexer", &o);
    p = t2_prompt(e.f);
    cr_assert_not_null(p);
    /* 80 bytes for the task, 15 of them its instruction */
    cr_assert(strstr(p, "truncated at 65 of 2000 bytes: "
                        "task_context_token_budget"),
              "%s", p);
    cJSON_Delete(out);
    cJSON_Delete(lim);
    /* without them, forum's own cap only: the whole output */
    struct orch_submit_opts none = {0};
    out = submit_opts(&e, "code for the printer", &none);
    p = t2_prompt(e.f);
    cr_assert_not_null(p);
    cr_assert_null(strstr(p, "truncated"), "%s", p);
    cJSON_Delete(out);
    env_close(&e);
}

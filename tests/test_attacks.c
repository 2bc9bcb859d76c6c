/* test_attacks: what a hostile or broken agent tries, through a scripted
 * model that replays the tool calls a prompt-injected model would make
 * (tests/tu_scene.h). Each case is a defect an outside attack found: the
 * daemon must stay responsive, keep its secrets and end the run. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ledger/fo_json.h"
#include "testutil.h"
#include "tu_daemon.h"
#include "tu_scene.h"

/* ---- a budget spent inside the tool loop ------------------------------- */

/* A model that never answers: every turn calls a tool. */
static const char *tool_forever(struct fake *f, const char *role, int n,
                                const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt, (void)n;
    if (tu_scene_control(role))
        return tu_scene_control(role);
    return "CALL list_dir {\"path\":\".\"}";
}

Test(budget, spent_inside_the_tool_loop_ends_the_run, .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, tool_forever, NULL);
    struct tu_run run = tu_forumv(
        NULL, "--ledger", sc.dir, "--json", "submit", "edit", "the", "file",
        "--roster", sc.rpath, "--workspace", sc.ws, "--chat-url", sc.url,
        "--model", "m1", "--max-model-calls", "5", NULL);
    /* exit 0: answered, with budget_spent (the documented contract) */
    cr_assert_eq(run.status, 0, "%d: %s", run.status, run.err);
    cJSON *out = tu_run_json(&run);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(out, "budget_spent")), "%s",
              run.out);
    cr_assert_str_eq(tu_str(out, "budget_reason"), "max_model_calls");
    cJSON_Delete(out);
    tu_run_free(&run);
    struct tu_entries k;
    tu_scene_entries(sc.dir, &k);
    cr_assert_eq(tu_scene_count(&k, "budget"), 1, "one budget entry");
    cr_assert_eq(tu_scene_count(&k, "answer"), 1, "the run answered");
    char *b = tu_scene_bodies(sc.dir, "budget");
    cr_assert(strstr(b, "max_model_calls"), "%s", b);
    free(b);
    /* every call witnessed has its result */
    cr_assert_eq(tu_scene_count(&k, "tool_call"),
                 tu_scene_count(&k, "tool_result"));
    cr_assert_leq(sc.f->count[R_TASK] + sc.f->count[R_COORD], 5,
                  "the budget held: %d calls",
                  sc.f->count[R_TASK] + sc.f->count[R_COORD]);
    tu_scene_close(&sc);
}

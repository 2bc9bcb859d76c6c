/* fuzz_orch: what the orchestrator takes from outside: rosters, plans (as
 * a coordinator writes them, through the lenient JSON reader), tool-call
 * arguments against each built-in tool's schema, and the guardrails'
 * scanner, which must never leave a configured secret in its output. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "daemon/orch_guard.h"
#include "daemon/orch_model.h"
#include "daemon/orch_tools.h"
#include "ledger/fo_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

#define SECRET "fuzz-secret-0123456789"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    const char *s = (const char *)data;
    static struct orch_roster *def;
    if (!def && orch_roster_default(&def, NULL) != FO_OK)
        abort();
    struct orch_roster *r = NULL;
    if (orch_roster_parse(s, n, &r, NULL) == FO_OK)
        orch_roster_free(r);
    cJSON *plan = NULL;
    if (orch_json_extract(s, n, &plan, NULL) == FO_OK) {
        struct orch_plan *p = NULL;
        if (orch_plan_compile(plan, def, &p, NULL) == FO_OK) {
            cJSON *j = orch_plan_json(p);
            cJSON_Delete(j);
            orch_plan_free(p);
        }
        cJSON_Delete(plan);
    }
    char *text = malloc(n + 1);
    if (!text)
        return 0;
    memcpy(text, data, n);
    text[n] = '\0';
    size_t nb = 0;
    const struct orch_tool_def *defs = orch_tools_builtin(&nb);
    for (size_t i = 0; i < nb; i++) {
        cJSON *a = NULL;
        if (orch_tool_args(&defs[i], text, &a, NULL) == FO_OK)
            cJSON_Delete(a);
    }
    static struct orch_guard g;
    if (!g.n)
        orch_guard_add_secret(&g, SECRET);
    struct fo_buf out;
    fo_buf_init(&out, FO_BUF_UNLIMITED);
    cJSON *found = NULL;
    if (orch_guard_scan(&g, s, n, &out, &found) >= 0 && out.data &&
        memmem(out.data, out.len, SECRET, strlen(SECRET)))
        abort(); /* a configured secret got through */
    fo_buf_release(&out);
    cJSON_Delete(found);
    free(text);
    return 0;
}

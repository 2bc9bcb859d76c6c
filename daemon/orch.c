/* orch: the orchestrator handle: its roster, policy and executor
 * configuration, built once from a struct orch_config and read-only after
 * that. */
#include "daemon/orch.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/orch_int.h"
#include "daemon/orch_mcpc.h"
#include "daemon/orch_model.h"

#define ENV_MAX 256
#define CATEGORIES_MAX 64

static char **copy_strings(const char *const *v, size_t n)
{
    char **c = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; c && i < n; i++) {
        c[i] = orch_strdup(v[i]);
        if (!c[i]) {
            for (size_t k = 0; k < i; k++)
                free(c[k]);
            free(c);
            return NULL;
        }
    }
    return c;
}

static void free_strings(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* PATH and HOME of this process, LANG=C.UTF-8: enough to find and run a
 * model CLI, and no secrets that happen to sit in our environment. */
static char **default_env(void)
{
    const char *path = getenv("PATH");
    const char *home = getenv("HOME");
    struct fo_buf b[2];
    const char *v[3];
    size_t n = 0;
    fo_buf_init(&b[0], FO_BUF_UNLIMITED);
    fo_buf_init(&b[1], FO_BUF_UNLIMITED);
    char **env = NULL;
    if (fo_buf_printf(&b[0], "PATH=%s",
                      path && *path ? path : "/usr/local/bin:/usr/bin:/bin"))
        goto out;
    v[n++] = b[0].data;
    if (home && *home) {
        if (fo_buf_printf(&b[1], "HOME=%s", home))
            goto out;
        v[n++] = b[1].data;
    }
    v[n++] = "LANG=C.UTF-8";
    env = copy_strings(v, n);
out:
    fo_buf_release(&b[0]);
    fo_buf_release(&b[1]);
    return env;
}

void orch_set_http_pool(struct orch *o, struct event_base *base,
                        struct httpc_pool *pool)
{
    if (o)
        orch_model_set_pool(o->models, base, pool);
}

void orch_free(struct orch *o)
{
    if (!o)
        return;
    orch_runs_free(o); /* no engine uses it any more */
    orch_roster_free(o->roster);
    free_strings(o->allowed);
    free(o->argv); /* one block */
    free_strings(o->env);
    orch_model_free(o->models);
    cJSON_Delete(o->gates);
    orch_guard_release(&o->guard);
    free(o->workspace);
    free(o->workspace_root);
    cJSON_Delete(o->mcp_servers);
    cJSON_Delete(o->context);
    free(o->data_dir);
    orch_cmd_box_release(&o->cmd_box);
    free(o->cmd_env);
    free(o);
}

void orch_tool_sandbox(const struct orch *o, const char *ws, int network,
                       struct orch_sandbox *sb)
{
    *sb = (struct orch_sandbox){.workspace = ws,
                                .network = network,
                                .data_dir = o->data_dir,
                                .own_workspace = !o->workspace};
}

/* The data dir resolved, the workspace checked against it, and the --cmd
 * program's sandbox set up (or refused where bwrap cannot run). */
static int setup_boxes(struct orch *o, const struct orch_config *c,
                       struct fo_err *err)
{
    if (c->data_dir) {
        /* a relative data dir (./forum-ledger, the default) is the working
         * directory's */
        char rd[PATH_MAX], abs[PATH_MAX];
        const char *dd = c->data_dir;
        if (dd[0] != '/') {
            char cwd[PATH_MAX];
            if (!getcwd(cwd, sizeof(cwd)) ||
                snprintf(abs, sizeof(abs), "%s/%s", cwd, dd) >=
                    (int)sizeof(abs))
                return fo_err_set(err, FO_E_INVALID,
                                  "%s: cannot make it an absolute path", dd);
            dd = abs;
        }
        int rc = orch_sandbox_resolve(dd, rd, err);
        if (rc)
            return rc;
        if (!(o->data_dir = orch_strdup(rd)))
            return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (c->workspace) {
        int rc = orch_sandbox_check_path("workspace", c->workspace, o->data_dir,
                                         err);
        if (rc)
            return rc;
    }
    int rc = orch_cmd_box_parse(c->cmd_sandbox, &o->cmd_box, err);
    if (rc || !o->argv || o->cmd_box.mode == ORCH_SANDBOX_NONE)
        return rc;
    char why[256];
    if (!orch_sandbox_available(why, sizeof(why)))
        return fo_err_set(
            err, FO_E_INVALID,
            "--cmd: the model program cannot be sandboxed here "
            "(%.180s); to run it unconfined, set \"cmd_sandbox\": "
            "{\"sandbox\": \"none\"} in DIR/forum.json",
            why);
    size_t n = 0, m = 0;
    while (o->env[n])
        n++;
    while (o->cmd_box.env && o->cmd_box.env[m])
        m++;
    if (!(o->cmd_env = calloc(n + m + 1, sizeof(char *))))
        return fo_err_set(err, FO_E_NOMEM, NULL);
    for (size_t i = 0; i < n; i++)
        o->cmd_env[i] = o->env[i];
    for (size_t i = 0; i < m; i++)
        o->cmd_env[n + i] = o->cmd_box.env[i];
    o->cmd_sb = (struct orch_sandbox){
        .workspace = o->workspace,
        .network = 1,
        .profile = ORCH_SANDBOX_MODEL,
        .data_dir = o->data_dir,
        .write_dirs = (const char *const *)o->cmd_box.write_dirs,
        .read_dirs = (const char *const *)o->cmd_box.read_dirs,
        .env = o->cmd_env};
    o->exec.box = &o->cmd_sb;
    return FO_OK;
}

int orch_sandbox_mode(const struct orch *o)
{
    return o->sandbox;
}

int64_t orch_disk_reserve_mb(const struct orch *o)
{
    return o->disk_reserve_mb;
}

const cJSON *orch_context_defaults(const struct orch *o)
{
    return o->context;
}

const cJSON *orch_mcp_servers(const struct orch *o)
{
    return o->mcp_servers;
}

const struct orch_roster *orch_roster(const struct orch *o)
{
    return o->roster;
}

/* The tier of api (0 chat, 1 anthropic) nearest to want that a provider
 * serves: want itself, else the nearest above, else below; -1 when none. */
static int served_tier(const struct orch *o, int a, int want)
{
    static const int order[3][3] = {{0, 1, 2}, {1, 2, 0}, {2, 1, 0}};
    if (want < ORCH_TIER_CHEAP || want > ORCH_TIER_FRONTIER)
        want = ORCH_TIER_CAPABLE;
    for (int i = 0; i < 3; i++)
        if (o->model_has[a][order[want][i]])
            return order[want][i];
    return -1;
}

const struct orch_exec_config *orch_exec_for_lane(const struct orch *o,
                                                  const struct orch_lane *l)
{
    int api = l->executor;
    if (l->executor == ORCH_EXEC_STUB)
        return &o->stub;
    /* A "default" lane, or a "cli" lane with no command, runs on the
     * configured models: the stub runs only when nothing is configured. */
    if ((api == ORCH_EXEC_DEFAULT || api == ORCH_EXEC_CLI) && !o->argv)
        api = o->default_api;
    if (o->models && (api == ORCH_EXEC_CHAT || api == ORCH_EXEC_ANTHROPIC)) {
        int a = api == ORCH_EXEC_ANTHROPIC;
        int t = served_tier(o, a, l->tier);
        if (t < 0) { /* no provider of the lane's api: the configured one */
            a = o->default_api == ORCH_EXEC_ANTHROPIC;
            t = served_tier(o, a, l->tier);
        }
        if (t >= 0)
            return &o->model_exec[a][t];
    }
    return &o->exec;
}

/* The model executors, one per api and tier; each records the model of the
 * first provider that would be asked (the reply records the served one). */
static int setup_models(struct orch *o, const struct orch_model_config *mc,
                        struct fo_err *err)
{
    /* A key variable that is not set fails here, before anything is
     * witnessed or served, not at the first model call (the CLI flags are
     * checked the same way; forum.json's providers come through here). */
    for (size_t i = 0; i < mc->n_providers; i++) {
        const struct orch_model_provider *p = &mc->providers[i];
        if (!p->api_key_env)
            continue;
        const char *key = secure_getenv(p->api_key_env);
        if (!key || !*key)
            return fo_err_set(err, FO_E_INVALID,
                              "provider %zu (%s): the API key variable %s is "
                              "not set",
                              i,
                              p->name    ? p->name
                              : p->model ? p->model
                                         : "?",
                              p->api_key_env);
    }
    int rc = orch_model_create(mc, &o->models, err);
    if (rc)
        return rc;
    o->default_api = mc->providers[0].api;
    for (int a = 0; a < 2; a++)
        for (int t = ORCH_TIER_CHEAP; t <= ORCH_TIER_FRONTIER; t++) {
            int api = a ? ORCH_EXEC_ANTHROPIC : ORCH_EXEC_CHAT;
            const char *name = NULL;
            for (int pass = 0; pass < 2 && !name; pass++)
                for (size_t i = 0; i < mc->n_providers && !name; i++)
                    if (mc->providers[i].api == api &&
                        mc->providers[i].tier == (pass ? ORCH_TIER_ANY : t))
                        name = mc->providers[i].model;
            o->model_has[a][t] = name != NULL;
            snprintf(o->model_names[a][t], sizeof(o->model_names[a][t]), "%s",
                     name ? name : orch_exec_name(api));
            o->model_exec[a][t] = (struct orch_exec_config){
                .kind = api,
                .timeout_ms = o->exec.timeout_ms,
                .output_max = o->exec.output_max,
                .model = o->model_names[a][t],
                .models = o->models,
                .tier = t,
            };
        }
    return FO_OK;
}

int orch_category_allowed(const struct orch *o, const char *category)
{
    if (o->n_allowed == 0)
        return 1;
    for (size_t i = 0; i < o->n_allowed; i++)
        if (strcmp(o->allowed[i], category) == 0)
            return 1;
    return 0;
}

static int check_config(const struct orch_config *c, struct fo_err *err)
{
    if (c->max_parallel < 0 || c->max_parallel > ORCH_MAX_PARALLEL_MAX)
        return fo_err_set(err, FO_E_INVALID, "max_parallel: must be 1..%d",
                          ORCH_MAX_PARALLEL_MAX);
    if (c->timeout_ms < 0)
        return fo_err_set(err, FO_E_INVALID, "timeout: must be positive");
    if (c->max_runs < 0 || c->max_runs > ORCH_RUNS_MAX)
        return fo_err_set(err, FO_E_INVALID, "max_runs: must be 1..%d",
                          ORCH_RUNS_MAX);
    if (c->n_allowed_categories > CATEGORIES_MAX)
        return fo_err_set(err, FO_E_INVALID, "categories: more than %d",
                          CATEGORIES_MAX);
    for (size_t i = 0; i < c->n_allowed_categories; i++)
        if (!orch_name_valid(c->allowed_categories[i], ORCH_NAME_MAX))
            return fo_err_set(err, FO_E_INVALID,
                              "categories: \"%s\": not a category name",
                              c->allowed_categories[i]);
    if (c->model && !orch_name_valid(c->model, ORCH_MODEL_MAX))
        return fo_err_set(err, FO_E_INVALID,
                          "model: must be 1-%d bytes without controls",
                          ORCH_MODEL_MAX);
    size_t n = 0;
    while (c->env && c->env[n]) {
        if (!strchr(c->env[n], '=') || c->env[n][0] == '=')
            return fo_err_set(err, FO_E_INVALID,
                              "env: \"%s\": must be NAME=VALUE", c->env[n]);
        if (++n > ENV_MAX)
            return fo_err_set(err, FO_E_INVALID, "env: more than %d", ENV_MAX);
    }
    return FO_OK;
}

/* "cmd:ollama run llama3", cut to ORCH_MODEL_MAX bytes on a character. */
static void cmd_model(char **argv, char *out, size_t size)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_buf_puts(&b, "cmd:");
    for (size_t i = 0; !rc && argv[i]; i++)
        rc = fo_buf_printf(&b, "%s%s", i ? " " : "", argv[i]);
    const char *s = !rc && b.data ? b.data : "cmd";
    size_t len = orch_utf8_prefix(s, strlen(s), size - 1);
    memcpy(out, s, len);
    out[len] = '\0';
    for (size_t i = 0; i < len; i++) /* a model id is one line */
        if ((unsigned char)out[i] < 0x20)
            out[i] = ' ';
    fo_buf_release(&b);
}

int orch_create(const struct orch_config *cfg, struct orch **out,
                struct fo_err *err)
{
    static const struct orch_config none = {0};
    const struct orch_config *c = cfg ? cfg : &none;
    struct orch *o = NULL;
    int rc = check_config(c, err);
    if (rc)
        goto out;
    o = calloc(1, sizeof(*o));
    if (!o) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    o->max_runs = c->max_runs;
    rc = orch_runs_init(o, err);
    if (rc)
        goto out;
    if (c->roster_path)
        rc = orch_roster_load(c->roster_path, &o->roster, err);
    else if (c->roster_json)
        rc = orch_roster_parse(c->roster_json, c->roster_json_len, &o->roster,
                               err);
    else
        rc = orch_roster_default(&o->roster, err);
    if (rc)
        goto out;
    o->n_allowed = c->n_allowed_categories;
    o->allowed = copy_strings(c->allowed_categories, o->n_allowed);
    if (c->env) {
        size_t n = 0;
        while (c->env[n])
            n++;
        o->env = copy_strings(c->env, n);
    } else {
        o->env = default_env();
    }
    if (!o->allowed || !o->env) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    o->max_parallel =
        c->max_parallel ? c->max_parallel : ORCH_MAX_PARALLEL_DEFAULT;
    o->inject_max = c->inject_max ? c->inject_max : ORCH_INJECT_MAX_DEFAULT;
    if (c->cmd) {
        rc = orch_split_argv(c->cmd, &o->argv, NULL, err);
        if (rc)
            goto out;
    }
    if (c->model)
        snprintf(o->model, sizeof(o->model), "%s", c->model);
    else if (o->argv)
        cmd_model(o->argv, o->model, sizeof(o->model));
    else
        snprintf(o->model, sizeof(o->model), "stub");
    o->exec = (struct orch_exec_config){
        .kind = o->argv ? ORCH_EXEC_CLI : ORCH_EXEC_STUB,
        .argv = (const char *const *)o->argv,
        .env = (const char *const *)o->env,
        .timeout_ms = c->timeout_ms ? c->timeout_ms : ORCH_TIMEOUT_MS_DEFAULT,
        .output_max = c->output_max ? c->output_max : ORCH_OUTPUT_MAX_DEFAULT,
        .model = o->model,
    };
    o->stub = (struct orch_exec_config){
        .kind = ORCH_EXEC_STUB,
        .timeout_ms = o->exec.timeout_ms,
        .output_max = o->exec.output_max,
        .model = "stub",
    };
    if (c->models) {
        rc = setup_models(o, c->models, err);
        if (rc)
            goto out;
    }
    if (c->gates) { /* a deadline in a standing policy makes no sense */
        rc = orch_gate_policy_check(c->gates, o->roster, 0, err);
        if (!rc && cJSON_GetObjectItemCaseSensitive(c->gates, "deadline"))
            rc = fo_err_set(err, FO_E_INVALID,
                            "gates.deadline: only a request may set one "
                            "(use timeout_s)");
        if (!rc && !(o->gates = cJSON_Duplicate(c->gates, 1)))
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        if (rc)
            goto out;
    }
    /* the guardrails look for every configured key's value */
    for (size_t i = 0; c->models && i < c->models->n_providers && !rc; i++)
        rc = orch_guard_add_env(&o->guard, c->models->providers[i].api_key_env);
    o->sandbox = c->sandbox;
    o->disk_reserve_mb = c->disk_reserve_mb > 0 ? c->disk_reserve_mb
                                                : ORCH_DISK_RESERVE_MB_DEFAULT;
    if (!rc && c->context) {
        struct orch_ctx_limits lim;
        orch_ctx_limits_default(&lim);
        rc = orch_ctx_limits_parse(c->context, &lim, err);
        if (rc)
            goto out;
        if (!(o->context = cJSON_Duplicate(c->context, 1)))
            rc = FO_E_NOMEM;
    }
    if (!rc && c->mcp_servers) {
        rc = orch_mcpc_check(c->mcp_servers, err);
        if (rc)
            goto out;
        if (!(o->mcp_servers = cJSON_Duplicate(c->mcp_servers, 1)))
            rc = FO_E_NOMEM;
        /* an HTTP server's token is a secret the guardrails look for */
        const cJSON *sv;
        cJSON_ArrayForEach (sv, c->mcp_servers) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(sv, "token_env");
            if (!rc && cJSON_IsString(t))
                rc = orch_guard_add_env(&o->guard, t->valuestring);
        }
    }
    if (!rc && ((c->workspace && !(o->workspace = orch_strdup(c->workspace))) ||
                (c->workspace_root &&
                 !(o->workspace_root = orch_strdup(c->workspace_root)))))
        rc = FO_E_NOMEM;
    if (rc) {
        rc = fo_err_set(err, rc,
                        rc == FO_E_TOO_LARGE ? "too many secrets" : NULL);
        goto out;
    }
    rc = setup_boxes(o, c, err);
    if (rc)
        goto out;
    *out = o;
    o = NULL;
out:
    orch_free(o);
    return rc;
}

int orch_add_secret(struct orch *o, const char *value)
{
    return orch_guard_add_secret(&o->guard, value);
}

const struct orch_guard *orch_guardrails(const struct orch *o)
{
    return &o->guard;
}

const char *orch_workspace_dir(const struct orch *o)
{
    return o->workspace;
}

const char *orch_workspace_root(const struct orch *o)
{
    return o->workspace_root;
}

int orch_max_runs(const struct orch *o)
{
    return o->max_runs;
}

const char *orch_data_dir(const struct orch *o)
{
    return o->data_dir;
}

const char *const *orch_child_env(const struct orch *o)
{
    return (const char *const *)o->env;
}

/* cli_key: `forum key add|list|revoke`: the gateway's client keys, in
 * DIR/keys.json (daemon/keys.h). The file is edited here, with or without a
 * daemon; a running daemon sees the change on its next keyed request. What
 * each key used is counted from the ledger. */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/crypto.h>

#include "daemon/keys.h"
#include "ledger/fo_json.h"

static const char key_usage[] =
    "usage: forum key add NAME [--max-calls N] [--max-tokens N] [--rpm N]\n"
    "                 [--models A,B] [--forge] [--json]\n"
    "       forum key list [--json]\n"
    "       forum key revoke NAME [--json]\n"
    "Client keys for the model gateway (/v1/...): give each agent or user\n"
    "its own key instead of the daemon's token. A key opens the gateway's\n"
    "routes only, within its limits: --max-calls and --max-tokens are\n"
    "budgets over the key's life (a spent budget is 429), --rpm a rate\n"
    "(calls in any 60 s; over it 429 with Retry-After), --models the\n"
    "models, providers or tiers it may name (others 403); --forge turns\n"
    "on, for its plain answers, the rescue of tool calls a model wrote as\n"
    "text into real tool calls (as a provider's gateway_forge does). The\n"
    "key is printed once by add; DIR/keys.json (0600) keeps only its\n"
    "SHA-256.\n"
    "Its calls are witnessed with the key's name and, without an\n"
    "X-Forum-Session header, grouped in the session key:NAME. A running\n"
    "daemon takes a change on the next call; no restart. Names are\n"
    "never reused, a revoked key's included.\n"
    "  add      make a key; prints it (stdout, once)\n"
    "  list     each key: limits, calls and tokens used (from the ledger),\n"
    "           made, revoked; never the key\n"
    "  revoke   the key answers 401 from now on\n"
    "examples:\n"
    "  forum key add ci-bot --max-calls 1000 --rpm 60 --models cheap\n"
    "  forum key add local-agent --forge --models cheap\n"
    "  forum key list\n"
    "  forum key revoke ci-bot\n"
    "exit codes: 0 ok; 1 no such key; 2 usage or bad input (a name that\n"
    "exists); 3 I/O\n";

static int dir_exists(struct cli *c)
{
    struct stat st;
    if (stat(c->ledger_dir, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    struct fo_err err;
    fo_err_set(&err, FO_E_NOT_FOUND,
               "%s: no data dir (forum ledger init or forum serve makes it)",
               c->ledger_dir);
    return cli_fail(c, &err);
}

/* "a,b,c" into up to KEYS_MODELS_MAX names in buf (split in place). */
static int split_models(struct cli *c, char *buf, const char **out, size_t *n)
{
    *n = 0;
    for (char *p = buf; p && *p;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (!*p)
            return cli_usage_error(c, "key add: --models: an empty name");
        if (*n >= KEYS_MODELS_MAX)
            return cli_usage_error(c, "key add: --models: at most %d",
                                   KEYS_MODELS_MAX);
        out[(*n)++] = p;
        p = comma ? comma + 1 : NULL;
    }
    if (!*n)
        return cli_usage_error(c, "key add: --models: at least one name");
    return 0;
}

static int key_add(struct cli *c, const char *name, long long calls,
                   long long tokens, long long rpm, const char *models,
                   int forge)
{
    const char *ms[KEYS_MODELS_MAX];
    char mbuf[KEYS_MODELS_MAX * (KEYS_MODEL_MAX + 1)];
    size_t nm = 0;
    if (models) {
        if (strlen(models) >= sizeof(mbuf))
            return cli_usage_error(c, "key add: --models: too long");
        snprintf(mbuf, sizeof(mbuf), "%s", models);
        int ex = split_models(c, mbuf, ms, &nm);
        if (ex)
            return ex;
    }
    if (!keys_name_valid(name))
        return cli_usage_error(c,
                               "key add: NAME: 1 to %d of A-Z a-z 0-9 . _ -, "
                               "starting with a letter or digit",
                               KEYS_NAME_MAX);
    int ex = dir_exists(c);
    if (ex)
        return ex;
    struct keys_new k = {.name = name,
                         .max_calls = calls,
                         .max_tokens = tokens,
                         .rpm = rpm,
                         .models = ms,
                         .n_models = nm,
                         .forge = forge};
    char key[KEYS_KEY_LEN + 1];
    struct fo_err err;
    int rc = keys_file_add(c->ledger_dir, &k, key, &err);
    if (rc == FO_E_EXISTS)
        err.code = FO_E_INVALID; /* a usage error: exit 2 */
    if (rc)
        return cli_fail(c, &err);
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", name);
        cJSON_AddStringToObject(o, "key", key);
        cli_print_json(o, 0);
        cJSON_Delete(o);
    } else {
        printf("%s\n", key);
        fprintf(stderr,
                "forum: key %s made; it is shown this once (only its "
                "SHA-256 is kept)\n",
                name);
    }
    OPENSSL_cleanse(key, sizeof(key));
    return 0;
}

static void when(int64_t us, char *out, size_t n)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(out, n, "?");
}

static cJSON *key_obj(const struct keys_key *k)
{
    cJSON *o = cJSON_CreateObject();
    char t[32];
    cJSON_AddStringToObject(o, "name", k->name);
    if (k->max_calls)
        fo_json_add_int(o, "max_calls", k->max_calls);
    if (k->max_tokens)
        fo_json_add_int(o, "max_tokens", k->max_tokens);
    if (k->rpm)
        fo_json_add_int(o, "rpm", k->rpm);
    if (k->models) {
        cJSON *ms = cJSON_AddArrayToObject(o, "models");
        for (size_t i = 0; i < k->n_models; i++)
            cJSON_AddItemToArray(ms, cJSON_CreateString(k->models[i]));
    }
    cJSON_AddBoolToObject(o, "forge", k->forge);
    fo_json_add_int(o, "used_calls", k->used_calls);
    fo_json_add_int(o, "used_tokens", k->used_tokens);
    when(k->created_us, t, sizeof(t));
    cJSON_AddStringToObject(o, "created", t);
    cJSON_AddBoolToObject(o, "revoked", k->revoked_us != 0);
    if (k->revoked_us) {
        when(k->revoked_us, t, sizeof(t));
        cJSON_AddStringToObject(o, "revoked_at", t);
    }
    return o;
}

static void print_key(const struct keys_key *k)
{
    char t[32], calls[64], tokens[64], rpm[32];
    if (k->max_calls)
        snprintf(calls, sizeof(calls), "%lld/%lld", k->used_calls,
                 k->max_calls);
    else
        snprintf(calls, sizeof(calls), "%lld", k->used_calls);
    if (k->max_tokens)
        snprintf(tokens, sizeof(tokens), "%lld/%lld", k->used_tokens,
                 k->max_tokens);
    else
        snprintf(tokens, sizeof(tokens), "%lld", k->used_tokens);
    snprintf(rpm, sizeof(rpm), "%lld", k->rpm);
    when(k->created_us, t, sizeof(t));
    printf("%s\tcalls %s\ttokens %s\trpm %s\tmodels ", k->name, calls, tokens,
           k->rpm ? rpm : "-");
    for (size_t i = 0; i < k->n_models; i++)
        printf("%s%s", i ? "," : "", k->models[i]);
    printf("%s%s\tmade %s%s\n", k->models ? "" : "any",
           k->forge ? "\tforge" : "", t, k->revoked_us ? "\trevoked" : "");
}

static int key_list(struct cli *c)
{
    int ex = dir_exists(c);
    if (ex)
        return ex;
    struct keys *ks = NULL;
    struct fo_err err;
    int rc = keys_load(c->ledger_dir, &ks, &err);
    if (rc)
        return cli_fail(c, &err);
    struct ledger *l = NULL;
    if (keys_count(ks)) { /* no ledger yet: nothing used */
        rc = ledger_open(c->ledger_dir, LEDGER_OPEN_READONLY, NULL, &l, &err);
        if (rc == FO_OK) {
            rc = keys_count_usage(ks, l, &err);
            ledger_close(l);
        } else if (rc == FO_E_NOT_FOUND) {
            rc = FO_OK;
        }
    }
    if (rc) {
        keys_free(ks);
        return cli_fail(c, &err);
    }
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(o, "keys");
        for (size_t i = 0; i < keys_count(ks); i++)
            cJSON_AddItemToArray(a, key_obj(keys_at(ks, i)));
        cli_print_json(o, 0);
        cJSON_Delete(o);
    } else if (!keys_count(ks)) {
        printf("no keys (forum key add NAME makes one)\n");
    } else {
        for (size_t i = 0; i < keys_count(ks); i++)
            print_key(keys_at(ks, i));
    }
    keys_free(ks);
    return 0;
}

static int key_revoke(struct cli *c, const char *name)
{
    int ex = dir_exists(c);
    if (ex)
        return ex;
    struct fo_err err;
    int rc = keys_file_revoke(c->ledger_dir, name, &err);
    if (rc == FO_E_EXISTS)
        err.code = FO_E_INVALID;
    if (rc)
        return cli_fail(c, &err);
    if (c->json)
        printf("{\"name\":\"%s\",\"revoked\":true}\n", name);
    else
        printf("key %s revoked\n", name);
    return 0;
}

int cli_key(struct cli *c, int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1]))
        return argc < 2 ? cli_usage_error(c, "key: add, list or revoke")
                        : cli_help(key_usage);
    static const char *const subs[] = {"add", "list", "revoke"};
    size_t k = 0;
    while (k < 3 && strcmp(argv[1], subs[k]))
        k++;
    if (k == 3)
        return cli_bad_sub(c, "key", argv[1], "add list revoke");
    long long calls = 0, tokens = 0, rpm = 0;
    const char *models = NULL, *pos[1];
    int npos = 0, forge = 0;
    const struct cli_opt add_opts[] = {
        {"--max-calls", "N", CLI_OPT_INT, &calls, 1, 1ll << 53, NULL, NULL,
         "the calls the key may make in all (then 429)"},
        {"--max-tokens", "N", CLI_OPT_INT, &tokens, 1, 1ll << 53, NULL, NULL,
         "the tokens (in and out) its calls may use in all (then 429)"},
        {"--rpm", "N", CLI_OPT_INT, &rpm, 1, KEYS_RPM_MAX, NULL, NULL,
         "at most N calls in any 60 s (then 429 with Retry-After)"},
        {"--models", "A,B", CLI_OPT_STR, &models, 0, 0, NULL, NULL,
         "the models, providers or tiers it may name (others 403)"},
        {"--forge", NULL, CLI_OPT_BOOL, &forge, 0, 0, NULL, NULL,
         "rescue tool calls written as text in its calls' answers"},
        CLI_OPT_END,
    };
    char name[32];
    snprintf(name, sizeof(name), "key %s", subs[k]);
    int ex =
        cli_parse(c, name, argc - 1, argv + 1, k == 0 ? add_opts : add_opts + 5,
                  pos, k == 1 ? 0 : 1, &npos);
    if (ex)
        return ex == CLI_PARSE_HELP ? cli_help(key_usage) : ex;
    if (k == 1)
        return key_list(c);
    if (npos != 1)
        return cli_usage_error(c, "key %s: NAME is required", subs[k]);
    if (k == 0)
        return key_add(c, pos[0], calls, tokens, rpm, models, forge);
    if (!keys_name_valid(pos[0]))
        return cli_usage_error(c, "key revoke: NAME: not a key name");
    return key_revoke(c, pos[0]);
}

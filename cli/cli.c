/* cli: helpers shared by the command groups: opening the ledger, calling a
 * table method, printing results and errors. */
#include "cli/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/service.h"
#include "ledger/fo_json.h"
#include "surfaces/surf.h"

int cli_fail(struct cli *c, const struct fo_err *err)
{
    fprintf(stderr, "forum: %s\n",
            err->msg[0] ? err->msg : fo_code_message(err->code));
    if (c && c->json) {
        cJSON *e = surf_error_json(err);
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        if (e && fo_json_canon(e, &b, NULL) == FO_OK)
            fprintf(stderr, "%s\n", b.data);
        fo_buf_release(&b);
        cJSON_Delete(e);
    }
    int code = fo_code_exit(err->code);
    return code ? code : 3;
}

int cli_open(struct cli *c, unsigned flags, struct ledger **out)
{
    struct fo_err err;
    fo_err_clear(&err);
    int rc = ledger_open(c->ledger_dir, flags, NULL, out, &err);
    if (rc) {
        /* A refused or damaged file is a storage error (exit 3), and so is
         * a missing ledger for commands that need one. */
        if (rc == FO_E_NOT_FOUND)
            err.code = FO_E_IO;
        return cli_fail(c, &err);
    }
    return 0;
}

int cli_call(struct cli *c, struct ledger *l, const char *method, cJSON *in,
             cJSON **out)
{
    struct fo_err err;
    fo_err_clear(&err);
    const struct surf_method *m = surf_find(method);
    struct surf_ctx ctx = {.ledger = l};
    int rc = m ? surf_call(&ctx, m, in, out, &err)
               : fo_err_set(&err, FO_E_INTERNAL, "no method %s", method);
    cJSON_Delete(in);
    if (rc)
        return cli_fail(c, &err);
    return 0;
}

void cli_print_json(const cJSON *v, int pretty)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (fo_json_write(v, pretty ? FO_JSON_PRETTY : 0, &b, &err) == FO_OK) {
        fwrite(b.data, 1, b.len, stdout);
        fputc('\n', stdout);
    } else {
        fprintf(stderr, "forum: cannot print result: %s\n", err.msg);
    }
    fo_buf_release(&b);
}

long long cli_parse_seq(const char *s)
{
    if (!s || *s < '0' || *s > '9') /* strtoll would skip spaces and signs */
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return -1;
    return v;
}

int cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int cli_usage_error(struct cli *c, const char *fmt, ...)
{
    struct fo_err err;
    va_list ap;
    va_start(ap, fmt);
    fo_err_setv(&err, FO_E_USAGE, fmt, ap);
    va_end(ap);
    fprintf(stderr, "run the command with --help for usage\n");
    cli_fail(c, &err);
    return 2;
}

int cli_help(const char *text)
{
    fputs(text, stdout);
    return 0;
}

int cli_provider_apply(struct cli *c, const char *cmd,
                       const struct cli_provider *p, struct daemon_config *cfg)
{
    if ((p->chat_url && p->api) || (p->chat_url && !p->model) ||
        ((p->model || p->key_env) && !p->chat_url && !p->api))
        return cli_usage_error(c,
                               "%s: --chat-url URL --model M, or --api "
                               "[--model M]; --api-key-env goes with either",
                               cmd);
    if (p->chat_url || p->api)
        daemon_config_set_provider(cfg, p->api, p->chat_url, p->model,
                                   p->key_env);
    return 0;
}

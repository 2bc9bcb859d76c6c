/* cli_tail: `forum ledger tail [-f]`, and the table of entries `ledger show`
 * and `tail` print for people: a header, local times, whole actor names,
 * the parent and a one-line preview of the body. Reads the ledger directly
 * (read only: it works while a daemon serves, as any reader does). */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "ledger/fo_json.h"

#define PREVIEW 60
#define FOLLOW_MS 200 /* how often -f looks at the head */

/* A gateway call in words: model, status or error, latency, tokens,
 * session. 0 when body is not one. */
static int gateway_line(const char *body, size_t len, char *out, size_t n)
{
    cJSON *b = NULL;
    if (fo_json_parse(body, len, &b, NULL) != FO_OK || !cJSON_IsObject(b)) {
        cJSON_Delete(b);
        return 0;
    }
    const char *m = cli_str_or(b, "model", "?");
    const char *ec = cli_str_or(b, "error_class", NULL);
    const char *se = cli_str_or(b, "session", NULL);
    long long ti = cli_int_or(b, "tokens_in", -1);
    long long to = cli_int_or(b, "tokens_out", -1);
    char tok[64] = "";
    if (ti >= 0 || to >= 0)
        snprintf(tok, sizeof(tok), ", tokens %lld/%lld", ti < 0 ? 0 : ti,
                 to < 0 ? 0 : to);
    snprintf(
        out, n, "%s %lld%s%s, %lld ms%s%s%s%s", m, cli_int_or(b, "status", 0),
        ec ? " " : "", ec ? ec : "", cli_int_or(b, "latency_us", 0) / 1000, tok,
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "stream")) ? ", stream"
                                                                    : "",
        se ? ", session " : "", se ? se : "");
    cJSON_Delete(b);
    return 1;
}

/* A one-line preview of entry seq's body: "(redacted)", "-" when none; a
 * gateway call in words (gateway_line). */
static void preview(struct ledger *l, int64_t seq, const char *kind, char *out,
                    size_t n)
{
    char *body = NULL;
    size_t len = 0;
    struct fo_err err;
    int rc = ledger_body(l, seq, &body, &len, &err);
    if (rc == FO_E_REDACTED) {
        snprintf(out, n, "(redacted)");
        return;
    }
    if (rc != FO_OK) {
        snprintf(out, n, "-");
        return;
    }
    if (!strcmp(kind, "gateway_call") && gateway_line(body, len, out, n)) {
        free(body);
        return;
    }
    size_t max = n - 1 > PREVIEW ? PREVIEW : n - 1;
    int cut = len > max;
    size_t o = cut ? max - 3 : len;
    /* never cut inside a UTF-8 sequence */
    while (cut && o > 0 && ((unsigned char)body[o] & 0xC0) == 0x80)
        o--;
    for (size_t i = 0; i < o; i++) {
        unsigned char ch = (unsigned char)body[i];
        out[i] = ch < 0x20 ? ' ' : (char)ch;
    }
    if (cut)
        memcpy(out + o, "...", 3), o += 3;
    out[o] = '\0';
    free(body);
}

static void when(int64_t ts_us, char *out, size_t n)
{
    time_t t = (time_t)(ts_us / 1000000);
    struct tm tm;
    if (!localtime_r(&t, &tm) || !strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(out, n, "?");
}

void cli_entries_header(int actor_w)
{
    printf("%8s  %-19s  %-*s  %-20s %8s  %s\n", "SEQ", "TIME (local)", actor_w,
           "ACTOR", "KIND", "PARENT", "BODY");
}

void cli_entries_row(struct ledger *l, const struct ledger_entry *e,
                     int actor_w)
{
    char t[32], par[24] = "-", pv[PREVIEW + 200];
    when(e->ts, t, sizeof(t));
    if (e->parent >= 0)
        snprintf(par, sizeof(par), "%" PRId64, e->parent);
    preview(l, e->seq, e->kind, pv, sizeof(pv));
    printf("%8" PRId64 "  %-19s  %-*s  %-20s %8s  ", e->seq, t, actor_w,
           e->actor, e->kind, par);
    cli_tty_puts(stdout, pv); /* the body: anything a writer put there */
    putchar('\n');
}

int cli_actor_width(const struct ledger_entry *v, size_t n)
{
    int w = 5;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(v[i].actor) > w)
            w = (int)strlen(v[i].actor);
    return w > 40 ? 40 : w;
}

/* ---- ledger tail ------------------------------------------------------ */

#define RUNS 4096

struct tail {
    struct cli *c;
    struct ledger *l;
    int64_t run; /* -1: all */
    const char *kinds[16];
    int nkinds;
    struct {
        int64_t seq, run;
    } runs[RUNS]; /* seq -> run */
    struct ledger_entry *v;
    size_t n, cap;
    int failed;
};

static int64_t run_of(struct tail *t, const struct ledger_entry *e)
{
    if (!strcmp(e->kind, "request"))
        return e->seq;
    int64_t p = e->parent, found = -1;
    struct ledger_entry pe;
    struct fo_err err;
    for (int hops = 0; p >= 0 && hops < 64; hops++) {
        if (t->runs[p % RUNS].seq == p) {
            found = t->runs[p % RUNS].run;
            break;
        }
        if (ledger_get(t->l, p, &pe, NULL, &err) != FO_OK)
            break;
        if (!strcmp(pe.kind, "request")) {
            found = p;
            break;
        }
        p = pe.parent;
    }
    return found;
}

static int keep(struct tail *t, const struct ledger_entry *e)
{
    if (t->run >= 0) {
        int64_t r = run_of(t, e);
        t->runs[e->seq % RUNS].seq = e->seq;
        t->runs[e->seq % RUNS].run = r;
        if (r != t->run)
            return 0;
    }
    if (!t->nkinds)
        return 1;
    for (int i = 0; i < t->nkinds; i++)
        if (!strcmp(t->kinds[i], e->kind))
            return 1;
    return 0;
}

static int collect(void *ctx, const struct ledger_entry *e)
{
    struct tail *t = ctx;
    if (!keep(t, e))
        return 0;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        struct ledger_entry *p = realloc(t->v, cap * sizeof(*p));
        if (!p) {
            t->failed = 1;
            return 1;
        }
        t->v = p;
        t->cap = cap;
    }
    t->v[t->n++] = *e;
    return 0;
}

static void print_one(struct tail *t, const struct ledger_entry *e, int w)
{
    if (t->c->json) {
        cJSON *j = ledger_entry_json(e);
        if (j)
            cli_print_json(j, 0);
        cJSON_Delete(j);
    } else {
        cli_entries_row(t->l, e, w);
    }
}

static const char tail_help[] =
    "usage: forum ledger tail [-n N] [-f] [--kind K]... [--run RUN]\n"
    "The last N entries (default 10) in a table: seq, local time, actor,\n"
    "kind, parent, a preview of the body; --json prints one entry object a\n"
    "line. With -f it then follows the ledger, printing each new entry as\n"
    "it is committed (by a daemon or any other writer) until interrupted.\n"
    "  -n N        how many to show first (0-10000; 0: only new ones)\n"
    "  -f          follow\n"
    "  --kind K    only entries of kind K (repeat for more kinds)\n"
    "  --run RUN   only the entries of run RUN (its request's seq)\n"
    "example:\n"
    "  forum ledger tail -f --run 42\n";

int cli_ledger_tail(struct cli *c, int argc, char **argv)
{
    struct tail *t = calloc(1, sizeof(*t));
    if (!t)
        return cli_usage_error(c, "tail: out of memory");
    t->c = c;
    t->run = -1;
    for (size_t i = 0; i < RUNS; i++)
        t->runs[i].seq = -1;
    long long n = 10, run = -1;
    int follow = 0, ex = 0;
    const struct cli_opt opts[] = {
        {"-n", "N", CLI_OPT_INT, &n, 0, 10000, NULL, NULL,
         "how many to show first (0: only new ones)"},
        {"-f", NULL, CLI_OPT_BOOL, &follow, 0, 0, NULL, NULL, "follow"},
        {"--follow", NULL, CLI_OPT_BOOL, &follow, 0, 0, NULL, NULL,
         "the same as -f"},
        {"--kind", "K", CLI_OPT_LIST, t->kinds, 0,
         (long long)(sizeof(t->kinds) / sizeof(t->kinds[0])), &t->nkinds, NULL,
         "only entries of kind K (repeat)"},
        {"--run", "RUN", CLI_OPT_INT, &run, 0, INT64_MAX, NULL, "not a seq",
         "only the entries of run RUN"},
        CLI_OPT_END,
    };
    ex = cli_parse(c, "ledger tail", argc, argv, opts, NULL, 0, NULL);
    for (int k = 0; !ex && k < t->nkinds; k++) {
        struct fo_err err;
        if (ledger_check_kind(t->kinds[k], &err) != FO_OK)
            ex = cli_usage_error(c, "ledger tail: --kind %s: %s", t->kinds[k],
                                 err.msg);
    }
    if (ex == CLI_PARSE_HELP) {
        free(t);
        return cli_help(tail_help);
    }
    if (ex) {
        free(t);
        return ex;
    }
    t->run = run;
    ex = cli_open(c, LEDGER_OPEN_READONLY, &t->l);
    if (ex) {
        free(t);
        return ex;
    }
    struct fo_err err;
    int64_t count = 0;
    if (ledger_count(t->l, &count, &err) != FO_OK)
        goto fail;
    if (t->run >= 0) {
        struct ledger_entry r;
        int rc = ledger_get(t->l, t->run, &r, NULL, &err);
        if (rc == FO_OK && strcmp(r.kind, "request"))
            rc = fo_err_set(&err, FO_E_NOT_A_RUN,
                            "entry %lld: not a run (its kind is \"%s\", "
                            "not a run's request)",
                            (long long)t->run, r.kind);
        if (rc != FO_OK)
            goto fail;
    }
    /* the last n that pass the filters: read back from the head in pages
     * until enough are found (or the start is reached) */
    int64_t from = count;
    struct ledger_entry *shown = NULL;
    size_t nshown = 0;
    while (n > 0 && from > 0 && nshown < (size_t)n) {
        int64_t page = from > 1000 ? 1000 : from;
        from -= page;
        t->n = 0;
        if (ledger_range(t->l, from, page, collect, t, &err) != FO_OK ||
            t->failed)
            goto fail_shown;
        size_t take = t->n;
        if (nshown + take > (size_t)n)
            take = (size_t)n - nshown;
        struct ledger_entry *p =
            realloc(shown, (nshown + take + 1) * sizeof(*p));
        if (!p)
            goto fail_shown;
        shown = p;
        memmove(shown + take, shown, nshown * sizeof(*shown));
        memcpy(shown, t->v + (t->n - take), take * sizeof(*shown));
        nshown += take;
        if (t->run >= 0 && from <= t->run)
            break; /* nothing before a run's request is in it */
    }
    int w = cli_actor_width(shown, nshown);
    if (w < 16)
        w = 16;
    if (!c->json && (nshown || follow))
        cli_entries_header(w);
    for (size_t i = 0; i < nshown; i++)
        print_one(t, &shown[i], w);
    free(shown);
    shown = NULL;
    if (!follow && nshown == 0 && !c->json)
        printf("(no entries%s)\n", t->run >= 0 || t->nkinds ? " match" : "");
    fflush(stdout);
    int64_t next = count;
    while (follow) {
        int64_t now = 0;
        if (ledger_count(t->l, &now, &err) != FO_OK)
            goto fail;
        while (next < now) {
            int64_t page = now - next > 1000 ? 1000 : now - next;
            t->n = 0;
            if (ledger_range(t->l, next, page, collect, t, &err) != FO_OK ||
                t->failed)
                goto fail;
            for (size_t i = 0; i < t->n; i++)
                print_one(t, &t->v[i], w);
            next += page;
        }
        if (fflush(stdout) != 0)
            break; /* the reader went away */
        usleep(FOLLOW_MS * 1000);
    }
    ledger_close(t->l);
    free(t->v);
    free(t);
    return 0;
fail_shown:
    free(shown);
    if (t->failed)
        fo_err_set(&err, FO_E_NOMEM, NULL);
fail:
    ex = cli_fail(c, &err);
    ledger_close(t->l);
    free(t->v);
    free(t);
    return ex;
}

/* cli_bench_deep: `forum bench-deep-verify`, how verification scales with
 * the number of entries, the body size, how the ledger was written and
 * how many bodies were redacted; a JSON receipt in the reference's shape
 * (forum.deep-verify-benchmark/v1, docs/COMPATIBILITY.md). Each case
 * builds a fresh ledger in a temporary directory and removes it. */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"
#include "ledger/fo_version.h"

#define BENCH_LIST_MAX 16
#define BENCH_ENTRIES_MAX 1000000
#define BENCH_BODY_MAX (512 * 1024)
#define BENCH_BATCH 1000

struct bench_case {
    long long entries, body;
    const char *mode; /* file-sync, file-batched */
    double ratio;
};

static double ms_since(int64_t t0)
{
    return (double)(ledger_mono_us() - t0) / 1000.0;
}

/* "1,2,3" into v (at most BENCH_LIST_MAX), each in [lo, hi]. */
static int parse_list(const char *s, double lo, double hi, int integer,
                      double *v, int *n)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno || x < lo || x > hi ||
            (integer && x != (double)(long long)x) || *n == BENCH_LIST_MAX ||
            (*end && *end != ','))
            return -1;
        v[(*n)++] = x;
        p = *end ? end + 1 : end;
    }
    return *n ? 0 : -1;
}

/* One entry's body: {"body":"<seq, 16 digits>:xxx..."} of about size
 * bytes, already canonical. */
static int body_of(long long seq, long long size, struct fo_buf *b)
{
    fo_buf_reset(b);
    int rc = fo_buf_printf(b, "{\"body\":\"%016lld:", seq);
    for (long long i = 17; !rc && i < size; i++)
        rc = fo_buf_putc(b, 'x');
    return rc ? rc : fo_buf_puts(b, "\"}");
}

static int build(struct ledger *l, const struct bench_case *k,
                 struct fo_err *err)
{
    int batch = strcmp(k->mode, "file-sync") ? BENCH_BATCH : 1;
    struct ledger_append *reqs = calloc((size_t)batch, sizeof(*reqs));
    struct fo_buf *bodies = calloc((size_t)batch, sizeof(*bodies));
    int rc = reqs && bodies ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
    for (int i = 0; i < batch && bodies; i++)
        fo_buf_init(&bodies[i], FO_BUF_UNLIMITED);
    for (long long seq = 0; !rc && seq < k->entries; seq += batch) {
        int n = (int)(k->entries - seq < batch ? k->entries - seq : batch);
        for (int i = 0; !rc && i < n; i++) {
            if (body_of(seq + i, k->body, &bodies[i]))
                rc = fo_err_set(err, FO_E_NOMEM, NULL);
            reqs[i] = (struct ledger_append){
                .actor = "bench",
                .kind = "payload",
                .parent = seq + i ? seq + i - 1 : LEDGER_NO_PARENT,
                .body = bodies[i].data,
                .body_len = bodies[i].len};
        }
        if (!rc)
            rc = cli_append_all(l, reqs, (size_t)n, err);
    }
    for (int i = 0; i < batch && bodies; i++)
        fo_buf_release(&bodies[i]);
    free(bodies);
    free(reqs);
    return rc;
}

struct hashed {
    int64_t seq;
    uint8_t payload[32];
};

static int collect(void *arg, const struct ledger_entry *e)
{
    struct hashed *h = arg;
    h[e->seq].seq = e->seq;
    memcpy(h[e->seq].payload, e->payload, 32);
    return 0;
}

static int by_payload(const void *a, const void *b)
{
    return memcmp(((const struct hashed *)a)->payload,
                  ((const struct hashed *)b)->payload, 32);
}

/* Redacts the bodies of the first ratio share of the entries in payload
 * hash order (as the reference chose them); *n how many. */
static int redact(struct ledger *l, const struct bench_case *k, long long *n,
                  struct fo_err *err)
{
    *n = (long long)((double)k->entries * k->ratio);
    if (*n <= 0) {
        *n = 0;
        return FO_OK;
    }
    struct hashed *h = calloc((size_t)k->entries, sizeof(*h));
    if (!h)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = ledger_range(l, 0, k->entries, collect, h, err);
    if (!rc)
        qsort(h, (size_t)k->entries, sizeof(*h), by_payload);
    for (long long i = 0; !rc && i < *n; i++)
        rc = ledger_redact(l, h[i].seq, "bench", NULL, err);
    free(h);
    return rc;
}

/* The bodies alone: every stored body re-hashed against its payload. */
struct pay {
    long long bad;
};

static int pay_check(void *arg, const struct ledger_entry *e, const char *body,
                     size_t len)
{
    uint8_t h[32];
    if (!body)
        return 0;
    fo_sha256(body, len, h);
    ((struct pay *)arg)->bad += memcmp(h, e->payload, 32) != 0;
    return 0;
}

/* 0 chain, 1 payloads, 2 deep: one run, its verdict in *ok. */
static int verify_once(struct ledger *l, int which, int *ok, struct fo_err *err)
{
    if (which == 1) {
        struct pay p = {0};
        int rc = ledger_range_bodies(l, 0, -1, pay_check, &p, err);
        *ok = !rc && !p.bad;
        return rc;
    }
    struct ledger_verify_result r;
    int rc =
        ledger_verify(l, which ? LEDGER_VERIFY_DEEP : 0, NULL, NULL, &r, err);
    *ok = !rc && r.ok;
    return rc;
}

static cJSON *timed(struct ledger *l, int which, int repeats,
                    struct fo_err *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *s = o ? cJSON_AddArrayToObject(o, "samples_ms") : NULL;
    double sum = 0, lo = 0, hi = 0;
    int ok = 1, all = 1;
    for (int i = 0; s && i < repeats; i++) {
        int64_t t0 = ledger_mono_us();
        if (verify_once(l, which, &ok, err)) {
            cJSON_Delete(o);
            return NULL;
        }
        double ms = ms_since(t0);
        all &= ok;
        sum += ms;
        lo = i && lo < ms ? lo : ms;
        hi = i && hi > ms ? hi : ms;
        cJSON_AddItemToArray(s, cJSON_CreateNumber(ms));
    }
    if (!s || !cJSON_AddBoolToObject(o, "ok", all) ||
        !cJSON_AddNumberToObject(o, "mean_ms", sum / repeats) ||
        !cJSON_AddNumberToObject(o, "min_ms", lo) ||
        !cJSON_AddNumberToObject(o, "max_ms", hi)) {
        cJSON_Delete(o);
        fo_err_set(err, FO_E_NOMEM, NULL);
        return NULL;
    }
    return o;
}

static int run_case(const struct bench_case *k, const char *tmp, int warmups,
                    int repeats, cJSON *cases, struct fo_err *err)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/forum-deep-verify-XXXXXX", tmp);
    if (!mkdtemp(dir))
        return fo_err_set(err, FO_E_IO, "%s: cannot make a directory: %s", tmp,
                          strerror(errno));
    struct ledger *l = NULL;
    long long redacted = 0;
    int64_t t0 = ledger_mono_us();
    int rc = ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, err);
    if (!rc)
        rc = build(l, k, err);
    double build_ms = ms_since(t0);
    if (!rc)
        rc = redact(l, k, &redacted, err);
    for (int w = 0; !rc && w < warmups; w++)
        for (int which = 0; !rc && which < 3; which++) {
            int ok;
            rc = verify_once(l, which, &ok, err);
        }
    cJSON *o = rc ? NULL : cJSON_CreateObject();
    cJSON *b = o ? cJSON_AddObjectToObject(o, "build") : NULL;
    int ok =
        b && fo_json_add_int(o, "entry_count", k->entries) &&
        fo_json_add_int(o, "payload_body_bytes", k->body) &&
        cJSON_AddStringToObject(o, "storage_mode", k->mode) &&
        cJSON_AddBoolToObject(o, "fsync_each", !strcmp(k->mode, "file-sync")) &&
        cJSON_AddNumberToObject(o, "redaction_ratio", k->ratio) &&
        fo_json_add_int(o, "unique_payloads", k->entries) &&
        fo_json_add_int(o, "payloads_present", k->entries - redacted) &&
        fo_json_add_int(o, "payloads_redacted", redacted) &&
        cJSON_AddNumberToObject(b, "ms", build_ms);
    static const char *const names[] = {"verify_chain", "verify_payloads",
                                        "verify_deep"};
    for (int which = 0; ok && which < 3; which++) {
        cJSON *t = timed(l, which, repeats, err);
        ok = t && cJSON_AddItemToObject(o, names[which], t);
        if (!t)
            rc = err->code;
    }
    if (!rc && !(ok && cJSON_AddItemToArray(cases, o)))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    else if (!rc)
        o = NULL;
    cJSON_Delete(o);
    ledger_close(l);
    cli_remove_sqlite(dir);
    rmdir(dir);
    return rc;
}

static cJSON *num_array(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static void report_text(const cJSON *p)
{
    printf("forum deep-verify benchmark\nschema: %s\nforum: %s | platform: "
           "%s | store: sqlite\n\n",
           cli_str_or(p, "schema", ""), cli_str_or(p, "forum", ""),
           cli_str_or(p, "platform", ""));
    printf("%8s %8s %-12s %7s %10s %10s %11s %10s\n", "entries", "body",
           "storage", "redact", "build_ms", "chain_ms", "payload_ms",
           "deep_ms");
    const cJSON *k;
    cJSON_ArrayForEach (k, cJSON_GetObjectItemCaseSensitive(p, "cases")) {
#define MEAN(n)                                                                \
    cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(k, n),   \
                                     "mean_ms")                                \
        ->valuedouble
        printf(
            "%8lld %8lld %-12s %7.2f %10.3f %10.3f %11.3f %10.3f\n",
            cli_int_or(k, "entry_count", 0),
            cli_int_or(k, "payload_body_bytes", 0),
            cli_str_or(k, "storage_mode", ""),
            cJSON_GetObjectItemCaseSensitive(k, "redaction_ratio")->valuedouble,
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(k, "build"), "ms")
                ->valuedouble,
            MEAN("verify_chain"), MEAN("verify_payloads"), MEAN("verify_deep"));
#undef MEAN
    }
}

static const char bench_deep_usage[] =
    "usage: forum bench-deep-verify [--entries N,...] [--payload-bytes N,...]\n"
    "          [--storage MODE]... [--redaction-ratio R,...] [--warmups N]\n"
    "          [--repeats N] [--json] [--out FILE]\n"
    "How verification scales: for every combination, a fresh ledger in a\n"
    "temporary directory (removed after) is written, a share of its bodies\n"
    "redacted, and three checks timed: the chain (ledger verify), the\n"
    "bodies alone (each re-hashed against its payload), and the deep\n"
    "verify. The receipt is forum.deep-verify-benchmark/v1. Nothing touches\n"
    "your own ledger.\n"
    "  --entries N,...          entries per ledger (default 100,1000)\n"
    "  --payload-bytes N,...    body size in bytes (default 256,4096)\n"
    "  --storage MODE           file-sync (a commit per entry) or\n"
    "                           file-batched (1000 a commit, the default);\n"
    "                           repeat for both\n"
    "  --redaction-ratio R,...  share of bodies redacted (default 0,0.5,1)\n"
    "  --warmups N, --repeats N runs before timing (1), runs timed (5)\n"
    "  --out FILE               also write the JSON receipt to FILE\n"
    "example:\n  forum bench-deep-verify --entries 1000 --payload-bytes 256 "
    "--json\n";

int cli_bench_deep_verify(struct cli *c, int argc, char **argv)
{
    const char *entries = "100,1000", *bytes = "256,4096", *ratios = "0,0.5,1";
    const char *out_path = NULL, *modes[2];
    int nmodes = 0;
    long long warmups = 1, repeats = 5;
    const struct cli_opt opts[] = {
        {"--entries", "N,...", CLI_OPT_STR, &entries, 0, 0, NULL, NULL,
         "entries per ledger"},
        {"--payload-bytes", "N,...", CLI_OPT_STR, &bytes, 0, 0, NULL, NULL,
         "body size in bytes"},
        {"--storage", "MODE", CLI_OPT_LIST, modes, 0, 2, &nmodes, NULL,
         "file-sync or file-batched (repeat)"},
        {"--redaction-ratio", "R,...", CLI_OPT_STR, &ratios, 0, 0, NULL, NULL,
         "share of bodies redacted"},
        {"--warmups", "N", CLI_OPT_INT, &warmups, 0, 100, NULL, NULL,
         "runs of each check before timing"},
        {"--repeats", "N", CLI_OPT_INT, &repeats, 1, 1000, NULL, NULL,
         "runs of each check timed"},
        {"--out", "FILE", CLI_OPT_STR, &out_path, 0, 0, NULL, NULL,
         "also write the JSON receipt to FILE"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "bench-deep-verify", argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(bench_deep_usage) : pe;
    double ev[BENCH_LIST_MAX], bv[BENCH_LIST_MAX], rv[BENCH_LIST_MAX];
    int ne, nb, nr;
    if (parse_list(entries, 0, BENCH_ENTRIES_MAX, 1, ev, &ne))
        return cli_usage_error(c,
                               "bench-deep-verify: --entries %s: up to %d "
                               "integers of 0 to %d, comma-separated",
                               entries, BENCH_LIST_MAX, BENCH_ENTRIES_MAX);
    if (parse_list(bytes, 0, BENCH_BODY_MAX, 1, bv, &nb))
        return cli_usage_error(c,
                               "bench-deep-verify: --payload-bytes %s: "
                               "integers of 0 to %d, comma-separated",
                               bytes, BENCH_BODY_MAX);
    if (parse_list(ratios, 0, 1, 0, rv, &nr))
        return cli_usage_error(c,
                               "bench-deep-verify: --redaction-ratio %s: "
                               "numbers from 0 to 1, comma-separated",
                               ratios);
    for (int i = 0; i < nmodes; i++)
        if (strcmp(modes[i], "file-sync") && strcmp(modes[i], "file-batched"))
            return cli_usage_error(
                c,
                "bench-deep-verify: --storage %s: file-sync or file-batched%s",
                modes[i],
                strcmp(modes[i], "memory") ? ""
                                           : " (forum has no in-memory "
                                             "ledger: every mode is SQLite "
                                             "on disk)");
    if (!nmodes)
        modes[nmodes++] = "file-batched";
    const char *tmp = getenv("TMPDIR");
    tmp = tmp && *tmp ? tmp : "/tmp";
    cJSON *p = cJSON_CreateObject(), *par = NULL, *cases = NULL;
    struct utsname u;
    char plat[512], when[32];
    if (uname(&u))
        snprintf(plat, sizeof(plat), "unknown");
    else
        snprintf(plat, sizeof(plat), "%s-%s-%s", u.sysname, u.release,
                 u.machine);
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    int ok =
        p &&
        cJSON_AddStringToObject(p, "schema",
                                "forum.deep-verify-benchmark/v1") &&
        cJSON_AddStringToObject(p, "generated_at", when) &&
        cJSON_AddStringToObject(p, "forum", FO_VERSION) &&
        cJSON_AddStringToObject(p, "platform", plat) &&
        cJSON_AddStringToObject(p, "store", "sqlite") &&
        (par = cJSON_AddObjectToObject(p, "parameters")) &&
        cJSON_AddItemToObject(par, "entry_counts", num_array(ev, ne)) &&
        cJSON_AddItemToObject(par, "payload_body_bytes", num_array(bv, nb)) &&
        cJSON_AddItemToObject(par, "storage_modes",
                              cJSON_CreateStringArray(modes, nmodes)) &&
        cJSON_AddItemToObject(par, "redaction_ratios", num_array(rv, nr)) &&
        fo_json_add_int(par, "repeats", repeats) &&
        fo_json_add_int(par, "warmups", warmups) &&
        (cases = cJSON_AddArrayToObject(p, "cases"));
    struct fo_err err;
    fo_err_set(&err, FO_E_NOMEM, NULL);
    int rc = ok ? FO_OK : FO_E_NOMEM;
    for (int a = 0; !rc && a < ne; a++)
        for (int b = 0; !rc && b < nb; b++)
            for (int m = 0; !rc && m < nmodes; m++)
                for (int r = 0; !rc && r < nr; r++) {
                    struct bench_case k = {(long long)ev[a], (long long)bv[b],
                                           modes[m], rv[r]};
                    rc = run_case(&k, tmp, (int)warmups, (int)repeats, cases,
                                  &err);
                }
    if (rc) {
        cJSON_Delete(p);
        fo_err_prefix(&err, "bench-deep-verify");
        return cli_fail(c, &err);
    }
    if (out_path) {
        struct fo_buf t;
        fo_buf_init(&t, FO_BUF_UNLIMITED);
        FILE *f = fo_json_write(p, FO_JSON_PRETTY, &t, &err) == FO_OK
                      ? fopen(out_path, "w")
                      : NULL;
        int bad =
            !f || fwrite(t.data, 1, t.len, f) != t.len || fputc('\n', f) == EOF;
        if (f && fclose(f))
            bad = 1;
        fo_buf_release(&t);
        if (bad) {
            cJSON_Delete(p);
            fo_err_set(&err, FO_E_IO, "bench-deep-verify: %s: cannot write",
                       out_path);
            return cli_fail(c, &err);
        }
    }
    if (c->json)
        cli_print_json(p, 0);
    else
        report_text(p);
    cJSON_Delete(p);
    return 0;
}

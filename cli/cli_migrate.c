/* cli_migrate: `forum ledger migrate --into DIR [--postgres CONNINFO]`: the
 * data dir's ledger copied into a new one (SQLite to PostgreSQL, or back,
 * or a plain copy), entry by entry as `ledger import` takes them (each must
 * come out with its recorded hash), and the files that go with a ledger
 * (its checkpoint key, witnesses, forum.json, token) copied beside it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "ledger/fo_file.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "ledger/proof.h"

#define MIGRATE_BATCH 2048

static const char migrate_usage[] =
    "usage: forum ledger migrate --into DIR [--postgres CONNINFO]\n"
    "Copies the data dir's ledger into a new ledger in DIR: in PostgreSQL\n"
    "with --postgres (a libpq connection string, as `ledger init` takes;\n"
    "the password only from PGPASSWORD or ~/.pgpass), else in SQLite\n"
    "(DIR/ledger.db). Every entry goes in with its recorded time and must\n"
    "come out with its recorded hash, as `ledger import` checks; then the\n"
    "tree roots are compared. Into PostgreSQL it is one transaction, into\n"
    "SQLite the files it made are removed: on any failure nothing is kept.\n"
    "The origin stays the same, and the checkpoint key pair, witnesses,\n"
    "forum.json and token are copied into DIR (0600), so signed checkpoints\n"
    "and clients go on working. The source is only read; entries a daemon\n"
    "appends to it meanwhile are not copied (stop it first to move).\n"
    "  --into DIR            the new data dir (made 0700; must hold no\n"
    "                        ledger)\n"
    "  --postgres CONNINFO   keep the new ledger in PostgreSQL\n"
    "  --json                print {entries, root, into, store, copied}\n"
    "exit codes: 0 migrated; 1 an entry or the root did not match; 2 usage,\n"
    "or DIR or the database already holds a ledger; 3 I/O, or the database\n"
    "cannot be reached\n"
    "example:\n"
    "  forum --ledger /var/lib/forum ledger migrate --into "
    "/var/lib/forum-pg \\\n"
    "      --postgres \"host=/run/postgresql dbname=forum user=forum\"\n";

/* The files of a data dir that go with its ledger. */
static const char *const companions[] = {"checkpoint.key", "checkpoint.vkey",
                                         "witnesses", "forum.json", "token"};

struct batch {
    struct ledger *src, *dst;
    struct ledger_append req[MIGRATE_BATCH];
    struct ledger_entry ent[MIGRATE_BATCH];
    char *bodies[MIGRATE_BATCH];
    size_t n;
    long long done;
    int tty;
    struct fo_err *err;
};

static void batch_clear(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->bodies[i]);
    b->n = 0;
}

static int batch_flush(struct batch *b)
{
    if (!b->n)
        return FO_OK;
    int rc = cli_append_all(b->dst, b->req, b->n, b->err);
    b->done += rc ? 0 : (long long)b->n;
    batch_clear(b);
    if (!rc && b->tty)
        fprintf(stderr, "\rforum: migrated %lld entries", b->done);
    return rc;
}

/* One source entry into the batch, its body with it (NULL when redacted:
 * the entry keeps the payload hash of the body it had). */
static int copy_one(void *ctx, const struct ledger_entry *e, const char *body,
                    size_t len)
{
    struct batch *b = ctx;
    char *copy = NULL;
    if (body && !(copy = malloc(len ? len : 1)))
        return fo_err_set(b->err, FO_E_NOMEM, NULL);
    if (body && len)
        memcpy(copy, body, len);
    b->ent[b->n] = *e;
    b->bodies[b->n] = copy;
    b->req[b->n] = (struct ledger_append){.actor = b->ent[b->n].actor,
                                          .kind = b->ent[b->n].kind,
                                          .parent = e->parent,
                                          .body = copy,
                                          .body_len = len,
                                          .import = &b->ent[b->n]};
    b->n++;
    return b->n == MIGRATE_BATCH ? batch_flush(b) : FO_OK;
}

/* Copies DIR_FROM/name to DIR_TO/name (0600, never over a file): 1 when
 * copied, 0 when there is no such file, -1 on an error (err). */
static int copy_file(const char *from, const char *to, const char *name,
                     struct fo_err *err)
{
    char src[PATH_MAX], dst[PATH_MAX];
    snprintf(src, sizeof(src), "%s/%s", from, name);
    snprintf(dst, sizeof(dst), "%s/%s", to, name);
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0 && errno == ENOENT)
        return 0;
    int out =
        in < 0 ? -1 : open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int ok = in >= 0 && out >= 0;
    char buf[8192];
    ssize_t n;
    while (ok && (n = read(in, buf, sizeof(buf))) != 0)
        ok = n > 0 && write(out, buf, (size_t)n) == n;
    ok = ok && fsync(out) == 0;
    int e = errno;
    if (out >= 0 && close(out) != 0)
        ok = 0;
    if (in >= 0)
        close(in);
    if (!ok && out >= 0)
        unlink(dst); /* made here (O_EXCL): not a file that was there */
    if (!ok) {
        fo_err_set(err, FO_E_IO, "copy %s to %s: %s", src, dst, strerror(e));
        return -1;
    }
    return 1;
}

/* What a failed migration made in dir goes again: the SQLite files and
 * store.json it wrote, the companions it copied (made[i]; never one that
 * was there before), and dir when it made it. */
static void remove_made(const char *dir, int made_dir, const int *made)
{
    char p[PATH_MAX];
    cli_remove_sqlite(dir);
    snprintf(p, sizeof(p), "%s/store.json", dir);
    unlink(p);
    for (size_t i = 0; i < sizeof(companions) / sizeof(companions[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, companions[i]);
        if (made[i])
            unlink(p);
    }
    if (made_dir)
        rmdir(dir);
}

/* dir holds a ledger (or its store.json names one) already. */
static int holds_ledger(const char *dir)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof(p), "%s/ledger.db", dir);
    if (stat(p, &st) == 0)
        return 1;
    snprintf(p, sizeof(p), "%s/store.json", dir);
    return stat(p, &st) == 0;
}

/* --into's rules: given, a usable path, not the data dir, no ledger in it
 * yet; 0, or the usage error's exit code. */
static int into_usage(struct cli *c, const char *into)
{
    if (!into || !*into)
        return cli_usage_error(c, "ledger migrate: --into DIR is required");
    struct fo_err derr;
    if (fo_dir_check(into, &derr) != FO_OK)
        return cli_usage_error(c, "ledger migrate: --into: %s", derr.msg);
    char rs[PATH_MAX], rd[PATH_MAX];
    if (realpath(c->ledger_dir, rs) && realpath(into, rd) && !strcmp(rs, rd))
        return cli_usage_error(c,
                               "ledger migrate: --into %s is the data dir "
                               "itself",
                               into);
    if (holds_ledger(into))
        return cli_usage_error(c,
                               "ledger migrate: %s holds a ledger already; "
                               "migrate into a new data dir",
                               into);
    return 0;
}

int cli_ledger_migrate(struct cli *c, int argc, char **argv)
{
    const char *into = NULL, *conninfo = NULL;
    const struct cli_opt opts[] = {
        {"--into", "DIR", CLI_OPT_STR, &into, 0, 0, NULL, NULL,
         "the new data dir (must hold no ledger)"},
        {"--postgres", "CONNINFO", CLI_OPT_STR, &conninfo, 0, 0, NULL, NULL,
         "keep the new ledger in PostgreSQL"},
        CLI_OPT_END,
    };
    int ex = cli_parse(c, "ledger migrate", argc, argv, opts, NULL, 0, NULL);
    if (ex)
        return ex == CLI_PARSE_HELP ? cli_help(migrate_usage) : ex;
    ex = into_usage(c, into);
    if (ex)
        return ex;
    struct fo_err err;
    fo_err_clear(&err);
    struct ledger *src = NULL, *dst = NULL;
    int rc = ledger_open(c->ledger_dir, LEDGER_OPEN_READONLY, NULL, &src, &err);
    if (rc)
        return cli_fail(c, &err);
    struct stat st;
    int made_dir = stat(into, &st) != 0;
    if (made_dir && mkdir(into, 0700) != 0) {
        fo_err_set(&err, FO_E_IO, "%s: %s", into, strerror(errno));
        ledger_close(src);
        return cli_fail(c, &err);
    }
    struct batch *b = calloc(1, sizeof(*b));
    int64_t count = 0;
    int held = 0;
    if (!b)
        rc = fo_err_set(&err, FO_E_NOMEM, NULL);
    if (!rc && conninfo)
        rc = ledger_use_postgres(into, conninfo, &err);
    struct ledger_config cfg = {.origin = ledger_origin(src)};
    if (!rc)
        rc = ledger_open(into, LEDGER_OPEN_CREATE, &cfg, &dst, &err);
    int64_t there = 0;
    if (!rc)
        rc = ledger_count(dst, &there, &err);
    if (!rc && there > 0)
        rc = fo_err_set(&err, FO_E_EXISTS,
                        "ledger migrate: the database holds a ledger of %lld "
                        "entries already; migrate into an empty one",
                        (long long)there);
    if (!rc)
        rc = ledger_count(src, &count, &err);
    if (!rc && !(rc = ledger_hold(dst, 1, 0, &err)))
        held = 1;
    if (!rc) {
        b->src = src;
        b->dst = dst;
        b->err = &err;
        b->tty = isatty(2) && !c->json;
        /* a batch's worth of entries and bodies a read (one round trip
         * on PostgreSQL), never the whole ledger in memory */
        for (int64_t at = 0; !rc && at < count; at += MIGRATE_BATCH)
            rc = ledger_range_bodies(src, at,
                                     count - at < MIGRATE_BATCH ? count - at
                                                                : MIGRATE_BATCH,
                                     copy_one, b, &err);
        if (!rc)
            rc = batch_flush(b);
        batch_clear(b);
        if (b->tty && b->done)
            fprintf(stderr, "\n");
    }
    uint8_t r1[32], r2[32];
    char hex[65] = "";
    if (!rc && count) {
        rc = ledger_root(src, count, r1, &err);
        if (!rc)
            rc = ledger_root(dst, count, r2, &err);
        if (!rc && memcmp(r1, r2, 32) != 0)
            rc = fo_err_set(&err, FO_E_CORRUPT,
                            "ledger migrate: the copy's tree root differs "
                            "from the source's");
        if (!rc)
            fo_hex(r1, 32, hex);
    }
    /* the files that go with it, before the copy is kept: a file that
     * cannot be copied (one of that name in DIR already) undoes it all */
    int made[sizeof(companions) / sizeof(companions[0])] = {0};
    cJSON *copied = cJSON_CreateArray();
    for (size_t i = 0; !rc && i < sizeof(companions) / sizeof(companions[0]);
         i++) {
        int k = copy_file(c->ledger_dir, into, companions[i], &err);
        if (k < 0)
            rc = err.code;
        made[i] = k > 0;
        if (k > 0 && copied)
            cJSON_AddItemToArray(copied, cJSON_CreateString(companions[i]));
    }
    if (held && rc)
        ledger_hold(dst, 0, 0, NULL);
    else if (held)
        rc = ledger_hold(dst, 0, 1, &err);
    const char *store = dst ? ledger_store_name(dst) : "";
    char store_name[32];
    snprintf(store_name, sizeof(store_name), "%s", store);
    free(b);
    ledger_close(dst);
    ledger_close(src);
    if (rc) {
        remove_made(into, made_dir, made);
        cJSON_Delete(copied);
        int code = cli_fail(c, &err);
        return rc == FO_E_CORRUPT ? 1 : code;
    }
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        if (o) {
            fo_json_add_int(o, "entries", count);
            cJSON_AddStringToObject(o, "root", hex);
            cJSON_AddStringToObject(o, "into", into);
            cJSON_AddStringToObject(o, "store", store_name);
            cJSON_AddItemToObject(o, "copied", copied);
            copied = NULL;
            cli_print_json(o, 0);
        }
        cJSON_Delete(o);
    } else {
        printf("migrated %lld entries from %s to %s (%s); the tree roots "
               "match%s%s\n",
               (long long)count, c->ledger_dir, into, store_name,
               count ? ": " : "", hex);
        printf("copied:");
        const cJSON *x;
        cJSON_ArrayForEach (x, copied)
            printf(" %s", x->valuestring);
        printf("%s\n", cJSON_GetArraySize(copied) ? "" : " nothing");
        printf("next: forum --ledger %s ledger verify --deep, then serve "
               "it\n",
               into);
    }
    cJSON_Delete(copied);
    return 0;
}

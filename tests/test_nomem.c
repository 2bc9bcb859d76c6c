/* test_nomem: out of memory, in the test process only. This file replaces
 * malloc, calloc and realloc for the whole test binary (glibc lets a
 * program interpose them; the forum binary never has this): armed on one
 * thread, the N-th allocation fails. Loops over N for ledger open, append,
 * batch append, redact, checkpoint, verify and the JSON reader: each
 * failure is a clear error (never a crash, never an "ok" that is not), and
 * the ledger afterwards verifies and holds exactly what was acknowledged.
 * Under ASan (which owns malloc) the test says it is skipped. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "ledger/proof.h"
#include "tests/testutil.h"

#ifndef FORUM_SANITIZE

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);

static __thread long fail_at; /* the N-th allocation fails (0: none) */
static __thread long seen;    /* allocations while armed */
static __thread long failed;  /* failures injected */

static int fail_now(void)
{
    if (!fail_at || ++seen != fail_at)
        return 0;
    failed++;
    errno = ENOMEM;
    return 1;
}

void *malloc(size_t n)
{
    return fail_now() ? NULL : __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    return fail_now() ? NULL : __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    return fail_now() ? NULL : __libc_realloc(p, n);
}

static void arm(long n)
{
    seen = 0;
    failed = 0;
    fail_at = n;
}

static long disarm(void)
{
    fail_at = 0;
    return failed;
}

/* The errors an allocation failure may come out as. */
static int clean_error(int rc)
{
    return rc == FO_E_NOMEM || rc == FO_E_IO;
}

static struct ledger *open_dir(const char *dir)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    return l;
}

/* Reopened with nothing armed: verifies deep and holds want entries. */
static void check_after(const char *dir, int64_t want, const char *what, long n)
{
    struct ledger *l = open_dir(dir);
    int64_t count = -1;
    struct fo_err err;
    cr_assert_eq(ledger_count(l, &count, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(count, want,
                 "%s, allocation %ld failed: %lld entries, %lld "
                 "acknowledged",
                 what, n, (long long)count, (long long)want);
    struct ledger_verify_result res;
    cr_assert_eq(ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &res, &err),
                 FO_OK, "%s", err.msg);
    cr_assert(res.ok, "%s, allocation %ld failed: verify: %s", what, n,
              res.reason ? res.reason : "?");
    ledger_close(l);
}

Test(nomem, append_and_batch_append)
{
    long points = 0;
    for (long n = 1; n < 100000; n++) {
        char *dir = tu_tmpdir();
        struct ledger *l = open_dir(dir);
        struct fo_err err;
        cr_assert_eq(ledger_append(l, "t", "first", LEDGER_NO_PARENT,
                                   "{\"a\":1}", 7, NULL, &err),
                     FO_OK);
        struct ledger_append reqs[4];
        char bodies[4][32];
        for (int i = 0; i < 4; i++) {
            snprintf(bodies[i], sizeof(bodies[i]), "{\"b\":[%d,\"x\"]}", i);
            reqs[i] = (struct ledger_append){.actor = "t",
                                             .kind = "batch",
                                             .parent = 0,
                                             .body = bodies[i],
                                             .body_len = strlen(bodies[i])};
        }
        arm(n);
        int brc = ledger_append_batch(l, reqs, 4, &err);
        int arc =
            ledger_append(l, "t", "one", 0, "{\"c\":true}", 10, NULL, &err);
        long f = disarm();
        if (brc)
            cr_assert(clean_error(brc) && err.msg[0],
                      "batch, allocation %ld failed: rc %d (%s)", n, brc,
                      err.msg);
        if (arc)
            cr_assert(clean_error(arc), "append, allocation %ld failed: %d", n,
                      arc);
        ledger_close(l);
        int64_t acked = 1 + (brc == FO_OK ? 4 : 0) + (arc == FO_OK);
        check_after(dir, acked, "append", n);
        tu_rmrf(dir);
        if (!f) {
            cr_assert_eq(brc, FO_OK);
            cr_assert_eq(arc, FO_OK);
            break;
        }
        points++;
    }
    cr_assert_gt(points, 10, "only %ld allocations were failed", points);
}

Test(nomem, open_redact_checkpoint_verify)
{
    long points = 0;
    for (long n = 1; n < 100000; n++) {
        char *dir = tu_tmpdir();
        struct ledger *l = open_dir(dir);
        struct fo_err err;
        for (int i = 0; i < 4; i++)
            cr_assert_eq(ledger_append(l, "t", "step", LEDGER_NO_PARENT,
                                       "{\"s\":\"secret\"}", 14, NULL, &err),
                         FO_OK);
        ledger_close(l);
        l = NULL;
        arm(n);
        int orc = ledger_open(dir, 0, NULL, &l, &err);
        int rrc = -1, crc = -1, vrc = -1;
        struct fo_err cerr = {0};
        struct ledger_verify_result res = {0};
        if (orc == FO_OK) {
            struct ledger_entry red;
            rrc = ledger_redact(l, 1, "nomem test", &red, &err);
            struct ledger_checkpoint cp = {0};
            crc = ledger_checkpoint_sign(l, 0, &cp, &cerr);
            if (crc == FO_OK)
                ledger_checkpoint_release(&cp);
            vrc = ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &res, &err);
        }
        long f = disarm();
        cr_assert(orc == FO_OK || clean_error(orc), "open at %ld: %d", n, orc);
        if (orc == FO_OK) {
            cr_assert(rrc == FO_OK || clean_error(rrc), "redact at %ld: %d", n,
                      rrc);
            /* OpenSSL does not always say that it ran out of memory
             * ("key setup failed", or nothing queued): then the error is
             * internal, with what failed; never a crash */
            cr_assert(crc == FO_OK || (cerr.msg[0] && (clean_error(crc) ||
                                                       crc == FO_E_INTERNAL)),
                      "sign at %ld: %d (%s)", n, crc, cerr.msg);
            /* verify never calls a sound ledger damaged for want of memory */
            cr_assert(vrc == FO_OK ? res.ok : clean_error(vrc),
                      "verify at %ld: rc %d ok %d (%s)", n, vrc, res.ok,
                      res.reason ? res.reason : "");
            ledger_close(l);
        }
        check_after(dir, 4 + (rrc == FO_OK), "redact", n);
        tu_rmrf(dir);
        if (!f) {
            cr_assert_eq(orc, FO_OK);
            cr_assert_eq(rrc, FO_OK);
            cr_assert_eq(crc, FO_OK);
            cr_assert_eq(vrc, FO_OK);
            break;
        }
        points++;
    }
    cr_assert_gt(points, 10, "only %ld allocations were failed", points);
}

Test(nomem, json_reader_and_writer)
{
    static const char text[] =
        "{\"a\":[1,2.5,\"x\\u00e9\",{\"b\":null,\"c\":[true,false]}],"
        "\"d\":\"long string with escapes \\n\\t\",\"e\":-0.0001}";
    long points = 0;
    for (long n = 1; n < 100000; n++) {
        cJSON *v = NULL;
        struct fo_err err;
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        arm(n);
        int prc = fo_json_parse(text, sizeof(text) - 1, &v, &err);
        int crc = prc == FO_OK ? fo_json_canon(v, &b, &err) : -1;
        long f = disarm();
        cr_assert(prc == FO_OK || prc == FO_E_NOMEM, "parse at %ld: %d (%s)", n,
                  prc, err.msg);
        if (prc == FO_OK)
            cr_assert(crc == FO_OK || crc == FO_E_NOMEM, "canon at %ld: %d", n,
                      crc);
        cJSON_Delete(v);
        fo_buf_release(&b);
        if (!f) {
            cr_assert_eq(prc, FO_OK);
            cr_assert_eq(crc, FO_OK);
            break;
        }
        points++;
    }
    cr_assert_gt(points, 5, "only %ld allocations were failed", points);
}

#else

Test(nomem, skipped_under_asan)
{
    cr_skip_test("ASan owns malloc: the out-of-memory loops run in the "
                 "plain build (the first pass of ./test.sh)");
}

#endif

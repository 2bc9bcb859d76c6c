/* test_faults: fault injection and the fsync check, in the test process
 * only (never in the forum binary). A SQLite VFS registered as the default
 * wraps the unix VFS: it can fail the N-th write or sync with an I/O error
 * or a full disk, and it records every write and sync of the WAL. Loops
 * over N for append, batch append, redact, checkpoint and verify show that
 * each failure is a clear error, nothing acknowledged is lost, and the
 * ledger verifies afterwards; the fsync test shows that every
 * acknowledged commit was synced before its call returned. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "ledger/ledger.h"
#include "ledger/proof.h"
#include "tests/testutil.h"

/* ---- the VFS ----------------------------------------------------------- */

enum { OP_WRITE, OP_SYNC };

static struct {
    sqlite3_vfs *real;
    int fail_op;    /* OP_WRITE or OP_SYNC */
    long fail_at;   /* the N-th such operation fails (0: none) */
    int fail_rc;    /* SQLITE_IOERR_WRITE, SQLITE_FULL, SQLITE_IOERR_FSYNC */
    long ops[2];    /* operations seen while armed */
    long failed;    /* failures injected */
    long tick;      /* a clock of WAL writes and syncs */
    long wal_write; /* tick of the last WAL write */
    long wal_sync;  /* tick of the last WAL sync */
} F;

struct ffile {
    sqlite3_file base;
    sqlite3_file *real;
    int wal;
};

static int inject(int op)
{
    if (!F.fail_at)
        return SQLITE_OK;
    if (++F.ops[op] == F.fail_at && F.fail_op == op) {
        F.failed++;
        return F.fail_rc;
    }
    return SQLITE_OK;
}

#define REAL(f) (((struct ffile *)(f))->real)

static int f_close(sqlite3_file *f)
{
    int rc = REAL(f)->pMethods->xClose(REAL(f));
    return rc;
}
static int f_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{
    return REAL(f)->pMethods->xRead(REAL(f), b, n, o);
}
static int f_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
    int rc = inject(OP_WRITE);
    if (rc)
        return rc;
    rc = REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
    if (!rc && ((struct ffile *)f)->wal)
        F.wal_write = ++F.tick;
    return rc;
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 n)
{
    return REAL(f)->pMethods->xTruncate(REAL(f), n);
}
static int f_sync(sqlite3_file *f, int flags)
{
    int rc = inject(OP_SYNC);
    if (rc)
        return rc;
    rc = REAL(f)->pMethods->xSync(REAL(f), flags);
    if (!rc && ((struct ffile *)f)->wal)
        F.wal_sync = ++F.tick;
    return rc;
}
static int f_size(sqlite3_file *f, sqlite3_int64 *n)
{
    return REAL(f)->pMethods->xFileSize(REAL(f), n);
}
static int f_lock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xLock(REAL(f), l);
}
static int f_unlock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xUnlock(REAL(f), l);
}
static int f_check(sqlite3_file *f, int *r)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r);
}
static int f_fcntl(sqlite3_file *f, int op, void *a)
{
    return REAL(f)->pMethods->xFileControl(REAL(f), op, a);
}
static int f_sector(sqlite3_file *f)
{
    return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int f_chars(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int f_shmmap(sqlite3_file *f, int i, int sz, int ext, void volatile **p)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), i, sz, ext, p);
}
static int f_shmlock(sqlite3_file *f, int o, int n, int fl)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl);
}
static void f_shmbarrier(sqlite3_file *f)
{
    REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int f_shmunmap(sqlite3_file *f, int del)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int f_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **p)
{
    return REAL(f)->pMethods->xFetch(REAL(f), o, n, p);
}
static int f_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p)
{
    return REAL(f)->pMethods->xUnfetch(REAL(f), o, p);
}

static const sqlite3_io_methods methods = {
    3,         f_close,      f_read,     f_write, f_truncate, f_sync,  f_size,
    f_lock,    f_unlock,     f_check,    f_fcntl, f_sector,   f_chars, f_shmmap,
    f_shmlock, f_shmbarrier, f_shmunmap, f_fetch, f_unfetch};

static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file,
                  int flags, int *out)
{
    (void)vfs;
    struct ffile *f = (struct ffile *)file;
    f->real = (sqlite3_file *)(f + 1);
    f->wal = (flags & SQLITE_OPEN_WAL) != 0;
    int rc = F.real->xOpen(F.real, name, f->real, flags, out);
    f->base.pMethods = rc == SQLITE_OK ? &methods : NULL;
    return rc;
}
static int v_delete(sqlite3_vfs *v, const char *n, int s)
{
    (void)v;
    return F.real->xDelete(F.real, n, s);
}
static int v_access(sqlite3_vfs *v, const char *n, int fl, int *r)
{
    (void)v;
    return F.real->xAccess(F.real, n, fl, r);
}
static int v_full(sqlite3_vfs *v, const char *n, int sz, char *out)
{
    (void)v;
    return F.real->xFullPathname(F.real, n, sz, out);
}
static void *v_dlopen(sqlite3_vfs *v, const char *n)
{
    (void)v;
    return F.real->xDlOpen(F.real, n);
}
static void v_dlerror(sqlite3_vfs *v, int n, char *m)
{
    (void)v;
    F.real->xDlError(F.real, n, m);
}
static void (*v_dlsym(sqlite3_vfs *v, void *h, const char *s))(void)
{
    (void)v;
    return F.real->xDlSym(F.real, h, s);
}
static void v_dlclose(sqlite3_vfs *v, void *h)
{
    (void)v;
    F.real->xDlClose(F.real, h);
}
static int v_random(sqlite3_vfs *v, int n, char *o)
{
    (void)v;
    return F.real->xRandomness(F.real, n, o);
}
static int v_sleep(sqlite3_vfs *v, int us)
{
    (void)v;
    return F.real->xSleep(F.real, us);
}
static int v_time(sqlite3_vfs *v, double *t)
{
    (void)v;
    return F.real->xCurrentTime(F.real, t);
}
static int v_lasterr(sqlite3_vfs *v, int n, char *m)
{
    (void)v;
    return F.real->xGetLastError ? F.real->xGetLastError(F.real, n, m) : 0;
}
static int v_time64(sqlite3_vfs *v, sqlite3_int64 *t)
{
    (void)v;
    return F.real->xCurrentTimeInt64(F.real, t);
}

static sqlite3_vfs vfs;

static void vfs_install(void)
{
    if (F.real)
        return;
    sqlite3_initialize();
    F.real = sqlite3_vfs_find("unix");
    cr_assert_not_null(F.real);
    vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(struct ffile) + F.real->szOsFile,
        .mxPathname = F.real->mxPathname,
        .zName = "forum-faults",
        .xOpen = v_open,
        .xDelete = v_delete,
        .xAccess = v_access,
        .xFullPathname = v_full,
        .xDlOpen = v_dlopen,
        .xDlError = v_dlerror,
        .xDlSym = v_dlsym,
        .xDlClose = v_dlclose,
        .xRandomness = v_random,
        .xSleep = v_sleep,
        .xCurrentTime = v_time,
        .xGetLastError = v_lasterr,
        .xCurrentTimeInt64 = v_time64,
    };
    cr_assert_eq(sqlite3_vfs_register(&vfs, 1), SQLITE_OK);
}

static void arm(int op, long at, int rc)
{
    F.fail_op = op;
    F.fail_at = at;
    F.fail_rc = rc;
    F.ops[0] = F.ops[1] = 0;
    F.failed = 0;
}

static void disarm(void)
{
    F.fail_at = 0;
}

/* ---- the loops ----------------------------------------------------------- */

static struct ledger *open_dir(const char *dir)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    return l;
}

static void append_n(struct ledger *l, int n, int tag)
{
    for (int i = 0; i < n; i++) {
        char body[64];
        snprintf(body, sizeof(body), "{\"tag\":%d,\"i\":%d}", tag, i);
        struct fo_err err;
        cr_assert_eq(ledger_append(l, "t", "step", LEDGER_NO_PARENT, body,
                                   strlen(body), NULL, &err),
                     FO_OK, "%s", err.msg);
    }
}

/* After a fault: reopened with nothing armed, the ledger verifies deep and
 * holds exactly `want` entries. */
static void check_after(const char *dir, int64_t want, const char *what, long n)
{
    disarm();
    struct ledger *l = open_dir(dir);
    int64_t count = -1;
    struct fo_err err;
    cr_assert_eq(ledger_count(l, &count, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(count, want, "%s, fault at %ld: %lld entries, want %lld", what,
                 n, (long long)count, (long long)want);
    struct ledger_verify_result res;
    cr_assert_eq(ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &res, &err),
                 FO_OK, "%s", err.msg);
    cr_assert(res.ok, "%s, fault at %ld: verify %s at %lld", what, n,
              res.reason ? res.reason : "bodies", (long long)res.first_bad_seq);
    ledger_close(l);
}

static const struct {
    int op, rc;
    const char *name;
} faults[] = {
    {OP_WRITE, SQLITE_IOERR_WRITE, "EIO on write"},
    {OP_WRITE, SQLITE_FULL, "ENOSPC on write"},
    {OP_SYNC, SQLITE_IOERR_FSYNC, "EIO on fsync"},
};

Test(faults, append_and_batch_append_lose_nothing_acknowledged, .timeout = 120)
{
    vfs_install();
    for (size_t k = 0; k < sizeof(faults) / sizeof(faults[0]); k++) {
        long injected = 0, errors = 0;
        for (long n = 1; n <= 12; n++) {
            char *dir = tu_tmpdir();
            struct ledger *l = open_dir(dir);
            append_n(l, 3, 0);
            arm(faults[k].op, n, faults[k].rc);
            /* a batch of five, then one more append */
            struct ledger_append reqs[5];
            char bodies[5][32];
            for (int i = 0; i < 5; i++) {
                snprintf(bodies[i], sizeof(bodies[i]), "{\"b\":%d}", i);
                reqs[i] = (struct ledger_append){.actor = "t",
                                                 .kind = "batch",
                                                 .parent = LEDGER_NO_PARENT,
                                                 .body = bodies[i],
                                                 .body_len = strlen(bodies[i])};
            }
            struct fo_err err;
            int brc = ledger_append_batch(l, reqs, 5, &err);
            if (brc)
                cr_assert(err.msg[0],
                          "%s at %ld: an error without a "
                          "message",
                          faults[k].name, n);
            int arc = brc ? -1
                          : ledger_append(l, "t", "one", LEDGER_NO_PARENT, "{}",
                                          2, NULL, &err);
            ledger_close(l);
            int64_t acked = 3 + (brc == FO_OK ? 5 : 0) + (arc == FO_OK);
            injected += F.failed;
            errors += brc != FO_OK || arc != FO_OK;
            /* a failed commit of this VFS kind may or may not have made
             * it to disk only when the failure came after the data was
             * durable; nothing acknowledged may be missing, and nothing
             * unacknowledged may be half there */
            disarm();
            struct ledger *r = open_dir(dir);
            int64_t count = 0;
            cr_assert_eq(ledger_count(r, &count, &err), FO_OK);
            ledger_close(r);
            cr_assert(count == acked || (count > acked && F.failed),
                      "%s at %ld: %lld entries, %lld acknowledged",
                      faults[k].name, n, (long long)count, (long long)acked);
            cr_assert(count == 3 || count == 8 || count == 9,
                      "%s at %ld: a batch in part (%lld entries)",
                      faults[k].name, n, (long long)count);
            check_after(dir, count, faults[k].name, n);
            tu_rmrf(dir);
        }
        /* the loop did inject, and the failures were reported */
        cr_assert_gt(injected, 0, "%s: never injected", faults[k].name);
        cr_assert_gt(errors, 0, "%s: no call failed", faults[k].name);
    }
}

Test(faults, redact_checkpoint_and_verify_fail_cleanly, .timeout = 120)
{
    vfs_install();
    for (size_t k = 0; k < sizeof(faults) / sizeof(faults[0]); k++) {
        long rerrors = 0;
        for (long n = 1; n <= 10; n++) {
            char *dir = tu_tmpdir();
            struct ledger *l = open_dir(dir);
            append_n(l, 6, 1);
            arm(faults[k].op, n, faults[k].rc);
            struct fo_err err;
            struct ledger_entry red;
            int rrc = ledger_redact(l, 2, "fault test", &red, &err);
            if (rrc)
                cr_assert(err.msg[0]);
            rerrors += rrc != FO_OK;
            struct ledger_checkpoint cp = {0};
            int crc = ledger_checkpoint_sign(l, 0, &cp, &err);
            if (!crc)
                ledger_checkpoint_release(&cp);
            struct ledger_verify_result res;
            int vrc =
                ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &res, &err);
            cr_assert(vrc == FO_OK ? res.ok : err.msg[0] != '\0',
                      "%s at %ld: verify said damaged", faults[k].name, n);
            ledger_close(l);
            disarm();
            struct ledger *r = open_dir(dir);
            int64_t count = 0;
            cr_assert_eq(ledger_count(r, &count, &err), FO_OK);
            /* an acknowledged redaction is on record, its body gone */
            if (rrc == FO_OK) {
                cr_assert_eq(count, 7);
                char *b = NULL;
                size_t bl = 0;
                cr_assert_eq(ledger_body(r, 2, &b, &bl, &err), FO_E_REDACTED);
            } else {
                cr_assert(count == 6 || count == 7);
            }
            ledger_close(r);
            check_after(dir, count, faults[k].name, n);
            tu_rmrf(dir);
        }
        cr_assert_gt(rerrors, 0, "%s: no redaction failed", faults[k].name);
    }
}

/* Killing a process cannot show a missing fsync (the page cache survives
 * it): the VFS can. Every acknowledged append was synced to the WAL after
 * its last write, before the call returned. */
Test(faults, every_acknowledged_commit_was_synced_first)
{
    vfs_install();
    disarm();
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir);
    for (int i = 0; i < 50; i++) {
        long before = F.tick;
        struct fo_err err;
        char body[32];
        snprintf(body, sizeof(body), "{\"i\":%d}", i);
        cr_assert_eq(ledger_append(l, "t", "step", LEDGER_NO_PARENT, body,
                                   strlen(body), NULL, &err),
                     FO_OK);
        cr_assert_gt(F.wal_write, before, "append %d wrote no WAL frame", i);
        cr_assert_gt(F.wal_sync, F.wal_write,
                     "append %d returned before its WAL write was synced", i);
    }
    ledger_close(l);
    tu_rmrf(dir);
}

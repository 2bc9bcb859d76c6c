/* cli_backup: `forum ledger backup FILE` (an online, consistent copy of
 * the ledger's database in one read transaction: no `sqlite3` CLI, no
 * stopping the daemon) and `forum ledger restore FILE` (the copy is
 * checked, deep, before anything in the data dir is replaced). */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/service.h"
#include "ledger/fo_json.h"

static const char backup_usage[] =
    "usage: forum ledger backup FILE [--json]\n"
    "Writes an online, consistent copy of the ledger's database to FILE (a\n"
    "new file, 0600), while the daemon and other processes go on appending:\n"
    "the copy is one state of the ledger, verified before the command\n"
    "exits. The data dir's keys and token are not in it: keep\n"
    "checkpoint.key with your backups (forum ledger key prints the verifier\n"
    "key).\n"
    "example:\n"
    "  forum ledger backup /backups/forum-$(date +%F).db\n"
    "exit codes: 0 written and verified; 1 the copy does not verify; 2\n"
    "usage, FILE exists; 3 I/O\n";

static const char restore_usage[] =
    "usage: forum ledger restore FILE [--replace] [--json]\n"
    "Makes the database FILE (from `forum ledger backup`) the data dir's\n"
    "ledger. FILE is first copied beside the ledger and verified deep (every\n"
    "hash, the tree, every body); nothing is replaced unless it verifies.\n"
    "A data dir that already holds a ledger is replaced only with\n"
    "--replace. No daemon may be serving the data dir (stop it first).\n"
    "example:\n"
    "  forum --ledger /var/lib/forum ledger restore /backups/forum.db "
    "--replace\n"
    "exit codes: 0 restored; 1 FILE does not verify; 2 usage, a ledger is\n"
    "there and no --replace, a daemon is serving; 3 I/O\n";

static int parse(struct cli *c, const char *what, const char *usage, int argc,
                 char **argv, const char **file, int *replace)
{
    const struct cli_opt opts[] = {
        {"--replace", NULL, CLI_OPT_BOOL, replace, 0, 0, NULL, NULL,
         "replace the ledger the data dir holds"},
        CLI_OPT_END,
    };
    const char *pos[8];
    int npos = 0;
    int pe = cli_parse(c, what, argc, argv, replace ? opts : opts + 1, pos, 8,
                       &npos);
    if (pe == CLI_PARSE_HELP)
        return cli_help(usage) - 1;
    if (pe)
        return pe;
    if (npos > 1)
        return cli_usage_error(c, "%s: one FILE", what);
    if (npos)
        *file = pos[0];
    if (!*file)
        return cli_usage_error(c, "%s: FILE is required", what);
    return 0;
}

/* Opens dir's ledger read-only and verifies it deep: 0 ok, 1 not, 3 I/O. */
static int verify_dir(struct cli *c, const char *dir,
                      struct ledger_verify_result *res, char *id, size_t idn)
{
    struct ledger *l = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    int rc = ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err);
    if (!rc) {
        snprintf(id, idn, "%s", ledger_id(l));
        rc = ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, res, &err);
        ledger_close(l);
    }
    if (rc) {
        cli_fail(c, &err);
        return 3;
    }
    return res->ok ? 0 : 1;
}

static int copy_file(const char *from, const char *to, struct fo_err *err)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return fo_err_set(err, errno == ENOENT ? FO_E_NOT_FOUND : FO_E_IO,
                          "%s: %s", from, strerror(errno));
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        close(in);
        return fo_err_set(err, FO_E_IO, "%s: %s", to, strerror(errno));
    }
    char buf[65536];
    ssize_t n;
    int rc = FO_OK;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        for (ssize_t off = 0; off < n && !rc;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w <= 0)
                rc = fo_err_set(err, FO_E_IO, "%s: %s", to, strerror(errno));
            else
                off += w;
        }
    if (!rc && n < 0)
        rc = fo_err_set(err, FO_E_IO, "%s: %s", from, strerror(errno));
    if (!rc && fsync(out) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: fsync: %s", to, strerror(errno));
    close(in);
    close(out);
    return rc;
}

int cli_ledger_backup(struct cli *c, int argc, char **argv)
{
    const char *file = NULL;
    int ex = parse(c, "ledger backup", backup_usage, argc, argv, &file, NULL);
    if (ex)
        return ex < 0 ? 0 : ex;
    struct ledger *l = NULL;
    ex = cli_open(c, 0, &l); /* SQLite writes the copy through this handle */
    if (ex)
        return ex;
    struct fo_err err;
    fo_err_clear(&err);
    int64_t count = 0;
    int rc = ledger_count(l, &count, &err);
    if (!rc)
        rc = ledger_backup(l, file, &err);
    ledger_close(l);
    if (rc)
        return cli_fail(c, &err);
    /* the copy, checked as a ledger of its own */
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.check-%ld", file, (long)getpid());
    char db[4200], id[64] = "";
    snprintf(db, sizeof(db), "%s/ledger.db", tmp);
    struct ledger_verify_result res = {0};
    if (mkdir(tmp, 0700) != 0 || link(file, db) != 0) {
        fo_err_set(&err, FO_E_IO, "%s: cannot check the copy: %s", tmp,
                   strerror(errno));
        rmdir(tmp);
        return cli_fail(c, &err);
    }
    ex = verify_dir(c, tmp, &res, id, sizeof(id));
    unlink(db);
    rmdir(tmp);
    if (ex == 1) {
        fprintf(stderr,
                "forum: %s: the copy does not verify (%s at seq "
                "%lld)\n",
                file, res.reason ? res.reason : "?",
                (long long)res.first_bad_seq);
        return 1;
    }
    if (ex)
        return ex;
    if (c->json)
        printf("{\"file\":\"%s\",\"entries\":%lld,\"ledger_id\":\"%s\","
               "\"verified\":true}\n",
               file, (long long)res.entries, id);
    else
        printf("%s: %lld entries (ledger %s), verified\n", file,
               (long long)res.entries, id);
    return 0;
}

int cli_ledger_restore(struct cli *c, int argc, char **argv)
{
    const char *file = NULL;
    int replace = 0;
    int ex =
        parse(c, "ledger restore", restore_usage, argc, argv, &file, &replace);
    if (ex)
        return ex < 0 ? 0 : ex;
    struct fo_err err;
    fo_err_clear(&err);
    long pid = 0;
    if (daemon_running(c->ledger_dir, &pid) == 1) {
        fo_err_set(&err, FO_E_USAGE,
                   "a forum daemon (pid %ld) is serving %s: stop it first "
                   "(forum serve stop)",
                   pid, c->ledger_dir);
        return cli_fail(c, &err);
    }
    char path[4096], wal[4200], shm[4200];
    snprintf(path, sizeof(path), "%s/ledger.db", c->ledger_dir);
    snprintf(wal, sizeof(wal), "%s-wal", path);
    snprintf(shm, sizeof(shm), "%s-shm", path);
    struct stat st;
    int exists = stat(path, &st) == 0;
    if (exists && !replace) {
        fo_err_set(&err, FO_E_USAGE,
                   "%s already holds a ledger: add --replace to replace it "
                   "with %s",
                   c->ledger_dir, file);
        return cli_fail(c, &err);
    }
    if (mkdir(c->ledger_dir, 0700) != 0 && errno != EEXIST) {
        fo_err_set(&err, FO_E_IO, "%s: %s", c->ledger_dir, strerror(errno));
        return cli_fail(c, &err);
    }
    /* the copy is checked where it will live (same file system) */
    char tmp[4096], db[4200], id[64] = "";
    snprintf(tmp, sizeof(tmp), "%s/.restore-%ld", c->ledger_dir,
             (long)getpid());
    snprintf(db, sizeof(db), "%s/ledger.db", tmp);
    if (mkdir(tmp, 0700) != 0) {
        fo_err_set(&err, FO_E_IO, "%s: %s", tmp, strerror(errno));
        return cli_fail(c, &err);
    }
    int rc = copy_file(file, db, &err);
    if (rc) {
        rmdir(tmp);
        return cli_fail(c, &err);
    }
    struct ledger_verify_result res = {0};
    ex = verify_dir(c, tmp, &res, id, sizeof(id));
    if (ex) {
        if (ex == 1)
            fprintf(stderr,
                    "forum: %s does not verify (%s at seq %lld): nothing "
                    "was replaced\n",
                    file, res.reason ? res.reason : "?",
                    (long long)res.first_bad_seq);
        char tw[4300];
        snprintf(tw, sizeof(tw), "%s-wal", db);
        unlink(tw);
        snprintf(tw, sizeof(tw), "%s-shm", db);
        unlink(tw);
        unlink(db);
        rmdir(tmp);
        return ex;
    }
    /* the old database's WAL must not be replayed onto the new one */
    unlink(wal);
    unlink(shm);
    if (rename(db, path) != 0) {
        fo_err_set(&err, FO_E_IO, "%s: %s", path, strerror(errno));
        unlink(db);
        rmdir(tmp);
        return cli_fail(c, &err);
    }
    rmdir(tmp);
    int dfd = open(c->ledger_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    if (c->json)
        printf("{\"restored\":\"%s\",\"entries\":%lld,\"ledger_id\":\"%s\","
               "\"replaced\":%s}\n",
               file, (long long)res.entries, id, exists ? "true" : "false");
    else
        printf("%s: restored %lld entries (ledger %s), verified%s\n",
               c->ledger_dir, (long long)res.entries, id,
               exists ? "; the previous ledger was replaced" : "");
    return 0;
}

/* tu_pg: a throwaway PostgreSQL server for tests (see tu_pg.h). */
#include "tests/tu_pg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>

#define TU_PG_PREFIX "/tmp/forum-test-pg-"

static int is_exec(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, X_OK) == 0;
}

int tu_pg_find(char *bin, size_t cap, char *why, size_t wcap)
{
    const char *env = getenv("FORUM_PG_BIN");
    if (env && *env) {
        if (is_exec(env, "initdb") && is_exec(env, "pg_ctl")) {
            snprintf(bin, cap, "%s", env);
            return 0;
        }
        snprintf(why, wcap, "FORUM_PG_BIN=%s holds no initdb and pg_ctl", env);
        return -1;
    }
    DIR *d = opendir("/usr/lib/postgresql");
    long best = -1;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char *end = NULL;
            long v = strtol(e->d_name, &end, 10);
            char cand[300];
            snprintf(cand, sizeof(cand), "/usr/lib/postgresql/%s/bin",
                     e->d_name);
            if (end != e->d_name && !*end && v > best &&
                is_exec(cand, "initdb") && is_exec(cand, "pg_ctl")) {
                best = v;
                snprintf(bin, cap, "%s", cand);
            }
        }
        closedir(d);
    }
    if (best >= 0)
        return 0;
    snprintf(why, wcap,
             "no PostgreSQL server binaries (initdb, pg_ctl) in "
             "/usr/lib/postgresql/<N>/bin or $FORUM_PG_BIN: install the "
             "postgresql package (scripts/install-deps.sh)");
    return -1;
}

/* Runs argv as the server's user, its output appended to DIR/ctl.log; the
 * exit status (or -1). */
static int run_as(const struct tu_pg *pg, const char *const argv[])
{
    char log[300];
    snprintf(log, sizeof(log), "%s/ctl.log", pg->dir);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        int nul = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (nul >= 0)
            dup2(nul, 0);
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 ||
                               setgid(pg->gid) != 0 || setuid(pg->uid) != 0))
            _exit(126);
        /* libpq's variables would point pg_ctl's own checks elsewhere */
        unsetenv("PGHOST");
        unsetenv("PGPORT");
        unsetenv("PGDATA");
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The last lines of DIR/name, appended to why. */
static void add_tail(const struct tu_pg *pg, const char *name, char *why,
                     size_t wcap)
{
    char p[300];
    snprintf(p, sizeof(p), "%s/%s", pg->dir, name);
    FILE *f = fopen(p, "rb");
    if (!f)
        return;
    char buf[600];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0,
          SEEK_SET);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    size_t len = strlen(why);
    snprintf(why + len, wcap - len, "; %s ends: %s", name, buf);
}

static int ctl_start(struct tu_pg *pg, char *why, size_t wcap)
{
    char pgctl[300], data[300], log[300], opts[400];
    snprintf(pgctl, sizeof(pgctl), "%s/pg_ctl", pg->bin);
    snprintf(data, sizeof(data), "%s/data", pg->dir);
    snprintf(log, sizeof(log), "%s/pg.log", pg->dir);
    snprintf(opts, sizeof(opts),
             "-c listen_addresses='' -k %s -p %d -c max_connections=40",
             pg->dir, pg->port);
    const char *const argv[] = {pgctl, "-D",  data, "-l", log,     "-w",
                                "-t",  "120", "-o", opts, "start", NULL};
    if (run_as(pg, argv) != 0) {
        snprintf(why, wcap, "pg_ctl start failed");
        add_tail(pg, "ctl.log", why, wcap);
        add_tail(pg, "pg.log", why, wcap);
        return -1;
    }
    return 0;
}

int tu_pg_start(struct tu_pg *pg, char *why, size_t wcap)
{
    memset(pg, 0, sizeof(*pg));
    if (tu_pg_find(pg->bin, sizeof(pg->bin), why, wcap) != 0)
        return 1;
    pg->port = 5432;
    pg->uid = getuid();
    pg->gid = getgid();
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("nobody");
        if (!pw) {
            snprintf(why, wcap,
                     "running as root, and there is no user nobody to run "
                     "PostgreSQL as (it refuses root)");
            return -1;
        }
        pg->uid = pw->pw_uid;
        pg->gid = pw->pw_gid;
    }
    snprintf(pg->dir, sizeof(pg->dir), "%sXXXXXX", TU_PG_PREFIX);
    if (!mkdtemp(pg->dir)) {
        snprintf(why, wcap, "mkdtemp: %s", strerror(errno));
        return -1;
    }
    if (geteuid() == 0 && chown(pg->dir, pg->uid, pg->gid) != 0) {
        snprintf(why, wcap, "chown %s: %s", pg->dir, strerror(errno));
        return -1;
    }
    char initdb[300], data[300];
    snprintf(initdb, sizeof(initdb), "%s/initdb", pg->bin);
    snprintf(data, sizeof(data), "%s/data", pg->dir);
    const char *const argv[] = {initdb,  "-D",          data,        "-U",
                                "forum", "-A",          "trust",     "-E",
                                "UTF8",  "--no-locale", "--no-sync", NULL};
    if (run_as(pg, argv) != 0) {
        snprintf(why, wcap, "initdb failed");
        add_tail(pg, "ctl.log", why, wcap);
        return -1;
    }
    return ctl_start(pg, why, wcap);
}

int tu_pg_stop(struct tu_pg *pg)
{
    char pgctl[300], data[300];
    snprintf(pgctl, sizeof(pgctl), "%s/pg_ctl", pg->bin);
    snprintf(data, sizeof(data), "%s/data", pg->dir);
    const char *const argv[] = {pgctl,       "-D", data,   "-m",
                                "immediate", "-w", "stop", NULL};
    return run_as(pg, argv) == 0 ? 0 : -1;
}

int tu_pg_restart(struct tu_pg *pg, char *why, size_t wcap)
{
    tu_pg_stop(pg);
    return ctl_start(pg, why, wcap);
}

void tu_pg_destroy(struct tu_pg *pg)
{
    if (!pg->dir[0])
        return;
    tu_pg_stop(pg);
    if (strncmp(pg->dir, TU_PG_PREFIX, strlen(TU_PG_PREFIX)) == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            execlp("rm", "rm", "-rf", pg->dir, (char *)NULL);
            _exit(127);
        }
        if (pid > 0)
            waitpid(pid, NULL, 0);
    }
    pg->dir[0] = '\0';
}

void tu_pg_conninfo(const struct tu_pg *pg, const char *db, char *out,
                    size_t cap)
{
    snprintf(out, cap, "host=%s port=%d dbname=%s user=forum", pg->dir,
             pg->port, db);
}

static PGconn *connect_db(const struct tu_pg *pg, const char *db, char *why,
                          size_t wcap)
{
    char ci[512];
    tu_pg_conninfo(pg, db, ci, sizeof(ci));
    PGconn *c = PQconnectdb(ci);
    if (!c || PQstatus(c) != CONNECTION_OK) {
        if (why)
            snprintf(why, wcap, "connect %s: %s", ci,
                     c ? PQerrorMessage(c) : "out of memory");
        PQfinish(c);
        return NULL;
    }
    return c;
}

static void quiet(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

int tu_pg_exec(const struct tu_pg *pg, const char *db, const char *sql,
               char *why, size_t wcap)
{
    PGconn *c = connect_db(pg, db, why, wcap);
    if (!c)
        return -1;
    PQsetNoticeProcessor(c, quiet, NULL);
    PGresult *r = PQexec(c, sql);
    int st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : -1;
    if (rc && why)
        snprintf(why, wcap, "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    return rc;
}

int tu_pg_query(const struct tu_pg *pg, const char *db, const char *sql,
                char *out, size_t cap)
{
    PGconn *c = connect_db(pg, db, NULL, 0);
    if (!c)
        return -1;
    PQsetNoticeProcessor(c, quiet, NULL);
    PGresult *r = PQexec(c, sql);
    int rc = r && PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : -1;
    out[0] = '\0';
    if (!rc && PQntuples(r) > 0 && PQnfields(r) > 0)
        snprintf(out, cap, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    PQfinish(c);
    return rc;
}

int tu_pg_createdb(const struct tu_pg *pg, char *name, size_t cap, char *why,
                   size_t wcap)
{
    static unsigned n;
    snprintf(name, cap, "t_%ld_%u", (long)getpid(), n++);
    char sql[200];
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", name);
    return tu_pg_exec(pg, "postgres", sql, why, wcap);
}

void tu_pg_share(const struct tu_pg *pg, int started, const char *why)
{
    unsetenv("FORUM_TEST_PG");
    unsetenv("FORUM_TEST_PG_SKIP");
    unsetenv("FORUM_TEST_PG_ERROR");
    if (started == 0) {
        char v[700];
        snprintf(v, sizeof(v), "%d:%d:%d:%s|%s", (int)pg->uid, (int)pg->gid,
                 pg->port, pg->bin, pg->dir);
        setenv("FORUM_TEST_PG", v, 1);
    } else {
        setenv(started > 0 ? "FORUM_TEST_PG_SKIP" : "FORUM_TEST_PG_ERROR",
               why && *why ? why : "PostgreSQL did not start", 1);
    }
}

int tu_pg_shared(struct tu_pg *pg, int *skip, char *why, size_t wcap)
{
    memset(pg, 0, sizeof(*pg));
    *skip = 0;
    const char *v = getenv("FORUM_TEST_PG");
    if (!v) {
        const char *s = getenv("FORUM_TEST_PG_SKIP");
        const char *e = getenv("FORUM_TEST_PG_ERROR");
        *skip = s != NULL;
        snprintf(why, wcap, "%s",
                 s   ? s
                 : e ? e
                     : "no PostgreSQL server was started");
        return s ? 0 : -1;
    }
    int uid, gid, port, used = 0;
    if (sscanf(v, "%d:%d:%d:%n", &uid, &gid, &port, &used) != 3 || !used) {
        snprintf(why, wcap, "FORUM_TEST_PG=%s: malformed", v);
        return -1;
    }
    const char *bar = strchr(v + used, '|');
    if (!bar) {
        snprintf(why, wcap, "FORUM_TEST_PG=%s: malformed", v);
        return -1;
    }
    pg->uid = (uid_t)uid;
    pg->gid = (gid_t)gid;
    pg->port = port;
    snprintf(pg->bin, sizeof(pg->bin), "%.*s", (int)(bar - (v + used)),
             v + used);
    snprintf(pg->dir, sizeof(pg->dir), "%s", bar + 1);
    return 1;
}

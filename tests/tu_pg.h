/* tu_pg: a throwaway PostgreSQL server for tests. A fresh cluster
 * (initdb) in a temp dir, reached only through a Unix socket in that dir
 * (listen_addresses=''), trust auth for the superuser "forum". As root it
 * runs as "nobody" (initdb and postgres refuse root), the dir owned by it.
 *
 * Start one in a Criterion PRE_ALL hook and hand it to the test
 * processes with tu_pg_share / tu_pg_shared, or start one per test. */
#ifndef TU_PG_H
#define TU_PG_H

#include <stddef.h>
#include <sys/types.h>

struct tu_pg {
    char dir[256]; /* the temp dir: data/, the socket, pg.log, ctl.log */
    char bin[256]; /* the directory of initdb, pg_ctl and postgres */
    uid_t uid;     /* who runs the server */
    gid_t gid;
    int port; /* names the socket: DIR/.s.PGSQL.<port> */
};

/* Finds the server binaries: $FORUM_PG_BIN, else the newest
 * /usr/lib/postgresql/<N>/bin holding initdb and pg_ctl. 0 when found
 * (into bin), -1 when not (why says what was looked for). */
int tu_pg_find(char *bin, size_t cap, char *why, size_t wcap);

/* Makes and starts a fresh cluster. 0 when running; 1 when the binaries
 * are absent (skip, why says so); -1 when something failed (why names it,
 * with the log's tail). */
int tu_pg_start(struct tu_pg *pg, char *why, size_t wcap);

/* Stops the server now (pg_ctl stop -m immediate: like a crash) and
 * starts it again on the same data; 0 when running again. */
int tu_pg_stop(struct tu_pg *pg);
int tu_pg_restart(struct tu_pg *pg, char *why, size_t wcap);

/* Stops the server (immediate) and removes its dir. */
void tu_pg_destroy(struct tu_pg *pg);

/* The libpq conninfo of database db (no password: trust auth). */
void tu_pg_conninfo(const struct tu_pg *pg, const char *db, char *out,
                    size_t cap);

/* Runs sql in database db as "forum". 0 when it did; -1 with the server's
 * message in why. */
int tu_pg_exec(const struct tu_pg *pg, const char *db, const char *sql,
               char *why, size_t wcap);

/* The first column of the first row of sql in db, into out ("" when no
 * row). 0 when it ran. */
int tu_pg_query(const struct tu_pg *pg, const char *db, const char *sql,
                char *out, size_t cap);

/* Creates a new, empty database with a name no other call gives (into
 * name). 0 when made. */
int tu_pg_createdb(const struct tu_pg *pg, char *name, size_t cap, char *why,
                   size_t wcap);

/* Hands a running server to child processes (the environment variable
 * FORUM_TEST_PG), or why it is not running (FORUM_TEST_PG_SKIP when the
 * binaries are absent, FORUM_TEST_PG_ERROR when starting failed). */
void tu_pg_share(const struct tu_pg *pg, int started, const char *why);
/* In a test: the shared server (1), or 0 and *skip set when the
 * binaries were absent (the reason in why), or -1 when it failed to start
 * (the reason in why). */
int tu_pg_shared(struct tu_pg *pg, int *skip, char *why, size_t wcap);

#endif

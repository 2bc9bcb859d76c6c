/* store_pg: the PostgreSQL implementation of the ledger's storage
 * interface, over libpq. The same rows as store_sqlite.c, in schema
 * "forum" of the database DIR/store.json names, so the same entries give
 * the same hashes, tree and proofs.
 *
 * Writers serialise on a transaction-scoped advisory lock taken at
 * begin_write (so several processes may append to one chain); commit
 * returns once the server says the commit is durable (synchronous_commit
 * is set on for every session). Every statement is prepared once per
 * connection and sent with binary parameters and results.
 *
 * Not the same as SQLite: backup (no file copy: pg_dump or `forum ledger
 * export`) gives FO_E_INVALID; wal_truncate runs VACUUM on the bodies
 * table (dead rows leave the table's pages; the server's WAL, archives
 * and replicas keep them until recycled); check asks the server for a
 * round trip and that the database still holds the same ledger. A lost
 * connection fails the operation under way inside a transaction (FO_E_IO;
 * the server rolls the transaction back, so nothing is half-written);
 * begin_*, check and the reads outside a transaction find it lost, try
 * PQreset once and go on. */
#include "ledger/store.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "ledger/fo_buf.h"
#include "ledger/store_pg_int.h"

/* The store's own format, in forum.meta "store_format". */
#define PG_STORE_FORMAT 1
/* Rows per round trip when streaming (bodies: fewer, they may be 1 MiB). */
#define CHUNK_ROWS 1024
#define CHUNK_BODY_ROWS 64

/* type OIDs of the parameters (pg_type.h; stable across versions) */
#define OID_BYTEA 17
#define OID_INT8 20
#define OID_TEXT 25

enum stmt_id {
    ST_META_GET,
    ST_META_SET,
    ST_HEAD,
    ST_GET_ENTRY,
    ST_GET_NODE,
    ST_GET_BODY,
    ST_SCAN,
    ST_SCAN_BODIES,
    ST_SCAN_NODES,
    ST_FIND_PAYLOAD,
    ST_DELETE_BODY,
    ST_COUNT_BODIES,
    ST_GROUP_KIND,
    ST_GROUP_ACTOR,
    ST_PUT_CHECKPOINT,
    ST_GET_CHECKPOINT,
    ST_SCAN_CHECKPOINTS,
    ST_DESCENDANTS,
    ST_REQUESTS,
    ST_GATES,
    ST_SESSIONS,
    ST_TURNS,
    ST_GATEWAY,
    ST_PUT_COSIG,
    ST_SCAN_COSIG,
    ST_LEASE_PUT,
    ST_LEASE_HELD,
    ST_LEASE_CLAIM,
    ST_LEASE_RENEW,
    ST_LEASE_DROP,
    ST_LEASE_EXPIRE,
    ST_LEASE_GET,
    ST_LEASE_EXPIRED,
    ST__COUNT
};

#define ENTRY_COLS "seq, ts, actor, kind, parent, payload, prev, hash"
/* parameter $n (int8 milliseconds) as an interval */
#define LEASE_TTL(n) "($" #n "::float8 / 1000) * interval '1 second'"

struct stmt_def {
    const char *sql;
    const char *types; /* one letter a parameter: i int8, b bytea, t text */
};

_Static_assert(ST__COUNT <= STORE_PG_STMTS, "too many statements");

static const struct stmt_def stmts[ST__COUNT] = {
    [ST_META_GET] = {"SELECT value FROM forum.meta WHERE key = $1", "t"},
    [ST_META_SET] = {"INSERT INTO forum.meta(key, value) VALUES ($1, $2)"
                     " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                     "tt"},
    [ST_HEAD] = {"SELECT " ENTRY_COLS
                 " FROM forum.entries ORDER BY seq DESC LIMIT 1",
                 ""},
    [ST_GET_ENTRY] = {"SELECT " ENTRY_COLS
                      ", EXISTS(SELECT 1 FROM forum.bodies b WHERE"
                      " b.seq = e.seq) FROM forum.entries e WHERE seq = $1",
                      "i"},
    [ST_GET_NODE] = {"SELECT hash FROM forum.tree WHERE pos = $1", "i"},
    [ST_GET_BODY] = {"SELECT body FROM forum.bodies WHERE seq = $1", "i"},
    [ST_SCAN] = {"SELECT " ENTRY_COLS " FROM forum.entries WHERE seq >= $1"
                 " ORDER BY seq LIMIT $2",
                 "ii"},
    [ST_SCAN_BODIES] = {"SELECT e.seq, e.ts, e.actor, e.kind, e.parent,"
                        " e.payload, e.prev, e.hash, b.body FROM"
                        " forum.entries e LEFT JOIN forum.bodies b ON"
                        " b.seq = e.seq WHERE e.seq >= $1 ORDER BY e.seq"
                        " LIMIT $2",
                        "ii"},
    [ST_SCAN_NODES] = {"SELECT pos, hash FROM forum.tree WHERE pos >= $1"
                       " ORDER BY pos LIMIT $2",
                       "ii"},
    [ST_FIND_PAYLOAD] = {"SELECT seq FROM forum.entries WHERE payload = $1"
                         " ORDER BY seq",
                         "b"},
    [ST_DELETE_BODY] = {"DELETE FROM forum.bodies WHERE seq = $1", "i"},
    [ST_COUNT_BODIES] = {"SELECT count(*) FROM forum.bodies", ""},
    /* byte order, as SQLite's BINARY collation */
    [ST_GROUP_KIND] = {"SELECT kind, count(*) FROM forum.entries GROUP BY"
                       " kind ORDER BY kind COLLATE \"C\"",
                       ""},
    [ST_GROUP_ACTOR] = {"SELECT actor, count(*) FROM forum.entries GROUP BY"
                        " actor ORDER BY actor COLLATE \"C\"",
                        ""},
    [ST_PUT_CHECKPOINT] = {"INSERT INTO forum.checkpoints(size, ts, root,"
                           " note) VALUES ($1, $2, $3, $4)"
                           " ON CONFLICT (size) DO NOTHING",
                           "iibt"},
    [ST_GET_CHECKPOINT] = {"SELECT size, root, note FROM forum.checkpoints"
                           " WHERE size <= $1 ORDER BY size DESC LIMIT 1",
                           "i"},
    [ST_SCAN_CHECKPOINTS] = {"SELECT size, root, note FROM forum.checkpoints"
                             " ORDER BY size",
                             ""},
    /* every entry whose parent chain reaches $1, through entries_parent;
     * LIMIT NULL is no limit */
    [ST_DESCENDANTS] = {"WITH RECURSIVE d(seq) AS (SELECT $1::bigint UNION ALL"
                        " SELECT e.seq FROM forum.entries e JOIN d ON"
                        " e.parent = d.seq) SELECT " ENTRY_COLS
                        " FROM forum.entries WHERE seq IN (SELECT seq FROM d)"
                        " ORDER BY seq LIMIT $2",
                        "ii"},
    [ST_REQUESTS] = {"SELECT " ENTRY_COLS " FROM forum.entries WHERE parent"
                     " IS NULL AND kind = 'request' AND seq >= $1"
                     " ORDER BY seq LIMIT $2",
                     "ii"},
    [ST_GATES] = {"SELECT " ENTRY_COLS " FROM forum.entries WHERE"
                  " kind = 'gate_requested' AND seq >= $1 ORDER BY seq"
                  " LIMIT $2",
                  "ii"},
    [ST_SESSIONS] = {"SELECT " ENTRY_COLS " FROM forum.entries WHERE"
                     " kind = 'session_started' AND seq >= $1 ORDER BY seq"
                     " LIMIT $2",
                     "ii"},
    [ST_TURNS] = {"SELECT " ENTRY_COLS " FROM forum.entries WHERE"
                  " kind = 'turn' AND seq >= $1 ORDER BY seq LIMIT $2",
                  "ii"},
    [ST_GATEWAY] = {"SELECT " ENTRY_COLS " FROM forum.entries WHERE"
                    " kind = 'gateway_call' AND seq >= $1 ORDER BY seq"
                    " LIMIT $2",
                    "ii"},
    [ST_PUT_COSIG] = {"INSERT INTO forum.cosignatures(size, key, ts, line)"
                      " VALUES ($1, $2, $3, $4) ON CONFLICT (size, key) DO"
                      " UPDATE SET ts = EXCLUDED.ts, line = EXCLUDED.line",
                      "itit"},
    [ST_SCAN_COSIG] = {"SELECT key, ts, line FROM forum.cosignatures WHERE"
                       " size = $1 ORDER BY key COLLATE \"C\"",
                       "i"},
    /* run leases: expiry on the server's clock, so daemons on hosts whose
     * clocks differ agree on it */
    [ST_LEASE_PUT] =
        {"INSERT INTO forum.run_leases(run, owner, expires)"
         " VALUES ($1, $2, clock_timestamp() + " LEASE_TTL(
             3) ") ON CONFLICT (run) DO UPDATE SET"
                " owner = EXCLUDED.owner, expires = EXCLUDED.expires",
         "iti"},
    [ST_LEASE_HELD] = {"SELECT 1 FROM forum.run_leases WHERE run = $1"
                       " AND owner = $2",
                       "it"},
    [ST_LEASE_CLAIM] =
        {"INSERT INTO forum.run_leases(run, owner, expires)"
         " VALUES ($1, $2, clock_timestamp() + " LEASE_TTL(
             3) ") ON CONFLICT (run) DO UPDATE SET"
                " owner = EXCLUDED.owner, expires = EXCLUDED.expires"
                " WHERE forum.run_leases.expires < clock_timestamp()"
                " RETURNING run",
         "iti"},
    [ST_LEASE_RENEW] = {"UPDATE forum.run_leases SET expires ="
                        " clock_timestamp() + " LEASE_TTL(
                            3) " WHERE owner = $1 AND run ="
                               " ANY(string_to_array($2, ',')::bigint[])"
                               " RETURNING run",
                        "tti"},
    [ST_LEASE_DROP] = {"DELETE FROM forum.run_leases WHERE run = $1"
                       " AND owner = $2",
                       "it"},
    [ST_LEASE_EXPIRE] = {"UPDATE forum.run_leases SET expires ="
                         " clock_timestamp() - interval '1 millisecond'"
                         " WHERE run = $1 AND owner = $2",
                         "it"},
    [ST_LEASE_GET] = {"SELECT owner, expires > clock_timestamp() FROM"
                      " forum.run_leases WHERE run = $1",
                      "i"},
    [ST_LEASE_EXPIRED] = {"SELECT run FROM forum.run_leases WHERE"
                          " expires < clock_timestamp() ORDER BY run"
                          " LIMIT $1",
                          "i"},
};

/* The run leases (several daemons on one ledger), part of the schema since
 * they came; made on the first read-write open of an older ledger. */
#define LEASES_SQL                                                             \
    "CREATE TABLE IF NOT EXISTS forum.run_leases(run bigint PRIMARY KEY,"      \
    " owner text NOT NULL, expires timestamptz NOT NULL);"

/* The gateway's calls, by seq (the gateway sessions of GET /runs); made on
 * the first read-write open of an older ledger, with the leases. */
#define GATEWAY_INDEX_SQL                                                      \
    "CREATE INDEX IF NOT EXISTS entries_gateway ON forum.entries(seq)"         \
    " WHERE kind = 'gateway_call';"

/* The whole schema, made in one transaction under the writers' lock. */
static const char schema_sql[] =
    "CREATE SCHEMA IF NOT EXISTS forum;"
    "CREATE TABLE forum.meta(key text PRIMARY KEY, value text NOT NULL);"
    "CREATE TABLE forum.entries(seq bigint PRIMARY KEY, ts bigint NOT NULL,"
    " actor text NOT NULL, kind text NOT NULL, parent bigint,"
    " payload bytea NOT NULL, prev bytea NOT NULL, hash bytea NOT NULL);"
    "CREATE TABLE forum.bodies(seq bigint PRIMARY KEY, body bytea NOT NULL);"
    "CREATE TABLE forum.tree(pos bigint PRIMARY KEY, hash bytea NOT NULL);"
    "CREATE TABLE forum.checkpoints(size bigint PRIMARY KEY,"
    " ts bigint NOT NULL, root bytea NOT NULL, note text NOT NULL);"
    "CREATE TABLE forum.cosignatures(size bigint NOT NULL, key text NOT NULL,"
    " ts bigint NOT NULL, line text NOT NULL, PRIMARY KEY(size, key));"
    "CREATE INDEX entries_parent ON forum.entries(parent)"
    " WHERE parent IS NOT NULL;"
    "CREATE INDEX entries_requests ON forum.entries(seq)"
    " WHERE parent IS NULL AND kind = 'request';"
    "CREATE INDEX entries_gates ON forum.entries(seq)"
    " WHERE kind = 'gate_requested';"
    "CREATE INDEX entries_sessions ON forum.entries(seq)"
    " WHERE kind = 'session_started';"
    "CREATE INDEX entries_turns ON forum.entries(seq) WHERE kind = "
    "'turn';" GATEWAY_INDEX_SQL
    "CREATE INDEX entries_payload ON forum.entries(payload);" LEASES_SQL;

/* ---- parameters and results ------------------------------------------- */

#define MAX_PARAMS 8

struct params {
    int n;
    const char *val[MAX_PARAMS];
    int len[MAX_PARAMS];
    int fmt[MAX_PARAMS];
    unsigned char i64[MAX_PARAMS][8];
};

static void par_i64(struct params *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 0; i < 8; i++)
        p->i64[p->n][i] = (unsigned char)(u >> (56 - 8 * i));
    p->val[p->n] = (const char *)p->i64[p->n];
    p->len[p->n] = 8;
    p->fmt[p->n] = 1;
    p->n++;
}

static void par_bytes(struct params *p, const void *b, size_t len)
{
    p->val[p->n] = len ? (const char *)b : "";
    p->len[p->n] = (int)len;
    p->fmt[p->n] = 1;
    p->n++;
}

static void par_null(struct params *p)
{
    p->val[p->n] = NULL;
    p->len[p->n] = 0;
    p->fmt[p->n] = 1;
    p->n++;
}

/* Column c of row r as an int8 (binary); *bad set when it is not one. */
static int64_t col_i64(const PGresult *res, int r, int c, int *bad)
{
    if (PQgetisnull(res, r, c) || PQgetlength(res, r, c) != 8) {
        *bad = 1;
        return 0;
    }
    const unsigned char *p = (const unsigned char *)PQgetvalue(res, r, c);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* Column c of row r as a malloc'd copy, NUL-terminated (its length in
 * *len, may be NULL); NULL when out of memory. */
static char *col_dup(const PGresult *res, int r, int c, size_t *len)
{
    size_t n = (size_t)PQgetlength(res, r, c);
    char *v = malloc(n + 1);
    if (!v)
        return NULL;
    if (n)
        memcpy(v, PQgetvalue(res, r, c), n);
    v[n] = '\0';
    if (len)
        *len = n;
    return v;
}

/* Column c as 32 bytes into out; -1 when null or another size. */
static int col_hash(const PGresult *res, int r, int c, uint8_t out[32])
{
    if (PQgetisnull(res, r, c) || PQgetlength(res, r, c) != 32)
        return -1;
    memcpy(out, PQgetvalue(res, r, c), 32);
    return 0;
}

/* ---- errors ------------------------------------------------------------ */

static int map_state(const char *st)
{
    if (!st || strlen(st) != 5)
        return FO_E_IO;
    if (!strncmp(st, "08", 2) || !strncmp(st, "57P", 3))
        return FO_E_IO; /* connection exception, admin shutdown */
    if (!strcmp(st, "55P03") || !strcmp(st, "40001") || !strcmp(st, "40P01"))
        return FO_E_BUSY; /* lock_timeout, serialization, deadlock */
    if (!strncmp(st, "23", 2))
        return FO_E_CORRUPT; /* a constraint, as SQLite's */
    if (!strncmp(st, "53", 2))
        return FO_E_IO; /* disk full, out of memory, too many connections */
    if (!strncmp(st, "XX", 2))
        return FO_E_CORRUPT; /* internal error: data corrupted, index */
    if (!strcmp(st, "57014"))
        return FO_E_TIMEOUT; /* canceled (statement_timeout) */
    return FO_E_IO;
}

/* The server's message without its trailing newline, at most 200 bytes. */
static void pg_message(const char *m, char *out, size_t cap)
{
    snprintf(out, cap, "%.200s", m && *m ? m : "no message");
    /* libpq's messages run over lines: one line, single spaces */
    size_t w = 0;
    for (size_t r = 0; out[r]; r++) {
        char c = out[r] == '\n' || out[r] == '\t' ? ' ' : out[r];
        if (c == ' ' && (w == 0 || out[w - 1] == ' '))
            continue;
        out[w++] = c;
    }
    while (w > 0 && out[w - 1] == ' ')
        w--;
    out[w] = '\0';
}

/* Sets err from a failed result (NULL: no result at all) and returns the
 * code. A lost connection marks the store broken. */
static int pg_fail(struct store *s, const PGresult *res, const char *what,
                   struct fo_err *err)
{
    char msg[224];
    const char *primary =
        res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    pg_message(primary ? primary : PQerrorMessage(s->conn), msg, sizeof(msg));
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    /* libpq's own failures (no SQLSTATE: the socket closed, a send
     * failed) and the server's connection and shutdown errors leave the
     * connection unusable, even when PQstatus has not noticed yet */
    if (PQstatus(s->conn) != CONNECTION_OK || !state ||
        !strncmp(state, "08", 2) || !strncmp(state, "57P0", 4)) {
        s->broken = 1;
        return fo_err_set(err, FO_E_IO,
                          "PostgreSQL %s: %s: connection lost (%s); the "
                          "operation was not done",
                          s->where, what, msg);
    }
    return fo_err_set(err, map_state(state),
                      "PostgreSQL %s: %s: %s (SQLSTATE %s)", s->where, what,
                      msg, state);
}

/* ---- the connection ---------------------------------------------------- */

static void ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* Runs sql (no parameters, text results); FO_OK when it did. */
static int exec(struct store *s, const char *sql, const char *what,
                struct fo_err *err)
{
    PGresult *res = PQexec(s->conn, sql);
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    int rc = FO_OK;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        rc = pg_fail(s, res, what, err);
    PQclear(res);
    return rc;
}

/* Per-session settings, after every (re)connect. */
static int setup_session(struct store *s, struct fo_err *err)
{
    memset(s->prepared, 0, sizeof(s->prepared));
    memset(s->sprepared, 0, sizeof(s->sprepared));
    PQsetNoticeProcessor(s->conn, ignore_notice, NULL);
    if (PQsetClientEncoding(s->conn, "UTF8") != 0)
        return pg_fail(s, NULL, "client_encoding UTF8", err);
    const char *enc = PQparameterStatus(s->conn, "server_encoding");
    if (enc && strcmp(enc, "UTF8") != 0 && strcmp(enc, "SQL_ASCII") != 0)
        return fo_err_set(err, FO_E_INVALID,
                          "PostgreSQL %s: the database's encoding is %s; the "
                          "ledger needs UTF8 (CREATE DATABASE ... ENCODING "
                          "'UTF8')",
                          s->where, enc);
    char sql[256];
    /* commit waits for the server's WAL flush (and a synchronous standby
     * when one is configured); a writer waits busy_ms for the lock */
    snprintf(sql, sizeof(sql),
             "SET synchronous_commit = on; SET lock_timeout = '%dms';"
             " SET client_min_messages = warning;%s",
             s->busy_ms,
             s->readonly ? " SET default_transaction_read_only = on;" : "");
    int rc = exec(s, sql, "session setup", err);
    return rc ? rc : store_pg_stage_relisten(s, err);
}

/* Outside a transaction: reconnects once when the connection was lost. */
static int ensure_conn(struct store *s, struct fo_err *err)
{
    if (!s->broken && PQstatus(s->conn) == CONNECTION_OK)
        return FO_OK;
    if (s->in_txn)
        return fo_err_set(err, FO_E_IO,
                          "PostgreSQL %s: connection lost inside a "
                          "transaction (rolled back by the server)",
                          s->where);
    if (s->nodes) {
        PQclear(s->nodes);
        s->nodes = NULL;
    }
    PQreset(s->conn);
    if (PQstatus(s->conn) != CONNECTION_OK) {
        char msg[224];
        pg_message(PQerrorMessage(s->conn), msg, sizeof(msg));
        s->broken = 1;
        return fo_err_set(err, FO_E_IO,
                          "PostgreSQL %s: connection lost; reconnecting "
                          "failed: %s",
                          s->where, msg);
    }
    s->broken = 0;
    return setup_session(s, err);
}

/* The head read with BEGIN is good only until something else runs. */
static void drop_head(struct store *s)
{
    PQclear(s->head_pre);
    s->head_pre = NULL;
}

/* And the staged rows read with it, at the end of the transaction. */
static void drop_pre(struct store *s)
{
    drop_head(s);
    PQclear(s->take_pre);
    s->take_pre = NULL;
}

/* Runs prepared statement id with p (binary results). NULL on failure
 * (err set); the caller PQclear()s the result. */
static PGresult *run_once(struct store *s, enum stmt_id id,
                          const struct params *p, const char *what,
                          struct fo_err *err)
{
    if (!s->in_txn && ensure_conn(s, err) != FO_OK)
        return NULL;
    drop_head(s);
    if (s->in_txn && store_pg_flush(s, err) != FO_OK)
        return NULL;
    char name[16];
    snprintf(name, sizeof(name), "fo_%d", (int)id);
    if (!s->prepared[id]) {
        Oid types[MAX_PARAMS];
        int n = 0;
        for (const char *t = stmts[id].types; *t && n < MAX_PARAMS; t++)
            types[n++] = *t == 'i'   ? OID_INT8
                         : *t == 'b' ? OID_BYTEA
                                     : OID_TEXT;
        PGresult *res = PQprepare(s->conn, name, stmts[id].sql, n, types);
        if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) {
            pg_fail(s, res, what, err);
            PQclear(res);
            return NULL;
        }
        PQclear(res);
        s->prepared[id] = 1;
    }
    PGresult *res =
        PQexecPrepared(s->conn, name, p ? p->n : 0, p ? p->val : NULL,
                       p ? p->len : NULL, p ? p->fmt : NULL, 1);
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        pg_fail(s, res, what, err);
        PQclear(res);
        return NULL;
    }
    return res;
}

/* Runs statement id; outside a transaction a connection found lost (the
 * server restarted since the last statement) is reset and the statement
 * sent once more: every statement run outside one is a read. */
static PGresult *run(struct store *s, enum stmt_id id, const struct params *p,
                     const char *what, struct fo_err *err)
{
    PGresult *res = run_once(s, id, p, what, err);
    if (!res && s->broken && !s->in_txn)
        res = run_once(s, id, p, what, err);
    return res;
}

static int err_code(struct fo_err *err)
{
    return err && err->code ? err->code : FO_E_IO;
}

/* Runs a statement whose result is not read. */
static int run_cmd(struct store *s, enum stmt_id id, const struct params *p,
                   const char *what, struct fo_err *err)
{
    PGresult *res = run(s, id, p, what, err);
    if (!res)
        return err_code(err);
    PQclear(res);
    return FO_OK;
}

/* ---- conninfo ---------------------------------------------------------- */

int store_pg_check_conninfo(const char *conninfo, struct fo_err *err)
{
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &msg);
    if (!opts) {
        char m[224];
        pg_message(msg, m, sizeof(m));
        PQfreemem(msg);
        return fo_err_set(err, FO_E_INVALID, "conninfo: %s", m);
    }
    int rc = FO_OK;
    for (PQconninfoOption *o = opts; o->keyword; o++)
        if (!strcmp(o->keyword, "password") && o->val && *o->val)
            rc = fo_err_set(err, FO_E_INVALID,
                            "conninfo: holds a password; it would be stored "
                            "in the data dir: put it in PGPASSFILE "
                            "(~/.pgpass) or PGPASSWORD instead");
    PQconninfoFree(opts);
    return rc;
}

/* "host=H port=P dbname=D user=U" of a conninfo, for messages (never the
 * password); into a malloc'd string. */
static char *describe(const char *conninfo)
{
    static const char *const keys[] = {"host", "hostaddr", "port", "dbname",
                                       "user"};
    PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
    struct fo_buf b;
    fo_buf_init(&b, 1024);
    for (size_t k = 0; opts && k < sizeof(keys) / sizeof(keys[0]); k++)
        for (PQconninfoOption *o = opts; o->keyword; o++)
            if (!strcmp(o->keyword, keys[k]) && o->val && *o->val)
                fo_buf_printf(&b, "%s%s=%s", b.len ? " " : "", keys[k], o->val);
    if (opts)
        PQconninfoFree(opts);
    if (!b.len)
        fo_buf_puts(&b, "(libpq defaults: PGHOST, PGPORT, PGDATABASE)");
    size_t n;
    char *out = fo_buf_detach(&b, &n);
    fo_buf_release(&b);
    return out;
}

/* ---- open -------------------------------------------------------------- */

/* What the database holds: 0 no schema "forum" (or an empty one), 1 a
 * schema "forum" with other things in it, 2 forum.meta. */
static int probe(struct store *s, int *what, struct fo_err *err)
{
    PGresult *res = PQexec(
        s->conn, "SELECT to_regclass('forum.meta') IS NOT NULL,"
                 " (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON"
                 " n.oid = c.relnamespace WHERE n.nspname = 'forum')");
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        int rc = pg_fail(s, res, "look for the ledger", err);
        PQclear(res);
        return rc;
    }
    int meta = !strcmp(PQgetvalue(res, 0, 0), "t");
    int rels = strcmp(PQgetvalue(res, 0, 1), "0") != 0;
    PQclear(res);
    *what = meta ? 2 : rels ? 1 : 0;
    return FO_OK;
}

/* forum.meta must say this store format, or an older one. */
static int check_format(struct store *s, struct fo_err *err)
{
    PGresult *res = PQexec(s->conn, "SELECT value FROM forum.meta WHERE"
                                    " key = 'store_format'");
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
        int rc;
        if (st && (!strcmp(st, "42703") || !strcmp(st, "42P01") ||
                   !strcmp(st, "42804")))
            rc = fo_err_set(err, FO_E_FOREIGN,
                            "PostgreSQL %s: schema \"forum\" holds a table "
                            "meta that is not a forum ledger's; refused, "
                            "nothing changed",
                            s->where);
        else
            rc = pg_fail(s, res, "read the store format", err);
        PQclear(res);
        return rc;
    }
    int rc = FO_OK;
    if (PQntuples(res) != 1) {
        rc = fo_err_set(err, FO_E_FOREIGN,
                        "PostgreSQL %s: schema \"forum\" is not a forum "
                        "ledger (no store_format in forum.meta); refused, "
                        "nothing changed",
                        s->where);
    } else {
        const char *v = PQgetvalue(res, 0, 0);
        char *end = NULL;
        long f = strtol(v, &end, 10);
        if (end == v || *end || f < 1)
            rc = fo_err_set(err, FO_E_CORRUPT,
                            "PostgreSQL %s: forum.meta store_format \"%.16s\" "
                            "is not a number",
                            s->where, v);
        else if (f > PG_STORE_FORMAT)
            rc = fo_err_set(err, FO_E_TOO_NEW,
                            "PostgreSQL %s: ledger store format %ld is newer "
                            "than this forum (reads up to %d); upgrade forum",
                            s->where, f, PG_STORE_FORMAT);
    }
    PQclear(res);
    return rc;
}

/* The ledger the database holds must be the one DIR/store.json pins. */
static int check_pinned(struct store *s, struct fo_err *err)
{
    if (!s->ledger_id)
        return FO_OK;
    PGresult *res = PQexec(s->conn, "SELECT value FROM forum.meta WHERE"
                                    " key = 'ledger_id'");
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        int rc = pg_fail(s, res, "read the ledger id", err);
        PQclear(res);
        return rc;
    }
    int rc = FO_OK;
    if (PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), s->ledger_id))
        rc = fo_err_set(err, FO_E_FOREIGN,
                        "PostgreSQL %s: holds ledger %.32s, but %s/%s names "
                        "ledger %.32s; refused",
                        s->where, PQgetvalue(res, 0, 0), s->dir,
                        STORE_CONF_FILE, s->ledger_id);
    PQclear(res);
    return rc;
}

/* Makes the schema, under the writers' lock so two processes creating at
 * once agree; refuses a schema "forum" that is someone else's. */
static int create_schema(struct store *s, struct fo_err *err)
{
    int rc = exec(s, "BEGIN; SELECT pg_advisory_xact_lock(" PG_WRITE_LOCK ")",
                  "create: lock", err);
    if (rc)
        return rc;
    int what = 0;
    rc = probe(s, &what, err);
    if (!rc && what == 1)
        rc = fo_err_set(err, FO_E_FOREIGN,
                        "PostgreSQL %s: schema \"forum\" holds tables that "
                        "are not a forum ledger; refused, nothing changed",
                        s->where);
    if (!rc && what == 0) {
        char meta[200];
        snprintf(meta, sizeof(meta),
                 "INSERT INTO forum.meta(key, value) VALUES"
                 " ('store_format', '%d')",
                 PG_STORE_FORMAT);
        rc = exec(s, schema_sql, "create the schema", err);
        if (!rc)
            rc = exec(s, meta, "create the schema", err);
    }
    if (!rc)
        rc = exec(s, "COMMIT", "create: commit", err);
    if (rc)
        exec(s, "ROLLBACK", "rollback", NULL);
    return rc;
}

/* A ledger made before run leases (or the gateway's index) existed gets
 * them (under the writers' lock: two processes opening at once agree). */
static int ensure_leases(struct store *s, struct fo_err *err)
{
    PGresult *res = PQexec(
        s->conn, "SELECT to_regclass('forum.run_leases') IS NOT NULL"
                 " AND to_regclass('forum.entries_gateway') IS NOT NULL");
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        int rc = pg_fail(s, res, "look for the run leases", err);
        PQclear(res);
        return rc;
    }
    int have = !strcmp(PQgetvalue(res, 0, 0), "t");
    PQclear(res);
    if (have)
        return FO_OK;
    int rc = exec(s, "BEGIN; SELECT pg_advisory_xact_lock(" PG_WRITE_LOCK ")",
                  "run leases: lock", err);
    if (!rc)
        rc =
            exec(s, LEASES_SQL GATEWAY_INDEX_SQL, "create the run leases", err);
    if (!rc)
        rc = exec(s, "COMMIT", "run leases: commit", err);
    if (rc)
        exec(s, "ROLLBACK", "rollback", NULL);
    return rc;
}

static void pg_close(struct store *s)
{
    if (!s)
        return;
    if (s->nodes)
        PQclear(s->nodes);
    drop_pre(s);
    if (s->conn)
        PQfinish(s->conn);
    store_pg_discard(s);
    store_pg_bulk_free(s);
    free(s->dir);
    free(s->where);
    free(s->ledger_id);
    free(s);
}

static int pg_open(const char *dir, unsigned flags, int busy_ms,
                   struct store **out, struct fo_err *err)
{
    struct store_conf conf;
    int rc = store_conf_read(dir, &conf, err);
    if (rc)
        return rc;
    if (!conf.postgres || !conf.conninfo) {
        store_conf_free(&conf);
        return fo_err_set(err, FO_E_NOT_FOUND,
                          "%s: no %s naming a PostgreSQL database (create "
                          "one with `forum ledger init --postgres CONNINFO`)",
                          dir, STORE_CONF_FILE);
    }
    rc = store_pg_check_conninfo(conf.conninfo, err);
    if (rc) {
        fo_err_prefix(err, "%s/%s", dir, STORE_CONF_FILE);
        store_conf_free(&conf);
        return rc;
    }
    struct store *s = calloc(1, sizeof(*s));
    if (!s) {
        store_conf_free(&conf);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    for (int i = 0; i < STORE_PG_COLS; i++)
        fo_buf_init(&s->col[i], FO_BUF_UNLIMITED);
    for (int i = 0; i < STORE_PG_FIN; i++)
        fo_buf_init(&s->fin[i], FO_BUF_UNLIMITED);
    s->readonly = (flags & STORE_READONLY) != 0;
    s->busy_ms = busy_ms > 0 ? busy_ms : 10000;
    s->dir = strdup(dir);
    s->where = describe(conf.conninfo);
    s->ledger_id = conf.ledger_id;
    conf.ledger_id = NULL;
    if (!s->dir || !s->where) {
        store_conf_free(&conf);
        pg_close(s);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    /* the user's conninfo (expanded from dbname) overrides the defaults
     * before it: a bounded connect, and who we are in pg_stat_activity */
    const char *keys[4], *vals[4];
    int k = 0;
    if (!getenv("PGCONNECT_TIMEOUT")) {
        keys[k] = "connect_timeout";
        vals[k++] = "10";
    }
    keys[k] = "fallback_application_name";
    vals[k++] = "forum";
    keys[k] = "dbname";
    vals[k++] = conf.conninfo;
    keys[k] = NULL;
    vals[k] = NULL;
    s->conn = PQconnectdbParams(keys, vals, 1);
    store_conf_free(&conf);
    if (!s->conn || PQstatus(s->conn) != CONNECTION_OK) {
        char msg[224];
        pg_message(s->conn ? PQerrorMessage(s->conn) : "out of memory", msg,
                   sizeof(msg));
        rc = fo_err_set(err, FO_E_IO, "PostgreSQL %s: cannot connect: %s",
                        s->where, msg);
        pg_close(s);
        return rc;
    }
    rc = setup_session(s, err);
    int what = 0;
    if (!rc)
        rc = probe(s, &what, err);
    if (!rc && what == 1)
        rc = fo_err_set(err, FO_E_FOREIGN,
                        "PostgreSQL %s: schema \"forum\" holds tables that "
                        "are not a forum ledger; refused, nothing changed",
                        s->where);
    if (!rc && what == 0) {
        if (s->ledger_id)
            rc = fo_err_set(err, FO_E_NOT_FOUND,
                            "PostgreSQL %s: holds no forum ledger, but %s/%s "
                            "names ledger %.32s (was the database replaced "
                            "or dropped?); nothing created",
                            s->where, dir, STORE_CONF_FILE, s->ledger_id);
        else if (!(flags & STORE_CREATE) || s->readonly)
            rc = fo_err_set(err, FO_E_NOT_FOUND,
                            "PostgreSQL %s: holds no forum ledger (create one "
                            "with `forum ledger init --postgres CONNINFO`)",
                            s->where);
        else
            rc = create_schema(s, err);
    }
    if (!rc)
        rc = check_format(s, err);
    if (!rc)
        rc = check_pinned(s, err);
    if (!rc && !s->readonly)
        rc = ensure_leases(s, err);
    if (!rc && !s->readonly)
        rc = store_pg_stage_ensure(s, err);
    if (rc) {
        pg_close(s);
        return rc;
    }
    *out = s;
    return FO_OK;
}

/* ---- transactions ------------------------------------------------------ */

/* Under a hold: the held transaction must still be there. */
static int held_check(struct store *s, struct fo_err *err)
{
    if (s->broken || PQstatus(s->conn) != CONNECTION_OK)
        return fo_err_set(err, FO_E_IO,
                          "PostgreSQL %s: the connection was lost in the held "
                          "transaction (nothing of it was kept)",
                          s->where);
    return FO_OK;
}

/* BEGIN, the lock, the head and (take > 0) the staged rows to take: one
 * round trip. */
static int begin_write_pipe(struct store *s, size_t take, struct fo_err *err)
{
    unsigned char lim[8];
    for (int i = 0; i < 8; i++)
        lim[i] = (unsigned char)((uint64_t)take >> (56 - 8 * i));
    struct store_pg_q q[4] = {
        {.sql = "BEGIN ISOLATION LEVEL READ COMMITTED"},
        {.sql = "SELECT pg_advisory_xact_lock(" PG_WRITE_LOCK ")"},
        {.sql = stmts[ST_HEAD].sql, .what = "head"},
        {.sql = store_pg_take_sql,
         .what = "take staged rows",
         .np = 1,
         .vals = {(const char *)lim},
         .lens = {8}},
    };
    PGresult *got[4];
    drop_pre(s);
    int rc = store_pg_pipe(s, q, take ? 4 : 3, got,
                           "begin write (the writers' lock)", err);
    if (rc == FO_OK) {
        PQclear(got[1]);
        s->head_pre = got[2];
        s->take_pre = take ? got[3] : NULL;
    }
    return rc;
}

static int begin_write(struct store *s, size_t take, struct fo_err *err);

static int pg_begin_write(struct store *s, struct fo_err *err)
{
    return begin_write(s, 0, err);
}

static int pg_stage_begin(struct store *s, size_t max_rows, struct fo_err *err)
{
    return begin_write(s, max_rows ? max_rows : 1, err);
}

static int begin_write(struct store *s, size_t take, struct fo_err *err)
{
    if (s->readonly)
        return fo_err_set(err, FO_E_INVALID, "PostgreSQL %s: opened read-only",
                          s->where);
    if (s->lost) {
        if (err)
            *err = s->lost_err;
        return FO_E_STORAGE_MOVED;
    }
    if (s->held)
        return held_check(s, err);
    int rc = ensure_conn(s, err);
    if (rc)
        return rc;
    /* READ COMMITTED: each statement sees what was committed before it, so
     * once the lock is held the head is the one the last writer left. One
     * round trip: BEGIN, the lock, the head (for the head() that follows) */
    rc = begin_write_pipe(s, take, err);
    /* a connection found lost here had nothing of ours in flight: reset
     * it once and begin again */
    if (rc && s->broken && (rc = ensure_conn(s, err)) == FO_OK)
        rc = begin_write_pipe(s, take, err);
    if (rc) {
        if (!s->broken)
            exec(s, "ROLLBACK", "rollback", NULL);
        return rc;
    }
    s->in_txn = 1;
    return FO_OK;
}

static int pg_begin_read(struct store *s, struct fo_err *err)
{
    if (s->held)
        return held_check(s, err);
    int rc = ensure_conn(s, err);
    if (rc)
        return rc;
    /* one snapshot for every statement until rollback */
    static const char begin_sql[] =
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
    rc = exec(s, begin_sql, "begin read", err);
    if (rc && s->broken && (rc = ensure_conn(s, err)) == FO_OK)
        rc = exec(s, begin_sql, "begin read", err);
    if (rc == FO_OK)
        s->in_txn = 1;
    return rc;
}

static int pg_commit(struct store *s, struct fo_err *err)
{
    drop_pre(s);
    if (s->held) { /* the held transaction commits at hold(0) */
        int frc = store_pg_flush(s, err);
        return frc ? frc : held_check(s, err);
    }
#ifdef FORUM_TEST_SEAMS
    if (s->fail_commit_in > 0 && --s->fail_commit_in == 0) {
        store_pg_discard(s);
        exec(s, "ROLLBACK", "rollback", NULL);
        s->in_txn = 0;
        return fo_err_set(err, FO_E_IO, "PostgreSQL %s: commit: injected fault",
                          s->where);
    }
#endif
    /* the rows not sent yet and the COMMIT: one round trip */
    int rc = store_pg_send(s, 1, err);
    s->in_txn = 0;
    if (rc && s->broken)
        fo_err_prefix(err, "the commit's outcome is unknown");
    else if (rc && PQtransactionStatus(s->conn) != PQTRANS_IDLE)
        exec(s, "ROLLBACK", "rollback", NULL);
    return rc;
}

static void pg_rollback(struct store *s)
{
    drop_pre(s);
    if (!s->held)
        store_pg_discard(s);
    if (s->nodes) {
        PQclear(s->nodes);
        s->nodes = NULL;
    }
    if (s->held)
        return;
    if (PQstatus(s->conn) == CONNECTION_OK &&
        PQtransactionStatus(s->conn) != PQTRANS_IDLE)
        exec(s, "ROLLBACK", "rollback", NULL);
    s->in_txn = 0;
}

static int pg_hold(struct store *s, int on, int keep, struct fo_err *err)
{
    if (on) {
        if (s->held)
            return fo_err_set(err, FO_E_INTERNAL, "PostgreSQL %s: already held",
                              s->where);
        int rc = pg_begin_write(s, err);
        if (rc == FO_OK)
            s->held = 1;
        return rc;
    }
    if (!s->held)
        return FO_OK;
    s->held = 0;
    if (keep)
        return pg_commit(s, err);
    pg_rollback(s);
    return FO_OK;
}

static void pg_fail_commit_after(struct store *s, int n)
{
    s->fail_commit_in = n;
}

/* ---- meta -------------------------------------------------------------- */

static int pg_meta_get(struct store *s, const char *key, char **val,
                       struct fo_err *err)
{
    struct params p = {0};
    par_bytes(&p, key, strlen(key));
    PGresult *res = run(s, ST_META_GET, &p, "meta", err);
    if (!res)
        return err_code(err);
    int rc = FO_OK;
    if (PQntuples(res) < 1) {
        rc = fo_err_set(err, FO_E_NOT_FOUND, "PostgreSQL %s: no meta %s",
                        s->where, key);
    } else if (!(*val = col_dup(res, 0, 0, NULL))) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    }
    PQclear(res);
    return rc;
}

static int pg_meta_set(struct store *s, const char *key, const char *val,
                       struct fo_err *err)
{
    struct params p = {0};
    par_bytes(&p, key, strlen(key));
    par_bytes(&p, val, strlen(val));
    return run_cmd(s, ST_META_SET, &p, "meta", err);
}

/* ---- entries ----------------------------------------------------------- */

/* Reads entry columns 0..7 of row r into rec: 0, or -1 when a column has
 * the wrong type or size (a damaged or tampered row). */
static int read_rec(const PGresult *res, int r, struct store_rec *rec)
{
    int bad = 0;
    memset(rec, 0, sizeof(*rec));
    rec->seq = col_i64(res, r, 0, &bad);
    rec->ts = col_i64(res, r, 1, &bad);
    size_t n = (size_t)PQgetlength(res, r, 2);
    if (PQgetisnull(res, r, 2) || n > STORE_ACTOR_MAX)
        bad = 1;
    else {
        memcpy(rec->actor, PQgetvalue(res, r, 2), n);
        rec->actor_len = n;
    }
    n = (size_t)PQgetlength(res, r, 3);
    if (PQgetisnull(res, r, 3) || n > STORE_KIND_MAX)
        bad = 1;
    else {
        memcpy(rec->kind, PQgetvalue(res, r, 3), n);
        rec->kind_len = n;
    }
    rec->parent = PQgetisnull(res, r, 4) ? -1 : col_i64(res, r, 4, &bad);
    if (col_hash(res, r, 5, rec->payload) || col_hash(res, r, 6, rec->prev) ||
        col_hash(res, r, 7, rec->hash))
        bad = 1;
    return bad ? -1 : 0;
}

static int pg_head(struct store *s, int64_t *count, struct store_rec *last,
                   struct fo_err *err)
{
    PGresult *res =
        s->head_pre ? s->head_pre : run(s, ST_HEAD, NULL, "head", err);
    s->head_pre = NULL;
    if (!res)
        return err_code(err);
    int rc = FO_OK;
    if (PQntuples(res) == 0) {
        *count = 0;
    } else {
        struct store_rec tmp, *r = last ? last : &tmp;
        if (read_rec(res, 0, r) != 0 || r->seq < 0 || r->seq == INT64_MAX)
            rc = fo_err_set(err, FO_E_CORRUPT,
                            "PostgreSQL %s: damaged head entry", s->where);
        else
            *count = r->seq + 1;
    }
    PQclear(res);
    return rc;
}

static int pg_put_entry(struct store *s, const struct store_rec *r,
                        const void *body, size_t body_len, struct fo_err *err)
{
    if (body_len > INT_MAX)
        return fo_err_set(err, FO_E_TOO_LARGE, "body of %zu bytes", body_len);
    if (!s->in_txn)
        return fo_err_set(err, FO_E_INTERNAL,
                          "PostgreSQL %s: append outside a transaction",
                          s->where);
    drop_head(s);
    return store_pg_buffer_entry(s, r, body, body_len, err);
}

static int pg_put_node(struct store *s, int64_t pos, const uint8_t hash[32],
                       struct fo_err *err)
{
    if (!s->in_txn)
        return fo_err_set(err, FO_E_INTERNAL,
                          "PostgreSQL %s: tree node outside a transaction",
                          s->where);
    drop_head(s);
    return store_pg_buffer_node(s, pos, hash, err);
}

static int pg_get_entry(struct store *s, int64_t seq, struct store_rec *rec,
                        int *has_body, struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, seq);
    PGresult *res = run(s, ST_GET_ENTRY, &p, "get", err);
    if (!res)
        return err_code(err);
    int rc = FO_OK;
    if (PQntuples(res) == 0)
        rc = fo_err_set(err, FO_E_NOT_FOUND, "entry %lld: not found",
                        (long long)seq);
    else if (read_rec(res, 0, rec) != 0 || PQgetlength(res, 0, 8) != 1)
        rc = fo_err_set(err, FO_E_CORRUPT, "entry %lld: damaged row",
                        (long long)seq);
    else if (has_body)
        *has_body = PQgetvalue(res, 0, 8)[0] != 0;
    PQclear(res);
    return rc;
}

static int pg_get_node(struct store *s, int64_t pos, uint8_t hash[32],
                       struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, pos);
    PGresult *res = run(s, ST_GET_NODE, &p, "tree", err);
    if (!res)
        return err_code(err);
    int rc = FO_OK;
    if (PQntuples(res) == 0)
        rc = fo_err_set(err, FO_E_CORRUPT, "tree node %lld: missing",
                        (long long)pos);
    else if (col_hash(res, 0, 0, hash) != 0)
        rc = fo_err_set(err, FO_E_CORRUPT, "tree node %lld: damaged",
                        (long long)pos);
    PQclear(res);
    return rc;
}

static int pg_get_body(struct store *s, int64_t seq, void **body, size_t *len,
                       struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, seq);
    PGresult *res = run(s, ST_GET_BODY, &p, "body", err);
    if (!res)
        return err_code(err);
    int rc = FO_OK;
    if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0)) {
        rc = fo_err_set(err, FO_E_NOT_FOUND, "entry %lld: no body",
                        (long long)seq);
    } else if (!(*body = col_dup(res, 0, 0, len))) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    }
    PQclear(res);
    return rc;
}

/* How a stream treats a damaged row. */
enum { ROWS_STRICT, ROWS_SCAN };

/* Hands the entry rows of res to fn; *last gets the last seq seen. */
static int hand_rows(struct store *s, PGresult *res, int mode, int bodies,
                     store_row_fn fn, void *ctx, int64_t *last,
                     struct fo_err *err)
{
    int n = PQntuples(res);
    struct store_row row;
    for (int i = 0; i < n; i++) {
        int bad = read_rec(res, i, &row.rec);
        row.body = NULL;
        row.body_len = 0;
        if (bodies && !PQgetisnull(res, i, 8)) {
            row.body = PQgetvalue(res, i, 8);
            row.body_len = (size_t)PQgetlength(res, i, 8);
        }
        int sbad = 0;
        int64_t seq = col_i64(res, i, 0, &sbad);
        if (!sbad)
            *last = seq;
        if (bad && (mode == ROWS_STRICT || sbad))
            return fo_err_set(err, FO_E_CORRUPT,
                              "PostgreSQL %s: damaged entry row", s->where);
        if (bad) /* a hash that cannot match: verify names the seq */
            memset(row.rec.hash, 0xff, 32);
        int rc = fn(ctx, &row);
        if (rc)
            return rc;
    }
    return FO_OK;
}

/* Streams statement id (params: from, limit) a chunk at a time, so a long
 * scan neither holds the whole log in memory nor keeps the connection
 * busy while fn runs (fn may use the store). */
static int stream(struct store *s, enum stmt_id id, int64_t from, int64_t limit,
                  int mode, int bodies, store_row_fn fn, void *ctx,
                  const char *what, struct fo_err *err)
{
    int64_t chunk = bodies ? CHUNK_BODY_ROWS : CHUNK_ROWS;
    for (;;) {
        int64_t want = limit >= 0 && limit < chunk ? limit : chunk;
        if (want == 0)
            return FO_OK;
        struct params p = {0};
        par_i64(&p, from);
        par_i64(&p, want);
        PGresult *res = run(s, id, &p, what, err);
        if (!res)
            return err_code(err);
        int n = PQntuples(res);
        int64_t last = from - 1;
        int rc = hand_rows(s, res, mode, bodies, fn, ctx, &last, err);
        PQclear(res);
        if (rc || n < want)
            return rc;
        if (last == INT64_MAX)
            return FO_OK;
        from = last + 1;
        if (limit >= 0)
            limit -= n;
    }
}

static int pg_scan(struct store *s, int64_t from, int64_t limit,
                   int with_bodies, store_row_fn fn, void *ctx,
                   struct fo_err *err)
{
    return stream(s, with_bodies ? ST_SCAN_BODIES : ST_SCAN, from, limit,
                  ROWS_SCAN, with_bodies, fn, ctx, "scan", err);
}

static int pg_descendants(struct store *s, int64_t root, int64_t limit,
                          store_row_fn fn, void *ctx, struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, root);
    if (limit < 0)
        par_null(&p);
    else
        par_i64(&p, limit);
    PGresult *res = run(s, ST_DESCENDANTS, &p, "descendants", err);
    if (!res)
        return err_code(err);
    int64_t last = 0;
    int rc = hand_rows(s, res, ROWS_STRICT, 0, fn, ctx, &last, err);
    PQclear(res);
    return rc;
}

static int pg_requests(struct store *s, int64_t from, store_row_fn fn,
                       void *ctx, struct fo_err *err)
{
    return stream(s, ST_REQUESTS, from, -1, ROWS_STRICT, 0, fn, ctx, "requests",
                  err);
}

static int pg_gates(struct store *s, int64_t from, store_row_fn fn, void *ctx,
                    struct fo_err *err)
{
    return stream(s, ST_GATES, from, -1, ROWS_STRICT, 0, fn, ctx, "gates", err);
}

static int pg_marked(struct store *s, int which, int64_t from, store_row_fn fn,
                     void *ctx, struct fo_err *err)
{
    static const int st[] = {ST_SESSIONS, ST_TURNS, ST_GATEWAY};
    static const char *const what[] = {"sessions", "turns", "gateway calls"};
    if (which < 0 || which > 2)
        return fo_err_set(err, FO_E_INVALID, "marked: %d", which);
    return stream(s, st[which], from, -1, ROWS_STRICT, 0, fn, ctx, what[which],
                  err);
}

/* No file copy of a server's database: pg_dump, pg_basebackup, or `forum
 * ledger export` (a JSON-lines copy that `ledger import` makes a ledger
 * again, same hashes). */
static int pg_backup(struct store *s, const char *path, struct fo_err *err)
{
    return fo_err_set(err, FO_E_INVALID,
                      "%s: the ledger is in PostgreSQL (%s): no file backup; "
                      "use `forum ledger export` or pg_dump / pg_basebackup",
                      path, s->where);
}

/* ---- the tree-node cursor ---------------------------------------------- */

static int pg_nodes_begin(struct store *s, int64_t from, struct fo_err *err)
{
    (void)err;
    if (s->nodes)
        PQclear(s->nodes);
    s->nodes = NULL;
    s->nodes_row = 0;
    s->nodes_eof = 0;
    s->nodes_from = from;
    return FO_OK;
}

static int pg_nodes_next(struct store *s, int64_t *pos, uint8_t hash[32],
                         struct fo_err *err)
{
    if (s->nodes && s->nodes_row >= PQntuples(s->nodes)) {
        s->nodes_eof = PQntuples(s->nodes) < CHUNK_ROWS;
        PQclear(s->nodes);
        s->nodes = NULL;
    }
    if (!s->nodes) {
        if (s->nodes_eof)
            return FO_E_NOT_FOUND;
        struct params p = {0};
        par_i64(&p, s->nodes_from);
        par_i64(&p, CHUNK_ROWS);
        s->nodes = run(s, ST_SCAN_NODES, &p, "scan tree", err);
        s->nodes_row = 0;
        if (!s->nodes)
            return err_code(err);
        if (PQntuples(s->nodes) == 0) {
            s->nodes_eof = 1;
            return FO_E_NOT_FOUND;
        }
    }
    int r = s->nodes_row++, bad = 0;
    *pos = col_i64(s->nodes, r, 0, &bad);
    if (bad)
        return fo_err_set(err, FO_E_CORRUPT, "PostgreSQL %s: damaged tree row",
                          s->where);
    if (*pos == INT64_MAX)
        s->nodes_eof = 1;
    else
        s->nodes_from = *pos + 1;
    if (col_hash(s->nodes, r, 1, hash) != 0)
        memset(hash, 0xff, 32); /* damaged: cannot match any hash */
    return FO_OK;
}

static void pg_nodes_end(struct store *s)
{
    if (s->nodes)
        PQclear(s->nodes);
    s->nodes = NULL;
}

/* ---- the rest ---------------------------------------------------------- */

/* Calls fn(ctx, x) for the int64 in column 0 of each row of res (what is
 * a damaged row: `what`), stopping at a non-zero return; frees res. */
static int each_i64(PGresult *res, const char *what,
                    int (*fn)(void *ctx, int64_t x), void *ctx,
                    struct fo_err *err)
{
    int rc = FO_OK, rows = PQntuples(res);
    for (int i = 0; !rc && i < rows; i++) {
        int bad = 0;
        int64_t x = col_i64(res, i, 0, &bad);
        rc = bad ? fo_err_set(err, FO_E_CORRUPT, "%s", what) : fn(ctx, x);
    }
    PQclear(res);
    return rc;
}

static int pg_find_payload(struct store *s, const uint8_t payload[32],
                           int (*fn)(void *ctx, int64_t seq), void *ctx,
                           struct fo_err *err)
{
    struct params p = {0};
    par_bytes(&p, payload, 32);
    PGresult *res = run(s, ST_FIND_PAYLOAD, &p, "find", err);
    if (!res)
        return err_code(err);
    return each_i64(res, "damaged entry row", fn, ctx, err);
}

static int pg_delete_body(struct store *s, int64_t seq, struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, seq);
    return run_cmd(s, ST_DELETE_BODY, &p, "delete body", err);
}

static int pg_count_bodies(struct store *s, int64_t *present,
                           struct fo_err *err)
{
    PGresult *res = run(s, ST_COUNT_BODIES, NULL, "count", err);
    if (!res)
        return err_code(err);
    int bad = PQntuples(res) != 1;
    if (!bad)
        *present = col_i64(res, 0, 0, &bad);
    PQclear(res);
    return bad ? fo_err_set(err, FO_E_INTERNAL, "count: not one number")
               : FO_OK;
}

static int pg_group_counts(struct store *s, const char *column,
                           int (*fn)(void *ctx, const char *key, int64_t n),
                           void *ctx, struct fo_err *err)
{
    enum stmt_id id;
    if (strcmp(column, "kind") == 0)
        id = ST_GROUP_KIND;
    else if (strcmp(column, "actor") == 0)
        id = ST_GROUP_ACTOR;
    else
        return fo_err_set(err, FO_E_INTERNAL, "no such column %s", column);
    PGresult *res = run(s, id, NULL, "count", err);
    if (!res)
        return err_code(err);
    int rc = FO_OK, n = PQntuples(res);
    for (int i = 0; !rc && i < n; i++) {
        char key[STORE_ACTOR_MAX + 1];
        int bad = 0;
        size_t len = (size_t)PQgetlength(res, i, 0);
        int64_t c = col_i64(res, i, 1, &bad);
        if (bad || len > STORE_ACTOR_MAX) {
            rc = fo_err_set(err, FO_E_CORRUPT, "damaged %s count", column);
            break;
        }
        memcpy(key, PQgetvalue(res, i, 0), len);
        key[len] = '\0';
        rc = fn(ctx, key, c);
    }
    PQclear(res);
    return rc;
}

static int pg_put_checkpoint(struct store *s, int64_t size, int64_t ts,
                             const uint8_t root[32], const char *note,
                             struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, size);
    par_i64(&p, ts);
    par_bytes(&p, root, 32);
    par_bytes(&p, note, strlen(note));
    return run_cmd(s, ST_PUT_CHECKPOINT, &p, "checkpoint", err);
}

/* Row r of a (size, root, note) result; the note NUL-terminated into a
 * malloc'd string. -1 when damaged, -2 out of memory. */
static int read_checkpoint(const PGresult *res, int r, int64_t *size,
                           uint8_t root[32], char **note)
{
    int bad = 0;
    *size = col_i64(res, r, 0, &bad);
    if (bad || col_hash(res, r, 1, root) != 0 || PQgetisnull(res, r, 2))
        return -1;
    return (*note = col_dup(res, r, 2, NULL)) ? 0 : -2;
}

static int pg_get_checkpoint(struct store *s, int64_t max_size, int64_t *size,
                             uint8_t root[32], char **note, struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, max_size < 0 ? INT64_MAX : max_size);
    PGresult *res = run(s, ST_GET_CHECKPOINT, &p, "checkpoint", err);
    if (!res)
        return err_code(err);
    int rc = FO_OK;
    char *t = NULL;
    if (PQntuples(res) == 0) {
        rc = fo_err_set(err, FO_E_NOT_FOUND, "no signed checkpoint yet");
    } else {
        int r = read_checkpoint(res, 0, size, root, &t);
        if (r == -2)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        else if (r)
            rc = fo_err_set(err, FO_E_CORRUPT, "damaged checkpoint row");
        else if (note) {
            *note = t;
            t = NULL;
        }
    }
    free(t);
    PQclear(res);
    return rc;
}

static int pg_scan_checkpoints(struct store *s,
                               int (*fn)(void *ctx, int64_t size,
                                         const uint8_t root[32],
                                         const char *note),
                               void *ctx, struct fo_err *err)
{
    PGresult *res = run(s, ST_SCAN_CHECKPOINTS, NULL, "checkpoints", err);
    if (!res)
        return err_code(err);
    int rc = FO_OK, n = PQntuples(res);
    for (int i = 0; !rc && i < n; i++) {
        int64_t size;
        uint8_t root[32];
        char *note = NULL;
        int r = read_checkpoint(res, i, &size, root, &note);
        if (r == -2)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        else if (r)
            rc = fo_err_set(err, FO_E_CORRUPT, "damaged checkpoint row");
        else
            rc = fn(ctx, size, root, note);
        free(note);
    }
    PQclear(res);
    return rc;
}

static int pg_put_cosignature(struct store *s, int64_t size, const char *key,
                              int64_t ts, const char *line, struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, size);
    par_bytes(&p, key, strlen(key));
    par_i64(&p, ts);
    par_bytes(&p, line, strlen(line));
    return run_cmd(s, ST_PUT_COSIG, &p, "cosignature", err);
}

static int pg_scan_cosignatures(struct store *s, int64_t size,
                                int (*fn)(void *ctx, const char *key,
                                          int64_t ts, const char *line),
                                void *ctx, struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, size);
    PGresult *res = run(s, ST_SCAN_COSIG, &p, "cosignatures", err);
    if (!res)
        return err_code(err);
    int rc = FO_OK, n = PQntuples(res);
    for (int i = 0; !rc && i < n; i++) {
        int bad = 0;
        int64_t ts = col_i64(res, i, 1, &bad);
        size_t kn = (size_t)PQgetlength(res, i, 0);
        size_t ln = (size_t)PQgetlength(res, i, 2);
        char *key = malloc(kn + 1), *line = malloc(ln + 1);
        if (!key || !line) {
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
        } else if (bad) {
            rc = fo_err_set(err, FO_E_CORRUPT, "damaged cosignature row");
        } else {
            memcpy(key, PQgetvalue(res, i, 0), kn);
            key[kn] = '\0';
            memcpy(line, PQgetvalue(res, i, 2), ln);
            line[ln] = '\0';
            rc = fn(ctx, key, ts, line);
        }
        free(key);
        free(line);
    }
    PQclear(res);
    return rc;
}

/* After a redaction (committed): the deleted rows leave the table's pages
 * (and their TOAST chunks). The server's WAL, archives and standbys keep
 * the bytes until they are recycled: see docs/OPERATIONS.md. */
static int pg_wal_truncate(struct store *s, struct fo_err *err)
{
    if (s->in_txn)
        return fo_err_set(err, FO_E_INVALID,
                          "PostgreSQL %s: VACUUM inside a transaction",
                          s->where);
    int rc = ensure_conn(s, err);
    return rc ? rc : exec(s, "VACUUM forum.bodies", "vacuum bodies", err);
}

/* The server answers (FO_E_IO when not: not sticky), and the database
 * still holds the ledger DIR/store.json names: when not (the conninfo's
 * database was replaced under the process), FO_E_STORAGE_MOVED, and
 * writes are refused until the store is closed. */
static int pg_check(struct store *s, struct fo_err *err)
{
    if (s->lost) {
        if (err)
            *err = s->lost_err;
        return FO_E_STORAGE_MOVED;
    }
    if (s->in_txn)
        return PQstatus(s->conn) == CONNECTION_OK
                   ? FO_OK
                   : fo_err_set(err, FO_E_IO, "PostgreSQL %s: connection lost",
                                s->where);
    int rc = ensure_conn(s, err);
    if (!rc)
        rc = exec(s, "SELECT 1", "check", err);
    if (rc && s->broken && (rc = ensure_conn(s, err)) == FO_OK)
        rc = exec(s, "SELECT 1", "check", err);
    struct fo_err perr;
    if (!rc && check_pinned(s, &perr) != FO_OK) {
        if (perr.code != FO_E_FOREIGN) {
            if (err)
                *err = perr;
            return perr.code;
        }
        s->lost = 1;
        fo_err_set(&s->lost_err, FO_E_STORAGE_MOVED,
                   "%s; the database was replaced under this process: writes "
                   "are refused until it is restarted",
                   perr.msg);
        if (err)
            *err = s->lost_err;
        return FO_E_STORAGE_MOVED;
    }
    return rc;
}

/* ---- run leases -------------------------------------------------------- */

int store_pg_owner_ok(struct store *s, const char *owner, struct fo_err *err)
{
    size_t n = owner ? strlen(owner) : 0;
    int ok = n >= 1 && n <= 64;
    for (size_t i = 0; ok && i < n; i++)
        ok = (owner[i] >= '0' && owner[i] <= '9') ||
             (owner[i] >= 'a' && owner[i] <= 'f');
    return ok ? FO_OK
              : fo_err_set(err, FO_E_INVALID,
                           "PostgreSQL %s: a lease owner is 1-64 lowercase hex "
                           "digits",
                           s->where);
}

static int pg_lease_put(struct store *s, int64_t id, const char *owner,
                        int ttl_ms, struct fo_err *err)
{
    int rc = store_pg_owner_ok(s, owner, err);
    if (rc)
        return rc;
    struct params p = {0};
    par_i64(&p, id);
    par_bytes(&p, owner, strlen(owner));
    par_i64(&p, ttl_ms);
    return run_cmd(s, ST_LEASE_PUT, &p, "run lease", err);
}

static int pg_lease_held(struct store *s, int64_t id, const char *owner,
                         int *held, struct fo_err *err)
{
    *held = 0;
    int rc = store_pg_owner_ok(s, owner, err);
    if (rc)
        return rc;
    struct params p = {0};
    par_i64(&p, id);
    par_bytes(&p, owner, strlen(owner));
    PGresult *res = run(s, ST_LEASE_HELD, &p, "run lease", err);
    if (!res)
        return err_code(err);
    *held = PQntuples(res) > 0;
    PQclear(res);
    return FO_OK;
}

static int pg_lease_claim(struct store *s, int64_t id, const char *owner,
                          int ttl_ms, int *got, struct fo_err *err)
{
    *got = 0;
    int rc = store_pg_owner_ok(s, owner, err);
    if (rc)
        return rc;
    rc = pg_begin_write(s, err);
    if (rc)
        return rc;
    struct params p = {0};
    par_i64(&p, id);
    par_bytes(&p, owner, strlen(owner));
    par_i64(&p, ttl_ms);
    PGresult *res = run(s, ST_LEASE_CLAIM, &p, "claim a run lease", err);
    if (!res) {
        rc = err_code(err);
        pg_rollback(s);
        return rc;
    }
    int n = PQntuples(res);
    PQclear(res);
    rc = pg_commit(s, err);
    if (!rc)
        *got = n > 0;
    return rc;
}

static int pg_lease_renew(struct store *s, const char *owner,
                          const int64_t *runs, size_t n, int ttl_ms,
                          int (*fn)(void *ctx, int64_t id), void *ctx,
                          struct fo_err *err)
{
    int rc = store_pg_owner_ok(s, owner, err);
    if (rc || !n)
        return rc;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    for (size_t i = 0; !rc && i < n; i++)
        rc = fo_buf_printf(&b, "%s%lld", i ? "," : "", (long long)runs[i]);
    if (rc) {
        fo_buf_release(&b);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    struct params p = {0};
    par_bytes(&p, owner, strlen(owner));
    par_bytes(&p, b.data, b.len);
    par_i64(&p, ttl_ms);
    PGresult *res = run(s, ST_LEASE_RENEW, &p, "renew the run leases", err);
    fo_buf_release(&b);
    if (!res)
        return err_code(err);
    return each_i64(res, "damaged run lease row", fn, ctx, err);
}

static int pg_lease_release(struct store *s, int64_t id, const char *owner,
                            int drop, struct fo_err *err)
{
    int rc = store_pg_owner_ok(s, owner, err);
    if (rc)
        return rc;
    struct params p = {0};
    par_i64(&p, id);
    par_bytes(&p, owner, strlen(owner));
    return run_cmd(s, drop ? ST_LEASE_DROP : ST_LEASE_EXPIRE, &p,
                   "release a run lease", err);
}

static int pg_lease_get(struct store *s, int64_t id, char *owner, size_t cap,
                        int *live, struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, id);
    PGresult *res = run(s, ST_LEASE_GET, &p, "run lease", err);
    if (!res)
        return err_code(err);
    int rc = FO_OK;
    if (PQntuples(res) < 1) {
        rc = fo_err_set(err, FO_E_NOT_FOUND, "run %lld: no lease",
                        (long long)id);
    } else if (PQgetlength(res, 0, 1) != 1) {
        rc = fo_err_set(err, FO_E_CORRUPT, "damaged run lease row");
    } else {
        *live = PQgetvalue(res, 0, 1)[0] != 0;
        if (cap)
            snprintf(owner, cap, "%.*s", PQgetlength(res, 0, 0),
                     PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return rc;
}

static int pg_lease_expired(struct store *s, int64_t limit,
                            int (*fn)(void *ctx, int64_t id), void *ctx,
                            struct fo_err *err)
{
    struct params p = {0};
    par_i64(&p, limit < 0 ? INT64_MAX : limit);
    PGresult *res = run(s, ST_LEASE_EXPIRED, &p, "expired run leases", err);
    if (!res)
        return err_code(err);
    return each_i64(res, "damaged run lease row", fn, ctx, err);
}

/* ---- for store_pg_stage.c --------------------------------------------- */

int store_pg_fail(struct store *s, const PGresult *res, const char *what,
                  struct fo_err *err)
{
    return pg_fail(s, res, what, err);
}

int store_pg_exec(struct store *s, const char *sql, const char *what,
                  struct fo_err *err)
{
    return exec(s, sql, what, err);
}

int store_pg_ensure_conn(struct store *s, struct fo_err *err)
{
    return ensure_conn(s, err);
}

const struct store_ops store_pg_ops = {
    .name = "postgres",
    .open = pg_open,
    .close = pg_close,
    .begin_write = pg_begin_write,
    .begin_read = pg_begin_read,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .meta_get = pg_meta_get,
    .meta_set = pg_meta_set,
    .head = pg_head,
    .put_entry = pg_put_entry,
    .put_node = pg_put_node,
    .get_entry = pg_get_entry,
    .get_node = pg_get_node,
    .get_body = pg_get_body,
    .scan = pg_scan,
    .descendants = pg_descendants,
    .requests = pg_requests,
    .gates = pg_gates,
    .marked = pg_marked,
    .backup = pg_backup,
    .nodes_begin = pg_nodes_begin,
    .nodes_next = pg_nodes_next,
    .nodes_end = pg_nodes_end,
    .find_payload = pg_find_payload,
    .delete_body = pg_delete_body,
    .count_bodies = pg_count_bodies,
    .group_counts = pg_group_counts,
    .put_checkpoint = pg_put_checkpoint,
    .get_checkpoint = pg_get_checkpoint,
    .scan_checkpoints = pg_scan_checkpoints,
    .put_cosignature = pg_put_cosignature,
    .scan_cosignatures = pg_scan_cosignatures,
    .wal_truncate = pg_wal_truncate,
    .check = pg_check,
    .fail_commit_after = pg_fail_commit_after,
    .hold = pg_hold,
    .lease_put = pg_lease_put,
    .lease_held = pg_lease_held,
    .lease_claim = pg_lease_claim,
    .lease_renew = pg_lease_renew,
    .lease_release = pg_lease_release,
    .lease_get = pg_lease_get,
    .lease_expired = pg_lease_expired,
    .stage_put = store_pg_stage_put,
    .stage_begin = pg_stage_begin,
    .stage_take = store_pg_stage_take,
    .stage_finish = store_pg_stage_finish,
    .stage_collect = store_pg_stage_collect,
    .stage_listen = store_pg_stage_listen,
    .stage_notes = store_pg_stage_notes,
    .ilease = store_pg_ilease,
    .stage_prune = store_pg_stage_prune,
};

/* store_sqlite: the SQLite implementation of the ledger's storage interface.
 * One database per ledger (DIR/ledger.db), WAL, synchronous=FULL, every
 * table keyed by an integer that only grows, so appends are sequential. */
#include "ledger/store.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "ledger/fo_buf.h"

/* 'foru' */
#define FORUM_APPLICATION_ID 0x666f7275
#define FORUM_USER_VERSION 1

enum stmt_id {
    ST_META_GET,
    ST_META_SET,
    ST_HEAD,
    ST_PUT_ENTRY,
    ST_PUT_BODY,
    ST_PUT_NODE,
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
    ST_HAS_PARENT_INDEX,
    ST_PUT_COSIG,
    ST_SCAN_COSIG,
    ST_HAS_COSIG,
    ST__COUNT
};

#define ENTRY_COLS "seq, ts, actor, kind, parent, payload, prev, hash"

static const char *const sql_text[ST__COUNT] = {
    [ST_META_GET] = "SELECT value FROM meta WHERE key = ?1",
    [ST_META_SET] = "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
    [ST_HEAD] = "SELECT " ENTRY_COLS " FROM entries ORDER BY seq DESC LIMIT 1",
    [ST_PUT_ENTRY] = "INSERT INTO entries(" ENTRY_COLS
                     ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_PUT_BODY] = "INSERT INTO bodies(seq, body) VALUES (?1, ?2)",
    [ST_PUT_NODE] = "INSERT INTO tree(pos, hash) VALUES (?1, ?2)",
    [ST_GET_ENTRY] = "SELECT " ENTRY_COLS
                     ", EXISTS(SELECT 1 FROM bodies b WHERE b.seq = e.seq)"
                     " FROM entries e WHERE seq = ?1",
    [ST_GET_NODE] = "SELECT hash FROM tree WHERE pos = ?1",
    [ST_GET_BODY] = "SELECT body FROM bodies WHERE seq = ?1",
    [ST_SCAN] = "SELECT " ENTRY_COLS " FROM entries WHERE seq >= ?1"
                " ORDER BY seq LIMIT ?2",
    [ST_SCAN_BODIES] =
        "SELECT e.seq, e.ts, e.actor, e.kind, e.parent, e.payload, e.prev,"
        " e.hash, b.body FROM entries e LEFT JOIN bodies b ON b.seq = e.seq"
        " WHERE e.seq >= ?1 ORDER BY e.seq LIMIT ?2",
    [ST_SCAN_NODES] = "SELECT pos, hash FROM tree WHERE pos >= ?1 ORDER BY pos",
    [ST_FIND_PAYLOAD] = "SELECT seq FROM entries WHERE payload = ?1",
    [ST_DELETE_BODY] = "DELETE FROM bodies WHERE seq = ?1",
    [ST_COUNT_BODIES] = "SELECT count(*) FROM bodies",
    [ST_GROUP_KIND] = "SELECT kind, count(*) FROM entries GROUP BY kind",
    [ST_GROUP_ACTOR] = "SELECT actor, count(*) FROM entries GROUP BY actor",
    [ST_PUT_CHECKPOINT] = "INSERT OR IGNORE INTO checkpoints(size, ts, root,"
                          " note) VALUES (?1, ?2, ?3, ?4)",
    [ST_GET_CHECKPOINT] = "SELECT size, root, note FROM checkpoints"
                          " WHERE size <= ?1 ORDER BY size DESC LIMIT 1",
    [ST_SCAN_CHECKPOINTS] =
        "SELECT size, root, note FROM checkpoints ORDER BY size",
    /* every entry whose parent chain reaches ?1, through entries_parent */
    [ST_DESCENDANTS] =
        "WITH RECURSIVE d(seq) AS (SELECT ?1 UNION ALL SELECT e.seq FROM"
        " entries e JOIN d ON e.parent = d.seq)"
        " SELECT " ENTRY_COLS " FROM entries WHERE seq IN d"
        " ORDER BY seq LIMIT ?2",
    /* the root `request` entries (runs), through entries_requests */
    [ST_REQUESTS] = "SELECT " ENTRY_COLS " FROM entries WHERE parent IS NULL"
                    " AND kind = 'request' AND seq >= ?1 ORDER BY seq",
    /* the `gate_requested` entries, through entries_gates */
    [ST_GATES] = "SELECT " ENTRY_COLS " FROM entries WHERE"
                 " kind = 'gate_requested' AND seq >= ?1 ORDER BY seq",
    [ST_HAS_PARENT_INDEX] = "SELECT count(*) FROM sqlite_master WHERE"
                            " type = 'index' AND name IN ('entries_parent',"
                            " 'entries_requests', 'entries_gates',"
                            " 'entries_sessions', 'entries_turns',"
                            " 'entries_gateway') HAVING count(*) = 6",
    /* the `session_started` and `turn` entries, through their indexes */
    [ST_SESSIONS] = "SELECT " ENTRY_COLS " FROM entries WHERE"
                    " kind = 'session_started' AND seq >= ?1 ORDER BY seq",
    [ST_TURNS] = "SELECT " ENTRY_COLS " FROM entries WHERE"
                 " kind = 'turn' AND seq >= ?1 ORDER BY seq",
    /* the gateway's `gateway_call` entries, through entries_gateway */
    [ST_GATEWAY] = "SELECT " ENTRY_COLS " FROM entries WHERE"
                   " kind = 'gateway_call' AND seq >= ?1 ORDER BY seq",
    [ST_PUT_COSIG] = "INSERT OR REPLACE INTO cosignatures(size, key, ts, line)"
                     " VALUES (?1, ?2, ?3, ?4)",
    [ST_SCAN_COSIG] = "SELECT key, ts, line FROM cosignatures WHERE size = ?1"
                      " ORDER BY key",
    [ST_HAS_COSIG] = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND"
                     " name = 'cosignatures'",
};

/* Witness cosignatures (made on first use: older ledgers read as before). */
#define COSIG_TABLE_SQL                                                        \
    "CREATE TABLE IF NOT EXISTS cosignatures(size INTEGER NOT NULL,"           \
    " key TEXT NOT NULL, ts INTEGER NOT NULL, line TEXT NOT NULL,"             \
    " PRIMARY KEY(size, key)) WITHOUT ROWID"

/* Children by parent, for the entries of a run (ledger_descendants).
 * Partial: entries without a parent (most plain appends) never touch it. */
#define PARENT_INDEX_SQL                                                       \
    "CREATE INDEX IF NOT EXISTS entries_parent ON entries(parent)"             \
    " WHERE parent IS NOT NULL;"                                               \
    "CREATE INDEX IF NOT EXISTS entries_requests ON entries(seq)"              \
    " WHERE parent IS NULL AND kind = 'request';"                              \
    "CREATE INDEX IF NOT EXISTS entries_gates ON entries(seq)"                 \
    " WHERE kind = 'gate_requested';"                                          \
    "CREATE INDEX IF NOT EXISTS entries_sessions ON entries(seq)"              \
    " WHERE kind = 'session_started';"                                         \
    "CREATE INDEX IF NOT EXISTS entries_turns ON entries(seq)"                 \
    " WHERE kind = 'turn';"                                                    \
    "CREATE INDEX IF NOT EXISTS entries_gateway ON entries(seq)"               \
    " WHERE kind = 'gateway_call';"

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY,"
    " value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS entries(seq INTEGER PRIMARY KEY,"
    " ts INTEGER NOT NULL, actor TEXT NOT NULL, kind TEXT NOT NULL,"
    " parent INTEGER, payload BLOB NOT NULL, prev BLOB NOT NULL,"
    " hash BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS bodies(seq INTEGER PRIMARY KEY,"
    " body BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS tree(pos INTEGER PRIMARY KEY,"
    " hash BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS checkpoints(size INTEGER PRIMARY KEY,"
    " ts INTEGER NOT NULL, root BLOB NOT NULL, note TEXT NOT "
    "NULL);" PARENT_INDEX_SQL;

/* The files a handle writes: ledger.db, its WAL and its wal-index. */
enum { F_DB, F_WAL, F_SHM, F__COUNT };

/* Which file a handle opened, to tell it from the one at the path later. */
struct file_id {
    int known;
    dev_t dev;
    ino_t ino;
};

struct store {
    sqlite3 *db;
    sqlite3_stmt *st[ST__COUNT];
    char *path;           /* DIR/ledger.db */
    char *side[F__COUNT]; /* [F_WAL], [F_SHM]: the -wal and -shm paths */
    struct file_id id[F__COUNT];
    int readonly;
    int in_txn;
    int fail_commit_in; /* test seam: fail the n-th commit from now */
    /* Set once a check found the files moved or the WAL damaged: every
     * later write transaction is refused with lost_err (sticky). */
    int lost;
    struct fo_err lost_err;
};

static int map_rc(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return FO_OK;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return FO_E_BUSY;
    case SQLITE_NOMEM:
        return FO_E_NOMEM;
    case SQLITE_NOTADB:
        return FO_E_FOREIGN;
    case SQLITE_CORRUPT:
        return FO_E_CORRUPT;
    case SQLITE_CONSTRAINT:
        return FO_E_CORRUPT;
    default:
        return FO_E_IO;
    }
}

static int db_fail(struct store *s, int rc, const char *what,
                   struct fo_err *err)
{
    return fo_err_set(err, map_rc(rc), "%s: %s: %s", s->path, what,
                      s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
}

static sqlite3_stmt *stmt(struct store *s, enum stmt_id id, struct fo_err *err)
{
    if (!s->st[id]) {
        int rc =
            sqlite3_prepare_v3(s->db, sql_text[id], -1,
                               SQLITE_PREPARE_PERSISTENT, &s->st[id], NULL);
        if (rc != SQLITE_OK) {
            db_fail(s, rc, "prepare", err);
            return NULL;
        }
    }
    return s->st[id];
}

static void done(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

static int exec(struct store *s, const char *sql, struct fo_err *err)
{
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, sql, err);
    return FO_OK;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

/* Reads the 100-byte header of an existing file and refuses, without
 * opening it through SQLite, anything that is not a forum ledger this
 * version can read. */
/* Reads the first bytes of the database file through SQLite's own VFS, not
 * a raw open(): closing a raw descriptor of a file would drop every POSIX
 * lock this process holds on it, those of the ledger's open connections
 * included (the lock that tells another process it is not the last
 * connection, which would then reset the WAL under us). The VFS keeps such
 * a descriptor open until the locks are gone. Sets *size to the file size;
 * the bytes of h past it are zero. */
static int read_head(const char *path, unsigned char *h, size_t len,
                     int64_t *size, struct fo_err *err)
{
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
    if (!vfs)
        return fo_err_set(err, FO_E_INTERNAL, "sqlite: no default VFS");
    sqlite3_filename name = sqlite3_create_filename(path, "", "", 0, NULL);
    sqlite3_file *f = calloc(1, (size_t)vfs->szOsFile);
    int rc = FO_OK;
    if (!name || !f) {
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    int oflags = 0;
    int src = vfs->xOpen(vfs, name, f,
                         SQLITE_OPEN_READONLY | SQLITE_OPEN_MAIN_DB, &oflags);
    if (src != SQLITE_OK) {
        rc = fo_err_set(err, FO_E_IO, "%s: cannot open (%s)", path,
                        sqlite3_errstr(src));
        if (f->pMethods)
            f->pMethods->xClose(f);
        goto out;
    }
    sqlite3_int64 sz = 0;
    src = f->pMethods->xFileSize(f, &sz);
    if (src == SQLITE_OK) {
        size_t want = (uint64_t)sz < len ? (size_t)sz : len;
        memset(h, 0, len);
        src = want ? f->pMethods->xRead(f, h, (int)want, 0) : SQLITE_OK;
        *size = sz;
    }
    if (src != SQLITE_OK)
        rc = fo_err_set(err, FO_E_IO, "%s: cannot read (%s)", path,
                        sqlite3_errstr(src));
    f->pMethods->xClose(f);
out:
    free(f);
    sqlite3_free_filename(name);
    return rc;
}

static int check_header(const char *path, struct fo_err *err)
{
    unsigned char h[100];
    int64_t size = 0;
    int rc = read_head(path, h, sizeof(h), &size, err);
    if (rc)
        return rc;
    if (size == 0)
        return fo_err_set(err, FO_E_CORRUPT,
                          "%s: empty file (not a forum ledger; move it away)",
                          path);
    if (size < 16 || memcmp(h, "SQLite format 3", 16) != 0) {
        return fo_err_set(err, FO_E_FOREIGN,
                          "%s: not a forum ledger (not a SQLite database)",
                          path);
    }
    if (size < (int64_t)sizeof(h)) {
        return fo_err_set(err, FO_E_CORRUPT, "%s: truncated database header",
                          path);
    }
    uint32_t app = be32(h + 68), ver = be32(h + 60);
    if (app != FORUM_APPLICATION_ID) {
        return fo_err_set(err, FO_E_FOREIGN,
                          "%s: not a forum ledger (application_id 0x%08x)",
                          path, app);
    }
    if (ver > FORUM_USER_VERSION)
        return fo_err_set(err, FO_E_TOO_NEW,
                          "%s: ledger format %u is newer than this forum "
                          "(reads up to %d); upgrade forum",
                          path, ver, FORUM_USER_VERSION);
    unsigned page = (unsigned)h[16] << 8 | h[17];
    uint64_t page_size = page == 1 ? 65536 : page;
    uint64_t pages = be32(h + 28);
    if (page_size < 512 || (page_size & (page_size - 1)) != 0) {
        return fo_err_set(err, FO_E_CORRUPT, "%s: bad page size %u", path,
                          page);
    }
    /* A file shorter than its header says is truncated, unless a WAL is
     * beside it: a checkpoint interrupted by a crash writes page 1 before
     * the pages that extend the file, and the WAL still holds them all. */
    char wal[PATH_MAX];
    struct stat wst;
    int has_wal = snprintf(wal, sizeof(wal), "%s-wal", path) > 0 &&
                  stat(wal, &wst) == 0 && wst.st_size > 0;
    if (!has_wal && be32(h + 92) == be32(h + 24) &&
        pages * page_size > (uint64_t)size) {
        return fo_err_set(err, FO_E_CORRUPT,
                          "%s: truncated: the header says %llu bytes, the "
                          "file has %lld",
                          path, (unsigned long long)(pages * page_size),
                          (long long)size);
    }
    return FO_OK;
}

static int configure(struct store *s, int busy_ms, struct fo_err *err)
{
    int rc = sqlite3_busy_timeout(s->db, busy_ms);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, "busy_timeout", err);
    if (s->readonly)
        return exec(s, "PRAGMA query_only=ON;", err);
    rc = exec(s, "PRAGMA journal_mode=WAL;", err);
    if (rc)
        return rc;
    return exec(s,
                "PRAGMA synchronous=FULL; PRAGMA secure_delete=ON;"
                " PRAGMA cache_size=-16384;",
                err);
}

/* Creates a new ledger database under a temporary name, then links it into
 * place, so no reader ever sees a half-made ledger and two processes
 * creating at once agree on one. */
static int create_db(const char *dir, const char *path, struct fo_err *err)
{
    char tmp[PATH_MAX];
    int n = snprintf(tmp, sizeof(tmp), "%s/.ledger.db.new-%ld", dir,
                     (long)getpid());
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", dir);
    unlink(tmp);
    /* made 0600 before SQLite opens it, whatever the umask: its WAL and
     * wal-index take the database file's mode */
    int mfd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (mfd < 0)
        return fo_err_set(err, FO_E_IO, "%s: %s", tmp, strerror(errno));
    int mode_ok = fchmod(mfd, 0600) == 0;
    close(mfd);
    if (!mode_ok) {
        unlink(tmp);
        return fo_err_set(err, FO_E_IO, "%s: chmod: %s", tmp, strerror(errno));
    }
    sqlite3 *db = NULL;
    int rc = FO_OK;
    int src = sqlite3_open_v2(
        tmp, &db,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    char sql[256];
    snprintf(sql, sizeof(sql),
             "PRAGMA journal_mode=DELETE; PRAGMA application_id=%d;"
             " PRAGMA user_version=%d;",
             FORUM_APPLICATION_ID, FORUM_USER_VERSION);
    if (src == SQLITE_OK)
        src = sqlite3_exec(db, "PRAGMA synchronous=FULL;", NULL, NULL, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_exec(db, schema_sql, NULL, NULL, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_exec(db, "COMMIT; PRAGMA journal_mode=WAL;", NULL, NULL,
                           NULL);
    if (src != SQLITE_OK) {
        rc = fo_err_set(err, map_rc(src), "%s: create: %s", tmp,
                        db ? sqlite3_errmsg(db) : sqlite3_errstr(src));
        sqlite3_close(db);
        unlink(tmp);
        return rc;
    }
    if (sqlite3_close(db) != SQLITE_OK) {
        unlink(tmp);
        return fo_err_set(err, FO_E_IO, "%s: close failed", tmp);
    }
    /* the new file and then its name must be on disk before anything is
     * appended to it: a failed sync is a failed creation */
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        rc = fo_err_set(err, FO_E_IO, "%s: fsync: %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        unlink(tmp);
        return rc;
    }
    close(fd);
    if (link(tmp, path) != 0 && errno != EEXIST) {
        rc = fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
        unlink(tmp);
        return rc;
    }
    unlink(tmp);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        rc = fo_err_set(err, FO_E_IO, "%s: fsync of the directory: %s", dir,
                        strerror(errno));
        if (dfd >= 0)
            close(dfd);
        return rc; /* the name may not be durable: say so, keep the file */
    }
    close(dfd);
    return FO_OK;
}

/* A WAL or wal-index with no ledger.db: it was deleted or moved away,
 * perhaps under a process still writing. A ledger made beside them would
 * take their frames for its own (SQLite applies the WAL at a database's
 * path to it, whichever database it came from), so none is made. Checked
 * WAL first, then ledger.db: a process creating the ledger at the same
 * time links ledger.db before its WAL exists. */
static int refuse_orphans(const char *path, struct fo_err *err)
{
    static const char *const suffix[] = {"-wal", "-shm"};
    for (size_t i = 0; i < 2; i++) {
        char side[PATH_MAX];
        struct stat st;
        if (snprintf(side, sizeof(side), "%s%s", path, suffix[i]) >=
                (int)sizeof(side) ||
            stat(side, &st) != 0)
            continue;
        if (stat(path, &st) == 0)
            return FO_OK; /* made meanwhile by another process */
        return fo_err_set(err, FO_E_CORRUPT,
                          "%s: missing, but its %s is there (ledger.db was "
                          "deleted or moved away): stop what uses it, then "
                          "move ledger.db-wal and ledger.db-shm away",
                          path, suffix[i]);
    }
    return FO_OK;
}

static void sq_close(struct store *s)
{
    if (!s)
        return;
    for (int i = 0; i < ST__COUNT; i++)
        sqlite3_finalize(s->st[i]);
    if (s->db)
        sqlite3_close(s->db);
    free(s->path);
    for (int i = 0; i < F__COUNT; i++)
        free(s->side[i]);
    free(s);
}

/* ---- the files under an open handle ----------------------------------- */

/* SQLite writes through the descriptors it opened, whatever the path names
 * now: a ledger.db deleted or renamed over under a running process takes
 * every later commit with it into an inode nobody will open again, and a
 * WAL truncated beneath it loses frames SQLite still counts on. So each
 * commit is checked (sq_commit), with three stat() calls and a 32-byte
 * pread: before it, that the WAL at its path is the one this handle writes
 * (device and inode), holds every frame the wal-index says is committed
 * and starts with the header of their generation; after it, that
 * ledger.db and the wal-index at their paths are the ones it opened.
 * check (/health) does both.
 *
 * The wal-index header is read as SQLite's file format documents it
 * (walformat.html, "The WAL-Index Header"): two 48-byte copies at the start
 * of the -shm, native byte order; iVersion (offset 0) 3007000, isInit (12)
 * 1, szPage (14; 1 means 65536), mxFrame (16: the frames committed), aSalt
 * (32: bytes 16-23 of the WAL header of the current generation). It is
 * reached through SQLite's own mapping of it (xShmMap of the VFS), and the
 * WAL's header through SQLite's own descriptor: no descriptor of ours is
 * ever opened or closed on these files (closing one would drop this
 * process's POSIX locks on them). */
#define WALINDEX_VERSION 3007000u
#define WALINDEX_HDR 48
#define WALINDEX_REGION 32768 /* the region size SQLite maps the -shm in */
#define WAL_HDR 32
#define WAL_FRAME_HDR 24

static void id_record(const char *path, struct file_id *id)
{
    struct stat st;
    id->known = stat(path, &st) == 0;
    if (id->known) {
        id->dev = st.st_dev;
        id->ino = st.st_ino;
    }
}

/* 0 when the file at path is the one recorded (or none was), its stat in
 * *st; 1 when it is gone or another file, *why saying which; -1 when stat
 * fails otherwise (errno). */
static int id_moved(const char *path, const struct file_id *id, struct stat *st,
                    const char **why)
{
    if (!id->known)
        return 0;
    if (stat(path, st) != 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            return -1;
        *why = "deleted or renamed away";
        return 1;
    }
    if (st->st_dev != id->dev || st->st_ino != id->ino) {
        *why = "replaced by another file";
        return 1;
    }
    return 0;
}

/* Copies the wal-index header (one consistent copy) into h; -1 when there
 * is none to read or the two copies differ (a writer is updating it). */
static int walindex_read(sqlite3_file *f, unsigned char h[WALINDEX_HDR])
{
    void volatile *map = NULL;
    if (f->pMethods->xShmMap(f, 0, WALINDEX_REGION, 0, &map) != SQLITE_OK ||
        !map)
        return -1;
    const volatile unsigned char *p = map;
    unsigned char second[WALINDEX_HDR];
    /* SQLite writes the second copy, then the first: read in the other
     * order, as it does (walIndexTryHdr). */
    for (size_t i = 0; i < WALINDEX_HDR; i++)
        h[i] = p[i];
    if (f->pMethods->xShmBarrier)
        f->pMethods->xShmBarrier(f);
    for (size_t i = 0; i < WALINDEX_HDR; i++)
        second[i] = p[WALINDEX_HDR + i];
    uint32_t version;
    memcpy(&version, h, 4);
    if (memcmp(h, second, WALINDEX_HDR) != 0 || version != WALINDEX_VERSION ||
        h[12] != 1)
        return -1;
    return 0;
}

/* The store's error once it is lost. */
static int lost_error(struct store *s, struct fo_err *err)
{
    if (err)
        *err = s->lost_err;
    return FO_E_STORAGE_MOVED;
}

/* Marks the store lost (once: the first reason stays) and returns its
 * error. */
static int lose(struct store *s, struct fo_err *err, const char *path,
                const char *why)
{
    if (!s->lost) {
        s->lost = 1;
        fo_err_set(&s->lost_err, FO_E_STORAGE_MOVED,
                   "%s: %s under this process; writes are refused until it "
                   "is restarted",
                   path, why);
    }
    return lost_error(s, err);
}

/* File f at its path is the one the handle opened (one stat(), into *st,
 * which is zeroed when nothing was recorded for f). */
static int check_file(struct store *s, int f, struct stat *st,
                      struct fo_err *err)
{
    if (s->lost)
        return lost_error(s, err);
    const char *path = f == F_DB ? s->path : s->side[f];
    const char *why = NULL;
    memset(st, 0, sizeof(*st));
    int m = path ? id_moved(path, &s->id[f], st, &why) : 0;
    if (m < 0)
        return fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    return m > 0 ? lose(s, err, path, why) : FO_OK;
}

/* The WAL at its path is the one the handle writes, and it holds every
 * frame the wal-index says is committed: it is not shorter than they need
 * and starts with the header of their generation (its salts: else it was
 * overwritten, or cut below its header and written past). One stat() and
 * a 32-byte pread. The wal-index header is read before the WAL and again
 * after it: when it changed meanwhile (a checkpoint restarting or
 * truncating the WAL, another writer's commit), what was seen is no proof
 * of damage. So this is right outside the write lock too (/health); inside
 * it, nothing can change. */
static int check_wal(struct store *s, struct fo_err *err)
{
    sqlite3_file *db = NULL, *wal = NULL;
    unsigned char h[WALINDEX_HDR], again[WALINDEX_HDR];
    int have_hdr =
        !s->readonly && s->id[F_WAL].known &&
        sqlite3_file_control(s->db, "main", SQLITE_FCNTL_FILE_POINTER, &db) ==
            SQLITE_OK &&
        db && db->pMethods && db->pMethods->iVersion >= 2 &&
        db->pMethods->xShmMap && walindex_read(db, h) == 0;
    struct stat st;
    int rc = check_file(s, F_WAL, &st, err);
    if (rc || !have_hdr)
        return rc;
    uint32_t frames;
    uint16_t szpage;
    memcpy(&frames, h + 16, 4);
    memcpy(&szpage, h + 14, 2);
    uint64_t page = (szpage & 0xfe00u) + ((uint64_t)(szpage & 1u) << 16);
    if (frames == 0 || page < 512)
        return FO_OK; /* an empty (or restarted) WAL: nothing to lose */
    uint64_t need = WAL_HDR + (uint64_t)frames * (page + WAL_FRAME_HDR);
    char why[160];
    why[0] = '\0';
    if ((uint64_t)st.st_size < need) {
        snprintf(why, sizeof(why),
                 "truncated (%lld bytes; its %lu committed frames need "
                 "%llu)",
                 (long long)st.st_size, (unsigned long)frames,
                 (unsigned long long)need);
    } else if (sqlite3_file_control(s->db, "main", SQLITE_FCNTL_JOURNAL_POINTER,
                                    &wal) == SQLITE_OK &&
               wal && wal->pMethods) {
        unsigned char wh[WAL_HDR];
        int r = wal->pMethods->xRead(wal, wh, WAL_HDR, 0);
        if (r != SQLITE_OK && r != SQLITE_IOERR_SHORT_READ)
            return FO_OK; /* cannot tell */
        if (r != SQLITE_OK || memcmp(wh + 16, h + 32, 8) != 0)
            snprintf(why, sizeof(why),
                     "overwritten (its header is not the one of its %lu "
                     "committed frames)",
                     (unsigned long)frames);
    }
    if (!why[0] || walindex_read(db, again) != 0 ||
        memcmp(h, again, WALINDEX_HDR) != 0)
        return FO_OK;
    return lose(s, err, s->side[F_WAL], why);
}

static int sq_check(struct store *s, struct fo_err *err)
{
    struct stat st;
    int rc = check_file(s, F_DB, &st, err);
    if (!rc)
        rc = check_file(s, F_SHM, &st, err);
    return rc ? rc : check_wal(s, err);
}

/* Ledgers made before entries_parent existed get it on their first
 * read-write open (one pass over the entries; nothing else changes, and
 * older builds read the file as before). */
static int ensure_parent_index(struct store *s, struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_HAS_PARENT_INDEX, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    int src = sqlite3_step(q);
    done(q);
    if (src == SQLITE_ROW)
        return FO_OK;
    if (src != SQLITE_DONE)
        return db_fail(s, src, "schema", err);
    int rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc)
        return rc;
    rc = exec(s, PARENT_INDEX_SQL, err);
    if (!rc)
        rc = exec(s, "COMMIT", err);
    if (rc)
        exec(s, "ROLLBACK", NULL);
    return rc;
}

/* After the open (SQLite has ledger.db, and for a read-write handle the
 * WAL and the wal-index, open): which files they are. SQLite's own check
 * (SQLITE_FCNTL_HAS_MOVED, against the inode it opened) makes sure the
 * ledger.db recorded is the one it has. */
static int record_files(struct store *s, struct fo_err *err)
{
    static const char *const suffix[F__COUNT] = {"", "-wal", "-shm"};
    id_record(s->path, &s->id[F_DB]);
    int moved = 0;
    if (!s->id[F_DB].known ||
        sqlite3_file_control(s->db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) !=
            SQLITE_OK ||
        moved)
        return fo_err_set(err, FO_E_STORAGE_MOVED,
                          "%s: moved or replaced while being opened", s->path);
    if (s->readonly)
        return FO_OK;
    for (int i = F_WAL; i < F__COUNT; i++) {
        size_t n = strlen(s->path) + strlen(suffix[i]) + 1;
        s->side[i] = malloc(n);
        if (!s->side[i])
            return fo_err_set(err, FO_E_NOMEM, NULL);
        snprintf(s->side[i], n, "%s%s", s->path, suffix[i]);
        id_record(s->side[i], &s->id[i]);
    }
    return FO_OK;
}

static int sq_open(const char *dir, unsigned flags, int busy_ms,
                   struct store **out, struct fo_err *err)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/ledger.db", dir);
    if (n < 0 || (size_t)n >= sizeof(path))
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", dir);
    int rc;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT)
            return fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
        if (!(flags & STORE_CREATE) || (flags & STORE_READONLY))
            return fo_err_set(err, FO_E_NOT_FOUND,
                              "no ledger at %s (create one with `forum "
                              "ledger init`)",
                              dir);
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
            return fo_err_set(err, FO_E_IO, "%s: %s", dir, strerror(errno));
        rc = refuse_orphans(path, err);
        if (rc)
            return rc;
        rc = create_db(dir, path, err);
        if (rc)
            return rc;
    } else if (!S_ISREG(st.st_mode)) {
        /* Checked before anything opens it: opening a FIFO blocks until a
         * writer comes, and a device is not a ledger either. */
        return fo_err_set(err, FO_E_FOREIGN,
                          "%s: not a forum ledger (not a regular file; move "
                          "it away)",
                          path);
    }
    if ((flags & STORE_READONLY) && access(path, R_OK) != 0 && errno == EACCES)
        return fo_err_set(err, FO_E_IO,
                          "%s: permission denied (the ledger's files are "
                          "0600: run as the user that owns them)",
                          path);
    rc = check_header(path, err);
    if (rc)
        return rc;
    /* Read-only, in a directory we may not write, with no WAL to replay:
     * SQLite could not make its -shm file there, so the database is opened
     * as immutable (nothing of it is in a WAL; a writer, which needs to
     * write the directory, is not ours to wait for). */
    char uri[PATH_MAX * 3 + 32];
    const char *open_as = path;
    int uri_flag = 0;
    if ((flags & STORE_READONLY) && access(dir, W_OK) != 0) {
        char walp[PATH_MAX + 8];
        struct stat ws;
        snprintf(walp, sizeof(walp), "%s-wal", path);
        if (stat(walp, &ws) != 0 || ws.st_size == 0) {
            size_t u = (size_t)snprintf(uri, sizeof(uri), "file:");
            for (const char *c = path; *c && u + 4 < sizeof(uri); c++) {
                if (*c == '%' || *c == '?' || *c == '#')
                    u += (size_t)snprintf(uri + u, sizeof(uri) - u, "%%%02X",
                                          (unsigned char)*c);
                else
                    uri[u++] = *c;
            }
            snprintf(uri + u, sizeof(uri) - u, "?immutable=1");
            open_as = uri;
            uri_flag = SQLITE_OPEN_URI;
        }
    }

    struct store *s = calloc(1, sizeof(*s));
    if (!s)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    s->path = strdup(path);
    s->readonly = (flags & STORE_READONLY) != 0;
    int oflags = SQLITE_OPEN_NOMUTEX | uri_flag |
                 (s->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE);
    int src = sqlite3_open_v2(open_as, &s->db, oflags, NULL);
    if (!s->path || src != SQLITE_OK) {
        rc = s->path ? db_fail(s, src, "open", err)
                     : fo_err_set(err, FO_E_NOMEM, NULL);
        sq_close(s);
        return rc;
    }
    sqlite3_extended_result_codes(s->db, 1);
    rc = configure(s, busy_ms > 0 ? busy_ms : 10000, err);
    if (rc) {
        sq_close(s);
        return rc;
    }
    /* The header looked right; make SQLite read the schema now so damage
     * shows here as a clear error, not later. */
    sqlite3_stmt *q = stmt(s, ST_META_GET, err);
    if (!q) {
        rc = err ? err->code : FO_E_CORRUPT;
        if (rc == FO_E_IO)
            rc = fo_err_set(err, FO_E_CORRUPT,
                            "%s: damaged or not a forum ledger: %s", path,
                            sqlite3_errmsg(s->db));
        sq_close(s);
        return rc;
    }
    if (!s->readonly && (rc = ensure_parent_index(s, err)) != FO_OK) {
        sq_close(s);
        return rc;
    }
    if ((rc = record_files(s, err)) != FO_OK) {
        sq_close(s);
        return rc;
    }
    *out = s;
    return FO_OK;
}

static int sq_begin_write(struct store *s, struct fo_err *err)
{
    if (s->readonly)
        return fo_err_set(err, FO_E_INVALID, "%s: opened read-only", s->path);
    if (s->lost)
        return lost_error(s, err);
    int rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc == FO_OK)
        s->in_txn = 1;
    return rc;
}

static int sq_begin_read(struct store *s, struct fo_err *err)
{
    int rc = exec(s, "BEGIN", err);
    if (rc == FO_OK)
        s->in_txn = 1;
    return rc;
}

#ifdef FORUM_TEST_SEAMS
/* any handle's n-th commit from now (ledger_fail_commits_after) */
static atomic_int fail_any_in;
#endif

void store_sqlite_fail_any_after(int n)
{
#ifdef FORUM_TEST_SEAMS
    atomic_store(&fail_any_in, n);
#else
    (void)n;
#endif
}

static int sq_commit(struct store *s, struct fo_err *err)
{
#ifdef FORUM_TEST_SEAMS
    int any =
        atomic_load(&fail_any_in) > 0 && atomic_fetch_sub(&fail_any_in, 1) == 1;
    if (any || (s->fail_commit_in > 0 && --s->fail_commit_in == 0)) {
        exec(s, "ROLLBACK", NULL);
        s->in_txn = 0;
        return fo_err_set(err, FO_E_IO, "%s: commit: injected fault", s->path);
    }
#endif
    /* Before, under the write lock (no checkpoint can restart or truncate
     * the WAL meanwhile): nothing is committed into a WAL that is not the
     * one at the path, or on top of one that lost frames. Only now: a
     * commit writes its frames past the end, which would hide a truncation
     * from any later look at the size. */
    int code = check_wal(s, err);
    if (code) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        s->in_txn = 0;
        return code;
    }
    int rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        code = db_fail(s, rc, "commit", err);
        if (!sqlite3_get_autocommit(s->db))
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        s->in_txn = 0;
        return code;
    }
    s->in_txn = 0;
    /* After: a database moved before the commit returned took the commit
     * with it, and the caller must not acknowledge it; one moved later did
     * not (what was acknowledged was in the ledger's files when it was).
     * The wal-index too: one replaced lets another process write beside
     * this one as if it were alone. */
    struct stat st;
    code = check_file(s, F_DB, &st, err);
    return code ? code : check_file(s, F_SHM, &st, err);
}

static void sq_rollback(struct store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    s->in_txn = 0;
}

static void sq_fail_commit_after(struct store *s, int n)
{
    s->fail_commit_in = n;
}

static int sq_meta_get(struct store *s, const char *key, char **val,
                       struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_META_GET, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    int out = FO_OK;
    if (rc == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(q, 0);
        *val = strdup(t ? t : "");
        if (!*val)
            out = fo_err_set(err, FO_E_NOMEM, NULL);
    } else if (rc == SQLITE_DONE) {
        out = fo_err_set(err, FO_E_NOT_FOUND, "%s: no meta %s", s->path, key);
    } else {
        out = db_fail(s, rc, "meta", err);
    }
    done(q);
    return out;
}

static int sq_meta_set(struct store *s, const char *key, const char *val,
                       struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_META_SET, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, val, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    done(q);
    return rc == SQLITE_DONE ? FO_OK : db_fail(s, rc, "meta", err);
}

/* Reads entry columns 0..7 of q into rec. Returns 0, or -1 when a column
 * has the wrong type or size (a damaged or tampered row). */
static int read_rec(sqlite3_stmt *q, struct store_rec *rec)
{
    int bad = 0;
    memset(rec, 0, sizeof(*rec));
    rec->seq = sqlite3_column_int64(q, 0);
    rec->ts = sqlite3_column_int64(q, 1);
    const unsigned char *t = sqlite3_column_text(q, 2);
    size_t n = (size_t)sqlite3_column_bytes(q, 2);
    if (!t || n > STORE_ACTOR_MAX)
        bad = 1;
    else {
        memcpy(rec->actor, t, n);
        rec->actor_len = n;
    }
    t = sqlite3_column_text(q, 3);
    n = (size_t)sqlite3_column_bytes(q, 3);
    if (!t || n > STORE_KIND_MAX)
        bad = 1;
    else {
        memcpy(rec->kind, t, n);
        rec->kind_len = n;
    }
    if (sqlite3_column_type(q, 4) == SQLITE_NULL)
        rec->parent = -1;
    else if (sqlite3_column_type(q, 4) == SQLITE_INTEGER)
        rec->parent = sqlite3_column_int64(q, 4);
    else
        bad = 1;
    if (sqlite3_column_type(q, 0) != SQLITE_INTEGER ||
        sqlite3_column_type(q, 1) != SQLITE_INTEGER)
        bad = 1;
    uint8_t *dst[3] = {rec->payload, rec->prev, rec->hash};
    for (int i = 0; i < 3; i++) {
        const void *b = sqlite3_column_blob(q, 5 + i);
        if (!b || sqlite3_column_bytes(q, 5 + i) != 32)
            bad = 1;
        else
            memcpy(dst[i], b, 32);
    }
    return bad ? -1 : 0;
}

static int sq_head(struct store *s, int64_t *count, struct store_rec *last,
                   struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_HEAD, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    int rc = sqlite3_step(q);
    int out = FO_OK;
    if (rc == SQLITE_ROW) {
        struct store_rec tmp;
        if (read_rec(q, last ? last : &tmp) != 0 ||
            (last ? last : &tmp)->seq < 0 ||
            (last ? last : &tmp)->seq == INT64_MAX)
            out = fo_err_set(err, FO_E_CORRUPT, "%s: damaged head entry",
                             s->path);
        else
            *count = (last ? last : &tmp)->seq + 1;
    } else if (rc == SQLITE_DONE) {
        *count = 0;
    } else {
        out = db_fail(s, rc, "head", err);
    }
    done(q);
    return out;
}

static int sq_put_entry(struct store *s, const struct store_rec *r,
                        const void *body, size_t body_len, struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_PUT_ENTRY, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, r->seq);
    sqlite3_bind_int64(q, 2, r->ts);
    sqlite3_bind_text(q, 3, r->actor, (int)r->actor_len, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, r->kind, (int)r->kind_len, SQLITE_STATIC);
    if (r->parent < 0)
        sqlite3_bind_null(q, 5);
    else
        sqlite3_bind_int64(q, 5, r->parent);
    sqlite3_bind_blob(q, 6, r->payload, 32, SQLITE_STATIC);
    sqlite3_bind_blob(q, 7, r->prev, 32, SQLITE_STATIC);
    sqlite3_bind_blob(q, 8, r->hash, 32, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    done(q);
    if (rc != SQLITE_DONE)
        return db_fail(s, rc, "append", err);
    if (!body)
        return FO_OK;
    q = stmt(s, ST_PUT_BODY, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, r->seq);
    sqlite3_bind_blob64(q, 2, body, body_len, SQLITE_STATIC);
    rc = sqlite3_step(q);
    done(q);
    return rc == SQLITE_DONE ? FO_OK : db_fail(s, rc, "append body", err);
}

static int sq_put_node(struct store *s, int64_t pos, const uint8_t hash[32],
                       struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_PUT_NODE, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, pos);
    sqlite3_bind_blob(q, 2, hash, 32, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    done(q);
    return rc == SQLITE_DONE ? FO_OK : db_fail(s, rc, "tree", err);
}

static int sq_get_entry(struct store *s, int64_t seq, struct store_rec *rec,
                        int *has_body, struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_GET_ENTRY, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, seq);
    int rc = sqlite3_step(q);
    int out = FO_OK;
    if (rc == SQLITE_ROW) {
        if (read_rec(q, rec) != 0)
            out = fo_err_set(err, FO_E_CORRUPT, "entry %lld: damaged row",
                             (long long)seq);
        else if (has_body)
            *has_body = sqlite3_column_int(q, 8);
    } else if (rc == SQLITE_DONE) {
        out = fo_err_set(err, FO_E_NOT_FOUND, "entry %lld: not found",
                         (long long)seq);
    } else {
        out = db_fail(s, rc, "get", err);
    }
    done(q);
    return out;
}

static int sq_get_node(struct store *s, int64_t pos, uint8_t hash[32],
                       struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_GET_NODE, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, pos);
    int rc = sqlite3_step(q);
    int out = FO_OK;
    if (rc == SQLITE_ROW) {
        const void *b = sqlite3_column_blob(q, 0);
        if (!b || sqlite3_column_bytes(q, 0) != 32)
            out = fo_err_set(err, FO_E_CORRUPT, "tree node %lld: damaged",
                             (long long)pos);
        else
            memcpy(hash, b, 32);
    } else if (rc == SQLITE_DONE) {
        out = fo_err_set(err, FO_E_CORRUPT, "tree node %lld: missing",
                         (long long)pos);
    } else {
        out = db_fail(s, rc, "tree", err);
    }
    done(q);
    return out;
}

static int sq_get_body(struct store *s, int64_t seq, void **body, size_t *len,
                       struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_GET_BODY, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, seq);
    int rc = sqlite3_step(q);
    int out = FO_OK;
    if (rc == SQLITE_ROW) {
        size_t n = (size_t)sqlite3_column_bytes(q, 0);
        const void *b = sqlite3_column_blob(q, 0);
        char *copy = malloc(n + 1);
        if (!copy) {
            out = fo_err_set(err, FO_E_NOMEM, NULL);
        } else {
            if (n)
                memcpy(copy, b, n);
            copy[n] = '\0';
            *body = copy;
            *len = n;
        }
    } else if (rc == SQLITE_DONE) {
        out = fo_err_set(err, FO_E_NOT_FOUND, "entry %lld: no body",
                         (long long)seq);
    } else {
        out = db_fail(s, rc, "body", err);
    }
    done(q);
    return out;
}

static int sq_scan(struct store *s, int64_t from, int64_t limit,
                   int with_bodies, store_row_fn fn, void *ctx,
                   struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, with_bodies ? ST_SCAN_BODIES : ST_SCAN, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, from);
    sqlite3_bind_int64(q, 2, limit < 0 ? -1 : limit);
    int out = FO_OK, rc;
    struct store_row row;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int bad = read_rec(q, &row.rec);
        row.body = NULL;
        row.body_len = 0;
        if (with_bodies && sqlite3_column_type(q, 8) != SQLITE_NULL) {
            row.body = sqlite3_column_blob(q, 8);
            row.body_len = (size_t)sqlite3_column_bytes(q, 8);
            if (!row.body)
                row.body = "";
        }
        if (bad) {
            /* Hand the row on with a hash that cannot match, so verify
             * names the seq instead of failing the scan. */
            memset(row.rec.hash, 0xff, 32);
        }
        out = fn(ctx, &row);
        if (out)
            break;
    }
    if (out == FO_OK && rc != SQLITE_DONE)
        out = db_fail(s, rc, "scan", err);
    done(q);
    return out;
}

static int sq_nodes_begin(struct store *s, int64_t from, struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_SCAN_NODES, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    done(q);
    sqlite3_bind_int64(q, 1, from);
    return FO_OK;
}

static int sq_nodes_next(struct store *s, int64_t *pos, uint8_t hash[32],
                         struct fo_err *err)
{
    sqlite3_stmt *q = s->st[ST_SCAN_NODES];
    int rc = sqlite3_step(q);
    if (rc == SQLITE_DONE)
        return FO_E_NOT_FOUND;
    if (rc != SQLITE_ROW)
        return db_fail(s, rc, "scan tree", err);
    *pos = sqlite3_column_int64(q, 0);
    const void *b = sqlite3_column_blob(q, 1);
    if (!b || sqlite3_column_bytes(q, 1) != 32)
        memset(hash, 0xff, 32); /* damaged: cannot match any hash */
    else
        memcpy(hash, b, 32);
    return FO_OK;
}

static void sq_nodes_end(struct store *s)
{
    if (s->st[ST_SCAN_NODES])
        done(s->st[ST_SCAN_NODES]);
}

static int sq_find_payload(struct store *s, const uint8_t payload[32],
                           int (*fn)(void *ctx, int64_t seq), void *ctx,
                           struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_FIND_PAYLOAD, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_blob(q, 1, payload, 32, SQLITE_STATIC);
    int out = FO_OK, rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        out = fn(ctx, sqlite3_column_int64(q, 0));
        if (out)
            break;
    }
    if (out == FO_OK && rc != SQLITE_DONE)
        out = db_fail(s, rc, "find", err);
    done(q);
    return out;
}

static int sq_delete_body(struct store *s, int64_t seq, struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_DELETE_BODY, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, seq);
    int rc = sqlite3_step(q);
    done(q);
    return rc == SQLITE_DONE ? FO_OK : db_fail(s, rc, "delete body", err);
}

static int sq_count_bodies(struct store *s, int64_t *present,
                           struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_COUNT_BODIES, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    int rc = sqlite3_step(q);
    int out = FO_OK;
    if (rc == SQLITE_ROW)
        *present = sqlite3_column_int64(q, 0);
    else
        out = db_fail(s, rc, "count", err);
    done(q);
    return out;
}

static int sq_group_counts(struct store *s, const char *column,
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
    sqlite3_stmt *q = stmt(s, id, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    int out = FO_OK, rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(q, 0);
        out = fn(ctx, k ? k : "", sqlite3_column_int64(q, 1));
        if (out)
            break;
    }
    if (out == FO_OK && rc != SQLITE_DONE)
        out = db_fail(s, rc, "count", err);
    done(q);
    return out;
}

static int sq_put_checkpoint(struct store *s, int64_t size, int64_t ts,
                             const uint8_t root[32], const char *note,
                             struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_PUT_CHECKPOINT, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, size);
    sqlite3_bind_int64(q, 2, ts);
    sqlite3_bind_blob(q, 3, root, 32, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, note, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    done(q);
    return rc == SQLITE_DONE ? FO_OK : db_fail(s, rc, "checkpoint", err);
}

static int read_checkpoint(sqlite3_stmt *q, int64_t *size, uint8_t root[32],
                           const char **note)
{
    *size = sqlite3_column_int64(q, 0);
    const void *b = sqlite3_column_blob(q, 1);
    if (!b || sqlite3_column_bytes(q, 1) != 32)
        return -1;
    memcpy(root, b, 32);
    *note = (const char *)sqlite3_column_text(q, 2);
    return *note ? 0 : -1;
}

static int sq_get_checkpoint(struct store *s, int64_t max_size, int64_t *size,
                             uint8_t root[32], char **note, struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_GET_CHECKPOINT, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, max_size < 0 ? INT64_MAX : max_size);
    int rc = sqlite3_step(q);
    int out = FO_OK;
    if (rc == SQLITE_ROW) {
        const char *t;
        if (read_checkpoint(q, size, root, &t) != 0)
            out = fo_err_set(err, FO_E_CORRUPT, "damaged checkpoint row");
        else if (note && !(*note = strdup(t)))
            out = fo_err_set(err, FO_E_NOMEM, NULL);
    } else if (rc == SQLITE_DONE) {
        out = fo_err_set(err, FO_E_NOT_FOUND, "no signed checkpoint yet");
    } else {
        out = db_fail(s, rc, "checkpoint", err);
    }
    done(q);
    return out;
}

/* Steps q (bound by the caller), handing each entry row to fn. */
static int stream_rows(struct store *s, sqlite3_stmt *q, const char *what,
                       store_row_fn fn, void *ctx, struct fo_err *err)
{
    int out = FO_OK, rc;
    struct store_row row = {.body = NULL, .body_len = 0};
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (read_rec(q, &row.rec) != 0) {
            out =
                fo_err_set(err, FO_E_CORRUPT, "%s: damaged entry row", s->path);
            break;
        }
        out = fn(ctx, &row);
        if (out)
            break;
    }
    if (out == FO_OK && rc != SQLITE_DONE)
        out = db_fail(s, rc, what, err);
    done(q);
    return out;
}

static int sq_descendants(struct store *s, int64_t root, int64_t limit,
                          store_row_fn fn, void *ctx, struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_DESCENDANTS, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, root);
    sqlite3_bind_int64(q, 2, limit < 0 ? -1 : limit);
    return stream_rows(s, q, "descendants", fn, ctx, err);
}

static int sq_requests(struct store *s, int64_t from, store_row_fn fn,
                       void *ctx, struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_REQUESTS, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, from);
    return stream_rows(s, q, "requests", fn, ctx, err);
}

static int sq_marked(struct store *s, int which, int64_t from, store_row_fn fn,
                     void *ctx, struct fo_err *err)
{
    static const int st[] = {ST_SESSIONS, ST_TURNS, ST_GATEWAY};
    static const char *const what[] = {"sessions", "turns", "gateway calls"};
    if (which < 0 || which > 2)
        return fo_err_set(err, FO_E_INVALID, "marked: %d", which);
    sqlite3_stmt *q = stmt(s, st[which], err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, from);
    return stream_rows(s, q, what[which], fn, ctx, err);
}

static int sq_gates(struct store *s, int64_t from, store_row_fn fn, void *ctx,
                    struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_GATES, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, from);
    return stream_rows(s, q, "gates", fn, ctx, err);
}

/* VACUUM INTO a new file: one read transaction, so concurrent appends
 * neither block it nor make it start over, and the copy is one state of
 * the ledger (compacted); then synced. */
static int sq_backup(struct store *s, const char *path, struct fo_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return fo_err_set(err, errno == EEXIST ? FO_E_EXISTS : FO_E_IO,
                          "%s: %s", path, strerror(errno));
    close(fd);
    sqlite3_stmt *q = NULL;
    int src = sqlite3_prepare_v2(s->db, "VACUUM INTO ?1", -1, &q, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_bind_text(q, 1, path, -1, SQLITE_TRANSIENT);
    if (src == SQLITE_OK) {
        src = sqlite3_step(q);
        if (src == SQLITE_DONE)
            src = SQLITE_OK;
    }
    int rc = FO_OK;
    if (src != SQLITE_OK)
        rc = fo_err_set(err, map_rc(src), "%s: backup: %s", path,
                        sqlite3_errmsg(s->db));
    sqlite3_finalize(q);
    if (!rc) {
        int f = open(path, O_RDONLY | O_CLOEXEC);
        if (f < 0 || fsync(f) != 0)
            rc = fo_err_set(err, FO_E_IO, "%s: fsync: %s", path,
                            strerror(errno));
        if (f >= 0)
            close(f);
    }
    if (rc)
        unlink(path);
    return rc;
}

static int sq_scan_checkpoints(struct store *s,
                               int (*fn)(void *ctx, int64_t size,
                                         const uint8_t root[32],
                                         const char *note),
                               void *ctx, struct fo_err *err)
{
    sqlite3_stmt *q = stmt(s, ST_SCAN_CHECKPOINTS, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    int out = FO_OK, rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t size;
        uint8_t root[32];
        const char *note;
        if (read_checkpoint(q, &size, root, &note) != 0) {
            out = fo_err_set(err, FO_E_CORRUPT, "damaged checkpoint row");
            break;
        }
        out = fn(ctx, size, root, note);
        if (out)
            break;
    }
    if (out == FO_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
        out = db_fail(s, rc, "checkpoints", err);
    done(q);
    return out;
}

static int sq_put_cosignature(struct store *s, int64_t size, const char *key,
                              int64_t ts, const char *line, struct fo_err *err)
{
    int rc = exec(s, COSIG_TABLE_SQL, err);
    if (rc)
        return rc;
    sqlite3_stmt *q = stmt(s, ST_PUT_COSIG, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, size);
    sqlite3_bind_text(q, 2, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, ts);
    sqlite3_bind_text(q, 4, line, -1, SQLITE_STATIC);
    int src = sqlite3_step(q);
    done(q);
    return src == SQLITE_DONE ? FO_OK : db_fail(s, src, "cosignature", err);
}

static int sq_scan_cosignatures(struct store *s, int64_t size,
                                int (*fn)(void *ctx, const char *key,
                                          int64_t ts, const char *line),
                                void *ctx, struct fo_err *err)
{
    /* Not prepared (nor cached) before the table exists. */
    sqlite3_stmt *q = stmt(s, ST_HAS_COSIG, err);
    if (!q)
        return err ? err->code : FO_E_IO;
    int src = sqlite3_step(q);
    done(q);
    if (src == SQLITE_DONE)
        return FO_OK;
    if (src != SQLITE_ROW)
        return db_fail(s, src, "cosignatures", err);
    if (!(q = stmt(s, ST_SCAN_COSIG, err)))
        return err ? err->code : FO_E_IO;
    sqlite3_bind_int64(q, 1, size);
    int out = FO_OK;
    while ((src = sqlite3_step(q)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(q, 0);
        const char *line = (const char *)sqlite3_column_text(q, 2);
        if (!key || !line) {
            out = fo_err_set(err, FO_E_CORRUPT, "damaged cosignature row");
            break;
        }
        out = fn(ctx, key, sqlite3_column_int64(q, 1), line);
        if (out)
            break;
    }
    if (out == FO_OK && src != SQLITE_DONE && src != SQLITE_ROW)
        out = db_fail(s, src, "cosignatures", err);
    done(q);
    return out;
}

static int sq_wal_truncate(struct store *s, struct fo_err *err)
{
    int log = 0, ckpt = 0;
    int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE,
                                       &log, &ckpt);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, "wal checkpoint", err);
    return FO_OK;
}

const struct store_ops store_sqlite_ops = {
    .name = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .begin_write = sq_begin_write,
    .begin_read = sq_begin_read,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .meta_get = sq_meta_get,
    .meta_set = sq_meta_set,
    .head = sq_head,
    .put_entry = sq_put_entry,
    .put_node = sq_put_node,
    .get_entry = sq_get_entry,
    .get_node = sq_get_node,
    .get_body = sq_get_body,
    .scan = sq_scan,
    .descendants = sq_descendants,
    .requests = sq_requests,
    .gates = sq_gates,
    .marked = sq_marked,
    .backup = sq_backup,
    .nodes_begin = sq_nodes_begin,
    .nodes_next = sq_nodes_next,
    .nodes_end = sq_nodes_end,
    .find_payload = sq_find_payload,
    .delete_body = sq_delete_body,
    .count_bodies = sq_count_bodies,
    .group_counts = sq_group_counts,
    .put_checkpoint = sq_put_checkpoint,
    .get_checkpoint = sq_get_checkpoint,
    .scan_checkpoints = sq_scan_checkpoints,
    .put_cosignature = sq_put_cosignature,
    .scan_cosignatures = sq_scan_cosignatures,
    .wal_truncate = sq_wal_truncate,
    .check = sq_check,
    .fail_commit_after = sq_fail_commit_after,
};

/* test_proof: roots, inclusion and consistency proofs read from the stored
 * tree, signed checkpoints and their key files, verify against a checkpoint
 * (a clean rewrite is caught), bundles, and the CLI's JSON shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <sqlite3.h>

#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "ledger/ledger_int.h"
#include "ledger/merkle.h"
#include "ledger/note.h"
#include "ledger/proof.h"
#include "tests/testutil.h"

static struct ledger *open_dir(const char *dir, unsigned flags)
{
    struct ledger *l = NULL;
    struct fo_err err;
    int rc = ledger_open(dir, flags, NULL, &l, &err);
    cr_assert_eq(rc, FO_OK, "open: %s", err.msg);
    return l;
}

static void fill(struct ledger *l, int n)
{
    char body[64];
    struct fo_err err;
    for (int i = 0; i < n; i++) {
        snprintf(body, sizeof(body), "{\"i\":%d}", i);
        int rc = ledger_append(l, "tester", "step", LEDGER_NO_PARENT, body,
                               strlen(body), NULL, &err);
        cr_assert_eq(rc, FO_OK, "append: %s", err.msg);
    }
}

/* The RFC 6962 root recomputed from the leaf hashes, with no storage. */
static void scratch_root(uint8_t (*leaves)[32], size_t n, uint8_t out[32])
{
    if (n == 0) {
        merkle_empty_root(out);
        return;
    }
    if (n == 1) {
        memcpy(out, leaves[0], 32);
        return;
    }
    size_t k = 1;
    while (k * 2 < n)
        k *= 2;
    uint8_t l[32], r[32];
    scratch_root(leaves, k, l);
    scratch_root(leaves + k, n - k, r);
    merkle_node_hash(NULL, l, r, out);
}

Test(proof_root, stored_tree_matches_scratch_at_every_size)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir, LEDGER_OPEN_CREATE);
    enum { N = 1000 };
    uint8_t(*leaves)[32] = calloc(N, 32);
    struct ledger_append reqs[50];
    struct fo_err err;
    srand(4242);
    int64_t count = 0;
    uint8_t want[32], got[32];
    cr_assert_eq(ledger_root(l, 0, got, &err), FO_OK, "%s", err.msg);
    scratch_root(leaves, 0, want);
    cr_assert_eq(memcmp(want, got, 32), 0);
    while (count < N) {
        size_t n = 1 + (size_t)(rand() % 50);
        if (count + (int64_t)n > N)
            n = (size_t)(N - count);
        for (size_t i = 0; i < n; i++)
            reqs[i] = (struct ledger_append){.actor = "a",
                                             .kind = "k",
                                             .parent = LEDGER_NO_PARENT,
                                             .body = "{}",
                                             .body_len = 2};
        cr_assert_eq(ledger_append_batch(l, reqs, n, &err), FO_OK, "%s",
                     err.msg);
        for (size_t i = 0; i < n; i++) {
            cr_assert_eq(reqs[i].rc, FO_OK);
            merkle_leaf_hash(NULL, reqs[i].entry.hash, 32,
                             leaves[reqs[i].entry.seq]);
        }
        int64_t before = count;
        count += (int64_t)n;
        /* every size this batch added, and the one before it */
        for (int64_t s = before; s <= count; s++) {
            scratch_root(leaves, (size_t)s, want);
            cr_assert_eq(ledger_root(l, s, got, &err), FO_OK, "%s", err.msg);
            cr_assert_eq(memcmp(want, got, 32), 0, "root at size %lld",
                         (long long)s);
        }
    }
    /* and again from scratch at every size, now the tree is complete */
    for (int64_t s = 0; s <= N; s += 7) {
        scratch_root(leaves, (size_t)s, want);
        cr_assert_eq(ledger_root(l, s, got, &err), FO_OK);
        cr_assert_eq(memcmp(want, got, 32), 0);
    }
    cr_assert_eq(ledger_root(l, N + 1, got, &err), FO_E_INVALID);
    int64_t size = 0;
    cr_assert_eq(ledger_tree_head(l, &size, got, &err), FO_OK);
    cr_assert_eq(size, N);
    free(leaves);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(proof_proofs, verify_and_fail_when_flipped)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir, LEDGER_OPEN_CREATE);
    fill(l, 37);
    struct fo_err err;
    struct ledger_inclusion *ip = malloc(sizeof(*ip));
    struct ledger_consistency *cp = malloc(sizeof(*cp));
    for (int64_t size = 1; size <= 37; size += 3) {
        for (int64_t i = 0; i < size; i++) {
            cr_assert_eq(ledger_prove_inclusion(l, i, size, ip, &err), FO_OK,
                         "%s", err.msg);
            struct ledger_entry e;
            cr_assert_eq(ledger_get(l, i, &e, NULL, &err), FO_OK);
            uint8_t leaf[32];
            merkle_leaf_hash(NULL, e.hash, 32, leaf);
            cr_assert_eq(memcmp(leaf, ip->leaf_hash, 32), 0);
            cr_assert_eq(
                merkle_verify_inclusion(leaf, (uint64_t)i, (uint64_t)size,
                                        (const uint8_t(*)[32])ip->path,
                                        ip->path_len, ip->root, &err),
                FO_OK, "%lld/%lld: %s", (long long)i, (long long)size, err.msg);
            if (ip->path_len > 0) {
                ip->path[ip->path_len / 2][5] ^= 1;
                cr_assert_eq(
                    merkle_verify_inclusion(leaf, (uint64_t)i, (uint64_t)size,
                                            (const uint8_t(*)[32])ip->path,
                                            ip->path_len, ip->root, &err),
                    FO_E_VERIFY);
            }
        }
    }
    for (int64_t a = 1; a <= 37; a++) {
        for (int64_t b = a; b <= 37; b++) {
            cr_assert_eq(ledger_prove_consistency(l, a, b, cp, &err), FO_OK,
                         "%s", err.msg);
            cr_assert_eq(
                merkle_verify_consistency(
                    (uint64_t)a, (uint64_t)b, cp->root1, cp->root2,
                    (const uint8_t(*)[32])cp->path, cp->path_len, &err),
                FO_OK, "%lld..%lld: %s", (long long)a, (long long)b, err.msg);
            if (cp->path_len > 0) {
                cp->path[0][31] ^= 0x80;
                cr_assert_neq(merkle_verify_consistency(
                                  (uint64_t)a, (uint64_t)b, cp->root1,
                                  cp->root2, (const uint8_t(*)[32])cp->path,
                                  cp->path_len, &err),
                              FO_OK);
            }
        }
    }
    /* defaults: the current size */
    cr_assert_eq(ledger_prove_inclusion(l, 3, -1, ip, &err), FO_OK);
    cr_assert_eq(ip->size, 37);
    cr_assert_eq(ledger_prove_consistency(l, 3, -1, cp, &err), FO_OK);
    cr_assert_eq(cp->second, 37);
    /* refusals */
    cr_assert_eq(ledger_prove_consistency(l, 0, 5, cp, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "empty tree"), "%s", err.msg);
    cr_assert_eq(ledger_prove_consistency(l, 6, 5, cp, &err), FO_E_INVALID);
    cr_assert_eq(ledger_prove_consistency(l, 1, 38, cp, &err), FO_E_INVALID);
    cr_assert_eq(ledger_prove_inclusion(l, 5, 5, ip, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "seq 5"), "%s", err.msg);
    cr_assert_eq(ledger_prove_inclusion(l, 0, 38, ip, &err), FO_E_INVALID);
    free(ip);
    free(cp);
    ledger_close(l);
    tu_rmrf(dir);
}

static char *path_in(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    cr_assert(p);
    memcpy(p, dir, strlen(dir));
    p[strlen(dir)] = '/';
    memcpy(p + strlen(dir) + 1, name, strlen(name) + 1);
    return p;
}

Test(proof_checkpoint, key_files_and_signed_notes)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir, LEDGER_OPEN_CREATE);
    fill(l, 5);
    struct fo_err err;
    struct ledger_checkpoint c1 = {0}, c2 = {0}, c3 = {0}, latest = {0};
    cr_assert_eq(ledger_checkpoint_latest(l, &latest, &err), FO_E_NOT_FOUND);
    cr_assert_eq(ledger_checkpoint_sign(l, 3, &c1, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(c1.size, 3);
    char *kp = path_in(dir, "checkpoint.key"),
         *vp = path_in(dir, "checkpoint.vkey");
    struct stat st;
    cr_assert_eq(stat(kp, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    size_t klen = 0, vlen = 0;
    char *ktext = tu_read_file(kp, &klen), *vtext = tu_read_file(vp, &vlen);
    cr_assert(ktext && vtext);
    cr_assert_eq(strncmp(ktext, "PRIVATE+KEY+", 12), 0);
    cr_assert_eq(ktext[klen - 1], '\n');
    cr_assert_eq(vtext[vlen - 1], '\n');
    char *vk = NULL;
    cr_assert_eq(ledger_verifier_key(l, &vk, &err), FO_OK);
    cr_assert_eq(strlen(vk), vlen - 1);
    cr_assert_eq(memcmp(vk, vtext, vlen - 1), 0);
    /* the vkey opens our note; the origin is the key name */
    struct note_verifier *v = NULL;
    cr_assert_eq(note_verifier_parse(vk, strlen(vk), &v, &err), FO_OK);
    cr_assert_str_eq(note_verifier_name(v), ledger_origin(l));
    struct note_checkpoint nc;
    cr_assert_eq(note_checkpoint_open(c1.note, strlen(c1.note), v, &nc, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_eq(nc.size, 3);
    cr_assert_eq(memcmp(nc.root, c1.root, 32), 0);
    uint8_t r3[32];
    cr_assert_eq(ledger_root(l, 3, r3, &err), FO_OK);
    cr_assert_eq(memcmp(r3, c1.root, 32), 0);
    /* signing the same size again gives the stored note */
    cr_assert_eq(ledger_checkpoint_sign(l, 3, &c2, &err), FO_OK);
    cr_assert_str_eq(c1.note, c2.note);
    cr_assert_eq(ledger_checkpoint_sign(l, -1, &c3, &err), FO_OK);
    cr_assert_eq(c3.size, 5);
    cr_assert_eq(ledger_checkpoint_latest(l, &latest, &err), FO_OK);
    cr_assert_eq(latest.size, 5);
    cr_assert_str_eq(latest.note, c3.note);
    struct ledger_checkpoint bad = {0};
    cr_assert_eq(ledger_checkpoint_sign(l, 6, &bad, &err), FO_E_INVALID);
    ledger_close(l);
    /* a second open reads the same key */
    l = open_dir(dir, 0);
    char *vk2 = NULL;
    cr_assert_eq(ledger_verifier_key(l, &vk2, &err), FO_OK);
    cr_assert_str_eq(vk, vk2);
    ledger_close(l);
    /* read-only: the latest is served, never signed */
    l = open_dir(dir, LEDGER_OPEN_READONLY);
    ledger_checkpoint_release(&latest);
    cr_assert_eq(ledger_checkpoint_get(l, &latest, &err), FO_OK);
    cr_assert_eq(latest.size, 5);
    ledger_close(l);
    note_verifier_free(v);
    free(vk);
    free(vk2);
    free(ktext);
    free(vtext);
    free(kp);
    free(vp);
    ledger_checkpoint_release(&c1);
    ledger_checkpoint_release(&c2);
    ledger_checkpoint_release(&c3);
    ledger_checkpoint_release(&latest);
    tu_rmrf(dir);
}

/* Rewrites the log cleanly from `from`: entry `from` gets a new actor, then
 * every hash and prev from there on is recomputed, and the tree table is
 * rebuilt from the new leaves, so the ledger verifies on its own. */
struct rebuild {
    sqlite3 *db;
};

static int put_node(void *ctx, unsigned level, uint64_t index,
                    const uint8_t hash[32])
{
    if (level < LEDGER_TREE_MIN_LEVEL)
        return 0; /* not stored: recomputed from the entries */
    struct rebuild *r = ctx;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(r->db,
                                    "INSERT INTO tree(pos, hash) VALUES (?1, "
                                    "?2)",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(st, 1, ledger_node_pos(level, index));
    sqlite3_bind_blob(st, 2, hash, 32, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    return 0;
}

static void clean_rewrite(const char *dir, int64_t from)
{
    struct ledger *l = open_dir(dir, 0);
    struct fo_err err;
    int64_t n = 0;
    cr_assert_eq(ledger_count(l, &n, &err), FO_OK);
    char *dbp = path_in(dir, "ledger.db");
    struct rebuild r;
    cr_assert_eq(sqlite3_open(dbp, &r.db), SQLITE_OK);
    cr_assert_eq(
        sqlite3_exec(r.db, "BEGIN; DELETE FROM tree", NULL, NULL, NULL),
        SQLITE_OK);
    struct merkle_frontier *f = malloc(sizeof(*f));
    merkle_frontier_init(f);
    struct ledger_entry prev;
    for (int64_t s = 0; s < n; s++) {
        struct ledger_entry e;
        cr_assert_eq(ledger_get(l, s, &e, NULL, &err), FO_OK);
        if (s >= from) {
            if (s == from)
                snprintf(e.actor, sizeof(e.actor), "%s", "mallory");
            if (s > 0)
                memcpy(e.prev, prev.hash, 32);
            cr_assert_eq(ledger_entry_hash(&e, e.hash), FO_OK);
            sqlite3_stmt *st;
            sqlite3_prepare_v2(r.db,
                               "UPDATE entries SET actor = ?1, prev = ?2, "
                               "hash = ?3 WHERE seq = ?4",
                               -1, &st, NULL);
            sqlite3_bind_text(st, 1, e.actor, -1, SQLITE_STATIC);
            sqlite3_bind_blob(st, 2, e.prev, 32, SQLITE_STATIC);
            sqlite3_bind_blob(st, 3, e.hash, 32, SQLITE_STATIC);
            sqlite3_bind_int64(st, 4, s);
            cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
            sqlite3_finalize(st);
        }
        uint8_t leaf[32];
        merkle_leaf_hash(NULL, e.hash, 32, leaf);
        cr_assert_eq(merkle_frontier_push(f, NULL, leaf, put_node, &r), 0);
        prev = e;
    }
    cr_assert_eq(sqlite3_exec(r.db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(r.db);
    free(f);
    free(dbp);
    ledger_close(l);
}

static void write_str(const char *path, const char *s)
{
    cr_assert_eq(tu_write_file(path, s, strlen(s)), 0);
}

Test(proof_verify, clean_rewrite_caught_by_checkpoint)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir, LEDGER_OPEN_CREATE);
    fill(l, 40); /* past two stored subtrees of 16 leaves */
    struct fo_err err;
    struct ledger_checkpoint cp = {0};
    cr_assert_eq(ledger_checkpoint_sign(l, 10, &cp, &err), FO_OK);
    ledger_close(l);
    char *np = path_in(dir, "old.note");
    write_str(np, cp.note);
    char vkarg[600];
    snprintf(vkarg, sizeof(vkarg), "@%s/checkpoint.vkey", dir);

    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify",
                                "--checkpoint", np, "--vkey", vkarg, NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);

    clean_rewrite(dir, 4);
    /* the ledger's own stored checkpoint of size 10 no longer matches the
     * rewritten entries: plain verify catches that much */
    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "verify", NULL);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "checkpoint_mismatch"), "%s", r.out);
    tu_run_free(&r);
    /* a thorough rewrite drops the stored checkpoints too: then only a
     * checkpoint kept elsewhere tells */
    char *dbp = path_in(dir, "ledger.db");
    sqlite3 *cdb = NULL;
    cr_assert_eq(sqlite3_open(dbp, &cdb), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(cdb, "DELETE FROM checkpoints", NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(cdb);
    free(dbp);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify", NULL);
    cr_assert_eq(r.status, 0, "plain verify should pass: %s%s", r.out, r.err);
    tu_run_free(&r);

    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "verify",
                  "--checkpoint", np, "--vkey", vkarg, NULL);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    cJSON *o = tu_run_json(&r);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(o, "ok")));
    cr_assert_str_eq(cJSON_GetObjectItem(o, "reason")->valuestring,
                     "checkpoint_mismatch");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "chain")));
    cJSON_Delete(o);
    tu_run_free(&r);

    /* a wrong key: bad_signature, exit 1 */
    char *dir2 = tu_tmpdir();
    l = open_dir(dir2, LEDGER_OPEN_CREATE);
    char *vk2 = NULL;
    cr_assert_eq(ledger_verifier_key(l, &vk2, &err), FO_OK);
    ledger_close(l);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "verify",
                  "--checkpoint", np, "--vkey", vk2, NULL);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    o = tu_run_json(&r);
    cr_assert_str_eq(cJSON_GetObjectItem(o, "reason")->valuestring,
                     "bad_signature");
    cJSON_Delete(o);
    tu_run_free(&r);

    /* a truncated log: checkpoint_beyond_log */
    char sqlp[600];
    snprintf(sqlp, sizeof(sqlp), "%s/ledger.db", dir);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(sqlp, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db,
                              "DELETE FROM entries WHERE seq >= 8;"
                              "DELETE FROM bodies WHERE seq >= 8;"
                              "DELETE FROM tree WHERE pos >= 8 * 64",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(db);
    clean_rewrite(dir, 7);
    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "verify",
                  "--checkpoint", np, "--vkey", vkarg, NULL);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    o = tu_run_json(&r);
    cr_assert_str_eq(cJSON_GetObjectItem(o, "reason")->valuestring,
                     "checkpoint_beyond_log");
    cJSON_Delete(o);
    tu_run_free(&r);

    /* usage: --checkpoint without --vkey */
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--checkpoint", np,
                  NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);

    free(vk2);
    free(np);
    ledger_checkpoint_release(&cp);
    tu_rmrf(dir2);
    tu_rmrf(dir);
}

/* ---- bundles ------------------------------------------------------------ */

static cJSON *load_json(const char *path)
{
    size_t n = 0;
    char *t = tu_read_file(path, &n);
    cr_assert(t);
    cJSON *o = NULL;
    cr_assert_eq(fo_json_parse(t, n, &o, NULL), FO_OK);
    free(t);
    return o;
}

static void save_json(const char *path, const cJSON *o)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(o, &b, NULL), FO_OK);
    cr_assert_eq(tu_write_file(path, b.data, b.len), 0);
    fo_buf_release(&b);
}

/* Flips one character of the string o[key] at pos (hex or base64 stays
 * valid: '0'<->'1', else 'a'<->'b' ...). */
static void flip_char(char *s, size_t pos)
{
    s[pos] = s[pos] == '0'   ? '1'
             : s[pos] == 'A' ? 'B'
             : s[pos] == 'a' ? 'b'
                             : 'a';
}

enum tamper {
    T_NONE,
    T_ACTOR,
    T_HASH,
    T_BODY,
    T_PATH,
    T_ROOT_LINE,
    T_SIG,
    T_PROOF_SIZE,
    T_EXTRA_ENTRY,
    T_EXTRA_TOP,
    T_EXTRA_PROOF,
    T_BODY_MARK,
};

static struct tu_run verify_tampered(const char *bundle, const char *dir,
                                     enum tamper t, const char *vkey)
{
    cJSON *o = load_json(bundle);
    cJSON *e = cJSON_GetObjectItem(o, "entry");
    cJSON *p = cJSON_GetObjectItem(o, "proof");
    char *cp = cJSON_GetObjectItem(o, "checkpoint")->valuestring;
    switch (t) {
    case T_NONE:
        break;
    case T_ACTOR:
        cJSON_ReplaceItemInObject(e, "actor", cJSON_CreateString("mallory"));
        break;
    case T_HASH:
        flip_char(cJSON_GetObjectItem(e, "hash")->valuestring, 10);
        break;
    case T_BODY:
        cJSON_ReplaceItemInObject(o, "body", cJSON_CreateString("forged"));
        break;
    case T_PATH:
        flip_char(
            cJSON_GetArrayItem(cJSON_GetObjectItem(p, "path"), 0)->valuestring,
            3);
        break;
    case T_ROOT_LINE: { /* the third line: the base64 root */
        char *nl = strchr(strchr(cp, '\n') + 1, '\n');
        flip_char(nl + 1, 0);
        break;
    }
    case T_SIG: { /* inside the signature's base64, past the key id */
        char *sp = strrchr(cp, ' ');
        flip_char(sp + 1, 20);
        break;
    }
    case T_PROOF_SIZE:
        cJSON_ReplaceItemInObject(p, "size", cJSON_CreateNumber(4));
        break;
    case T_EXTRA_ENTRY:
        cJSON_AddStringToObject(e, "extra", "not hashed");
        break;
    case T_EXTRA_TOP:
        cJSON_AddStringToObject(o, "note", "not signed");
        break;
    case T_EXTRA_PROOF:
        cJSON_AddNumberToObject(p, "tree_id", 7);
        break;
    case T_BODY_MARK:
        cJSON_ReplaceItemInObject(e, "body", cJSON_CreateString("redacted"));
        break;
    }
    char *out = path_in(dir, "tampered.json");
    save_json(out, o);
    cJSON_Delete(o);
    struct tu_run r =
        tu_forumv(NULL, "verify-bundle", out, "--vkey", vkey, NULL);
    free(out);
    return r;
}

Test(proof_bundle, valid_and_every_tamper_named)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir, LEDGER_OPEN_CREATE);
    fill(l, 9);
    ledger_close(l);
    char *bp = path_in(dir, "b.json");
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "bundle", "5",
                                "-o", bp, NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    cJSON *b = load_json(bp);
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(b, "body")));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(b, "vkey")));
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "proof"), "size")
                     ->valuedouble,
                 9);
    cJSON_Delete(b);
    char vkarg[600];
    snprintf(vkarg, sizeof(vkarg), "@%s/checkpoint.vkey", dir);

    r = verify_tampered(bp, dir, T_NONE, vkarg);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);

    static const struct {
        enum tamper t;
        const char *what;
    } cases[] = {
        {T_ACTOR, "entry hash"},    {T_HASH, "entry hash"},
        {T_BODY, "body"},           {T_PATH, "proof"},
        {T_ROOT_LINE, "signature"}, {T_SIG, "signature"},
        {T_PROOF_SIZE, "size"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r = verify_tampered(bp, dir, cases[i].t, vkarg);
        cr_assert_eq(r.status, 1, "case %zu: %s%s", i, r.out, r.err);
        cr_assert(strstr(r.out, cases[i].what), "case %zu: want %s in: %s", i,
                  cases[i].what, r.out);
        tu_run_free(&r);
    }

    /* members no hash or signature covers are refused, by name (exit 2) */
    static const struct {
        enum tamper t;
        const char *what;
    } extras[] = {
        {T_EXTRA_ENTRY, "bundle: entry: unknown field \"extra\""},
        {T_EXTRA_TOP, "bundle: unknown field \"note\""},
        {T_EXTRA_PROOF, "bundle: proof: unknown field \"tree_id\""},
        {T_BODY_MARK, "entry: body must be \"present\""},
    };
    for (size_t i = 0; i < sizeof(extras) / sizeof(extras[0]); i++) {
        r = verify_tampered(bp, dir, extras[i].t, vkarg);
        cr_assert_eq(r.status, 2, "extra %zu: %s%s", i, r.out, r.err);
        cr_assert(strstr(r.err, extras[i].what), "extra %zu: want %s in: %s", i,
                  extras[i].what, r.err);
        tu_run_free(&r);
    }

    /* another ledger's key: the signature fails, whatever the bundle says */
    char *dir2 = tu_tmpdir();
    l = open_dir(dir2, LEDGER_OPEN_CREATE);
    char *vk2 = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_verifier_key(l, &vk2, &err), FO_OK);
    ledger_close(l);
    r = verify_tampered(bp, dir, T_NONE, vk2);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "signature"), "%s", r.out);
    tu_run_free(&r);

    /* bad input: exit 2 */
    char *junk = path_in(dir, "junk.json");
    write_str(junk, "{not json");
    r = tu_forumv(NULL, "verify-bundle", junk, "--vkey", vkarg, NULL);
    cr_assert_eq(r.status, 2, "%s%s", r.out, r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "verify-bundle", bp, NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);

    /* a redacted body: null, and the bundle still verifies */
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "redact", "2", "--reason",
                  "test", NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "bundle", "2", "-o", bp,
                  NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    b = load_json(bp);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(b, "body")));
    cJSON_Delete(b);
    r = tu_forumv(NULL, "verify-bundle", bp, "--vkey", vkarg, NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);

    free(junk);
    free(vk2);
    free(bp);
    tu_rmrf(dir2);
    tu_rmrf(dir);
}

/* ---- the CLI's JSON shapes ---------------------------------------------- */

static int is_hex64(const cJSON *v)
{
    if (!cJSON_IsString(v) || strlen(v->valuestring) != 64)
        return 0;
    for (const char *p = v->valuestring; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

static int is_hex_path(const cJSON *a)
{
    const cJSON *h;
    if (!cJSON_IsArray(a))
        return 0;
    cJSON_ArrayForEach (h, a) {
        if (!is_hex64(h))
            return 0;
    }
    return 1;
}

Test(proof_cli, json_shapes_and_exit_codes)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir, LEDGER_OPEN_CREATE);
    fill(l, 11);
    ledger_close(l);

    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger",
                                "checkpoint", NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cJSON *o = tu_run_json(&r);
    cr_assert(is_hex64(cJSON_GetObjectItem(o, "checkpoint")));
    cr_assert(is_hex64(cJSON_GetObjectItem(o, "root")));
    cr_assert_str_eq(cJSON_GetObjectItem(o, "checkpoint")->valuestring,
                     cJSON_GetObjectItem(o, "root")->valuestring);
    cr_assert_eq(cJSON_GetObjectItem(o, "size")->valuedouble, 11);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(o, "note")));
    cr_assert_eq(cJSON_GetArraySize(o), 4);
    char *note = strdup(cJSON_GetObjectItem(o, "note")->valuestring);
    cJSON_Delete(o);
    tu_run_free(&r);

    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "checkpoint",
                  "--size", "4", NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    o = tu_run_json(&r);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "note")));
    cr_assert_eq(cJSON_GetObjectItem(o, "size")->valuedouble, 4);
    cJSON_Delete(o);
    tu_run_free(&r);

    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "prove", "7",
                  NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    o = tu_run_json(&r);
    cr_assert_eq(cJSON_GetObjectItem(o, "index")->valuedouble, 7);
    cr_assert_eq(cJSON_GetObjectItem(o, "size")->valuedouble, 11);
    cr_assert(is_hex64(cJSON_GetObjectItem(o, "leaf_hash")));
    cr_assert(is_hex64(cJSON_GetObjectItem(o, "root")));
    cr_assert(is_hex_path(cJSON_GetObjectItem(o, "path")));
    cr_assert_eq(cJSON_GetArraySize(o), 5);
    cJSON_Delete(o);
    tu_run_free(&r);

    r = tu_forumv(NULL, "--ledger", dir, "--json", "ledger", "consistency", "3",
                  "9", NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    o = tu_run_json(&r);
    cr_assert_eq(cJSON_GetObjectItem(o, "first")->valuedouble, 3);
    cr_assert_eq(cJSON_GetObjectItem(o, "second")->valuedouble, 9);
    cr_assert(is_hex64(cJSON_GetObjectItem(o, "root1")));
    cr_assert(is_hex64(cJSON_GetObjectItem(o, "root2")));
    cr_assert(is_hex_path(cJSON_GetObjectItem(o, "path")));
    cr_assert_eq(cJSON_GetArraySize(o), 5);
    cJSON_Delete(o);
    tu_run_free(&r);

    /* refusals: from 0, beyond the log; usage */
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "consistency", "0", "5",
                  NULL);
    cr_assert_eq(r.status, 2, "%s%s", r.out, r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "prove", "11", NULL);
    cr_assert_eq(r.status, 2, "%s%s", r.out, r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "prove", NULL);
    cr_assert_eq(r.status, 2);
    tu_run_free(&r);
    const char *helps[] = {"checkpoint", "prove", "consistency", "key",
                           "bundle"};
    for (size_t i = 0; i < 5; i++) {
        r = tu_forumv(NULL, "--ledger", dir, "ledger", helps[i], "--help",
                      NULL);
        cr_assert_eq(r.status, 0);
        cr_assert(strstr(r.out, "usage:"));
        tu_run_free(&r);
    }

    /* key: one line, the vkey file's content; it opens the note */
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "key", NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    char *vp = path_in(dir, "checkpoint.vkey");
    size_t vlen = 0;
    char *vtext = tu_read_file(vp, &vlen);
    cr_assert_str_eq(r.out, vtext);
    struct note_verifier *v = NULL;
    struct note_checkpoint nc;
    struct fo_err err;
    cr_assert_eq(note_verifier_parse(vtext, vlen - 1, &v, &err), FO_OK);
    cr_assert_eq(note_checkpoint_open(note, strlen(note), v, &nc, &err), FO_OK,
                 "%s", err.msg);
    note_verifier_free(v);
    tu_run_free(&r);

    /* Go's note package accepts the note, when go is here */
    if (system("command -v go >/dev/null 2>&1") == 0) {
        char *np = path_in(dir, "go.note");
        write_str(np, note);
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "sh %s/tests/interop/run.sh -n %s -v %s >/dev/null 2>&1",
                 FORUM_SRC, np, vp);
        int st = system(cmd);
        cr_assert(WIFEXITED(st));
        /* 3: cannot build (no x/mod package here): not our failure */
        cr_assert(WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 3,
                  "Go rejected our checkpoint (%d)", WEXITSTATUS(st));
        free(np);
    }
    free(vtext);
    free(vp);
    free(note);
    tu_rmrf(dir);
}

Test(checkpoint_key, processes_racing_to_create_it_agree_on_one_key)
{
    for (int round = 0; round < 5; round++) {
        char *dir = tu_tmpdir();
        struct tu_run r =
            tu_forumv(NULL, "--ledger", dir, "ledger", "init", (char *)NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        tu_run_free(&r);
        /* eight processes ask for the key at once; none exists yet */
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "for i in 1 2 3 4 5 6 7 8; do '%s' --ledger '%s' ledger key "
                 "> '%s'/key.$i 2>&1 & done; wait",
                 FORUM_BIN, dir, dir);
        cr_assert_eq(system(cmd), 0);
        char path[512];
        snprintf(path, sizeof(path), "%s/key.1", dir);
        char *first = tu_read_file(path, NULL);
        cr_assert_not_null(first);
        cr_assert(strncmp(first, "forum/", 6) == 0, "key.1: %s", first);
        for (int i = 2; i <= 8; i++) {
            snprintf(path, sizeof(path), "%s/key.%d", dir, i);
            char *k = tu_read_file(path, NULL);
            cr_assert_not_null(k);
            cr_assert_str_eq(k, first, "process %d saw another key", i);
            free(k);
        }
        free(first);
        tu_rmrf(dir);
    }
}

Test(checkpoint_key, a_lost_key_is_not_silently_replaced)
{
    char *dir = tu_tmpdir();
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "init", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "checkpoint", "--sign",
                  (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    char key[512];
    snprintf(key, sizeof(key), "%s/checkpoint.key", dir);
    cr_assert_eq(unlink(key), 0);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "checkpoint", "--sign",
                  (char *)NULL);
    cr_assert_neq(r.status, 0);
    cr_assert(strstr(r.err, "checkpoint.vkey exists"), "%s", r.err);
    tu_run_free(&r);
    cr_assert_neq(access(key, F_OK), 0, "a new key was made");
    tu_rmrf(dir);
}

/* A checkpoint.key named for another origin is refused with both names in the
 * message (the signer was once freed before its name was formatted). */
Test(checkpoint_key, a_key_for_another_origin_is_named_in_the_error)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir, LEDGER_OPEN_CREATE);
    fill(l, 2);
    struct fo_err err;
    struct note_signer *s = NULL;
    cr_assert_eq(note_signer_generate("other.example/log", &s, &err), FO_OK);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(note_signer_format(s, &b, &err), FO_OK);
    char *kp = path_in(dir, "checkpoint.key");
    FILE *f = fopen(kp, "w");
    cr_assert(f);
    cr_assert_eq(fwrite(b.data, 1, b.len, f), b.len);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(kp, 0600), 0);
    fo_buf_release(&b);
    note_signer_free(s);
    struct ledger_checkpoint c = {0};
    cr_assert_eq(ledger_checkpoint_sign(l, 2, &c, &err), FO_E_CORRUPT);
    cr_assert(strstr(err.msg, "key name \"other.example/log\" is not the "
                              "ledger origin"),
              "%s", err.msg);
    cr_assert(strstr(err.msg, ledger_origin(l)), "%s", err.msg);
    free(kp);
    ledger_close(l);
    tu_rmrf(dir);
}

/* A private key others may read is refused, not used: signing fails with the
 * file named and the fix, through the API and the CLI (exit 2). */
Test(checkpoint_key, a_key_others_can_read_is_refused)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir, LEDGER_OPEN_CREATE);
    fill(l, 2);
    struct fo_err err;
    struct ledger_checkpoint c = {0};
    cr_assert_eq(ledger_checkpoint_sign(l, 1, &c, &err), FO_OK, "%s", err.msg);
    ledger_checkpoint_release(&c);
    char *kp = path_in(dir, "checkpoint.key");
    cr_assert_eq(chmod(kp, 0640), 0);
    cr_assert_eq(ledger_checkpoint_sign(l, 2, &c, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, kp), "%s", err.msg);
    cr_assert(strstr(err.msg, "chmod 600"), "%s", err.msg);
    ledger_close(l);
    cr_assert_eq(chmod(kp, 0604), 0);
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "checkpoint",
                                "--sign", (char *)NULL);
    cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "chmod 600"), "%s", r.err);
    tu_run_free(&r);
    free(kp);
    tu_rmrf(dir);
}

/* The pid of a process that has exited (for the name of a stale temp file). */
static long dead_pid(void)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    return (long)pid;
}

/* A key creation killed between its temp file and the link leaves a whole
 * private key in checkpoint.key.tmp-PID-HEX: the next open for writing
 * removes it, and leaves alone the temp file of a live process and names
 * that only look alike. */
Test(checkpoint_key, stale_temp_keys_are_removed_on_open)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir, LEDGER_OPEN_CREATE);
    ledger_close(l);
    char stale[512], live[512], other[512];
    snprintf(stale, sizeof(stale), "%s/checkpoint.key.tmp-%ld-0123456789abcdef",
             dir, dead_pid());
    snprintf(live, sizeof(live), "%s/checkpoint.key.tmp-%ld-0123456789abcdef",
             dir, (long)getpid());
    snprintf(other, sizeof(other), "%s/checkpoint.key.tmp-notes", dir);
    const char *all[] = {stale, live, other};
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(tu_write_file(all[i], "PRIVATE+KEY+x", 13), 0);
    l = open_dir(dir, LEDGER_OPEN_READONLY);
    ledger_close(l);
    cr_assert_eq(access(stale, F_OK), 0, "a read-only open removed it");
    l = open_dir(dir, 0);
    ledger_close(l);
    cr_assert_neq(access(stale, F_OK), 0, "%s is still there", stale);
    cr_assert_eq(access(live, F_OK), 0, "a live process's temp file went");
    cr_assert_eq(access(other, F_OK), 0, "a look-alike name went");
    tu_rmrf(dir);
}

/* ---- what plain and deep verify catch from the ledger alone (issue 18,
 * defect 13) ---------------------------------------------------------- */

/* A ledger of n entries with a stored checkpoint of size n, then sql run on
 * its database file behind its back; returns verify's JSON (deep or not)
 * and its exit status in *status. */
static cJSON *tampered(const char *sql, int deep, int *status)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_dir(dir, LEDGER_OPEN_CREATE);
    fill(l, 12);
    struct fo_err err;
    struct ledger_checkpoint cp = {0};
    cr_assert_eq(ledger_checkpoint_sign(l, 12, &cp, &err), FO_OK, "%s",
                 err.msg);
    ledger_checkpoint_release(&cp);
    ledger_close(l);
    char *dbp = path_in(dir, "ledger.db");
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(dbp, &db), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s",
                 sql, msg ? msg : "");
    sqlite3_close(db);
    free(dbp);
    struct tu_run r = deep ? tu_forumv(NULL, "--ledger", dir, "--json",
                                       "ledger", "verify", "--deep", NULL)
                           : tu_forumv(NULL, "--ledger", dir, "--json",
                                       "ledger", "verify", NULL);
    *status = r.status;
    cJSON *o = r.out && r.out[0] == '{' ? cJSON_Parse(r.out) : NULL;
    if (!o)
        o = cJSON_Parse(r.err ? strchr(r.err, '{') ? strchr(r.err, '{') : "{}"
                              : "{}");
    tu_run_free(&r);
    tu_rmrf(dir);
    return o;
}

static void caught(const char *sql, int deep, const char *reason)
{
    int st = 0;
    cJSON *o = tampered(sql, deep, &st);
    cr_assert_eq(st, 1, "%s: exit %d", sql, st);
    const cJSON *rs = cJSON_GetObjectItem(o, "reason");
    cr_assert(cJSON_IsString(rs) && !strcmp(rs->valuestring, reason),
              "%s: reason %s, not %s", sql,
              cJSON_IsString(rs) ? rs->valuestring : "(none)", reason);
    cJSON_Delete(o);
}

Test(proof_verify, the_ledger_alone_catches_these_tamperings)
{
    /* untouched: ok (the check above can fail) */
    int st = 0;
    cJSON *o = tampered("SELECT 1", 1, &st);
    cr_assert_eq(st, 0);
    cJSON_Delete(o);
    caught("INSERT INTO tree(pos, hash) VALUES(-5, zeroblob(32))", 0,
           "tree_mismatch");
    caught("UPDATE checkpoints SET note = 'garbage'", 0, "checkpoint_mismatch");
    caught("INSERT INTO bodies(seq, body) VALUES(999, 'x')", 1, "orphan_body");
    caught("UPDATE meta SET value = 'forum-ledger/2' WHERE key = 'format'", 0,
           "format_mismatch");
    /* cut below the size the ledger itself signed */
    caught("DELETE FROM entries WHERE seq >= 9; DELETE FROM bodies WHERE seq "
           ">= 9; DELETE FROM tree WHERE (pos >> 6) >= 8",
           0, "checkpoint_beyond_log");
}

Test(proof_verify, a_seq_at_int64_max_is_damage_not_overflow)
{
    int st = 0;
    cJSON *o = tampered("UPDATE entries SET seq = 9223372036854775807 WHERE "
                        "seq = 11",
                        0, &st);
    cr_assert_neq(st, 0, "a seq at INT64_MAX verified");
    cJSON_Delete(o);
}

/* `ledger checkpoint --sign > cp.note` saves a note `verify --checkpoint`
 * takes (before, the size and root lines came first and the note failed
 * as bad_signature); a trailing blank line, or those lines, are named as
 * what they are, not "no signatures" or "bad_signature". */
Test(checkpoint_key, a_signed_checkpoint_saved_from_stdout_verifies)
{
    char *dir = tu_tmpdir();
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "a",
                  "--kind", "k", "--payload", "1", (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "checkpoint", "--sign",
                  (char *)NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "size 1, root "), "%s", r.err);
    char note[600], bad[600], vk[600];
    snprintf(note, sizeof(note), "%s/cp.note", dir);
    snprintf(bad, sizeof(bad), "%s/cp.bad", dir);
    snprintf(vk, sizeof(vk), "@%s/checkpoint.vkey", dir);
    cr_assert_eq(tu_write_file(note, r.out, r.out_len), 0);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_buf_append(&b, r.out, r.out_len), 0);
    cr_assert_eq(fo_buf_putc(&b, '\n'), 0);
    cr_assert_eq(tu_write_file(bad, b.data, b.len), 0);
    fo_buf_release(&b);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--checkpoint",
                  note, "--vkey", vk, (char *)NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--checkpoint",
                  bad, "--vkey", vk, (char *)NULL);
    cr_assert_eq(r.status, 2, "%s%s", r.out, r.err);
    cr_assert(strstr(r.err, "a blank line after the signatures"), "%s", r.err);
    tu_run_free(&r);
    const char *old = "size 1\nroot ab\n\nforum/x\n1\nAAAA\n\n— forum/x AAAA\n";
    cr_assert_eq(tu_write_file(bad, old, strlen(old)), 0);
    r = tu_forumv(NULL, "--ledger", dir, "ledger", "verify", "--checkpoint",
                  bad, "--vkey", vk, (char *)NULL);
    cr_assert_eq(r.status, 2, "%s%s", r.out, r.err);
    cr_assert(strstr(r.err, "starts with \"size\" and \"root\" lines"), "%s",
              r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* keys: the gateway's client keys. DIR/keys.json (mode 0600) holds each
 * key's name, the SHA-256 of the key, its limits (calls, tokens, requests
 * per minute, models), whether the forge layer is on for it, and when it was
 * made or revoked; never the key. The CLI edits the file (keys_file_add,
 * keys_file_revoke: under a lock, a whole new file renamed into place); the
 * daemon holds a store made from it (keys_open), sees the file change through
 * inotify and reloads it on the next keyed request (keys_refresh), so changes
 * need no restart. What a key has used is counted from the ledger's
 * gateway_call entries that name it (at start, and by the CLI's `key list`),
 * then kept in memory as calls are witnessed. docs/GATEWAY.md, "Keys". */
#ifndef KEYS_H
#define KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"
#include "ledger/ledger.h"

#define KEYS_FILE "keys.json"
#define KEYS_NAME_MAX 64
#define KEYS_MODELS_MAX 32
#define KEYS_MODEL_MAX 256
#define KEYS_MAX 1000      /* keys in a file, revoked ones included */
#define KEYS_RPM_MAX 10000 /* the highest --rpm */
#define KEYS_FILE_MAX (1u << 20)
#define KEYS_PREFIX "fk_"
#define KEYS_KEY_LEN (3 + 48)    /* "fk_" and 24 random bytes in hex */
#define KEYS_BUDGET_RETRY_S 3600 /* Retry-After of a spent budget */

/* One key as the file describes it, and (in the daemon) what it used. */
struct keys_key {
    char name[KEYS_NAME_MAX + 1];
    uint8_t sha256[32];
    int64_t created_us, revoked_us;       /* revoked_us 0: live */
    long long max_calls, max_tokens, rpm; /* 0: no limit */
    char **models;                        /* NULL when any model */
    size_t n_models;
    int forge; /* "forge": true: the gateway's rescue of tool calls written
                  as text is on for its calls (docs/GATEWAY.md) */
    /* usage: witnessed calls and their tokens (in and out), calls in
     * flight, refusals since the daemon started */
    long long used_calls, used_tokens, inflight;
    unsigned long long n429, n403;
    int64_t *ring; /* the last rpm admissions' times, for the window */
    size_t ring_at, ring_n;
};

/* A request for a new key (keys_file_add). models: n_models names. */
struct keys_new {
    const char *name;
    long long max_calls, max_tokens, rpm; /* 0: no limit */
    const char *const *models;
    size_t n_models;
    int forge; /* 1: "forge": true (the gateway's rescue) */
};

/* 1 when name is a valid key name: 1-64 of [A-Za-z0-9._-], starting with
 * a letter or a digit. */
int keys_name_valid(const char *name);

/* ---- the file (the CLI; blocks on the lock and fsync) ----------------- */

/* Adds a key to DIR/keys.json (made 0600 when absent): a new random key,
 * written into key_out (KEYS_KEY_LEN + 1 bytes) and nowhere else. The
 * name must be new (revoked names included): FO_E_EXISTS. FO_E_INVALID for
 * a bad name or limit, FO_E_IO. */
int keys_file_add(const char *dir, const struct keys_new *k,
                  char key_out[KEYS_KEY_LEN + 1], struct fo_err *err);

/* Marks the key name revoked (it stays listed; the name is not reused).
 * FO_E_NOT_FOUND when there is no such key, FO_E_EXISTS when it was
 * revoked already, FO_E_IO. */
int keys_file_revoke(const char *dir, const char *name, struct fo_err *err);

/* ---- the store -------------------------------------------------------- */

struct keys;

/* Reads DIR/keys.json into a new store (an absent file: no keys). Refuses
 * a file that is not a regular file, is readable by group or others, is
 * over KEYS_FILE_MAX or not of the format: FO_E_INVALID naming it. */
int keys_load(const char *dir, struct keys **out, struct fo_err *err);
/* NULL-safe. */
void keys_free(struct keys *k);

size_t keys_count(const struct keys *k);
/* The i-th key, in the file's order (valid until the next refresh). */
struct keys_key *keys_at(struct keys *k, size_t i);

/* Counts each key's used calls and tokens from the ledger: its
 * gateway_call entries whose "key" is the key's name, made after the key
 * was (one read of the ledger; blocks; skipped when there are no keys). */
int keys_count_usage(struct keys *k, struct ledger *l, struct fo_err *err);

/* Daemon: watches the file (inotify on the data dir; when that cannot be
 * had, its stat is compared on each refresh). */
int keys_watch(struct keys *k, struct fo_err *err);

/* Daemon, loop: when the file changed since the last look, reloads it;
 * each key whose name and creation time are unchanged keeps its usage.
 * A file that cannot be read keeps the keys as they were and counts in
 * keys_reload_errors. Returns 1 when it reloaded. One non-blocking read
 * of the inotify descriptor when nothing changed. */
int keys_refresh(struct keys *k);
unsigned long long keys_reload_errors(const struct keys *k);

/* The key whose SHA-256 is that of cred (revoked ones included), else
 * NULL. Compares in constant time per key. */
struct keys_key *keys_find(struct keys *k, const char *cred);
struct keys_key *keys_by_name(struct keys *k, const char *name,
                              int64_t created_us);

/* 1 when the key may call model (the string the client sent) served by
 * the provider named pname whose model is pmodel: a key without a model
 * list may call any; else one of the three must be in the list. */
int keys_model_ok(const struct keys_key *key, const char *model,
                  const char *pname, const char *pmodel);

/* What keys_admit says. */
enum { KEYS_OK = 0, KEYS_OVER_CALLS, KEYS_OVER_TOKENS, KEYS_OVER_RPM };

/* Admits one call of key at now_us: KEYS_OK (counted in flight and in the
 * rate window), or why not with *retry_s (seconds, >= 1) for Retry-After
 * (the refusal counted in n429). */
int keys_admit(struct keys_key *key, int64_t now_us, long *retry_s);

/* A call admitted by keys_admit is over: witnessed (counted in used_calls
 * with its tokens) or not. */
void keys_done(struct keys_key *key, int witnessed, long long tokens);

/* The Prometheus text of the keys: per key, calls and tokens used and the
 * 429s and 403s since start. */
int keys_metrics(const struct keys *k, struct fo_buf *out);

#endif

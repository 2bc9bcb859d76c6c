/* witness: the witnesses a ledger accepts (DIR/witnesses), accepting and
 * storing their cosignatures, and checkpoints served with them. See
 * witness.h. */
#include "ledger/witness.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ledger/fo_buf.h"
#include "ledger/ledger_int.h"
#include "ledger/note.h"
#include "ledger/proof.h"
#include "ledger/tiles.h"

#define WITNESSES_FILE_MAX (256 * 1024)
#define FUTURE_SLACK_S 600 /* cosignature timestamps accepted ahead of now */

void ledger_witnesses_free(struct cosig_verifier **w, size_t n)
{
    if (!w)
        return;
    for (size_t i = 0; i < n; i++)
        cosig_verifier_free(w[i]);
    free(w);
}

/* DIR/witnesses into b (empty when absent). */
static int read_witnesses_file(struct ledger *l, struct fo_buf *b,
                               struct fo_err *err)
{
    char path[4096];
    int n =
        snprintf(path, sizeof(path), "%s/%s", l->dir, LEDGER_WITNESSES_FILE);
    if (n < 0 || (size_t)n >= sizeof(path))
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", l->dir);
    fo_buf_init(b, WITNESSES_FILE_MAX);
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT
                   ? FO_OK
                   : fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    char chunk[4096];
    size_t got;
    int rc = FO_OK;
    while (!rc && (got = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = fo_buf_append(b, chunk, got);
    if (!rc && ferror(f))
        rc = FO_E_IO;
    fclose(f);
    if (rc)
        return fo_err_set(err, rc == FO_E_TOO_LARGE ? FO_E_INVALID : rc,
                          "%s: unreadable or over %d bytes", path,
                          WITNESSES_FILE_MAX);
    return FO_OK;
}

/* Parses the witnesses file text. */
static int parse_witnesses(const char *text, size_t len,
                           struct cosig_verifier ***out, size_t *count,
                           struct fo_err *err)
{
    struct cosig_verifier **w = calloc(LEDGER_WITNESSES_MAX, sizeof(*w));
    size_t n = 0;
    int rc = w ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
    size_t pos = 0, lineno = 0;
    while (!rc && pos < len) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - line) : len - pos;
        pos += ll + (nl ? 1 : 0);
        lineno++;
        while (ll > 0 && (line[ll - 1] == ' ' || line[ll - 1] == '\r' ||
                          line[ll - 1] == '\t'))
            ll--;
        if (ll == 0 || line[0] == '#')
            continue;
        if (n == LEDGER_WITNESSES_MAX) {
            rc = fo_err_set(err, FO_E_INVALID, "witnesses: more than %d keys",
                            LEDGER_WITNESSES_MAX);
            break;
        }
        rc = cosig_verifier_parse(line, ll, &w[n], err);
        if (rc) {
            fo_err_prefix(err, "witnesses: line %zu", lineno);
            break;
        }
        for (size_t i = 0; i < n; i++)
            if (!strcmp(cosig_verifier_name(w[i]), cosig_verifier_name(w[n])) &&
                cosig_verifier_id(w[i]) == cosig_verifier_id(w[n]))
                rc = fo_err_set(err, FO_E_INVALID,
                                "witnesses: line %zu: %s given twice", lineno,
                                cosig_verifier_name(w[n]));
        n++;
    }
    if (rc) {
        ledger_witnesses_free(w, n);
        return rc;
    }
    *out = w;
    *count = n;
    return FO_OK;
}

int ledger_witnesses(struct ledger *l, struct cosig_verifier ***out, size_t *n,
                     struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct fo_buf b;
    int rc = read_witnesses_file(l, &b, err);
    if (!rc)
        rc = parse_witnesses(b.data ? b.data : "", b.len, out, n, err);
    fo_buf_release(&b);
    return rc;
}

int ledger_witness_add(struct ledger *l, const char *vkey, size_t len,
                       struct fo_err *err)
{
    LEDGER_OWNED(l);
    struct cosig_verifier *v = NULL;
    struct cosig_verifier **w = NULL;
    size_t n = 0;
    struct fo_buf b;
    fo_buf_init(&b, WITNESSES_FILE_MAX);
    int rc = cosig_verifier_parse(vkey, len, &v, err);
    if (!rc) {
        fo_buf_release(&b);
        rc = read_witnesses_file(l, &b, err);
    }
    if (!rc)
        rc = parse_witnesses(b.data ? b.data : "", b.len, &w, &n, err);
    for (size_t i = 0; !rc && i < n; i++)
        if (!strcmp(cosig_verifier_name(w[i]), cosig_verifier_name(v)) &&
            cosig_verifier_id(w[i]) == cosig_verifier_id(v))
            rc = fo_err_set(err, FO_E_EXISTS,
                            "witness %s+%08" PRIx32 ": already in %s/%s",
                            cosig_verifier_name(v), cosig_verifier_id(v),
                            l->dir, LEDGER_WITNESSES_FILE);
    if (!rc && b.len > 0 && b.data[b.len - 1] != '\n')
        rc = fo_buf_putc(&b, '\n');
    if (!rc && !(rc = fo_buf_append(&b, vkey, len)))
        rc = fo_buf_putc(&b, '\n');
    if (!rc)
        rc = tiles_put_file(l->dir, LEDGER_WITNESSES_FILE, b.data, b.len, err);
    if (!rc) { /* the data dir's files are 0600 (docs/OPERATIONS.md) */
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", l->dir, LEDGER_WITNESSES_FILE);
        if (chmod(path, 0600) != 0)
            rc = fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    }
    ledger_witnesses_free(w, n);
    cosig_verifier_free(v);
    fo_buf_release(&b);
    return rc;
}

/* ---- cosigned checkpoints ----------------------------------------------- */

struct collect {
    struct fo_buf *out;
    size_t count;
};

static int collect_line(void *ctx, const char *key, int64_t ts,
                        const char *line)
{
    (void)key;
    (void)ts;
    struct collect *c = ctx;
    int rc = fo_buf_puts(c->out, line);
    if (!rc)
        rc = fo_buf_putc(c->out, '\n');
    c->count++;
    return rc;
}

int ledger_checkpoint_cosigned_n(struct ledger *l, int64_t size,
                                 struct fo_buf *out, size_t *count,
                                 struct fo_err *err)
{
    LEDGER_OWNED(l);
    char *note = NULL;
    int64_t got = 0;
    uint8_t root[32];
    int rc = l->ops->begin_read(l->store, err);
    if (rc)
        return rc;
    rc = l->ops->get_checkpoint(l->store, size, &got, root, &note, err);
    if (!rc && size >= 0 && got != size)
        rc = fo_err_set(err, FO_E_NOT_FOUND, "no checkpoint of size %lld",
                        (long long)size);
    struct fo_buf tmp;
    fo_buf_init(&tmp, out->max);
    struct collect c = {&tmp, 0};
    if (!rc)
        rc = fo_buf_puts(&tmp, note);
    if (!rc)
        rc = l->ops->scan_cosignatures(l->store, got, collect_line, &c, err);
    l->ops->rollback(l->store);
    if (rc == FO_E_NOMEM || rc == FO_E_TOO_LARGE)
        rc = fo_err_set(err, rc, "checkpoint: %s", fo_code_message(rc));
    if (!rc && (rc = fo_buf_append(out, tmp.data, tmp.len)) != FO_OK)
        rc = fo_err_set(err, rc, "checkpoint: %s", fo_code_message(rc));
    if (!rc && count)
        *count = c.count;
    fo_buf_release(&tmp);
    free(note);
    return rc;
}

int ledger_checkpoint_cosigned(struct ledger *l, int64_t size,
                               struct fo_buf *out, struct fo_err *err)
{
    LEDGER_OWNED(l);
    return ledger_checkpoint_cosigned_n(l, size, out, NULL, err);
}

/* ---- accepting cosignatures --------------------------------------------- */

/* The key name and key id of a signature line (no verification). */
static int line_key(const char *line, size_t ll, char name[NOTE_NAME_MAX + 1],
                    uint32_t *id)
{
    const char *p = line + 4; /* after the em dash and space */
    const char *sp = memchr(p, ' ', ll - 4);
    size_t nl = sp ? (size_t)(sp - p) : 0;
    if (!sp || nl == 0 || nl > NOTE_NAME_MAX)
        return -1;
    memcpy(name, p, nl);
    name[nl] = '\0';
    uint8_t *sig = malloc(8192);
    size_t n = 0;
    int bad = !sig || note_b64_decode(sp + 1, ll - 4 - nl - 1, sig, 8192, &n) ||
              n < 4;
    if (!bad)
        *id = (uint32_t)sig[0] << 24 | (uint32_t)sig[1] << 16 |
              (uint32_t)sig[2] << 8 | (uint32_t)sig[3];
    free(sig);
    return bad ? -1 : 0;
}

struct accepted {
    char key[NOTE_NAME_MAX + 16];
    uint64_t ts;
    size_t off, len;
};

/* The cosignature lines of note (split in sl): each must be the log's own
 * signature or a valid cosignature, not from the future, by a witness of
 * w; the accepted ones go to acc (*nacc of them). */
static int accept_lines(const struct ledger *l, const char *note,
                        const struct cosig_lines *sl,
                        const struct note_verifier *logv,
                        struct cosig_verifier **w, size_t nw,
                        const struct fo_buf *textb, uint64_t size,
                        struct accepted *acc, size_t *naccp, struct fo_err *err)
{
    int rc = FO_OK;
    size_t nacc = 0;
    struct fo_buf text = *textb;
    struct {
        uint64_t size;
    } cp = {size};
    int64_t now = ledger_now_us() / 1000000;
    for (size_t j = 0; j < sl->n; j++) {
        const char *line = note + sl->line_off[j];
        size_t ll = sl->line_len[j];
        char name[NOTE_NAME_MAX + 1];
        uint32_t id = 0;
        if (line_key(line, ll, name, &id) != 0) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "note: signature line %zu is malformed", j + 1);
            return rc;
        }
        if (!strcmp(name, note_verifier_name(logv)) &&
            id == note_verifier_id(logv))
            continue; /* the log's own signature: note_open checked it */
        int found = 0;
        for (size_t i = 0; i < nw && !found; i++) {
            uint64_t ts = 0;
            int r = cosig_verify_line(w[i], text.data, text.len, line, ll, &ts,
                                      err);
            if (r == FO_E_NOT_FOUND)
                continue;
            if (r) {
                if (r == FO_E_VERIFY)
                    fo_err_prefix(err,
                                  "checkpoint of size %" PRIu64
                                  ": refused (a cosignature over another "
                                  "checkpoint, or damaged)",
                                  cp.size);
                rc = r;
                return rc;
            }
            if ((int64_t)ts > now + FUTURE_SLACK_S) {
                rc = fo_err_set(err, FO_E_VERIFY,
                                "cosignature by %s: timestamp %" PRIu64
                                " is in the future",
                                name, ts);
                return rc;
            }
            found = 1;
            struct accepted *a = &acc[nacc++];
            snprintf(a->key, sizeof(a->key), "%s+%08" PRIx32, name, id);
            a->ts = ts;
            a->off = sl->line_off[j];
            a->len = ll;
        }
        if (!found) {
            rc =
                fo_err_set(err, FO_E_VERIFY,
                           "unknown witness key %s+%08" PRIx32 ": not in %s/%s",
                           name, id, l->dir, LEDGER_WITNESSES_FILE);
            return rc;
        }
    }
    *naccp = nacc;
    return FO_OK;
}

int ledger_cosign(struct ledger *l, const char *note, size_t len, cJSON **out,
                  struct fo_err *err)
{
    LEDGER_OWNED(l);
    if (l->readonly)
        return fo_err_set(err, FO_E_INVALID, "%s: opened read-only", l->dir);
    char *vkey = NULL, *stored = NULL;
    struct note_verifier *logv = NULL;
    struct cosig_verifier **w = NULL;
    size_t nw = 0;
    struct cosig_lines *sl = malloc(sizeof(*sl));
    struct accepted *acc = calloc(NOTE_MAX_SIGS, sizeof(*acc));
    struct fo_buf text, full;
    fo_buf_init(&text, NOTE_MAX_LEN);
    fo_buf_init(&full, NOTE_MAX_LEN * 2);
    size_t nacc = 0, count = 0;
    struct note_checkpoint cp;
    int64_t got = -1;
    uint8_t sroot[32];
    int rc = sl && acc ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
    size_t vlen = 0;
    if (!rc)
        rc = ledger_verifier_key(l, &vkey, err);
    if (!rc)
        vlen = strlen(vkey);
    if (!rc)
        rc = note_verifier_parse(vkey, vlen, &logv, err);
    if (!rc) {
        const struct note_verifier *k[1] = {logv};
        rc = note_open(note, len, k, 1, &text, err);
        if (rc == FO_E_VERIFY)
            fo_err_prefix(err, "not a checkpoint signed by this ledger");
    }
    if (!rc)
        rc = note_checkpoint_parse(text.data, text.len, &cp, err);
    if (!rc)
        rc = cosig_split(note, len, sl, err);
    if (!rc)
        rc = ledger_witnesses(l, &w, &nw, err);
    if (rc)
        goto out;
    /* The text must be the stored checkpoint's, byte for byte. */
    rc = l->ops->get_checkpoint(l->store, (int64_t)(cp.size & INT64_MAX), &got,
                                sroot, &stored, err);
    if (rc == FO_E_NOT_FOUND || (!rc && (got != (int64_t)cp.size ||
                                         strncmp(stored, text.data, text.len) ||
                                         strlen(stored) <= text.len))) {
        rc = fo_err_set(err, FO_E_VERIFY,
                        "checkpoint of size %" PRIu64
                        ": not one this ledger signed and stored",
                        cp.size);
        goto out;
    }
    if (rc)
        goto out;
    rc =
        accept_lines(l, note, sl, logv, w, nw, &text, cp.size, acc, &nacc, err);
    if (rc)
        goto out;
    if (nacc == 0) {
        rc = fo_err_set(err, FO_E_INVALID,
                        "note: no cosignature besides the log's signature");
        goto out;
    }
    rc = l->ops->begin_write(l->store, err);
    if (rc)
        goto out;
    for (size_t i = 0; !rc && i < nacc; i++) {
        char *line = strndup(note + acc[i].off, acc[i].len);
        rc = line ? l->ops->put_cosignature(l->store, (int64_t)cp.size,
                                            acc[i].key, (int64_t)acc[i].ts,
                                            line, err)
                  : fo_err_set(err, FO_E_NOMEM, NULL);
        free(line);
    }
    if (!rc)
        rc = l->ops->commit(l->store, err);
    else
        l->ops->rollback(l->store);
    if (!rc)
        rc = ledger_checkpoint_cosigned_n(l, (int64_t)cp.size, &full, &count,
                                          err);
    if (rc)
        goto out;
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "accepted");
    char hex[65];
    fo_hex(cp.root, 32, hex);
    int bad = !o || !arr ||
              !cJSON_AddNumberToObject(o, "size", (double)cp.size) ||
              !cJSON_AddStringToObject(o, "root", hex) ||
              !cJSON_AddNumberToObject(o, "cosignatures", (double)count) ||
              !cJSON_AddStringToObject(o, "note", full.data);
    for (size_t i = 0; !bad && i < nacc; i++) {
        cJSON *e = cJSON_CreateObject();
        char *plus = strrchr(acc[i].key, '+');
        bad = !e || !cJSON_AddItemToArray(arr, e);
        if (!bad) {
            *plus = '\0';
            bad = !cJSON_AddStringToObject(e, "witness", acc[i].key) ||
                  !cJSON_AddStringToObject(e, "key_id", plus + 1) ||
                  !cJSON_AddNumberToObject(e, "timestamp", (double)acc[i].ts);
            *plus = '+';
        }
    }
    if (bad) {
        cJSON_Delete(o);
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    *out = o;
out:
    free(vkey);
    free(stored);
    note_verifier_free(logv);
    ledger_witnesses_free(w, nw);
    fo_buf_release(&text);
    fo_buf_release(&full);
    free(acc);
    free(sl);
    return rc;
}

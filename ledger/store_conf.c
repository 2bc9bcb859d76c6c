/* store_conf: which store a data dir's ledger lives in (DIR/store.json).
 * No file: SQLite (DIR/ledger.db). The file never holds a password: libpq
 * reads it from PGPASSWORD or PGPASSFILE (~/.pgpass). */
#include "ledger/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>
#include <openssl/rand.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

#define STORE_CONF_MAX 65536

void store_conf_free(struct store_conf *c)
{
    if (!c)
        return;
    free(c->conninfo);
    free(c->ledger_id);
    memset(c, 0, sizeof(*c));
}

static int conf_path(const char *dir, char *out, size_t cap, struct fo_err *err)
{
    int n = snprintf(out, cap, "%s/%s", dir, STORE_CONF_FILE);
    if (n < 0 || (size_t)n >= cap)
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", dir);
    return FO_OK;
}

int store_conf_read(const char *dir, struct store_conf *c, struct fo_err *err)
{
    memset(c, 0, sizeof(*c));
    char path[4096];
    int rc = conf_path(dir, path, sizeof(path), err);
    if (rc)
        return rc;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT || errno == ENOTDIR)
            return FO_OK; /* the default: SQLite */
        return fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    }
    char *text = malloc(STORE_CONF_MAX + 1);
    size_t n = text ? fread(text, 1, STORE_CONF_MAX + 1, f) : 0;
    int bad_read = ferror(f);
    fclose(f);
    if (!text)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    if (bad_read || n > STORE_CONF_MAX) {
        free(text);
        return fo_err_set(err, FO_E_INVALID, "%s: %s", path,
                          bad_read ? "read error" : "over 64 KiB");
    }
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' '))
        n--;
    cJSON *j = NULL;
    struct fo_err perr;
    rc = fo_json_parse(text, n, &j, &perr);
    free(text);
    if (rc || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return fo_err_set(err, FO_E_INVALID,
                          "%s: not a JSON object (%s): expected "
                          "{\"store\": \"postgres\", \"conninfo\": \"...\"}",
                          path, rc ? perr.msg : "not an object");
    }
    static const char *const keys[] = {"store", "conninfo", "ledger_id"};
    const cJSON *store = cJSON_GetObjectItemCaseSensitive(j, "store");
    const cJSON *ci = cJSON_GetObjectItemCaseSensitive(j, "conninfo");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "ledger_id");
    rc = fo_json_only_keys(j, keys, 3, &perr);
    if (rc)
        rc = fo_err_set(err, FO_E_INVALID, "%s: %s", path, perr.msg);
    else if (!cJSON_IsString(store))
        rc = fo_err_set(err, FO_E_INVALID, "%s: no \"store\" string", path);
    else if (strcmp(store->valuestring, "sqlite") == 0)
        c->postgres = 0;
    else if (strcmp(store->valuestring, "postgres") == 0)
        c->postgres = 1;
    else
        rc = fo_err_set(err, FO_E_INVALID,
                        "%s: unknown store \"%.32s\" (sqlite or postgres)",
                        path, store->valuestring);
    if (!rc && c->postgres && !cJSON_IsString(ci))
        rc = fo_err_set(err, FO_E_INVALID,
                        "%s: the postgres store needs a \"conninfo\" string",
                        path);
    if (!rc && id && !cJSON_IsString(id))
        rc = fo_err_set(err, FO_E_INVALID, "%s: \"ledger_id\" is not a string",
                        path);
    if (!rc && cJSON_IsString(ci) && !(c->conninfo = strdup(ci->valuestring)))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (!rc && cJSON_IsString(id) && !(c->ledger_id = strdup(id->valuestring)))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    cJSON_Delete(j);
    if (rc)
        store_conf_free(c);
    return rc;
}

int store_conf_write(const char *dir, const struct store_conf *c,
                     struct fo_err *err)
{
    char path[4096], tmp[4200];
    int rc = conf_path(dir, path, sizeof(path), err);
    if (rc)
        return rc;
    cJSON *j = cJSON_CreateObject();
    if (!j ||
        !cJSON_AddStringToObject(j, "store",
                                 c->postgres ? "postgres" : "sqlite") ||
        (c->conninfo && !cJSON_AddStringToObject(j, "conninfo", c->conninfo)) ||
        (c->ledger_id &&
         !cJSON_AddStringToObject(j, "ledger_id", c->ledger_id))) {
        cJSON_Delete(j);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    rc = fo_json_canon(j, &b, err);
    cJSON_Delete(j);
    if (!rc)
        rc = fo_buf_puts(&b, "\n");
    unsigned char rnd[8];
    if (!rc && RAND_bytes(rnd, sizeof(rnd)) != 1)
        rc = fo_err_set(err, FO_E_INTERNAL, "no randomness");
    if (rc) {
        fo_buf_release(&b);
        return rc;
    }
    char rhex[17];
    fo_hex(rnd, sizeof(rnd), rhex);
    snprintf(tmp, sizeof(tmp), "%s.tmp-%ld-%s", path, (long)getpid(), rhex);
    /* written whole under a temp name, synced, then renamed over: a reader
     * sees the old file or the new one */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        fo_buf_release(&b);
        return fo_err_set(err, FO_E_IO, "%s: %s", tmp, strerror(errno));
    }
    size_t off = 0;
    while (!rc && off < b.len) {
        ssize_t w = write(fd, b.data + off, b.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc =
                fo_err_set(err, FO_E_IO, "%s: write: %s", tmp, strerror(errno));
        else
            off += (size_t)w;
    }
    fo_buf_release(&b);
    if (!rc && fsync(fd) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = fo_err_set(err, FO_E_IO, "%s: close: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    if (rc) {
        unlink(tmp);
        return rc;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0)
        rc = fo_err_set(err, FO_E_IO, "%s: fsync of the directory: %s", dir,
                        strerror(errno));
    if (dfd >= 0)
        close(dfd);
    return rc;
}

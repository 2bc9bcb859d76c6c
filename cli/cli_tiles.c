/* cli_tiles: static tiles and witnesses. `forum ledger tiles --out DIR`
 * writes the log as C2SP tlog-tiles; `forum verify --tiles DIR|URL` proves
 * inclusion and consistency from tiles alone; `forum witness keygen|cosign`
 * act as a witness; `forum ledger cosign` and `forum ledger witness` accept
 * and name witnesses; `ledger verify --checkpoint --witness` counts them.
 * docs/LEDGER.md, "Static tiles" and "Witnesses". */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "daemon/httpc.h"
#include "ledger/cosig.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_file.h"
#include "ledger/fo_json.h"
#include "ledger/note.h"
#include "ledger/proof.h"
#include "ledger/tiles.h"
#include "ledger/witness.h"

#define VKEY_MAX 4096
#define WITNESS_ARGS_MAX LEDGER_WITNESSES_MAX
#define FETCH_TIMEOUT_MS 15000
#define FETCH_BODY_MAX (64u << 20)

/* ---- forum ledger tiles ---------------------------------------------------
 */

int cli_ledger_tiles(struct cli *c, int argc, char **argv)
{
    const char *out = NULL;
    const struct cli_opt opts[] = {
        {"--out", "DIR", CLI_OPT_STR, &out, 0, 0, NULL, NULL,
         "write the tiles and the checkpoint under DIR"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "ledger tiles", argc, argv, opts, NULL, 0, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum ledger tiles --out DIR\n"
            "Writes the log as C2SP tlog-tiles under DIR, for any static "
            "web server\nor CDN to serve: tile/<L>/<N> (256 Merkle "
            "hashes to a full tile),\npartial tiles tile/<L>/<N>.p/<W>, "
            "entry bundles tile/entries/<N>, and\nDIR/checkpoint (a "
            "checkpoint signed now at the current size, with\nits "
            "witness cosignatures). Incremental: full tiles never change "
            "and\nare written once; a re-run writes only new tiles and "
            "the checkpoint.\nA DIR holding another log's tiles is "
            "refused.\n"
            "example:\n  forum ledger tiles --out /var/www/log && \\\n"
            "    forum verify --tiles /var/www/log --vkey "
            "@DIR/checkpoint.vkey\n"
            "--json prints {\"out\", \"size\", \"root\", \"written\", "
            "\"kept\"}.\n");
    if (pe)
        return pe;
    if (!out || !*out)
        return cli_usage_error(c, "tiles: --out DIR is required");
    struct ledger *l = NULL;
    int ex = cli_open(c, 0, &l);
    if (ex)
        return ex;
    struct tiles_stats st = {0};
    struct fo_err err;
    fo_err_clear(&err);
    uint8_t root[32];
    int rc = ledger_tiles_write(l, out, &st, &err);
    if (!rc)
        rc = ledger_root(l, (int64_t)st.size, root, &err);
    ledger_close(l);
    if (rc)
        return cli_fail(c, &err);
    char hex[65];
    fo_hex(root, 32, hex);
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "out", out);
        fo_json_add_int(o, "size", (long long)st.size);
        cJSON_AddStringToObject(o, "root", hex);
        fo_json_add_int(o, "written", (long long)st.written);
        fo_json_add_int(o, "kept", (long long)st.kept);
        cli_print_json(o, 0);
        cJSON_Delete(o);
    } else {
        printf("tiles of size %llu (root %.16s...) in %s: %lld written, "
               "%lld kept\n",
               (unsigned long long)st.size, hex, out, (long long)st.written,
               (long long)st.kept);
    }
    return 0;
}

/* ---- forum ledger cosign, forum ledger witness ------------------------------
 */

int cli_ledger_cosign(struct cli *c, int argc, char **argv)
{
    const char *file = NULL;
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe = cli_parse(c, "ledger cosign", argc, argv, opts, &file, 1, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum ledger cosign NOTE\n"
            "Adds the witness cosignatures on NOTE (a checkpoint this "
            "ledger signed,\nwith cosignature/v1 lines appended, as "
            "`forum witness cosign` writes\nit) to the ledger. Every "
            "cosignature must be by a witness named in\nDIR/witnesses "
            "(forum ledger witness add) and verify over the stored\n"
            "checkpoint, else nothing is stored (exit 1). The method "
            "ledger_cosign\n(POST /checkpoint/cosign).\n"
            "example:\n  forum witness cosign --key @w1.key --vkey "
            "@DIR/checkpoint.vkey cp.note \\\n"
            "    > cp.cosigned && forum ledger cosign cp.cosigned\n"
            "--json prints {\"size\", \"root\", \"accepted\", "
            "\"cosignatures\", \"note\"}.\n");
    if (pe)
        return pe;
    if (!file)
        return cli_usage_error(c, "cosign: a NOTE file is required");
    struct fo_buf note;
    struct fo_err err;
    fo_err_clear(&err);
    int rc = cli_read_file(file, NOTE_MAX_LEN, &note, &err);
    if (rc) {
        fo_buf_release(&note);
        return cli_fail(c, &err);
    }
    struct ledger *l = NULL;
    int ex = cli_open(c, 0, &l);
    cJSON *in = ex ? NULL : cJSON_CreateObject();
    cJSON *out = NULL;
    if (in)
        cJSON_AddStringToObject(in, "note", note.data ? note.data : "");
    if (!ex)
        ex = cli_call(c, l, "ledger_cosign", in, &out);
    if (!ex) {
        if (c->json) {
            cli_print_json(out, 0);
        } else {
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(out, "accepted");
            const cJSON *e;
            cJSON_ArrayForEach (e, a) {
                const cJSON *w = cJSON_GetObjectItemCaseSensitive(e, "witness");
                printf("accepted: cosignature by %s\n",
                       cJSON_IsString(w) ? w->valuestring : "?");
            }
            const cJSON *n =
                cJSON_GetObjectItemCaseSensitive(out, "cosignatures");
            printf("checkpoint %.0f now has %.0f cosignature(s)\n",
                   cJSON_GetNumberValue(
                       cJSON_GetObjectItemCaseSensitive(out, "size")),
                   cJSON_GetNumberValue(n));
        }
    }
    cJSON_Delete(out);
    ledger_close(l);
    fo_buf_release(&note);
    return ex;
}

int cli_ledger_witness(struct cli *c, int argc, char **argv)
{
    static const char help[] =
        "usage: forum ledger witness add VKEY | list\n"
        "The witnesses whose cosignatures the ledger accepts, kept in\n"
        "DIR/witnesses (one witness verifier key per line). add takes the "
        "key\ntext or @FILE (`forum witness keygen` prints one).\n"
        "example:\n  forum ledger witness add @w1.vkey\n"
        "--json (list) prints {\"witnesses\": [{\"name\", \"key_id\", "
        "\"vkey\"}]}.\n";
    /* add VKEY | list: the words, no flags of its own (--json is global) */
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe = cli_parse(c, "ledger witness", argc, argv, opts, pos, 2, &npos);
    if (pe == CLI_PARSE_HELP)
        return cli_help(help);
    if (pe)
        return pe;
    if (npos == 0)
        return cli_usage_error(c, "witness: add or list");
    const char *sub = pos[0];
    if (strcmp(sub, "add") != 0 && strcmp(sub, "list") != 0)
        return cli_bad_sub(c, "ledger witness", sub, "add list");
    struct fo_err err;
    fo_err_clear(&err);
    struct ledger *l = NULL;
    if (!strcmp(sub, "add")) {
        if (npos != 2)
            return cli_usage_error(c, "witness add: one VKEY is needed");
        struct fo_buf k;
        int rc = cli_read_vkey(pos[1], &k, &err);
        int ex = rc ? cli_fail(c, &err) : cli_open(c, 0, &l);
        if (!ex) {
            rc = ledger_witness_add(l, k.data ? k.data : "", k.len, &err);
            ex = rc ? cli_fail(c, &err) : 0;
        }
        if (!ex && !c->json)
            printf("witness added: %s\n", k.data);
        else if (!ex) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "vkey", k.data);
            cli_print_json(o, 0);
            cJSON_Delete(o);
        }
        fo_buf_release(&k);
        ledger_close(l);
        return ex;
    }
    if (npos != 1)
        return cli_bad_arg(c, "ledger witness list", pos[1], NULL);
    int ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    struct cosig_verifier **w = NULL;
    size_t n = 0;
    int rc = ledger_witnesses(l, &w, &n, &err);
    ledger_close(l);
    if (rc)
        return cli_fail(c, &err);
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "witnesses");
    for (size_t i = 0; i < n; i++) {
        struct fo_buf t;
        fo_buf_init(&t, VKEY_MAX);
        char id[9];
        snprintf(id, sizeof(id), "%08" PRIx32, cosig_verifier_id(w[i]));
        cosig_verifier_format(w[i], &t, &err);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", cosig_verifier_name(w[i]));
        cJSON_AddStringToObject(e, "key_id", id);
        cJSON_AddStringToObject(e, "vkey", t.data ? t.data : "");
        cJSON_AddItemToArray(arr, e);
        if (!c->json)
            printf("%s\n", t.data ? t.data : "");
        fo_buf_release(&t);
    }
    if (c->json)
        cli_print_json(o, 0);
    else if (n == 0)
        printf("(no witnesses: add one with `forum ledger witness add "
               "VKEY`)\n");
    cJSON_Delete(o);
    ledger_witnesses_free(w, n);
    return 0;
}

/* ---- forum witness keygen|cosign ---------------------------------------- */

static const char witness_help[] =
    "usage: forum witness keygen NAME --out FILE\n"
    "       forum witness cosign --key @FILE --vkey LOGKEY NOTE "
    "[--time T]\n"
    "Act as a witness (C2SP tlog-cosignature, Ed25519 "
    "cosignature/v1).\n"
    "keygen makes a witness key named NAME (a schema-less URL, e.g.\n"
    "witness.example.com/w1) in FILE (0600, PRIVATE+KEY+... text) and "
    "prints\nits verifier key (NAME+<id>+<base64(0x04 || key)>) for "
    "logs and\nverifiers to name it by.\n"
    "cosign checks that NOTE is a checkpoint signed by LOGKEY (the "
    "log's\nverifier key, text or @FILE) and prints NOTE with this "
    "witness's\ncosignature line appended, timestamped now (or T, "
    "POSIX seconds). It\ndoes not check consistency with checkpoints "
    "seen before: run\n`forum verify --tiles URL --old PREVIOUS` "
    "first, as a witness must.\n"
    "e.g. forum witness keygen witness.example.com/w1 --out w1.key\n"
    "     forum witness cosign --key @w1.key --vkey @log.vkey cp.note "
    "> cp.cosigned\n"
    "--json prints {\"name\", \"key_file\", \"vkey\"} (keygen) or\n"
    "{\"witness\", \"timestamp\", \"size\", \"note\"} (cosign).\n";

static int witness_keygen(struct cli *c, int argc, char **argv)
{
    const char *name = NULL, *out = NULL;
    const struct cli_opt opts[] = {
        {"--out", "FILE", CLI_OPT_STR, &out, 0, 0, NULL, NULL,
         "the new private key's file (0600; never overwritten)"},
        CLI_OPT_END,
    };
    /* before any key is made */
    int pe = cli_parse(c, "witness keygen", argc, argv, opts, &name, 1, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(witness_help);
    if (pe)
        return pe;
    if (!name || !out)
        return cli_usage_error(c, "witness keygen: NAME and --out FILE are "
                                  "required");
    struct fo_err err;
    fo_err_clear(&err);
    struct cosig_signer *s = NULL;
    struct fo_buf sk, vk;
    fo_buf_init(&sk, VKEY_MAX);
    fo_buf_init(&vk, VKEY_MAX);
    int rc = cosig_signer_generate(name, &s, &err);
    if (rc == FO_E_INVALID)
        err.code = FO_E_USAGE;
    if (!rc)
        rc = cosig_signer_format(s, &sk, &err);
    if (!rc)
        rc = cosig_signer_format_verifier(s, &vk, &err);
    if (!rc && !(rc = fo_buf_putc(&sk, '\n'))) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s", out);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof(dir), ".");
        rc = fo_file_create(dir, out, sk.data, sk.len - 1, 0600, &err);
        if (rc == FO_E_EXISTS)
            fo_err_set(&err, FO_E_EXISTS, "%s: exists; not overwritten", out);
    }
    int ex = rc ? cli_fail(c, &err) : 0;
    if (!ex && c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", name);
        cJSON_AddStringToObject(o, "key_file", out);
        cJSON_AddStringToObject(o, "vkey", vk.data);
        cli_print_json(o, 0);
        cJSON_Delete(o);
    } else if (!ex) {
        printf("%s\n", vk.data);
    }
    if (sk.data)
        memset(sk.data, 0, sk.len);
    fo_buf_release(&sk);
    fo_buf_release(&vk);
    cosig_signer_free(s);
    return ex;
}

/* Reads a private witness key file (one trailing newline allowed). */
static int read_witness_key(const char *arg, struct cosig_signer **out,
                            struct fo_err *err)
{
    struct fo_buf k;
    int rc = cli_read_vkey(arg, &k, err);
    if (!rc)
        rc = cosig_signer_parse(k.data ? k.data : "", k.len, out, err);
    if (k.data)
        memset(k.data, 0, k.len);
    fo_buf_release(&k);
    return rc;
}

static int witness_cosign(struct cli *c, int argc, char **argv)
{
    const char *key = NULL, *vkey_arg = NULL, *file = NULL;
    long long t = -1;
    const struct cli_opt opts[] = {
        {"--key", "@FILE", CLI_OPT_STR, &key, 0, 0, NULL, NULL,
         "this witness's private key (from witness keygen)"},
        {"--vkey", "LOGKEY", CLI_OPT_STR, &vkey_arg, 0, 0, NULL, NULL,
         "the log's verifier key (text or @FILE)"},
        {"--time", "T", CLI_OPT_INT, &t, 0, INT64_MAX, NULL, "POSIX seconds",
         "the cosignature's timestamp (default: now)"},
        CLI_OPT_END,
    };
    /* before any file is read */
    int pe = cli_parse(c, "witness cosign", argc, argv, opts, &file, 1, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(witness_help);
    if (pe)
        return pe;
    if (!key || !vkey_arg || !file)
        return cli_usage_error(c, "witness cosign: --key KEY, --vkey LOGKEY "
                                  "and NOTE are required");
    uint64_t ts = t >= 0 ? (uint64_t)t : (uint64_t)time(NULL);
    struct fo_err err;
    fo_err_clear(&err);
    struct cosig_signer *s = NULL;
    struct note_verifier *logv = NULL;
    struct fo_buf note, vkey, text, line;
    fo_buf_init(&text, NOTE_MAX_LEN);
    fo_buf_init(&line, VKEY_MAX);
    int rc = cli_read_file(file, NOTE_MAX_LEN, &note, &err);
    if (!rc)
        rc = cli_read_vkey(vkey_arg, &vkey, &err);
    else
        fo_buf_init(&vkey, VKEY_MAX);
    if (!rc)
        rc = read_witness_key(key, &s, &err);
    if (!rc)
        rc = note_verifier_parse(vkey.data ? vkey.data : "", vkey.len, &logv,
                                 &err);
    struct note_checkpoint cp;
    if (!rc) {
        /* A witness signs only a checkpoint the log signed. */
        rc = note_checkpoint_open(note.data ? note.data : "", note.len, logv,
                                  &cp, &err);
        if (rc == FO_OK) {
            const struct note_verifier *k[1] = {logv};
            rc = note_open(note.data, note.len, k, 1, &text, &err);
        }
    }
    if (!rc)
        rc = cosig_sign(s, text.data, text.len, ts, &line, &err);
    int ex;
    if (rc == FO_E_VERIFY) {
        fprintf(stderr, "forum: %s\n", err.msg);
        ex = 1;
    } else {
        ex = rc ? cli_fail(c, &err) : 0;
    }
    if (!ex && c->json) {
        cJSON *o = cJSON_CreateObject();
        struct fo_buf both;
        fo_buf_init(&both, FO_BUF_UNLIMITED);
        fo_buf_append(&both, note.data, note.len);
        fo_buf_append(&both, line.data, line.len);
        cJSON_AddStringToObject(o, "witness", cosig_signer_name(s));
        fo_json_add_int(o, "timestamp", (long long)ts);
        fo_json_add_int(o, "size", (long long)cp.size);
        cJSON_AddStringToObject(o, "note", both.data);
        cli_print_json(o, 0);
        cJSON_Delete(o);
        fo_buf_release(&both);
    } else if (!ex) {
        fwrite(note.data, 1, note.len, stdout);
        fwrite(line.data, 1, line.len, stdout);
    }
    cosig_signer_free(s);
    note_verifier_free(logv);
    fo_buf_release(&note);
    fo_buf_release(&vkey);
    fo_buf_release(&text);
    fo_buf_release(&line);
    return ex;
}

int cli_witness(struct cli *c, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i]))
            return cli_help(witness_help);
    if (argc < 2)
        return cli_usage_error(c, "witness: keygen or cosign");
    if (!strcmp(argv[1], "keygen"))
        return witness_keygen(c, argc - 1, argv + 1);
    if (!strcmp(argv[1], "cosign"))
        return witness_cosign(c, argc - 1, argv + 1);
    return cli_bad_sub(c, "witness", argv[1], "keygen cosign");
}

/* ---- witnesses on a checkpoint --------------------------------------------
 */

struct wcheck {
    size_t n;
    size_t valid;
    struct cosig_verifier *w[WITNESS_ARGS_MAX];
    int ok[WITNESS_ARGS_MAX];
    uint64_t ts[WITNESS_ARGS_MAX];
};

static void wcheck_release(struct wcheck *wc)
{
    for (size_t i = 0; i < wc->n; i++)
        cosig_verifier_free(wc->w[i]);
    wc->n = 0;
}

/* Parses the --witness keys (refusing one named twice). */
static int wcheck_keys(struct wcheck *wc, const char *const *arg, int n,
                       struct fo_err *err)
{
    for (int i = 0; i < n; i++) {
        struct fo_buf k;
        int rc = cli_read_vkey(arg[i], &k, err);
        if (!rc)
            rc = cosig_verifier_parse(k.data ? k.data : "", k.len,
                                      &wc->w[wc->n], err);
        fo_buf_release(&k);
        if (rc)
            return rc;
        wc->n++;
        for (size_t j = 0; j + 1 < wc->n; j++)
            if (!strcmp(cosig_verifier_name(wc->w[j]),
                        cosig_verifier_name(wc->w[wc->n - 1])) &&
                cosig_verifier_id(wc->w[j]) ==
                    cosig_verifier_id(wc->w[wc->n - 1]))
                return fo_err_set(err, FO_E_USAGE, "--witness %s given twice",
                                  cosig_verifier_name(wc->w[j]));
    }
    return FO_OK;
}

static cJSON *wcheck_json(const struct wcheck *wc, int min)
{
    cJSON *o = cJSON_CreateObject();
    fo_json_add_int(o, "required", min);
    fo_json_add_int(o, "valid", (long long)wc->valid);
    cJSON *arr = cJSON_AddArrayToObject(o, "named");
    for (size_t i = 0; i < wc->n; i++) {
        cJSON *e = cJSON_CreateObject();
        char id[9];
        snprintf(id, sizeof(id), "%08" PRIx32, cosig_verifier_id(wc->w[i]));
        cJSON_AddStringToObject(e, "witness", cosig_verifier_name(wc->w[i]));
        cJSON_AddStringToObject(e, "key_id", id);
        cJSON_AddBoolToObject(e, "ok", wc->ok[i]);
        if (wc->ok[i])
            fo_json_add_int(e, "timestamp", (long long)wc->ts[i]);
        else
            cJSON_AddNullToObject(e, "timestamp");
        cJSON_AddItemToArray(arr, e);
    }
    return o;
}

int cli_witness_check(struct cli *c, const char *note_file,
                      const char *const *witness, int n, int min)
{
    struct wcheck wc = {0};
    struct fo_buf note;
    struct fo_err err;
    fo_err_clear(&err);
    int rc = cli_read_file(note_file, NOTE_MAX_LEN, &note, &err);
    if (!rc)
        rc = wcheck_keys(&wc, witness, n, &err);
    if (!rc)
        rc = cosig_check_note(note.data ? note.data : "", note.len,
                              (const struct cosig_verifier *const *)wc.w, wc.n,
                              wc.ok, wc.ts, &wc.valid, &err);
    int ex = 0;
    if (rc == FO_E_VERIFY || (!rc && wc.valid < (size_t)min)) {
        if (!rc)
            fo_err_set(&err, FO_E_VERIFY,
                       "%zu of %d required witness cosignatures", wc.valid,
                       min);
        if (c->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddFalseToObject(o, "ok");
            cJSON_AddStringToObject(o, "reason", "witnesses");
            cJSON_AddStringToObject(o, "detail", err.msg);
            cJSON_AddItemToObject(o, "witnesses", wcheck_json(&wc, min));
            cli_print_json(o, 0);
            cJSON_Delete(o);
        } else {
            printf("FAILED: witnesses: %s\n", err.msg);
        }
        ex = 1;
    } else if (rc) {
        ex = cli_fail(c, &err);
        if (ex == 1)
            ex = 2;
    }
    wcheck_release(&wc);
    fo_buf_release(&note);
    return ex;
}

/* ---- forum verify ----------------------------------------------------------
 */

/* Where tiles come from: a directory, or an http:// or https:// URL
 * prefix (read with the HTTP client, httpc.h). */
struct source {
    const char *dir;
    struct httpc_url url; /* its path is the prefix, without a final '/' */
    struct httpc_tls *tls;
};

static void source_release(struct source *s)
{
    httpc_url_release(&s->url);
    httpc_tls_free(s->tls);
}

static int parse_source(const char *arg, const char *ca_file, struct source *s,
                        struct fo_err *err)
{
    memset(s, 0, sizeof(*s));
    if (strncasecmp(arg, "http://", 7) != 0 &&
        strncasecmp(arg, "https://", 8) != 0) {
        if (ca_file)
            return fo_err_set(err, FO_E_USAGE,
                              "--ca-file is for an https:// --tiles URL");
        s->dir = arg;
        return FO_OK;
    }
    int rc = httpc_url_parse(arg, &s->url, err);
    if (!rc && strchr(s->url.path, '?'))
        rc = fo_err_set(err, FO_E_INVALID, "a query is not taken");
    if (!rc && ca_file && !s->url.tls)
        rc = fo_err_set(err, FO_E_INVALID, "--ca-file is for https");
    if (rc) {
        source_release(s);
        if (rc == FO_E_INVALID)
            fo_err_prefix(err, "--tiles %s", arg);
        return rc == FO_E_INVALID ? FO_E_USAGE : rc;
    }
    size_t n = strlen(s->url.path);
    while (n > 0 && s->url.path[n - 1] == '/')
        s->url.path[--n] = '\0';
    if (s->url.tls && (rc = httpc_tls_create(ca_file, &s->tls, err)) != FO_OK)
        source_release(s);
    return rc;
}

static int fetch_file(const struct source *s, const char *path,
                      struct fo_buf *out, struct fo_err *err)
{
    char full[4096];
    int n = snprintf(full, sizeof(full), "%s/%s", s->dir, path);
    if (n < 0 || (size_t)n >= sizeof(full))
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", s->dir);
    FILE *f = fopen(full, "rb");
    if (!f)
        return fo_err_set(err, errno == ENOENT ? FO_E_NOT_FOUND : FO_E_IO,
                          "%s: %s", full, strerror(errno));
    char chunk[8192];
    size_t got;
    int rc = FO_OK;
    while (!rc && (got = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = fo_buf_append(out, chunk, got);
    if (!rc && ferror(f))
        rc = fo_err_set(err, FO_E_IO, "%s: read error", full);
    fclose(f);
    if (rc == FO_E_TOO_LARGE || rc == FO_E_NOMEM)
        fo_err_set(err, rc, "%s: %s", full, fo_code_message(rc));
    return rc;
}

static int fetch(void *ctx, const char *path, struct fo_buf *out,
                 struct fo_err *err)
{
    const struct source *s = ctx;
    if (s->dir)
        return fetch_file(s, path, out, err);
    char rpath[HTTPC_URL_MAX + 64], shown[HTTPC_URL_MAX + 400];
    snprintf(rpath, sizeof(rpath), "%s/%s", s->url.path, path);
    httpc_url_text(&s->url, rpath, shown, sizeof(shown));
    struct httpc_spec spec = {.method = HTTPC_GET,
                              .url = &s->url,
                              .path = rpath,
                              .tls = s->tls,
                              .timeout_ms = FETCH_TIMEOUT_MS,
                              .body_max = FETCH_BODY_MAX};
    struct httpc_reply rep;
    int rc = httpc_fetch(&spec, &rep, err);
    if (rc) {
        fo_err_prefix(err, "%s", shown);
        /* a TLS or protocol failure is a source that cannot be read */
        return rc == FO_E_UPSTREAM ? FO_E_IO : rc;
    }
    if (rep.status == 404 || rep.status == 410)
        rc = fo_err_set(err, FO_E_NOT_FOUND, "%s: %d", shown, rep.status);
    else if (rep.status != 200)
        rc = fo_err_set(err, FO_E_IO, "%s: HTTP %d", shown, rep.status);
    else if ((rc = fo_buf_append(out, rep.body, rep.len)) != FO_OK)
        fo_err_set(err, rc, "%s: %s", shown, fo_code_message(rc));
    httpc_reply_release(&rep);
    return rc;
}

struct vres {
    const char *reason; /* NULL when ok */
    char detail[FO_ERR_MSG_MAX];
};

static void vfail(struct vres *v, const char *reason, const struct fo_err *err)
{
    if (v->reason)
        return;
    v->reason = reason;
    snprintf(v->detail, sizeof(v->detail), "%s", err->msg);
}

static cJSON *hex_item(const uint8_t h[32])
{
    char hex[65];
    fo_hex(h, 32, hex);
    return cJSON_CreateString(hex);
}

/* forum verify without --tiles is `forum ledger verify`. */
static int ledger_verify_alias(struct cli *c, int argc, char **argv)
{
    char **v = calloc((size_t)argc + 2, sizeof(*v));
    if (!v)
        return 3;
    static char ledger_word[] = "ledger";
    v[0] = ledger_word;
    for (int i = 0; i < argc; i++)
        v[i + 1] = argv[i];
    int ex = cli_ledger(c, argc + 1, v);
    free(v);
    return ex;
}

static const char verify_help[] =
    "usage: forum verify [--deep] [--checkpoint NOTE --vkey KEY\n"
    "                    [--witness WKEY ... [--min-witnesses K]]]\n"
    "       forum verify --tiles DIR|URL --vkey KEY [--ca-file PEM]\n"
    "                    [--index I] [--old NOTE] [--witness WKEY ... "
    "[--min-witnesses K]]\n"
    "Without --tiles, forum verify is forum ledger verify: see its "
    "--help.\n"
    "With --tiles it checks a log from what it publishes, with no ledger "
    "and\nno database: "
    "reads DIR/checkpoint (or URL/checkpoint: an "
    "http:// or https://\nprefix served by any static web server), checks "
    "its signature by KEY (the\nlog's verifier key, text or "
    "@FILE), recomputes its root from the\ntiles, proves that "
    "entry I (default: a random one) is in it from the\ntiles "
    "and its entry bundle, and with --old NOTE (an earlier "
    "signed\ncheckpoint of the same log) proves the two "
    "consistent from the tiles.\n"
    "--witness WKEY (text or @FILE, repeatable) names a witness; "
    "at least K\n(default: all named) must have cosigned the "
    "checkpoint\n(cosignature/v1). A bad cosignature by a named "
    "witness fails.\n"
    "An https:// URL's certificate is checked against the system's CAs "
    "(the\nSSL_CERT_FILE and SSL_CERT_DIR variables replace them) or "
    "those of\n--ca-file PEM.\n"
    "e.g. forum verify --tiles https://logs.example/forum-log "
    "--vkey @log.vkey\n"
    "     forum verify --tiles ./tiles --vkey @log.vkey --old "
    "yesterday.note \\\n"
    "         --witness @w1.vkey --witness @w2.vkey "
    "--min-witnesses 1\n"
    "Exit 0 verified, 1 not verified (reason: bad_signature, "
    "witnesses,\nmissing_tile, bad_tile, root_mismatch, "
    "inclusion, consistency),\n2 bad input, 3 a source that "
    "cannot be read. --json prints {\"ok\",\n\"reason\", "
    "\"detail\", \"checkpoint\", \"witnesses\", \"inclusion\", "
    "\"consistency\",\n\"fetches\"}.\n";

/* Step 3b: entry index (random when < 0) proved in the checkpoint from
 * the tiles alone; *inc says how (NULL when it failed: res says why). */
static int prove_inclusion(struct tile_reader *r,
                           const struct note_checkpoint *cp, long long index,
                           cJSON **inc, struct vres *res, struct fo_err *err)
{
    int rc = FO_OK;
    uint64_t idx = (uint64_t)index;
    if (index < 0) {
        uint64_t rnd = 0;
        RAND_bytes((unsigned char *)&rnd, sizeof(rnd));
        idx = rnd % cp->size;
    }
    uint8_t(*path)[32] = malloc(MERKLE_MAX_PATH * 32);
    uint8_t data[32], leaf[32];
    size_t plen = 0;
    if (!path)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (!rc && idx >= cp->size)
        rc = fo_err_set(err, FO_E_VERIFY,
                        "entry %llu is not in the checkpoint (size "
                        "%llu)",
                        (unsigned long long)idx, (unsigned long long)cp->size);
    if (!rc)
        rc = tile_reader_leaf_data(r, idx, data, err);
    if (!rc)
        merkle_leaf_hash(NULL, data, 32, leaf);
    if (!rc)
        rc = merkle_inclusion_proof(tile_reader_node, r, idx, cp->size, path,
                                    &plen, err);
    if (!rc)
        rc = merkle_verify_inclusion(leaf, idx, cp->size,
                                     (const uint8_t(*)[32])path, plen, cp->root,
                                     err);
    if (rc == FO_E_VERIFY || rc == FO_E_INVALID)
        vfail(res, "inclusion", err);
    if (!rc) {
        *inc = cJSON_CreateObject();
        fo_json_add_int(*inc, "index", (long long)idx);
        cJSON_AddItemToObject(*inc, "entry_hash", hex_item(data));
        cJSON_AddItemToObject(*inc, "leaf_hash", hex_item(leaf));
        fo_json_add_int(*inc, "path_len", (long long)plen);
    }
    free(path);
    return rc;
}

/* Step 3c: the checkpoint consistent with the earlier one in oldnote (its
 * fields into *ocp); *con says how (NULL when it failed: res says why). */
static int prove_consistency(struct tile_reader *r,
                             const struct note_verifier *v,
                             const struct note_checkpoint *cp,
                             const struct fo_buf *oldnote,
                             struct note_checkpoint *ocp, cJSON **con,
                             struct vres *res, struct fo_err *err)
{
    int rc;
    rc = note_checkpoint_open(oldnote->data, oldnote->len, v, ocp, err);
    if (rc == FO_E_VERIFY) {
        fo_err_prefix(err, "--old");
        vfail(res, "bad_signature", err);
    } else if (rc == FO_OK) {
        uint8_t(*path)[32] = malloc(MERKLE_MAX_PATH * 32);
        size_t plen = 0;
        rc = path ? FO_OK : fo_err_set(err, FO_E_NOMEM, NULL);
        if (!rc && (ocp->size == 0 || ocp->size > cp->size))
            rc = fo_err_set(err, FO_E_VERIFY,
                            "--old size %llu: must be 1 to the "
                            "checkpoint's size %llu",
                            (unsigned long long)ocp->size,
                            (unsigned long long)cp->size);
        if (!rc)
            rc = merkle_consistency_proof(tile_reader_node, r, ocp->size,
                                          cp->size, path, &plen, err);
        if (!rc)
            rc = merkle_verify_consistency(ocp->size, cp->size, ocp->root,
                                           cp->root, (const uint8_t(*)[32])path,
                                           plen, err);
        if (rc == FO_E_VERIFY || rc == FO_E_INVALID)
            vfail(res, "consistency", err);
        if (!rc) {
            *con = cJSON_CreateObject();
            fo_json_add_int(*con, "first", (long long)ocp->size);
            fo_json_add_int(*con, "second", (long long)cp->size);
            cJSON_AddItemToObject(*con, "root1", hex_item(ocp->root));
            fo_json_add_int(*con, "path_len", (long long)plen);
        }
        free(path);
    }
    return rc;
}

/* What verify --tiles found: JSON with --json (inc and con taken), text
 * otherwise. */
static void verify_print(struct cli *c, const struct vres *res,
                         const struct note_checkpoint *cpp,
                         const struct note_checkpoint *ocpp,
                         const struct wcheck *wcp, int min, cJSON *inc,
                         cJSON *con, struct tile_reader *r, const char *old)
{
    const struct note_checkpoint cp = *cpp, ocp = *ocpp;
    const struct wcheck *wc = wcp;
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", !res->reason);
        if (res->reason) {
            cJSON_AddStringToObject(o, "reason", res->reason);
            cJSON_AddStringToObject(o, "detail", res->detail);
        } else {
            cJSON_AddNullToObject(o, "reason");
            cJSON_AddNullToObject(o, "detail");
        }
        if (res->reason && !strcmp(res->reason, "bad_signature") && !old) {
            cJSON_AddNullToObject(o, "checkpoint");
        } else {
            cJSON *jc = cJSON_AddObjectToObject(o, "checkpoint");
            cJSON_AddStringToObject(jc, "origin", cp.origin);
            fo_json_add_int(jc, "size", (long long)cp.size);
            cJSON_AddItemToObject(jc, "root", hex_item(cp.root));
        }
        if (wc->n > 0)
            cJSON_AddItemToObject(o, "witnesses", wcheck_json(wc, min));
        else
            cJSON_AddNullToObject(o, "witnesses");
        cJSON_AddItemToObject(o, "inclusion", inc ? inc : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "consistency", con ? con : cJSON_CreateNull());
        fo_json_add_int(o, "fetches",
                        r ? (long long)tile_reader_fetches(r) + 1 : 0);
        cli_print_json(o, 0);
        cJSON_Delete(o);
    } else if (res->reason) {
        printf("FAILED: %s: %s\n", res->reason, res->detail);
    } else {
        char hex[65];
        fo_hex(cp.root, 32, hex);
        printf("ok: checkpoint %s at size %llu (root %.16s...) signed by "
               "the given key\n",
               cp.origin, (unsigned long long)cp.size, hex);
        if (wc->n > 0)
            printf("ok: %zu of %zu named witnesses cosigned it (%d "
                   "required)\n",
                   wc->valid, wc->n, min);
        if (inc) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(inc, "index");
            const cJSON *h =
                cJSON_GetObjectItemCaseSensitive(inc, "entry_hash");
            printf("ok: entry %.0f (hash %.16s...) is in it, proved from "
                   "tiles alone (%llu fetched)\n",
                   cJSON_GetNumberValue(e), h->valuestring,
                   (unsigned long long)tile_reader_fetches(r) + 1);
        }
        if (con)
            printf("ok: consistent with the checkpoint at size %llu\n",
                   (unsigned long long)ocp.size);
    }
    if (!c->json) {
        cJSON_Delete(inc);
        cJSON_Delete(con);
    }
}

/* The --tiles form's own usage rules; 0, or the usage error's exit code.
 * *min becomes the witnesses required (all named, by default). */
static int tiles_usage(struct cli *c, const char *ledger_flag, int has_vkey,
                       int nw, int *min)
{
    if (ledger_flag)
        return cli_usage_error(c, "verify: %s checks a ledger, not --tiles",
                               ledger_flag);
    if (!has_vkey)
        return cli_usage_error(c, "verify: --tiles and --vkey are required");
    if (*min >= 0 && nw == 0)
        return cli_usage_error(c, "verify: --min-witnesses needs --witness");
    if (*min > nw)
        return cli_usage_error(c, "verify: --min-witnesses %d of %d named",
                               *min, nw);
    if (*min < 0)
        *min = nw;
    return 0;
}

/* Step 2: the named witnesses' cosignatures on the note, at least min of
 * them valid (res says so when not). FO_OK, or an error to report. */
static int check_witnesses(const struct fo_buf *note, struct wcheck *wc,
                           int min, struct vres *res, struct fo_err *err)
{
    int rc = cosig_check_note(note->data, note->len,
                              (const struct cosig_verifier *const *)wc->w,
                              wc->n, wc->ok, wc->ts, &wc->valid, err);
    if (rc == FO_E_VERIFY) {
        vfail(res, "witnesses", err);
        return FO_OK;
    }
    if (rc)
        return rc;
    if (wc->valid < (size_t)min) {
        fo_err_set(err, FO_E_VERIFY, "%zu of %d required witness cosignatures",
                   wc->valid, min);
        vfail(res, "witnesses", err);
    }
    return FO_OK;
}

int cli_verify(struct cli *c, int argc, char **argv)
{
    /* One table for both forms: ledger verify's flags (the ledger form
     * is run by `ledger verify` itself, which parses the same words
     * again) and the --tiles ones. */
    int deep = 0;
    const char *tiles = NULL, *vkey_arg = NULL, *old = NULL, *cp_file = NULL;
    const char *ca_file = NULL;
    const char *witness[WITNESS_ARGS_MAX];
    int nw = 0;
    long long index = -1, min_w = -1;
    const struct cli_opt opts[] = {
        {"--deep", NULL, CLI_OPT_BOOL, &deep, 0, 0, NULL, NULL,
         "also re-hash every stored body (not with --tiles)"},
        {"--checkpoint", "NOTE", CLI_OPT_STR, &cp_file, 0, 0, NULL, NULL,
         "also check the signed checkpoint NOTE (not with --tiles)"},
        {"--tiles", "DIR|URL", CLI_OPT_STR, &tiles, 0, 0, NULL, NULL,
         "check a log from its static tiles alone (a directory, or an "
         "http:// or https:// URL), no ledger"},
        {"--ca-file", "PEM", CLI_OPT_STR, &ca_file, 0, 0, NULL, NULL,
         "--tiles https://: trust the CAs in PEM instead of the system "
         "store"},
        {"--vkey", "KEY", CLI_OPT_STR, &vkey_arg, 0, 0, NULL, NULL,
         "the log's verifier key (text or @FILE)"},
        {"--index", "I", CLI_OPT_INT, &index, 0, INT64_MAX, NULL, "not a seq",
         "--tiles: prove entry I is in it (default: a random one)"},
        {"--old", "NOTE", CLI_OPT_STR, &old, 0, 0, NULL, NULL,
         "--tiles: prove it consistent with the earlier checkpoint NOTE"},
        {"--witness", "WKEY", CLI_OPT_LIST, witness, 0, WITNESS_ARGS_MAX, &nw,
         NULL, "a witness that must have cosigned the checkpoint (repeat)"},
        {"--min-witnesses", "K", CLI_OPT_INT, &min_w, 0, WITNESS_ARGS_MAX, NULL,
         NULL, "at least K of them (default: all)"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "verify", argc, argv, opts, NULL, 0, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(verify_help);
    if (pe)
        return pe;
    if (!tiles) {
        if (index >= 0 || old)
            return cli_usage_error(c, "verify: %s needs --tiles",
                                   old ? "--old" : "--index");
        return ledger_verify_alias(c, argc, argv);
    }
    int min = (int)min_w;
    int uex = tiles_usage(
        c, deep || cp_file ? (deep ? "--deep" : "--checkpoint") : NULL,
        vkey_arg != NULL, nw, &min);
    if (uex)
        return uex;

    struct fo_err err;
    fo_err_clear(&err);
    struct source src;
    struct fo_buf vkey, note, oldnote;
    fo_buf_init(&vkey, VKEY_MAX);
    fo_buf_init(&note, NOTE_MAX_LEN * 2);
    fo_buf_init(&oldnote, NOTE_MAX_LEN * 2);
    struct note_verifier *v = NULL;
    struct tile_reader *r = NULL;
    struct wcheck wc = {0};
    struct vres res = {0};
    struct note_checkpoint cp = {0}, ocp = {0};
    cJSON *inc = NULL, *con = NULL;
    int ex = 0;
    int rc = cli_read_vkey(vkey_arg, &vkey, &err);
    if (!rc)
        rc = note_verifier_parse(vkey.data, vkey.len, &v, &err);
    if (!rc)
        rc = wcheck_keys(&wc, witness, nw, &err);
    if (!rc)
        rc = parse_source(tiles, ca_file, &src, &err);
    if (!rc) {
        rc = fetch(&src, "checkpoint", &note, &err);
        if (rc == FO_E_NOT_FOUND)
            rc = FO_E_IO; /* no checkpoint: not a log at all */
    }
    if (!rc && old) {
        fo_buf_release(&oldnote);
        rc = cli_read_file(old, NOTE_MAX_LEN * 2, &oldnote, &err);
    }
    if (rc) {
        ex = cli_fail(c, &err);
        if (ex == 1)
            ex = 2;
        goto out;
    }
    /* 1. the checkpoint's signature */
    rc = note_checkpoint_open(note.data, note.len, v, &cp, &err);
    if (rc == FO_E_VERIFY)
        vfail(&res, "bad_signature", &err);
    else if (rc) {
        ex = cli_fail(c, &err);
        goto out;
    }
    /* 2. the witnesses */
    if (!res.reason && wc.n > 0 &&
        (rc = check_witnesses(&note, &wc, min, &res, &err)) != FO_OK) {
        ex = cli_fail(c, &err);
        goto out;
    }
    /* 3. the tiles: root, inclusion, consistency */
    if (!res.reason && cp.size > 0) {
        rc = tile_reader_create(fetch, &src, cp.size, &r, &err);
        uint8_t root[32];
        if (!rc)
            rc = merkle_root(tile_reader_node, r, cp.size, root, &err);
        if (!rc && memcmp(root, cp.root, 32) != 0) {
            fo_err_set(&err, FO_E_VERIFY,
                       "the tiles give another root than the checkpoint's");
            rc = FO_E_VERIFY;
            vfail(&res, "root_mismatch", &err);
        }
        if (!rc)
            rc = prove_inclusion(r, &cp, index, &inc, &res, &err);
        if (!rc && old)
            rc = prove_consistency(r, v, &cp, &oldnote, &ocp, &con, &res, &err);
        if (rc == FO_E_NOT_FOUND)
            vfail(&res, "missing_tile", &err);
        else if (rc && !res.reason && rc != FO_E_IO && rc != FO_E_NOMEM &&
                 rc != FO_E_UNAVAILABLE && rc != FO_E_TIMEOUT)
            vfail(&res, "bad_tile", &err);
        else if (rc && !res.reason) {
            ex = cli_fail(c, &err);
            goto out;
        }
    } else if (!res.reason && old) {
        fo_err_set(&err, FO_E_VERIFY, "the checkpoint is of the empty tree");
        vfail(&res, "consistency", &err);
    }
    ex = res.reason ? 1 : 0;
    verify_print(c, &res, &cp, &ocp, &wc, min, inc, con, r, old);
    inc = con = NULL;
out:
    cJSON_Delete(inc);
    cJSON_Delete(con);
    tile_reader_free(r);
    source_release(&src);
    wcheck_release(&wc);
    note_verifier_free(v);
    fo_buf_release(&vkey);
    fo_buf_release(&note);
    fo_buf_release(&oldnote);
    return ex;
}

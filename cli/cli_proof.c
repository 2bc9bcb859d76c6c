/* cli_proof: `forum ledger checkpoint | prove | consistency | key | bundle`,
 * `forum ledger verify --checkpoint`, and `forum verify-bundle`. The data
 * commands map onto the table's methods, so --json prints what HTTP and MCP
 * serve; verify-bundle needs no ledger at all. */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ledger/fo_json.h"
#include "ledger/note.h"
#include "ledger/proof.h"

#define VKEY_MAX 4096
#define BUNDLE_MAX (64u << 20) /* a 1 MiB body and its escaping fit well */

static int fail_msg(struct cli *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_msg(struct cli *c, int code, const char *fmt, ...)
{
    struct fo_err err;
    va_list ap;
    va_start(ap, fmt);
    fo_err_setv(&err, code, fmt, ap);
    va_end(ap);
    return cli_fail(c, &err);
}

int cli_read_file(const char *path, size_t max, struct fo_buf *out,
                  struct fo_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fo_err_set(err, FO_E_INVALID, "%s: cannot open", path);
    char chunk[65536];
    size_t n;
    int rc = FO_OK;
    fo_buf_init(out, max);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        rc = fo_buf_append(out, chunk, n);
        if (rc == FO_E_TOO_LARGE)
            rc = fo_err_set(err, FO_E_INVALID, "%s: more than %zu bytes", path,
                            max);
        if (rc)
            break;
    }
    if (rc == FO_OK && ferror(f))
        rc = fo_err_set(err, FO_E_IO, "%s: read error", path);
    fclose(f);
    return rc;
}

int cli_read_vkey(const char *arg, struct fo_buf *out, struct fo_err *err)
{
    if (arg[0] != '@') {
        fo_buf_init(out, VKEY_MAX);
        int rc = fo_buf_puts(out, arg);
        return rc ? fo_err_set(err, FO_E_INVALID, "--vkey: too long") : FO_OK;
    }
    int rc = cli_read_file(arg + 1, VKEY_MAX, out, err);
    if (rc == FO_OK && out->len > 0 && out->data[out->len - 1] == '\n')
        out->data[--out->len] = '\0';
    return rc;
}

static void print_path(const cJSON *path)
{
    const cJSON *h;
    printf("path (%d hashes):\n", cJSON_GetArraySize(path));
    cJSON_ArrayForEach (h, path) {
        printf("  %s\n", h->valuestring);
    }
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* ---- checkpoint -------------------------------------------------------- */

static void print_checkpoint(struct cli *c, const cJSON *o)
{
    if (c->json) {
        cli_print_json(o, 0);
        return;
    }
    const cJSON *note = cJSON_GetObjectItemCaseSensitive(o, "note");
    if (cJSON_IsString(note)) {
        /* stdout is the note alone, as `verify --checkpoint` reads it
         * (`> cp.note` saves a file that verifies); the rest to stderr */
        fprintf(stderr, "forum: size %.0f, root %s\n", num_of(o, "size"),
                str_of(o, "root"));
        fputs(note->valuestring, stdout);
        return;
    }
    printf("size %.0f\nroot %s\n", num_of(o, "size"), str_of(o, "root"));
    printf("(unsigned: the live tree at that size)\n");
}

int cli_ledger_checkpoint(struct cli *c, int argc, char **argv)
{
    int sign = 0;
    long long size = -1;
    const struct cli_opt opts[] = {
        {"--sign", NULL, CLI_OPT_BOOL, &sign, 0, 0, NULL, NULL,
         "sign a checkpoint (the key is made on first use)"},
        {"--size", "N", CLI_OPT_INT, &size, 0, INT64_MAX, NULL,
         "a non-negative integer is needed", "at tree size N"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "ledger checkpoint", argc, argv, opts, NULL, 0, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum ledger checkpoint [--sign] [--size N]\n"
            "Without --sign: the latest signed checkpoint (one is signed "
            "first when\nnone exists yet), or with --size N the live "
            "tree root at size N,\nunsigned. With --sign: signs a C2SP "
            "checkpoint at size N (default: the\ncurrent size) with the "
            "ledger key, stores it and prints it. A signed\ncheckpoint is "
            "printed as the note alone (its size and root go to\nstderr), "
            "so `> cp.note` saves what verify --checkpoint takes.\nSigning a"
            "\nsize twice "
            "gives the stored checkpoint. The key is made on first use\n"
            "(DIR/checkpoint.key, DIR/checkpoint.vkey).\n"
            "--json prints {\"checkpoint\", \"size\", \"root\", "
            "\"note\"}.\n"
            "examples:\n  forum ledger checkpoint --sign\n"
            "  forum ledger checkpoint --size 1000\n");
    if (pe)
        return pe;
    struct ledger *l = NULL;
    int ex = cli_open(c, sign || size < 0 ? 0 : LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    cJSON *out = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    if (!sign && size < 0) {
        ex = cli_call(c, l, "ledger_checkpoint", NULL, &out);
    } else {
        struct ledger_checkpoint cp = {0};
        int rc = sign ? ledger_checkpoint_sign(l, size, &cp, &err)
                      : ledger_root(l, size, cp.root, &err);
        cp.size = sign ? cp.size : size;
        if (rc == FO_OK && !(out = ledger_checkpoint_json(&cp)))
            rc = fo_err_set(&err, FO_E_NOMEM, NULL);
        ledger_checkpoint_release(&cp);
        if (rc)
            ex = cli_fail(c, &err);
    }
    if (!ex)
        print_checkpoint(c, out);
    cJSON_Delete(out);
    ledger_close(l);
    return ex;
}

/* ---- prove, consistency ------------------------------------------------ */

int cli_ledger_prove(struct cli *c, int argc, char **argv)
{
    long long seq = -1, size = -1;
    const char *pos = NULL;
    const struct cli_opt opts[] = {
        {"--size", "N", CLI_OPT_INT, &size, 0, INT64_MAX, NULL,
         "a non-negative integer is needed", "in the tree of size N"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "ledger prove", argc, argv, opts, &pos, 1, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help("usage: forum ledger prove SEQ [--size N]\n"
                        "The RFC 6962 inclusion proof of entry SEQ in the "
                        "tree of size N\n(default: the current size). "
                        "--json prints {\"index\", \"size\",\n\"leaf_hash\", "
                        "\"root\", \"path\"}.\n"
                        "example:\n  forum --json ledger prove 42 --size "
                        "1000\n");
    if (pe)
        return pe;
    if (pos && (seq = cli_parse_seq(pos)) < 0)
        return cli_bad_arg(c, "ledger prove", pos, NULL);
    if (seq < 0)
        return cli_usage_error(c, "prove: a SEQ (a non-negative integer) is "
                                  "needed");
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    fo_json_add_int(in, "seq", seq);
    if (size >= 0)
        fo_json_add_int(in, "size", size);
    ex = cli_call(c, l, "ledger_prove", in, &out);
    if (!ex && c->json) {
        cli_print_json(out, 0);
    } else if (!ex) {
        printf("entry %.0f is in the tree of size %.0f\nleaf_hash %s\nroot "
               "%s\n",
               num_of(out, "index"), num_of(out, "size"),
               str_of(out, "leaf_hash"), str_of(out, "root"));
        print_path(cJSON_GetObjectItemCaseSensitive(out, "path"));
    }
    cJSON_Delete(out);
    ledger_close(l);
    return ex;
}

int cli_ledger_consistency(struct cli *c, int argc, char **argv)
{
    long long a = -1, b = -1;
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe =
        cli_parse(c, "ledger consistency", argc, argv, opts, pos, 2, &npos);
    if (pe == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum ledger consistency A [B]\n"
            "The RFC 6962 consistency proof that the tree of size A is "
            "a prefix of\nthe tree of size B (default: the current "
            "size). A must be at least 1:\na proof from the empty tree "
            "proves nothing. --json prints {\"first\",\n\"second\", "
            "\"root1\", \"root2\", \"path\"}.\n"
            "example:\n  forum ledger consistency 1000 2000\n");
    if (pe)
        return pe;
    for (int i = 0; i < npos; i++) {
        long long v = cli_parse_seq(pos[i]);
        if (v < 0)
            return cli_bad_arg(c, "ledger consistency", pos[i], NULL);
        if (i == 0)
            a = v;
        else
            b = v;
    }
    if (npos == 0)
        return cli_usage_error(c, "consistency: the sizes A and B are needed");
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    fo_json_add_int(in, "first", a);
    if (b >= 0)
        fo_json_add_int(in, "second", b);
    ex = cli_call(c, l, "ledger_consistency", in, &out);
    if (!ex && c->json) {
        cli_print_json(out, 0);
    } else if (!ex) {
        printf("the tree of size %.0f is a prefix of the tree of size %.0f\n"
               "root1 %s\nroot2 %s\n",
               num_of(out, "first"), num_of(out, "second"),
               str_of(out, "root1"), str_of(out, "root2"));
        print_path(cJSON_GetObjectItemCaseSensitive(out, "path"));
    }
    cJSON_Delete(out);
    ledger_close(l);
    return ex;
}

/* ---- key --------------------------------------------------------------- */

int cli_ledger_key(struct cli *c, int argc, char **argv)
{
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe = cli_parse(c, "ledger key", argc, argv, opts, NULL, 0, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help("usage: forum ledger key\n"
                        "Prints the verifier key of the ledger's checkpoints "
                        "(<name>+<hex id>+<base64>),\nas Go's "
                        "golang.org/x/mod/sumdb/note reads it; the key pair "
                        "is made on\nfirst use. --json prints {\"vkey\", "
                        "\"name\"}.\n"
                        "example:\n  forum ledger key > checkpoint.vkey\n");
    if (pe)
        return pe;
    struct ledger *l = NULL;
    int ex = cli_open(c, 0, &l);
    if (ex)
        return ex;
    char *vkey = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    int rc = ledger_verifier_key(l, &vkey, &err);
    if (rc) {
        ex = cli_fail(c, &err);
    } else if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "vkey", vkey);
        cJSON_AddStringToObject(o, "name", ledger_origin(l));
        cli_print_json(o, 0);
        cJSON_Delete(o);
    } else {
        printf("%s\n", vkey);
    }
    free(vkey);
    ledger_close(l);
    return ex;
}

/* ---- bundle ------------------------------------------------------------ */

int cli_ledger_bundle(struct cli *c, int argc, char **argv)
{
    long long seq = -1;
    const char *file = NULL;
    const char *pos = NULL;
    const struct cli_opt opts[] = {
        {"-o", "FILE", CLI_OPT_STR, &file, 0, 0, NULL, NULL,
         "write it to FILE, not stdout"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "ledger bundle", argc, argv, opts, &pos, 1, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum ledger bundle SEQ [-o FILE]\n"
            "Writes one JSON object proving entry SEQ on its own: "
            "{\"entry\", \"body\"\n(null when redacted), \"checkpoint\" "
            "(a signed note), \"proof\" (inclusion\nat the checkpoint's "
            "size), \"vkey\" (informational)}. Signs a fresh\n"
            "checkpoint when none covers SEQ. Check it anywhere with\n"
            "`forum verify-bundle FILE --vkey KEY`.\n"
            "example:\n  forum ledger bundle 42 -o entry-42.json\n");
    if (pe)
        return pe;
    if (pos && (seq = cli_parse_seq(pos)) < 0)
        return cli_bad_arg(c, "ledger bundle", pos, NULL);
    if (seq < 0)
        return cli_usage_error(c, "bundle: a SEQ (a non-negative integer) is "
                                  "needed");
    struct ledger *l = NULL;
    int ex = cli_open(c, 0, &l);
    if (ex)
        return ex;
    cJSON *out = NULL;
    struct fo_err err;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    fo_err_clear(&err);
    int rc = ledger_bundle(l, seq, &out, &err);
    if (rc == FO_OK)
        rc = fo_json_canon(out, &b, &err);
    if (rc == FO_OK)
        rc = fo_buf_putc(&b, '\n');
    if (rc) {
        ex = cli_fail(c, &err);
    } else if (file) {
        FILE *f = fopen(file, "wb");
        if (!f || fwrite(b.data, 1, b.len, f) != b.len || fflush(f) != 0 ||
            fsync(fileno(f)) != 0)
            ex = fail_msg(c, FO_E_IO, "%s: cannot write", file);
        if (f && fclose(f) != 0 && !ex)
            ex = fail_msg(c, FO_E_IO, "%s: cannot write", file);
        if (!ex && !c->json)
            printf("wrote the bundle of entry %lld to %s\n", seq, file);
        else if (!ex)
            fwrite(b.data, 1, b.len, stdout);
    } else {
        fwrite(b.data, 1, b.len, stdout);
    }
    fo_buf_release(&b);
    cJSON_Delete(out);
    ledger_close(l);
    return ex;
}

/* ---- verify --checkpoint ------------------------------------------------ */

/* What is wrong with the shape of a note file, said plainly, before the
 * signature check would call it a bad signature or no signature: FO_OK or
 * FO_E_INVALID. */
static int note_shape(const char *file, const char *n, size_t len,
                      struct fo_err *err)
{
    if (len >= 5 && !strncmp(n, "size ", 5) && memmem(n, len, "\nroot ", 6))
        return fo_err_set(err, FO_E_INVALID,
                          "%s: starts with \"size\" and \"root\" lines (what "
                          "an older `forum ledger checkpoint --sign` printed "
                          "before the note): the note starts at its origin "
                          "line; delete the lines before it",
                          file);
    if (len >= 2 && n[len - 1] == '\n' && n[len - 2] == '\n')
        return fo_err_set(err, FO_E_INVALID,
                          "%s: a blank line after the signatures (an extra "
                          "newline at the end?): a note ends right after "
                          "its last signature line",
                          file);
    if (len && n[len - 1] != '\n')
        return fo_err_set(err, FO_E_INVALID,
                          "%s: does not end in a newline after its last "
                          "signature line (cut short, or saved without it?)",
                          file);
    return FO_OK;
}

int cli_verify_checkpoint(struct cli *c, int deep, const char *note_file,
                          const char *vkey_arg)
{
    struct fo_buf note, vkey;
    struct fo_err err;
    fo_err_clear(&err);
    fo_buf_init(&note, NOTE_MAX_LEN);
    fo_buf_init(&vkey, VKEY_MAX);
    int rc = cli_read_file(note_file, NOTE_MAX_LEN, &note, &err);
    if (rc == FO_OK)
        rc = note_shape(note_file, note.data ? note.data : "", note.len, &err);
    if (rc == FO_OK)
        rc = cli_read_vkey(vkey_arg, &vkey, &err);
    if (rc) {
        fo_buf_release(&note);
        fo_buf_release(&vkey);
        return cli_fail(c, &err);
    }
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        goto out;
    struct ledger_checkpoint_result res;
    rc = ledger_verify_checkpoint(
        l, deep ? LEDGER_VERIFY_DEEP : 0, note.data ? note.data : "", note.len,
        vkey.data ? vkey.data : "", vkey.len, NULL, NULL, &res, &err);
    ledger_close(l);
    if (rc) {
        ex = cli_fail(c, &err);
        goto out;
    }
    if (c->json) {
        cJSON *o = ledger_checkpoint_result_json(&res);
        cli_print_json(o, 0);
        cJSON_Delete(o);
    } else if (res.ok) {
        char hex[65];
        fo_hex(res.root, 32, hex);
        printf("ok: %lld entries verified (chain and tree); the signed "
               "checkpoint at size %lld (root %.16s...) matches, and %lld "
               "stored checkpoints agree\n",
               (long long)res.base.entries, (long long)res.size, hex,
               (long long)res.stored_checked);
    } else if (!res.base.ok) {
        printf("FAILED: entry %lld: %s (%lld entries verified before it)\n",
               (long long)res.base.first_bad_seq,
               res.base.reason ? res.base.reason : "bad_body",
               (long long)res.base.entries);
        if (res.cp_reason)
            printf("FAILED: checkpoint: %s: %s\n", res.cp_reason, res.detail);
    } else {
        printf("FAILED: checkpoint: %s: %s\n", res.cp_reason, res.detail);
    }
    ex = res.ok ? 0 : 1;
out:
    fo_buf_release(&note);
    fo_buf_release(&vkey);
    return ex;
}

/* ---- verify-bundle ----------------------------------------------------- */

int cli_verify_bundle(struct cli *c, int argc, char **argv)
{
    const char *file = NULL, *vkey_arg = NULL;
    const struct cli_opt opts[] = {
        {"--vkey", "KEY", CLI_OPT_STR, &vkey_arg, 0, 0, NULL, NULL,
         "the log's verifier key (text or @FILE)"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "verify-bundle", argc, argv, opts, &file, 1, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum verify-bundle FILE --vkey KEY\n"
            "Checks a bundle from `forum ledger bundle` with no ledger: "
            "the entry\nhash, the body against its payload hash, the "
            "inclusion proof against\nthe checkpoint's root and size, "
            "and the checkpoint's signature by KEY\n(the key text or "
            "@FILE; never the bundle's own vkey). Exit 0 valid,\n1 "
            "invalid (the message names what failed), 2 bad input.\n"
            "example:\n  forum verify-bundle entry-42.json --vkey "
            "@checkpoint.vkey\n");
    if (pe)
        return pe;
    if (!file || !vkey_arg)
        return cli_usage_error(c, "verify-bundle: FILE and --vkey KEY are "
                                  "required");
    struct fo_buf text, vkey;
    struct fo_err err;
    cJSON *b = NULL;
    fo_err_clear(&err);
    fo_buf_init(&text, BUNDLE_MAX);
    fo_buf_init(&vkey, VKEY_MAX);
    int rc = cli_read_file(file, BUNDLE_MAX, &text, &err);
    if (rc == FO_OK)
        rc = cli_read_vkey(vkey_arg, &vkey, &err);
    if (rc == FO_OK) {
        rc = fo_json_parse(text.data ? text.data : "", text.len, &b, &err);
        if (rc) {
            fo_err_prefix(&err, "%s", file);
            err.code = FO_E_INVALID;
            rc = FO_E_INVALID;
        }
    }
    if (rc == FO_OK)
        rc =
            ledger_bundle_verify(b, vkey.data ? vkey.data : "", vkey.len, &err);
    int ex;
    if (rc == FO_OK) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(b, "entry");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "proof");
        if (c->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddTrueToObject(o, "ok");
            fo_json_add_int(o, "seq", (long long)num_of(e, "seq"));
            cJSON_AddStringToObject(o, "hash", str_of(e, "hash"));
            fo_json_add_int(o, "size", (long long)num_of(p, "size"));
            cJSON_AddStringToObject(o, "root", str_of(p, "root"));
            cli_print_json(o, 0);
            cJSON_Delete(o);
        } else {
            printf("ok: entry %.0f (hash %.16s...) is in the log at size "
                   "%.0f, root %.16s..., signed by the given key\n",
                   num_of(e, "seq"), str_of(e, "hash"), num_of(p, "size"),
                   str_of(p, "root"));
        }
        ex = 0;
    } else if (rc == FO_E_VERIFY) {
        if (c->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddFalseToObject(o, "ok");
            cJSON_AddStringToObject(o, "error", err.msg);
            cli_print_json(o, 0);
            cJSON_Delete(o);
        } else {
            printf("INVALID: %s\n", err.msg);
        }
        ex = 1;
    } else {
        ex = cli_fail(c, &err);
        if (ex == 1) /* a bundle that cannot be read is bad input */
            ex = 2;
    }
    cJSON_Delete(b);
    fo_buf_release(&text);
    fo_buf_release(&vkey);
    return ex;
}

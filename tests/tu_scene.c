/* tu_scene: the scenario tests' shared fixture (tu_scene.h). */
#include "tu_scene.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ledger/fo_buf.h"
#include "testutil.h"

const char tu_scene_plan[] =
    "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"coder\",\"instruction\":"
    "\"do what the file says\"}]}";

static const char default_roster[] =
    "{\"lanes\":[{\"name\":\"coder\",\"category\":\"engineering\","
    "\"domain\":\"edits files\",\"keywords\":[\"edit\",\"file\"],"
    "\"model_tier\":\"capable\",\"executor\":\"chat\",\"tools\":["
    "\"read_file\",\"write_file\",\"list_dir\",\"search_text\","
    "\"apply_patch\",\"run_command\"],\"max_turns\":16}]}";

const char *tu_scene_control(const char *role)
{
    if (!strcmp(role, "coordinator"))
        return tu_scene_plan;
    if (!strcmp(role, "synthesizer"))
        return "done";
    if (!strcmp(role, "validator"))
        return "{\"pass\": true, \"reason\": \"ok\"}";
    return NULL;
}

void tu_scene_open(struct scene *sc, fake_fn script, const char *roster)
{
    if (!roster)
        roster = default_roster;
    sc->f = fake_start(script);
    sc->dir = tu_tmpdir();
    /* beside the data dir: a workspace may not lie inside it; the
     * sandbox's own as root (commands run as its owner) */
    snprintf(sc->ws, sizeof(sc->ws), "%s.project", sc->dir);
    snprintf(sc->rpath, sizeof(sc->rpath), "%s/roster.json", sc->dir);
    cr_assert_eq(mkdir(sc->ws, 0700), 0);
    if (geteuid() == 0)
        cr_assert_eq(chown(sc->ws, 65534, 65534), 0);
    cr_assert_eq(tu_write_file(sc->rpath, roster, strlen(roster)), 0);
    snprintf(sc->url, sizeof(sc->url), "http://127.0.0.1:%d", sc->f->port);
}

void tu_scene_close(struct scene *sc)
{
    fake_stop(sc->f);
    fake_free(sc->f);
    tu_rmrf(sc->dir);
    tu_rmrf(strdup(sc->ws));
    sc->f = NULL;
    sc->dir = NULL;
}

static int collect(void *ctx, const struct ledger_entry *e)
{
    struct tu_entries *k = ctx;
    if (k->n < 256) {
        snprintf(k->kind[k->n], sizeof(k->kind[0]), "%s", e->kind);
        k->seq[k->n] = e->seq;
        k->parent[k->n] = e->parent;
        k->n++;
    }
    return 0;
}

void tu_scene_entries(const char *dir, struct tu_entries *k)
{
    struct ledger *l = NULL;
    struct fo_err err;
    memset(k, 0, sizeof(*k));
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "%s", err.msg);
    cr_assert_eq(ledger_range(l, 0, 256, collect, k, &err), FO_OK);
    ledger_close(l);
}

int tu_scene_count(const struct tu_entries *k, const char *kind)
{
    int n = 0;
    for (int i = 0; i < k->n; i++)
        n += !strcmp(k->kind[i], kind);
    return n;
}

char *tu_scene_bodies(const char *dir, const char *kind)
{
    struct tu_entries *k = malloc(sizeof(*k));
    cr_assert_not_null(k);
    tu_scene_entries(dir, k);
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    for (int i = 0; i < k->n; i++) {
        char *body = NULL;
        size_t len = 0;
        if (strcmp(k->kind[i], kind) ||
            ledger_body(l, k->seq[i], &body, &len, &err) != FO_OK)
            continue;
        fo_buf_append(&b, body, len);
        fo_buf_putc(&b, '\n');
        free(body);
    }
    ledger_close(l);
    free(k);
    char *s = fo_buf_detach(&b, NULL);
    fo_buf_release(&b);
    return s ? s : strdup("");
}

/* tu_scene: the shared fixture of the scenario tests that drive a scripted
 * model through tool calls (tests/test_attacks.c): a fake model running a
 * script, a temp data dir holding a one-lane roster whose agent has the
 * file tools and run_command, an empty project directory beside it as
 * the workspace, and readers of what the run witnessed. */
#ifndef TU_SCENE_H
#define TU_SCENE_H

#include <stdint.h>

#include "ledger/ledger.h"
#include "tu_model.h"

struct scene {
    struct fake *f;
    char *dir;       /* the data dir (a temp dir) */
    char ws[600];    /* DIR/project: the workspace */
    char rpath[600]; /* DIR/roster.json */
    char url[80];    /* the fake model's URL */
};

/* The plan every scene's coordinator answers: one task T1 for "coder". */
extern const char tu_scene_plan[];

/* What the control roles answer in a scene: the plan, a pass, "done";
 * NULL for a task's turns (the script's own). */
const char *tu_scene_control(const char *role);

/* Starts the fake with script and lays out the scene. roster may be NULL
 * (coder with read_file, write_file, list_dir, search_text, apply_patch
 * and run_command, max_turns 16). */
void tu_scene_open(struct scene *sc, fake_fn script, const char *roster);

/* Stops the fake and removes the data dir. */
void tu_scene_close(struct scene *sc);

/* The entries of a ledger, at most 256, in order. */
struct tu_entries {
    char kind[256][LEDGER_KIND_MAX + 1];
    int64_t seq[256], parent[256];
    int n;
};
void tu_scene_entries(const char *dir, struct tu_entries *k);

/* How many entries of kind there are. */
int tu_scene_count(const struct tu_entries *k, const char *kind);

/* The bodies of the entries of kind, joined by newlines (malloc'd). */
char *tu_scene_bodies(const char *dir, const char *kind);

#endif

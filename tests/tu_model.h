/* tu_model: a scripted fake model server on 127.0.0.1 for tests of the
 * control loop. It answers in the OpenAI-compatible chat shape, or in the
 * Anthropic Messages shape when asked at /v1/messages. It
 * tells the role of each request from the system prompt ("You are the
 * coordinator", ...) and answers with what the test's script returns. One
 * thread, one request per connection. */
#ifndef TU_MODEL_H
#define TU_MODEL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

struct fake;
/* The reply text for one request: role is "coordinator", "classifier",
 * "validator", "synthesizer", "summarizer", "judge" or "task"; n is that
 * role's
 * 0-based count. */
typedef const char *(*fake_fn)(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt);

enum { R_COORD, R_CLASS, R_VALID, R_SYNTH, R_SUMM, R_JUDGE, R_TASK, R_N };
static const char *const roles[R_N] = {"coordinator", "classifier", "validator",
                                       "synthesizer", "summarizer", "judge",
                                       "task"};

struct fake {
    int lfd, port;
    pthread_t th;
    atomic_int stop;
    fake_fn fn;
    int count[R_N];
    char log[4096]; /* "role:model " for each request, in order */
    char *seen;     /* every request body, appended */
    size_t seen_len;
    char *prompts[64]; /* the last user message of each request */
    int n_prompts;
    int anthropic; /* requests answered in Anthropic's shape */
    int bad_names; /* requests refused, as providers do, for a tool name
                      outside ^[a-zA-Z0-9_-]{1,64}$ */
};

/* Starts the server on an ephemeral port (f->port); aborts on failure. */
struct fake *fake_start(fake_fn fn);
/* Stops the server thread and closes the socket. */
void fake_stop(struct fake *f);
/* Frees what the server recorded (after fake_stop). */
void fake_free(struct fake *f);

/* A script for runs a test holds in their plan: the coordinator's reply
 * waits while tu_held_hold is set (at most 30 s; it starts set), counting
 * its calls in tu_held_coord_calls; the plan is one backend task, the
 * validator passes and the synthesizer answers TU_HELD_ANSWER. */
#define TU_HELD_ANSWER "The schema is made."
extern atomic_int tu_held_hold, tu_held_coord_calls;
/* coordinator replies let go (held or not) */
extern atomic_int tu_held_coord_done;
const char *tu_held_script(struct fake *f, const char *role, int n,
                           const char *model, const char *prompt);
/* Waits until n coordinator calls have arrived; aborts after 10 s. */
void tu_held_wait_coord(int n);

#endif

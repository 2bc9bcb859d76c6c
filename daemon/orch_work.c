/* orch_work: slow work off the event loop (orch_work.h). Jobs wait in a
 * FIFO queue for one of at most ORCH_WORK_THREADS threads; a finished job
 * goes on a done list and an eventfd wakes the loop, which calls done. An
 * eventfd, not event_active, so a loop created without libevent's thread
 * support (the CLI's) is woken safely too. */
#include "daemon/orch_work.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct orch_work_job {
    struct orch_work_job *next;
    orch_work_fn run;
    orch_work_done_fn done;
    void *arg;
    atomic_int cancel;
};

struct orch_work {
    struct event_base *base;
    struct event *ev; /* the eventfd's read */
    int efd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct orch_work_job *q_head, *q_tail; /* waiting for a thread */
    struct orch_work_job *done_head, *done_tail;
    int idle; /* threads waiting on cv */
    int n_threads;
    int stopping;
    pthread_t th[ORCH_WORK_THREADS];
};

static void *thread_main(void *arg)
{
    struct orch_work *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->q_head && !w->stopping) {
            w->idle++;
            pthread_cond_wait(&w->cv, &w->mu);
            w->idle--;
        }
        struct orch_work_job *j = w->q_head;
        if (!j) /* stopping, nothing left */
            break;
        w->q_head = j->next;
        if (!w->q_head)
            w->q_tail = NULL;
        pthread_mutex_unlock(&w->mu);
        if (!atomic_load(&j->cancel))
            j->run(j->arg, &j->cancel);
        pthread_mutex_lock(&w->mu);
        j->next = NULL;
        if (w->done_tail)
            w->done_tail->next = j;
        else
            w->done_head = j;
        w->done_tail = j;
        uint64_t one = 1;
        ssize_t n;
        do
            n = write(w->efd, &one, sizeof(one));
        while (n < 0 && errno == EINTR);
        /* EAGAIN: the counter is full, so the loop is due to wake anyway */
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Calls done for every finished job, in the order they finished. */
static void land(struct orch_work *w)
{
    pthread_mutex_lock(&w->mu);
    struct orch_work_job *j = w->done_head;
    w->done_head = w->done_tail = NULL;
    pthread_mutex_unlock(&w->mu);
    while (j) {
        struct orch_work_job *next = j->next;
        j->done(j->arg, atomic_load(&j->cancel) != 0);
        free(j);
        j = next;
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    uint64_t n;
    while (read(fd, &n, sizeof(n)) < 0 && errno == EINTR)
        ;
    land(arg);
}

int orch_work_create(struct event_base *base, struct orch_work **out,
                     struct fo_err *err)
{
    struct orch_work *w = calloc(1, sizeof(*w));
    if (!w)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    w->base = base;
    w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->efd < 0) {
        int e = errno;
        free(w);
        return fo_err_set(err, FO_E_IO, "eventfd: %s", strerror(e));
    }
    w->ev = event_new(base, w->efd, EV_READ | EV_PERSIST, on_wake, w);
    if (!w->ev || event_add(w->ev, NULL) != 0) {
        if (w->ev)
            event_free(w->ev);
        close(w->efd);
        free(w);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    *out = w;
    return FO_OK;
}

void orch_work_free(struct orch_work *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    for (struct orch_work_job *j = w->q_head; j; j = j->next)
        atomic_store(&j->cancel, 1);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    /* queued jobs are taken and skipped (cancelled), running ones return */
    for (int i = 0; i < w->n_threads; i++)
        pthread_join(w->th[i], NULL);
    land(w);
    event_free(w->ev);
    close(w->efd);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

int orch_work_post(struct orch_work *w, orch_work_fn run,
                   orch_work_done_fn done, void *arg,
                   struct orch_work_job **job, struct fo_err *err)
{
    struct orch_work_job *j = calloc(1, sizeof(*j));
    if (!j)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    j->run = run;
    j->done = done;
    j->arg = arg;
    pthread_mutex_lock(&w->mu);
    if (w->q_tail)
        w->q_tail->next = j;
    else
        w->q_head = j;
    w->q_tail = j;
    /* a thread more while none is idle and the cap allows */
    if (!w->idle && w->n_threads < ORCH_WORK_THREADS &&
        pthread_create(&w->th[w->n_threads], NULL, thread_main, w) == 0)
        w->n_threads++;
    int threads = w->n_threads;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (!threads) { /* no thread could be made: nothing will run it */
        pthread_mutex_lock(&w->mu);
        w->q_head = w->q_tail = NULL;
        pthread_mutex_unlock(&w->mu);
        free(j);
        return fo_err_set(err, FO_E_NOMEM, "no thread for the job");
    }
    if (job)
        *job = j;
    return FO_OK;
}

void orch_work_cancel(struct orch_work_job *job)
{
    if (job)
        atomic_store(&job->cancel, 1);
}

int orch_work_threads(const struct orch_work *w)
{
    return w ? w->n_threads : 0;
}

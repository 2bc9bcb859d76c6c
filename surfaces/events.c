/* events: the live stream of new ledger entries (see events.h). */
#include "surfaces/events.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <event2/event.h>

#include "ledger/fo_file.h"

#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

#define RING 4096     /* recent events kept formatted */
#define FILL_MAX 2048 /* entries read into the ring per turn */
#define PAGE 256      /* entries a subscriber behind the ring reads a turn */
#define PAGES_MAX 64  /* subscribers behind the ring paged in one read */
/* seq -> run: the ring's entries, and older parents */
#define RUNS_CACHE RING
#define WALK_MAX 64 /* parent links followed to find an entry's run */

/* The kinds forum itself writes: always valid in a filter. Any other kind
 * is valid when the ledger holds an entry of it. */
static const char *const forum_kinds[] = {"answer",
                                          "budget",
                                          "campaign_declared",
                                          "campaign_dispatch",
                                          "classifier_attempt",
                                          "context_budget",
                                          "coordinator_attempt",
                                          "error",
                                          "fact",
                                          "fact_forgotten",
                                          "feature_status",
                                          "gateway_call",
                                          "gate_approved",
                                          "gate_edited",
                                          "gate_expired",
                                          "gate_rejected",
                                          "gate_requested",
                                          "guardrail",
                                          "import",
                                          "plan",
                                          "project_status",
                                          "redaction",
                                          "refusal",
                                          "request",
                                          "result",
                                          "resume",
                                          "route",
                                          "session_started",
                                          "skip",
                                          "stop",
                                          "task",
                                          "tier_escalation",
                                          "tool_call",
                                          "tool_rescue",
                                          "tool_result",
                                          "turn",
                                          "validator_attempt",
                                          "verdict",
                                          NULL};

struct item {
    int64_t seq;
    int64_t run; /* -1: none */
    char kind[LEDGER_KIND_MAX + 1];
    char *text; /* the whole SSE event */
    size_t len;
};

struct surf_events_sub {
    struct surf_events *ev;
    struct surf_events_filter f;
    int64_t next; /* the next seq to consider */
    int blocked;  /* over SURF_EVENTS_HIGH: waits for writable */
    int gone;     /* the stream cannot go on: no more writes */
    int closing;  /* sink.close was called */
    int hello;    /* waits for the read that finds where it starts */
    int paging;   /* a page of its own is being read */
    int zombie;   /* unsubscribed while paging: freed when the read ends */
    struct surf_events_sink sink;
    void *arg;
    struct surf_events_sub *prev, *nextsub;
    /* the index (see "who is looked at") */
    int parked;     /* caught up; its next is the ring's end as of when the
                       last new entry it could want came */
    unsigned stamp; /* the turn that last looked at it */
    int active;     /* in the active list */
    struct surf_events_sub *aprev, *anext;
};

#define BUCKETS 256
/* The subscribers whose filter names one key: a run, a kind, or none
 * (run -2: every entry). */
struct bucket {
    int64_t run; /* >= 0: a run; -1: kind; -2: no filter */
    char kind[LEDGER_KIND_MAX + 1];
    struct surf_events_sub **subs;
    size_t n, cap;
    struct bucket *chain;
};

/* A page of entries for one subscriber behind the ring: its wanted
 * events, framed, on the worker. */
struct page_req {
    struct surf_events_sub *s;
    int64_t from, n; /* asked */
    int64_t last;    /* the last seq read */
    struct fo_buf out;
    unsigned long nout;
    int failed;
};

/* The one read in flight (see "reads" below). */
struct read_job {
    struct surf_events *ev;
    unsigned gen;
    int started; /* the ring had a start when posted (else: the head) */
    int64_t hi;  /* the ring's end when posted */
    struct page_req pages[PAGES_MAX];
    size_t npages;
    /* found on the worker */
    int rc;             /* of ledger_count */
    int64_t count;      /* the head */
    struct item *items; /* the new entries from hi, framed */
    size_t nitems;
    int more; /* more than FILL_MAX new */
};

struct surf_events {
    struct event_base *base;
    struct surf_events_reader rd;
    struct event *wake, *poll, *keep;
    int keepalive_s;
    struct item *ring; /* RING slots, by seq % RING */
    int64_t lo, hi;    /* seqs [lo, hi) are in the ring */
    int started;       /* lo/hi set from the head */
    struct {           /* seq -> run, direct-mapped */
        int64_t seq, run;
    } runs[RUNS_CACHE];
    struct surf_events_sub *subs;
    size_t nsubs;
    unsigned long long sent;
    struct bucket *buckets[BUCKETS];
    struct surf_events_sub *active; /* catching up, blocked or new */
    unsigned stamp;
    struct read_job job;
    int reading;  /* job is on a worker */
    int again;    /* woken while reading: read once more */
    int behind;   /* a subscriber waits for a page */
    unsigned gen; /* the ring restarted (no subscriber left) */
    struct surf_events_sub *zombies;
    char *hold; /* test builds: FORUM_TEST_EVENTS_HOLD */
};

static void runs_put(struct surf_events *ev, int64_t seq, int64_t run)
{
    ev->runs[seq % RUNS_CACHE].seq = seq;
    ev->runs[seq % RUNS_CACHE].run = run;
}

/* Worker (the read in flight owns ev->runs): the run of entry e, the
 * nearest `request` at or above it (its own seq when e is one), -1 when
 * none. Parents are looked up in the cache (which holds every entry the
 * ring was filled with, until a later seq takes its slot), then in the
 * ledger. */
static int64_t run_of(struct surf_events *ev, struct ledger *l,
                      const struct ledger_entry *e)
{
    if (!strcmp(e->kind, "request"))
        return e->seq;
    int64_t p = e->parent;
    struct ledger_entry pe;
    struct fo_err err;
    for (int hops = 0; p >= 0 && hops < WALK_MAX; hops++) {
        if (ev->runs[p % RUNS_CACHE].seq == p)
            return ev->runs[p % RUNS_CACHE].run;
        if (ledger_get(l, p, &pe, NULL, &err) != FO_OK)
            return -1;
        if (!strcmp(pe.kind, "request")) {
            runs_put(ev, p, p);
            return p;
        }
        p = pe.parent;
    }
    return -1;
}

/* The SSE event of e: id, event (the kind), data (the entry as served,
 * with its run). */
static char *format(const struct ledger_entry *e, int64_t run, size_t *len)
{
    struct fo_buf t, b;
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (ledger_entry_text(e, &t) != 0 || t.len < 2) {
        fo_buf_release(&t);
        return NULL;
    }
    char head[160];
    int n = snprintf(head, sizeof(head),
                     "id: %" PRId64 "\nevent: %s\ndata: ", e->seq, e->kind);
    char tail[48];
    int m = run >= 0
                ? snprintf(tail, sizeof(tail), ",\"run\":%" PRId64 "}\n\n", run)
                : snprintf(tail, sizeof(tail), ",\"run\":null}\n\n");
    if (n < 0 || (size_t)n >= sizeof(head) || m < 0 ||
        (size_t)m >= sizeof(tail) || fo_buf_append(&b, head, (size_t)n) != 0 ||
        fo_buf_append(&b, t.data, t.len - 1) != 0 || /* the closing brace */
        fo_buf_append(&b, tail, (size_t)m) != 0) {
        fo_buf_release(&t);
        fo_buf_release(&b);
        return NULL;
    }
    fo_buf_release(&t);
    return fo_buf_detach(&b, len);
}

static int wanted(const struct surf_events_filter *f, const char *kind,
                  int64_t run)
{
    if (f->run >= 0 && run != f->run)
        return 0;
    if (f->nkinds == 0)
        return 1;
    for (int i = 0; i < f->nkinds; i++)
        if (!strcmp(f->kinds[i], kind))
            return 1;
    return 0;
}

static void sub_write(struct surf_events_sub *s, const char *data, size_t len)
{
    if (s->gone)
        return;
    if (s->sink.write(s->arg, data, len) != 0)
        s->gone = 1;
}

/* ---- a subscriber behind the ring gets pages read for it ------------- */

struct page_ctx {
    struct page_req *p;
    struct surf_events *ev;
    struct ledger *l;
};

/* Worker: one entry of a page. */
static int page_entry(void *ctx, const struct ledger_entry *e)
{
    struct page_ctx *c = ctx;
    struct page_req *p = c->p;
    int64_t run = run_of(c->ev, c->l, e);
    runs_put(c->ev, e->seq, run);
    p->last = e->seq;
    if (!wanted(&p->s->f, e->kind, run))
        return 0;
    size_t len = 0;
    char *t = format(e, run, &len);
    if (!t || fo_buf_append(&p->out, t, len) != 0) {
        free(t);
        p->failed = 1;
        return 1;
    }
    free(t);
    p->nout++;
    return 0;
}

/* Writes what s has not seen, up to the ring's end, while it keeps up.
 * Behind the ring it waits for a page (ev->behind: the next read). */
static void deliver(struct surf_events_sub *s)
{
    struct surf_events *ev = s->ev;
    while (!s->gone && !s->hello && s->next < ev->hi) {
        if (s->sink.pending(s->arg) > SURF_EVENTS_HIGH) {
            s->blocked = 1; /* surf_events_writable goes on */
            return;
        }
        if (s->next < ev->lo) {
            ev->behind = 1;
            break;
        }
        const struct item *it = &ev->ring[s->next % RING];
        if (wanted(&s->f, it->kind, it->run)) {
            sub_write(s, it->text, it->len);
            ev->sent++;
        }
        s->next++;
    }
    s->blocked = 0;
}

/* Loop: a page read for s, written out (or the stream ended when it could
 * not be read). */
static void page_done(struct surf_events *ev, struct page_req *p)
{
    struct surf_events_sub *s = p->s;
    s->paging = 0;
    if (s->zombie || s->gone || s->next != p->from)
        return;
    if (p->failed || p->last < p->from) {
        /* cannot read on: say so and stop this stream */
        char msg[320];
        int n = snprintf(msg, sizeof(msg),
                         "event: error\ndata: {\"error\":\"cannot read "
                         "the ledger at seq %" PRId64 "\"}\n\n",
                         s->next);
        if (n > 0)
            sub_write(s, msg, (size_t)n);
        s->gone = 1;
        return;
    }
    if (p->out.len)
        sub_write(s, p->out.data, p->out.len);
    ev->sent += p->nout;
    s->next = p->last + 1;
}

/* ---- the ring --------------------------------------------------------- */

struct fill {
    struct read_job *j;
    struct ledger *l;
    int failed;
};

/* Worker: one new entry, framed for the ring. */
static int fill_entry(void *ctx, const struct ledger_entry *e)
{
    struct fill *f = ctx;
    struct read_job *j = f->j;
    if (e->seq != j->hi + (int64_t)j->nitems) { /* never a gap in the ring */
        f->failed = 1;
        return 1;
    }
    int64_t run = run_of(j->ev, f->l, e);
    runs_put(j->ev, e->seq, run);
    size_t len = 0;
    char *t = format(e, run, &len);
    if (!t) {
        f->failed = 1;
        return 1;
    }
    struct item *it = &j->items[j->nitems++];
    *it = (struct item){.seq = e->seq, .run = run, .text = t, .len = len};
    memcpy(it->kind, e->kind, sizeof(it->kind));
    return 0;
}

/* Loop: the entries read, into the ring (taken from j). */
static void fill_ring(struct surf_events *ev, struct read_job *j)
{
    for (size_t i = 0; i < j->nitems; i++) {
        struct item *src = &j->items[i];
        if (src->seq != ev->hi) { /* the ring moved meanwhile: drop */
            free(src->text);
            continue;
        }
        struct item *it = &ev->ring[src->seq % RING];
        free(it->text);
        *it = *src;
        ev->hi++;
        if (ev->hi - ev->lo > RING)
            ev->lo = ev->hi - RING;
    }
    free(j->items);
    j->items = NULL;
    j->nitems = 0;
}

/* The distinct kinds and runs of a turn's new entries (many: too many to
 * keep; then every subscriber looks at each entry). */
#define BATCH_DISTINCT 64
struct batch {
    const char *kinds[BATCH_DISTINCT];
    int64_t runs[BATCH_DISTINCT];
    int nkinds, nruns, many;
};

static void batch_add(struct batch *b, const struct item *it)
{
    int i;
    for (i = 0; i < b->nkinds && strcmp(b->kinds[i], it->kind); i++)
        ;
    if (i == b->nkinds) {
        if (b->nkinds == BATCH_DISTINCT) {
            b->many = 1;
            return;
        }
        b->kinds[b->nkinds++] = it->kind;
    }
    for (i = 0; i < b->nruns && b->runs[i] != it->run; i++)
        ;
    if (i == b->nruns) {
        if (b->nruns == BATCH_DISTINCT) {
            b->many = 1;
            return;
        }
        b->runs[b->nruns++] = it->run;
    }
}

/* ---- who is looked at ------------------------------------------------- */

/* A turn looks only at the subscribers some new entry could be for: the
 * active ones (catching up, paused, new), the unfiltered ones, and those
 * in the buckets of the kinds and runs the new entries have. A parked
 * subscriber skipped meanwhile wanted none of what it skipped, so when it
 * is looked at again its next is the end of the ring before the turn.
 * Idle subscribers cost the loop nothing a turn. */

static unsigned key_hash(int64_t run, const char *kind)
{
    uint32_t h = 2166136261u;
    if (run != -1) {
        for (int i = 0; i < 8; i++)
            h = (h ^ (uint8_t)(run >> (8 * i))) * 16777619u;
    } else {
        for (const char *p = kind; *p; p++)
            h = (h ^ (uint8_t)*p) * 16777619u;
    }
    return h % BUCKETS;
}

static struct bucket *bucket_find(struct surf_events *ev, int64_t run,
                                  const char *kind, int make)
{
    unsigned i = key_hash(run, kind);
    for (struct bucket *b = ev->buckets[i]; b; b = b->chain)
        if (b->run == run && (run != -1 || !strcmp(b->kind, kind)))
            return b;
    if (!make)
        return NULL;
    struct bucket *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->run = run;
    if (run == -1)
        snprintf(b->kind, sizeof(b->kind), "%s", kind);
    b->chain = ev->buckets[i];
    ev->buckets[i] = b;
    return b;
}

static int bucket_add(struct surf_events *ev, int64_t run, const char *kind,
                      struct surf_events_sub *s)
{
    struct bucket *b = bucket_find(ev, run, kind, 1);
    if (!b)
        return -1;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 8;
        struct surf_events_sub **p = realloc(b->subs, cap * sizeof(*p));
        if (!p)
            return -1;
        b->subs = p;
        b->cap = cap;
    }
    b->subs[b->n++] = s;
    return 0;
}

static void bucket_del(struct surf_events *ev, int64_t run, const char *kind,
                       struct surf_events_sub *s)
{
    struct bucket *b = bucket_find(ev, run, kind, 0);
    for (size_t i = 0; b && i < b->n; i++)
        if (b->subs[i] == s) {
            b->subs[i] = b->subs[--b->n];
            break;
        }
    if (!b || b->n)
        return;
    /* the last one: the bucket goes (a run watched once is not kept) */
    struct bucket **pp = &ev->buckets[key_hash(run, kind)];
    while (*pp != b)
        pp = &(*pp)->chain;
    *pp = b->chain;
    free(b->subs);
    free(b);
}

/* The buckets s belongs in: its run's, else its kinds', else the
 * unfiltered one. */
static int index_sub(struct surf_events *ev, struct surf_events_sub *s, int add)
{
    int n = s->f.run >= 0 ? 1 : s->f.nkinds ? s->f.nkinds : 1;
    for (int i = 0; i < n; i++) {
        int64_t run = s->f.run >= 0 ? s->f.run : s->f.nkinds ? -1 : -2;
        const char *kind = run == -1 ? s->f.kinds[i] : "";
        if (!add)
            bucket_del(ev, run, kind, s);
        else if (bucket_add(ev, run, kind, s) != 0) {
            while (i-- > 0)
                bucket_del(ev, run, s->f.kinds[i], s);
            return -1;
        }
    }
    return 0;
}

static void active_add(struct surf_events *ev, struct surf_events_sub *s)
{
    if (s->active)
        return;
    s->active = 1;
    s->aprev = NULL;
    s->anext = ev->active;
    if (ev->active)
        ev->active->aprev = s;
    ev->active = s;
}

static void active_del(struct surf_events *ev, struct surf_events_sub *s)
{
    if (!s->active)
        return;
    s->active = 0;
    if (s->aprev)
        s->aprev->anext = s->anext;
    else
        ev->active = s->anext;
    if (s->anext)
        s->anext->aprev = s->aprev;
}

static void visit(struct surf_events *ev, struct surf_events_sub *s,
                  int64_t old_hi)
{
    if (s->stamp == ev->stamp)
        return;
    s->stamp = ev->stamp;
    if (s->hello)
        return; /* stays active: its start comes with the read */
    if (s->parked) {
        s->next = old_hi;
        s->parked = 0;
    }
    if (!s->blocked)
        deliver(s);
    if (!s->blocked && !s->gone && s->next >= ev->hi) {
        active_del(ev, s);
        s->parked = 1;
    } else {
        active_add(ev, s);
    }
}

static void visit_bucket(struct surf_events *ev, struct bucket *b,
                         int64_t old_hi)
{
    for (size_t i = 0; b && i < b->n; i++)
        visit(ev, b->subs[i], old_hi);
}

/* Subscribers whose stream cannot go on are closed by their transport
 * (which unsubscribes them). */
static void reap(struct surf_events *ev)
{
    struct surf_events_sub *s = ev->subs;
    while (s) {
        struct surf_events_sub *n = s->nextsub;
        if (s->gone && !s->closing) {
            s->closing = 1;
            s->sink.close(s->arg);
        }
        s = n;
    }
}

/* ---- reads -------------------------------------------------------------
 * The tailer never reads the ledger on the loop thread. A turn posts one
 * read (rd.post) to a thread with a ledger handle of its own (the HTTP
 * surface's workers): the head, the new entries from the ring's end (up
 * to FILL_MAX, framed there), and a page for each subscriber behind the
 * ring. Its done, on the loop, fills the ring, writes the pages, starts
 * the new subscribers and looks at whoever the new entries concern. One
 * read is in flight at a time: it owns ev->runs meanwhile, and a wake
 * that comes during it makes another read when it ends. */

/* Worker: the read (l: the worker's handle, NULL when it has none). */
static void read_main(void *arg, struct ledger *l)
{
    struct read_job *j = arg;
#ifdef FORUM_TEST_SEAMS
    fo_test_hold(j->ev->hold); /* FORUM_TEST_EVENTS_HOLD */
#endif
    struct fo_err err;
    if (!l) {
        j->rc = FO_E_UNAVAILABLE;
        return;
    }
    j->rc = ledger_count(l, &j->count, &err);
    if (j->rc != FO_OK)
        return;
    if (!j->started)
        j->hi = j->count; /* a fresh ring starts at the head */
    if (j->count > j->hi) {
        int64_t n = j->count - j->hi;
        if (n > FILL_MAX) {
            n = FILL_MAX;
            j->more = 1;
        }
        j->items = calloc((size_t)n, sizeof(*j->items));
        struct fill f = {.j = j, .l = l};
        if (j->items)
            ledger_range(l, j->hi, n, fill_entry, &f, &err);
        if (j->nitems < (size_t)n)
            j->more = 0; /* a failed read is not retried at once */
    }
    for (size_t i = 0; i < j->npages; i++) {
        struct page_req *p = &j->pages[i];
        struct page_ctx c = {.p = p, .ev = j->ev, .l = l};
        if (ledger_range(l, p->from, p->n, page_entry, &c, &err) != FO_OK)
            p->failed = 1;
    }
}

/* Loop: the subscribers that waited for the head start from it (or from
 * their Last-Event-ID, not past the head); when it could not be read,
 * their streams end. */
static void start_new(struct surf_events *ev, int ok, int64_t count)
{
    for (struct surf_events_sub *s = ev->subs; s; s = s->nextsub) {
        if (!s->hello)
            continue;
        s->hello = 0;
        if (!ok) {
            static const char msg[] =
                "event: error\ndata: {\"error\":\"cannot read the ledger's "
                "head\"}\n\n";
            sub_write(s, msg, sizeof(msg) - 1);
            s->gone = 1;
            continue;
        }
        s->next = s->f.start >= 0 ? s->f.start : count;
        if (s->next > count)
            s->next = count; /* an id from the future: from the head */
        char hello[96];
        int n = snprintf(hello, sizeof(hello),
                         "retry: 1000\n: forum events from seq %" PRId64 "\n\n",
                         s->next);
        if (n > 0)
            sub_write(s, hello, (size_t)n);
    }
}

/* Loop: whoever the entries from old_hi concern gets them. */
static void look(struct surf_events *ev, int64_t old_hi)
{
    struct batch b = {0};
    for (int64_t q = old_hi; q < ev->hi && !b.many; q++)
        batch_add(&b, &ev->ring[q % RING]);
    ev->stamp++;
    if (b.many) {
        for (struct surf_events_sub *s = ev->subs; s; s = s->nextsub)
            visit(ev, s, old_hi);
        return;
    }
    for (struct surf_events_sub *s = ev->active, *n; s; s = n) {
        n = s->anext; /* visit may take s out */
        visit(ev, s, old_hi);
    }
    if (ev->hi > old_hi)
        visit_bucket(ev, bucket_find(ev, -2, "", 0), old_hi);
    for (int i = 0; i < b.nkinds; i++)
        visit_bucket(ev, bucket_find(ev, -1, b.kinds[i], 0), old_hi);
    for (int i = 0; i < b.nruns; i++)
        if (b.runs[i] >= 0)
            visit_bucket(ev, bucket_find(ev, b.runs[i], "", 0), old_hi);
}

static void free_zombies(struct surf_events *ev)
{
    while (ev->zombies) {
        struct surf_events_sub *z = ev->zombies;
        ev->zombies = z->nextsub;
        free(z);
    }
}

static void read_clear(struct read_job *j)
{
    for (size_t i = 0; i < j->nitems; i++)
        free(j->items[i].text);
    free(j->items);
    for (size_t i = 0; i < j->npages; i++)
        fo_buf_release(&j->pages[i].out);
    memset(j, 0, sizeof(*j));
}

/* Loop: the read ended. */
static void read_done(void *arg)
{
    struct read_job *j = arg;
    struct surf_events *ev = j->ev;
    ev->reading = 0;
    if (j->gen == ev->gen && ev->nsubs) {
        int ok = j->rc == FO_OK;
        if (ok && !ev->started) {
            ev->lo = ev->hi = j->count;
            ev->started = 1;
        }
        int64_t old_hi = ev->hi;
        if (ok)
            fill_ring(ev, j);
        start_new(ev, ok, j->count);
        for (size_t i = 0; i < j->npages; i++)
            page_done(ev, &j->pages[i]);
        ev->behind = 0;
        look(ev, old_hi);
        reap(ev);
        if (j->more || ev->behind)
            ev->again = 1;
    }
    free_zombies(ev); /* none is paging now */
    read_clear(j);
    if (ev->again && ev->nsubs)
        event_active(ev->wake, 0, 0);
}

/* Loop: a read of what is new, and of a page for each subscriber behind
 * the ring (not blocked), unless one is under way. */
static void turn(struct surf_events *ev)
{
    if (!ev->nsubs)
        return;
    if (ev->reading) {
        ev->again = 1;
        return;
    }
    ev->again = 0;
    struct read_job *j = &ev->job;
    read_clear(j);
    *j = (struct read_job){
        .ev = ev, .gen = ev->gen, .started = ev->started, .hi = ev->hi};
    for (struct surf_events_sub *s = ev->active; s && ev->started;
         s = s->anext) {
        if (s->hello || s->gone || s->blocked || s->paging || s->next >= ev->lo)
            continue;
        if (j->npages == PAGES_MAX) {
            ev->again = 1; /* the rest in the next read */
            break;
        }
        struct page_req *p = &j->pages[j->npages++];
        int64_t want = ev->lo - s->next;
        *p = (struct page_req){
            .s = s, .from = s->next, .n = want < PAGE ? want : PAGE};
        p->last = p->from - 1;
        fo_buf_init(&p->out, FO_BUF_UNLIMITED);
        s->paging = 1;
    }
    ev->reading = 1;
    if (ev->rd.post(ev->rd.hook, read_main, read_done, j) != 0) {
        j->rc = FO_E_UNAVAILABLE; /* as if the ledger could not be read */
        for (size_t i = 0; i < j->npages; i++)
            j->pages[i].failed = 1;
        ev->again = 0;
        read_done(j);
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    turn(arg);
}

static void on_keep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct surf_events *ev = arg;
    static const char ka[] = ":\n\n";
    for (struct surf_events_sub *s = ev->subs; s; s = s->nextsub)
        if (!s->hello)
            sub_write(s, ka, sizeof(ka) - 1);
    reap(ev);
}

/* ---- the API ---------------------------------------------------------- */

int surf_events_create(struct event_base *base,
                       const struct surf_events_reader *rd, int keepalive_s,
                       struct surf_events **out, struct fo_err *err)
{
    struct surf_events *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    ev->base = base;
    ev->rd = *rd;
#ifdef FORUM_TEST_SEAMS
    const char *hold = getenv("FORUM_TEST_EVENTS_HOLD");
    if (hold && *hold && !(ev->hold = strdup(hold))) {
        surf_events_free(ev);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
#endif
    ev->keepalive_s = keepalive_s > 0 ? keepalive_s : 15;
    ev->ring = calloc(RING, sizeof(*ev->ring));
    ev->wake = event_new(base, -1, 0, on_wake, ev);
    ev->poll = event_new(base, -1, EV_PERSIST, on_wake, ev);
    ev->keep = event_new(base, -1, EV_PERSIST, on_keep, ev);
    for (size_t i = 0; i < RUNS_CACHE; i++)
        ev->runs[i].seq = -1;
    if (!ev->ring || !ev->wake || !ev->poll || !ev->keep) {
        surf_events_free(ev);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    *out = ev;
    return FO_OK;
}

static int kind_known(struct ledger *l, const char *kind, struct fo_err *err)
{
    for (size_t i = 0; forum_kinds[i]; i++)
        if (!strcmp(forum_kinds[i], kind))
            return FO_OK;
    cJSON *sum = NULL;
    int rc = ledger_summary(l, &sum, err);
    if (rc != FO_OK)
        return rc;
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(sum, "by_kind");
    int held = cJSON_GetObjectItemCaseSensitive(by, kind) != NULL;
    cJSON_Delete(sum);
    if (!held)
        return fo_err_set(err, FO_E_INVALID,
                          "kind: %s is not a kind forum writes, and the ledger "
                          "holds no entry of it",
                          kind);
    return FO_OK;
}

static int parse_seq(const char *name, const char *v, size_t n, int64_t *out,
                     struct fo_err *err)
{
    char buf[24];
    if (n == 0 || n >= sizeof(buf))
        return fo_err_set(err, FO_E_INVALID, "%s: not a non-negative integer",
                          name);
    memcpy(buf, v, n);
    buf[n] = '\0';
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] < '0' || buf[i] > '9' || x > (INT64_MAX - 9) / 10)
            return fo_err_set(err, FO_E_INVALID,
                              "%s: not a non-negative integer: %s", name, buf);
        x = x * 10 + (buf[i] - '0');
    }
    *out = x;
    return FO_OK;
}

int surf_events_filter_parse(struct ledger *l, const char *query,
                             const char *last_event_id,
                             struct surf_events_filter *f, struct fo_err *err)
{
    memset(f, 0, sizeof(*f));
    f->run = -1;
    f->start = -1;
    for (const char *p = query; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        size_t kn = eq ? (size_t)(eq - p) : n;
        const char *v = eq ? eq + 1 : p + n;
        size_t vn = eq ? n - kn - 1 : 0;
        int rc = FO_OK;
        if (kn == 3 && !memcmp(p, "run", 3)) {
            rc = parse_seq("run", v, vn, &f->run, err);
        } else if (kn == 4 && !memcmp(p, "from", 4)) {
            rc = parse_seq("from", v, vn, &f->start, err);
        } else if (kn == 4 && !memcmp(p, "kind", 4)) {
            /* a comma list (%2C accepted too) */
            for (size_t i = 0; i < vn;) {
                size_t j = i, skip = 0;
                while (j < vn && v[j] != ',' &&
                       !(j + 2 < vn && v[j] == '%' && v[j + 1] == '2' &&
                         (v[j + 2] == 'C' || v[j + 2] == 'c')))
                    j++;
                if (j < vn)
                    skip = v[j] == ',' ? 1 : 3;
                if (f->nkinds == SURF_EVENTS_KINDS_MAX)
                    return fo_err_set(err, FO_E_INVALID,
                                      "kind: at most %d kinds",
                                      SURF_EVENTS_KINDS_MAX);
                char *k = f->kinds[f->nkinds];
                if (j - i == 0 || j - i > LEDGER_KIND_MAX)
                    return fo_err_set(err, FO_E_INVALID,
                                      "kind: an empty or over-long kind");
                memcpy(k, v + i, j - i);
                k[j - i] = '\0';
                if (ledger_check_kind(k, err) != FO_OK)
                    return fo_err_set(err, FO_E_INVALID, "kind: not a kind: %s",
                                      k);
                rc = kind_known(l, k, err);
                if (rc != FO_OK)
                    return rc;
                f->nkinds++;
                i = j + skip;
            }
            if (vn == 0)
                rc = fo_err_set(err, FO_E_INVALID, "kind: empty");
        } else if (kn == 5 && !memcmp(p, "token", 5)) {
            return fo_err_set(err, FO_E_INVALID,
                              "a token in the query string is refused: send "
                              "it as Authorization: Bearer");
        } else {
            char name[40];
            snprintf(name, sizeof(name), "%.*s", (int)(kn < 32 ? kn : 32), p);
            return fo_err_set(err, FO_E_INVALID,
                              "unknown parameter %s (run, kind, from)", name);
        }
        if (rc != FO_OK)
            return rc;
        p = amp ? amp + 1 : p + n;
    }
    if (last_event_id && *last_event_id) {
        int64_t id = 0;
        int rc = parse_seq("Last-Event-ID", last_event_id,
                           strlen(last_event_id), &id, err);
        if (rc != FO_OK)
            return rc;
        f->start = id + 1;
    }
    if (f->run >= 0) {
        struct ledger_entry e;
        int rc = ledger_get(l, f->run, &e, NULL, err);
        if (rc == FO_E_NOT_FOUND || (rc == FO_OK && strcmp(e.kind, "request")))
            return fo_err_set(err, FO_E_NOT_A_RUN,
                              "run: entry %" PRId64 " is not a run's request",
                              f->run);
        if (rc != FO_OK)
            return rc;
    }
    return FO_OK;
}

struct surf_events_sub *surf_events_subscribe(
    struct surf_events *ev, const struct surf_events_filter *f,
    const struct surf_events_sink *sink, void *arg, struct fo_err *err)
{
    struct surf_events_sub *s = calloc(1, sizeof(*s));
    if (!s) {
        fo_err_set(err, FO_E_NOMEM, NULL);
        return NULL;
    }
    s->ev = ev;
    s->f = *f;
    s->sink = *sink;
    s->arg = arg;
    s->hello = 1; /* the next read says where it starts */
    if (index_sub(ev, s, 1) != 0) {
        free(s);
        fo_err_set(err, FO_E_NOMEM, NULL);
        return NULL;
    }
    active_add(ev, s);
    s->nextsub = ev->subs;
    if (ev->subs)
        ev->subs->prev = s;
    ev->subs = s;
    if (ev->nsubs++ == 0) {
        struct timeval pt = {0, SURF_EVENTS_POLL_MS * 1000};
        struct timeval kt = {ev->keepalive_s, 0};
        evtimer_add(ev->poll, &pt);
        evtimer_add(ev->keep, &kt);
    }
    event_active(ev->wake, 0, 0); /* its start, and the backlog if any */
    return s;
}

void surf_events_writable(struct surf_events *ev, struct surf_events_sub *s)
{
    if (s->blocked) {
        ev->behind = 0;
        deliver(s);
        if (s->gone || ev->behind)
            event_active(ev->wake, 0, 0); /* reaped, or paged, there */
    }
}

void surf_events_unsubscribe(struct surf_events *ev, struct surf_events_sub *s)
{
    if (!s)
        return;
    if (s->prev)
        s->prev->nextsub = s->nextsub;
    else
        ev->subs = s->nextsub;
    if (s->nextsub)
        s->nextsub->prev = s->prev;
    index_sub(ev, s, 0);
    active_del(ev, s);
    if (s->paging) { /* the read in flight still looks at it */
        s->zombie = 1;
        s->prev = NULL;
        s->nextsub = ev->zombies;
        ev->zombies = s;
    } else {
        free(s);
    }
    if (--ev->nsubs == 0) {
        evtimer_del(ev->poll);
        evtimer_del(ev->keep);
        /* the ring starts again from the head at the next subscriber (a
         * read in flight is for the old one: its result is dropped) */
        for (int64_t q = ev->lo; q < ev->hi; q++) {
            free(ev->ring[q % RING].text);
            ev->ring[q % RING].text = NULL;
        }
        ev->started = 0;
        ev->gen++;
    }
}

void surf_events_notify(struct surf_events *ev)
{
    if (ev)
        event_active(ev->wake, 0, 0);
}

size_t surf_events_subscribers(const struct surf_events *ev)
{
    return ev ? ev->nsubs : 0;
}

unsigned long long surf_events_sent(const struct surf_events *ev)
{
    return ev ? ev->sent : 0;
}

void surf_events_free(struct surf_events *ev)
{
    if (!ev)
        return;
    while (ev->subs)
        surf_events_unsubscribe(ev, ev->subs);
    /* no read is in flight now: the workers are stopped */
    free_zombies(ev);
    read_clear(&ev->job);
    free(ev->hold);
    if (ev->ring)
        for (size_t i = 0; i < RING; i++)
            free(ev->ring[i].text);
    free(ev->ring);
    for (size_t i = 0; i < BUCKETS; i++)
        while (ev->buckets[i]) {
            struct bucket *b = ev->buckets[i];
            ev->buckets[i] = b->chain;
            free(b->subs);
            free(b);
        }
    if (ev->wake)
        event_free(ev->wake);
    if (ev->poll)
        event_free(ev->poll);
    if (ev->keep)
        event_free(ev->keep);
    free(ev);
}

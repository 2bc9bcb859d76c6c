/* orch_prose: delivery profiles, route frames, communication contracts and
 * humanize, deterministic and without a model (orch_views.h). The
 * vocabularies (profile, domain, intent, posture and lane names, finding
 * codes, schema names) are the reference's, so its clients read the same
 * fields; the sentences are forum's own. Words are the maximal runs of
 * letters and digits, where every byte >= 0x80 counts as a letter (the
 * reference's \w on Unicode text, close enough for its ASCII rules). */
#include "daemon/orch_views.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"

/* ---- vocabularies ------------------------------------------------------ */

static const char *const proof_lanes[] = {"observe", "execute", "validate",
                                          "synthesize", "verify"};
static const char *const domain_lanes[] = {
    "frontier-foundry",   "research-foundry", "model-foundry",
    "scientific-runtime", "formal-proof",     "bio-evidence",
    "robotics-control",   "visual-truth",     "learning-forge",
    "source-federation"};

static int in_list(const char *s, const char *const *l, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        if (!strcmp(s, l[i]))
            return 1;
    return 0;
}

int orch_proof_lane_known(const char *name)
{
    return in_list(name, proof_lanes,
                   sizeof(proof_lanes) / sizeof(*proof_lanes));
}

int orch_domain_lane_known(const char *name)
{
    return in_list(name, domain_lanes,
                   sizeof(domain_lanes) / sizeof(*domain_lanes));
}

/* ---- words ------------------------------------------------------------- */

static int word_byte(unsigned char c)
{
    return isalnum(c) || c >= 0x80;
}

/* What the words of a text hold (each word compared on its first 63
 * bytes). */
struct words {
    size_t n, filler, action;
    int technical;
};

static const char *const fillers[] = {
    "just",      "really",    "very",     "quite",       "basically",
    "actually",  "literally", "simply",   "essentially", "definitely",
    "certainly", "probably",  "perhaps",  "maybe",       "somewhat",
    "rather",    "fairly",    "arguably", "clearly",     "obviously",
    "honestly",  "truly",     "indeed",   "generally"};
static const char *const actions[] = {"ship",    "run",     "fix",    "build",
                                      "verify",  "commit",  "report", "review",
                                      "deploy",  "write",   "read",   "test",
                                      "measure", "compare", "record", "keep"};
static const char *const technical[] = {
    "api",  "class",  "cli", "command", "commit", "error", "file",   "function",
    "http", "ledger", "mcp", "method",  "module", "route", "schema", "test"};
static const char *const evidence_words[] = {"source",   "citation", "observed",
                                             "measured", "reported", "unknown",
                                             "verified"};
static const char *const evidence_phrases[] = {
    "not verified", "from the test output", "test output", "from the ledger"};
static const char *const overconfident[] = {"proves", "certainly", "obviously",
                                            "definitely"};

#define N(a) (sizeof(a) / sizeof(*(a)))

/* Counts over the words of lowered text; *flags gets 1 (optimize), 2
 * (an evidence word), 4 (overconfident). */
static void count_words(const char *low, struct words *w, unsigned *flags)
{
    memset(w, 0, sizeof(*w));
    *flags = 0;
    const char *p = low;
    while (*p) {
        while (*p && !word_byte((unsigned char)*p))
            p++;
        const char *s = p;
        while (*p && word_byte((unsigned char)*p))
            p++;
        if (p == s)
            break;
        char word[64];
        size_t len = (size_t)(p - s) < sizeof(word) - 1 ? (size_t)(p - s)
                                                        : sizeof(word) - 1;
        memcpy(word, s, len);
        word[len] = '\0';
        w->n++;
        w->filler += in_list(word, fillers, N(fillers));
        w->action += in_list(word, actions, N(actions));
        w->technical |= in_list(word, technical, N(technical));
        if (!strcmp(word, "optimize"))
            *flags |= 1;
        if (in_list(word, evidence_words, N(evidence_words)))
            *flags |= 2;
        if (in_list(word, overconfident, N(overconfident)))
            *flags |= 4;
    }
    for (size_t i = 0; i < N(evidence_phrases); i++)
        if (strstr(low, evidence_phrases[i]))
            *flags |= 2;
}

/* Sentences: the pieces between runs of . ! ? that hold more than space. */
static size_t count_sentences(const char *t)
{
    size_t n = 0;
    int text = 0;
    for (const char *p = t;; p++) {
        if (!*p || *p == '.' || *p == '!' || *p == '?') {
            n += text;
            text = 0;
            if (!*p)
                break;
        } else if (!isspace((unsigned char)*p)) {
            text = 1;
        }
    }
    return n;
}

/* ---- delivery profiles ------------------------------------------------- */

struct profile {
    const char *name;
    int max_words; /* 0: none */
    int action, evidence, technical;
};

static const struct profile profiles[] = {
    {"operator", 0, 1, 0, 0},
    {"engineer", 0, 1, 1, 1},
    {"researcher", 0, 0, 1, 0},
    {"executive", 120, 1, 0, 0},
};
#define MEAN_SENTENCE_MAX 24.0
#define FILLER_MAX 0.04

const char orch_profiles_list[] = "operator, engineer, researcher, executive";

static const struct profile *profile_find(const char *name)
{
    if (!name)
        return &profiles[0];
    for (size_t i = 0; i < N(profiles); i++)
        if (!strcmp(profiles[i].name, name))
            return &profiles[i];
    return NULL;
}

int orch_profile_known(const char *name)
{
    return name && profile_find(name) != NULL;
}

static int unknown_profile(const char *name, struct fo_err *err)
{
    return fo_err_set(err, FO_E_INVALID,
                      "profile: unknown delivery profile %.64s (known: %s)",
                      name, orch_profiles_list);
}

static int list_into(struct fo_buf *b, const char *const *l, size_t n)
{
    int rc = FO_OK;
    for (size_t i = 0; !rc && i < n; i++)
        rc = fo_buf_printf(b, "%s%s", i ? ", " : "", l[i]);
    return rc;
}

int orch_profile_guide(const char *profile, struct fo_buf *out,
                       struct fo_err *err)
{
    const struct profile *p = profile_find(profile);
    if (!p)
        return unknown_profile(profile, err);
    int rc = fo_buf_printf(
        out,
        "Deliver the answer to the %s delivery profile: open with the "
        "point itself (no preamble such as \"As an AI\", no \"I think\", "
        "\"maybe\" or \"perhaps\" to begin, no disclaimer about what you "
        "cannot do); keep sentences to %.0f words on average; avoid filler "
        "words (",
        p->name, MEAN_SENTENCE_MAX);
    if (!rc)
        rc = list_into(out, fillers, N(fillers));
    if (!rc)
        rc = fo_buf_puts(out, ")");
    if (!rc && p->action) {
        rc = fo_buf_puts(out, "; name a concrete action (");
        if (!rc)
            rc = list_into(out, actions, N(actions));
        if (!rc)
            rc = fo_buf_puts(out, ")");
    }
    if (!rc && p->technical) {
        rc = fo_buf_puts(out, "; name the technical object concerned (");
        if (!rc)
            rc = list_into(out, technical, N(technical));
        if (!rc)
            rc = fo_buf_puts(out, ")");
    }
    if (!rc && p->evidence)
        rc = fo_buf_puts(out, "; say where each claim comes from (observed, "
                              "measured, reported, verified, the source, or "
                              "unknown)");
    if (!rc && p->max_words)
        rc = fo_buf_printf(out, "; at most %d words in all", p->max_words);
    if (!rc)
        rc = fo_buf_puts(out, ".");
    return rc ? fo_err_set(err, FO_E_NOMEM, NULL) : FO_OK;
}

static char *lowered_trim(const char *text)
{
    while (isspace((unsigned char)*text))
        text++;
    size_t n = strlen(text);
    while (n && isspace((unsigned char)text[n - 1]))
        n--;
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++)
        s[i] = (char)tolower((unsigned char)text[i]);
    s[n] = '\0';
    return s;
}

static int starts(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

static int finding(cJSON *arr, const char *code, const char *detail)
{
    cJSON *f = cJSON_CreateObject();
    if (!f || !cJSON_AddItemToArray(arr, f))
        return cJSON_Delete(f), 0;
    return cJSON_AddStringToObject(f, "code", code) &&
           cJSON_AddStringToObject(f, "detail", detail);
}

static const char *const preambles[] = {"as an ai language model",
                                        "as a language model", "as an ai"};
static const char *const disclaimers[] = {
    "i cannot", "i can't", "i do not have access", "i don't have access"};
static const char *const weak_starts[] = {"it seems", "maybe",
                                          "perhaps",  "i think",
                                          "as an ai", "as a language model"};

/* The findings of text against p, into arr. 0 when out of memory. */
static int assess(const struct profile *p, const char *low,
                  const struct words *w, size_t sentences, double mean,
                  double ratio, unsigned flags, cJSON *arr)
{
    char d[160];
    int ok = 1;
    if (!*low)
        ok &= finding(arr, "empty_text", "the text is empty");
    for (size_t i = 0; i < N(preambles); i++)
        if (starts(low, preambles[i])) {
            ok &= finding(arr, "model_preamble",
                          "the text opens with a model's preamble");
            break;
        }
    for (size_t i = 0; i < N(disclaimers); i++)
        if (strstr(low, disclaimers[i])) {
            ok &= finding(arr, "model_disclaimer",
                          "the text holds a model's first-person disclaimer");
            break;
        }
    for (size_t i = 0; i < N(weak_starts); i++)
        if (starts(low, weak_starts[i])) {
            snprintf(d, sizeof(d), "the text opens with '%s'", weak_starts[i]);
            ok &= finding(arr, "banned_start", d);
            break;
        }
    if (w->n && mean > MEAN_SENTENCE_MAX) {
        snprintf(d, sizeof(d), "%.2f words a sentence, over %.1f", mean,
                 MEAN_SENTENCE_MAX);
        ok &= finding(arr, "long_sentence", d);
    }
    if (w->n && ratio > FILLER_MAX) {
        snprintf(d, sizeof(d), "filler words are %.4g of the words, over %.2f",
                 ratio, FILLER_MAX);
        ok &= finding(arr, "filler_ratio", d);
    }
    if (p->max_words && w->n > (size_t)p->max_words) {
        snprintf(d, sizeof(d), "%zu words, over %d", w->n, p->max_words);
        ok &= finding(arr, "too_many_words", d);
    }
    if (p->action && sentences > 1 && !w->action)
        ok &= finding(arr, "missing_action_verb",
                      "no concrete action verb (fix, run, verify, ...)");
    if (p->technical && !w->technical) {
        snprintf(d, sizeof(d), "the %s profile wants a technical term",
                 p->name);
        ok &= finding(arr, "missing_required_term", d);
    }
    if (p->evidence && !(flags & 2)) {
        snprintf(d, sizeof(d), "the %s profile wants evidence language",
                 p->name);
        ok &= finding(arr, "missing_evidence_language", d);
    }
    if ((flags & 1) && !strpbrk(low, "0123456789"))
        ok &= finding(arr, "vague_optimization",
                      "an optimisation claim without a measurable target");
    if ((flags & 4) && !(flags & 2))
        ok &= finding(arr, "overconfident_without_evidence",
                      "confident wording without evidence language");
    return ok;
}

int orch_profile_check(const char *text, const char *profile, cJSON **out,
                       struct fo_err *err)
{
    const struct profile *p = profile_find(profile);
    if (!p)
        return unknown_profile(profile, err);
    char *low = lowered_trim(text ? text : "");
    if (!low)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    struct words w;
    unsigned flags;
    count_words(low, &w, &flags);
    size_t sentences = count_sentences(text ? text : "");
    double mean = sentences ? round((double)w.n / (double)sentences * 100) / 100
                            : (double)w.n;
    double ratio =
        w.n ? round((double)w.filler / (double)w.n * 10000) / 10000 : 0.0;
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_CreateArray();
    int ok = o && arr && assess(p, low, &w, sentences, mean, ratio, flags, arr);
    if (ok && !cJSON_AddItemToObject(o, "findings", arr))
        ok = 0;
    else if (ok)
        arr = NULL; /* the object's now */
    ok = ok &&
         cJSON_AddStringToObject(o, "schema", "forum.delivery-profile/v1") &&
         cJSON_AddStringToObject(o, "profile", p->name) &&
         fo_json_add_int(o, "words", (long long)w.n) &&
         fo_json_add_int(o, "sentences", (long long)sentences) &&
         cJSON_AddNumberToObject(o, "mean_sentence_words", mean) &&
         cJSON_AddNumberToObject(o, "filler_ratio", ratio) &&
         cJSON_AddBoolToObject(
             o, "flagged",
             cJSON_GetArraySize(
                 cJSON_GetObjectItemCaseSensitive(o, "findings")) > 0);
    free(low);
    cJSON_Delete(arr);
    if (!ok) {
        cJSON_Delete(o);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    *out = o;
    return FO_OK;
}

/* ---- humanize ---------------------------------------------------------- */

/* Stock phrases and their plain form, matched case-insensitively on word
 * boundaries; "" drops the phrase and the spaces after it. */
static const struct {
    const char *from, *to;
} plain[] = {
    {"it is important to note that", ""},
    {"it should be noted that", ""},
    {"in order to", "to"},
    {"utilizing", "using"},
    {"utilize", "use"},
    {"methodology", "method"},
    {"provide assistance", "help"},
    {"assist", "help"},
    {"prior to", "before"},
};

/* Replaces the phrases of plain[] in s (consumed) into a new string;
 * *changed set when any matched. NULL when out of memory. */
static char *plainer(char *s, int *changed)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    const char *p = s;
    int ok = 1;
    while (*p && ok) {
        int at_word = p == s || !word_byte((unsigned char)p[-1]);
        size_t k = N(plain);
        for (size_t i = 0; at_word && i < N(plain) && k == N(plain); i++) {
            size_t n = strlen(plain[i].from);
            if (!strncasecmp(p, plain[i].from, n) &&
                !word_byte((unsigned char)p[n]) &&
                (*plain[i].to || isspace((unsigned char)p[n])))
                k = i;
        }
        if (k == N(plain)) {
            ok = fo_buf_putc(&b, *p++) == FO_OK;
            continue;
        }
        *changed = 1;
        p += strlen(plain[k].from);
        if (!*plain[k].to)
            while (isspace((unsigned char)*p))
                p++;
        else
            ok = fo_buf_append(&b, plain[k].to, strlen(plain[k].to)) == FO_OK;
    }
    free(s);
    if (!ok || fo_buf_putc(&b, '\0') != FO_OK) {
        fo_buf_release(&b);
        return NULL;
    }
    return b.data ? b.data : calloc(1, 1);
}

/* Collapses runs of white space to one space, trims, capitalises the first
 * letter and ends with a full stop unless it ends in . ! or ?. */
static char *tidy(const char *s)
{
    size_t n = strlen(s);
    char *o = malloc(n + 2);
    if (!o)
        return NULL;
    size_t k = 0;
    int space = 0;
    for (const char *p = s; *p; p++) {
        if (isspace((unsigned char)*p)) {
            space = k > 0;
            continue;
        }
        if (space)
            o[k++] = ' ';
        space = 0;
        o[k++] = *p;
    }
    o[k] = '\0';
    if (k)
        o[0] = (char)toupper((unsigned char)o[0]);
    if (k && !strchr(".!?", o[k - 1])) {
        o[k++] = '.';
        o[k] = '\0';
    }
    return o;
}

static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static cJSON *strings(const char *a, const char *b)
{
    cJSON *arr = cJSON_CreateArray();
    if (arr && a && !cJSON_AddItemToArray(arr, cJSON_CreateString(a)))
        return cJSON_Delete(arr), NULL;
    if (arr && b && !cJSON_AddItemToArray(arr, cJSON_CreateString(b)))
        return cJSON_Delete(arr), NULL;
    return arr;
}

int orch_humanize(const char *text, const char *audience, const char *profile,
                  cJSON **out, struct fo_err *err)
{
    const char *t = text ? text : "";
    while (isspace((unsigned char)*t))
        t++;
    if (!*t)
        return fo_err_set(err, FO_E_INVALID, "text: must not be empty");
    if (!profile_find(profile))
        return unknown_profile(profile, err);
    const char *body = t;
    int preamble = 0;
    for (size_t i = 0; i < N(preambles) && !preamble; i++) {
        size_t n = strlen(preambles[i]);
        /* the reference's preambles end in a comma */
        if (!strncasecmp(body, preambles[i], n) && body[n] == ',') {
            body += n + 1;
            preamble = 1;
        }
    }
    int changed = 0;
    char *s = strdup(body);
    char *p = s ? plainer(s, &changed) : NULL;
    char *o = p ? tidy(p) : NULL;
    free(p);
    if (!o)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    cJSON *check = NULL;
    int rc = orch_profile_check(o, profile, &check, err);
    if (rc) {
        free(o);
        return rc;
    }
    cJSON *r = cJSON_CreateObject();
    cJSON *edits = preamble || changed
                       ? strings(preamble ? "removed model preamble" : NULL,
                                 changed ? "simplified phrasing" : NULL)
                       : strings("kept wording", NULL);
    cJSON *nv = strings("facts were not independently checked", NULL);
    int ok =
        r && edits && nv &&
        cJSON_AddStringToObject(r, "schema", "forum.prose-humanization/v1") &&
        cJSON_AddStringToObject(
            r, "audience", audience && *audience ? audience : "operator") &&
        cJSON_AddStringToObject(r, "profile", profile_find(profile)->name) &&
        cJSON_AddItemToObject(r, "profile_check", check) &&
        fo_json_add_int(r, "input_chars", (long long)utf8_chars(text)) &&
        fo_json_add_int(r, "output_chars", (long long)utf8_chars(o)) &&
        cJSON_AddStringToObject(r, "output", o);
    if (ok) {
        check = NULL;
        cJSON_AddItemToObject(r, "edits", edits);
        cJSON_AddItemToObject(r, "not_verified", nv);
        edits = nv = NULL;
    }
    free(o);
    cJSON_Delete(check);
    cJSON_Delete(edits);
    cJSON_Delete(nv);
    if (!ok) {
        cJSON_Delete(r);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    *out = r;
    return FO_OK;
}

/* ---- route frames and contracts ---------------------------------------- */

struct frame_rule {
    const char *domain, *intent, *posture, *profile, *proof_lane, *domain_lane,
        *contract;
    const char *keywords; /* space-separated */
    const char *agents;   /* space-separated lane names */
};

/* In order: the first rule whose keywords meet the request's words, or
 * whose lanes hold the decided one, frames it. */
static const struct frame_rule rules[] = {
    {"model-foundry", "validate", "architect", "engineer", "validate",
     "model-foundry",
     "Say how it works, what evidence gates it, and the next step that can "
     "be run.",
     "daemon eval evals foundry gate gated improving model models promotion "
     "self",
     "model-foundry"},
    {"evidence", "investigate", "investigator", "researcher", "observe",
     "source-federation",
     "Keep what was observed apart from what is inferred, cite what was "
     "captured, and keep its provenance.",
     "browser capture crawl dom evidence page provenance scrape screenshot "
     "screenshots source sources",
     "web-intel deep-research"},
    {"validation", "validate", "reviewer", "engineer", "verify", "formal-proof",
     "Name the claim, the check that was run, its result, and the risk "
     "left.",
     "audit proof quality regression review test tests validate "
     "verification verify",
     "code-review ci-cd"},
    {"teaching", "synthesize", "teacher", "researcher", "synthesize",
     "learning-forge",
     "Start where the learner is, give one worked example, and say how to "
     "check the understanding.",
     "course example explain learn learning lesson teach tutorial", "teaching"},
    {"operator-platform", "coordinate", "operator", "executive", "synthesize",
     "frontier-foundry",
     "Name the move on the platform, its tradeoff, who owns it, and the "
     "next coordinated action.",
     "agents flagship forum harness index operator orchestration platform "
     "telos workflow",
     "project-telos function-routing"},
    {"implementation", "execute", "architect", "engineer", "execute", NULL,
     "Describe the change, its interface, how it is verified, and the next "
     "step that can be run.",
     "api build code database endpoint fix implement server service ship",
     "backend frontend python-apps sdk-platform data-pipeline"},
};
static const char general_contract[] =
    "Say where the request went, how sure that is, and the next useful step.";

/* 1 when word is one of the space-separated words of list. */
static int listed(const char *list, const char *word, size_t n)
{
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, " ");
        if (k == n && !strncmp(p, word, n))
            return 1;
        p += k + (p[k] == ' ');
    }
    return 0;
}

/* The rule's keywords among text's [a-z0-9]+ tokens, sorted (the list is
 * sorted, and each is added once). */
static cJSON *signals_of(const struct frame_rule *r, const char *low)
{
    cJSON *arr = cJSON_CreateArray();
    for (const char *k = r->keywords; arr && *k;) {
        size_t n = strcspn(k, " ");
        int found = 0;
        for (const char *p = low; *p && !found;) {
            while (*p && !isalnum((unsigned char)*p))
                p++;
            const char *s = p;
            while (isalnum((unsigned char)*p))
                p++;
            found = (size_t)(p - s) == n && !strncmp(s, k, n);
        }
        char w[ORCH_KEYWORD_MAX + 1];
        snprintf(w, sizeof(w), "%.*s", (int)n, k);
        if (found && !cJSON_AddItemToArray(arr, cJSON_CreateString(w)))
            return cJSON_Delete(arr), NULL;
        k += n + (k[n] == ' ');
    }
    return arr;
}

static int add_str_or_null(cJSON *o, const char *k, const char *v)
{
    return v ? cJSON_AddStringToObject(o, k, v) != NULL
             : cJSON_AddNullToObject(o, k) != NULL;
}

cJSON *orch_route_frame(const struct orch_roster *r, const char *text,
                        const struct orch_route *rt)
{
    const char *agent = rt && !rt->needs_escalation ? rt->decided : NULL;
    const struct orch_lane *lane = agent ? orch_roster_find(r, agent) : NULL;
    char *low = lowered_trim(text ? text : "");
    if (!low)
        return NULL;
    const struct frame_rule *rule = NULL;
    cJSON *sig = NULL;
    for (size_t i = 0; i < N(rules) && !rule; i++) {
        cJSON_Delete(sig);
        sig = signals_of(&rules[i], low);
        if (!sig)
            break;
        if (cJSON_GetArraySize(sig) > 0 ||
            (agent && listed(rules[i].agents, agent, strlen(agent))))
            rule = &rules[i];
    }
    free(low);
    if (!rule) {
        cJSON_Delete(sig);
        sig = cJSON_CreateArray();
    }
    cJSON *o = cJSON_CreateObject();
    int ok =
        sig && o &&
        cJSON_AddStringToObject(o, "schema", "forum.route-frame/v1") &&
        add_str_or_null(o, "agent", agent) &&
        cJSON_AddStringToObject(o, "domain", rule ? rule->domain : "general") &&
        cJSON_AddStringToObject(o, "intent",
                                rule ? rule->intent : "coordinate") &&
        cJSON_AddStringToObject(o, "posture",
                                rule ? rule->posture : "operator") &&
        cJSON_AddStringToObject(o, "delivery_profile",
                                rule ? rule->profile : "operator") &&
        add_str_or_null(o, "model_tier",
                        lane ? orch_tier_name(lane->tier) : NULL) &&
        add_str_or_null(o, "executor",
                        lane ? orch_exec_name(lane->executor) : NULL) &&
        add_str_or_null(o, "proof_lane", rule ? rule->proof_lane : NULL) &&
        add_str_or_null(o, "domain_lane", rule ? rule->domain_lane : NULL) &&
        cJSON_AddStringToObject(o, "human_contract",
                                rule ? rule->contract : general_contract);
    if (ok) {
        cJSON_AddItemToObject(o, "signals", sig);
        sig = NULL;
        cJSON *c = NULL;
        struct fo_err e;
        ok = orch_prose_contract(o, NULL, &c, &e) == FO_OK &&
             cJSON_AddItemToObject(o, "communication_contract", c);
    }
    cJSON_Delete(sig);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* What each posture leads with, the structure each profile follows, the
 * evidence it names, the moves each posture must make. */
static const struct {
    const char *posture, *lead, *moves;
} postures[] = {
    {"architect", "Open with the concrete change or decision.",
     "name the mechanism|keep verified output apart from the work left"},
    {"investigator", "Open with what was observed, then what it suggests.",
     "keep provenance|keep observations apart from inference"},
    {"reviewer", "Open with the verdict and the check behind it.",
     "say pass or fail|name the risk left"},
    {"teacher", "Open from where the learner stands.",
     "give one clear example|say how to check understanding"},
    {"operator", "Open with the status, the tradeoff and the next action.",
     "name the owner|say the next coordinated action"},
};
static const struct {
    const char *profile, *structure, *evidence;
} shapes[] = {
    {"engineer", "change|interface|verification|risk|next step",
     "name files, commands, tests or ledger entries where there are some"},
    {"researcher", "observation|source|inference|unknowns|next check",
     "keep observation apart from inference|name the sources or the unknowns"},
    {"executive", "decision|tradeoff|owner|risk|next action",
     "name what the recommendation rests on"},
    {"operator", "status|route|uncertainty|next step",
     "say what is verified and what is still uncertain"},
};

static cJSON *split(const char *s)
{
    cJSON *arr = cJSON_CreateArray();
    while (arr && *s) {
        size_t n = strcspn(s, "|");
        char w[256];
        snprintf(w, sizeof(w), "%.*s", (int)n, s);
        if (!cJSON_AddItemToArray(arr, cJSON_CreateString(w)))
            return cJSON_Delete(arr), NULL;
        s += n + (s[n] == '|');
    }
    return arr;
}

static const char *str_of(const cJSON *o, const char *k, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) && *v->valuestring ? v->valuestring : dflt;
}

int orch_prose_contract(const cJSON *frame, const char *profile, cJSON **out,
                        struct fo_err *err)
{
    const char *pname =
        profile ? profile : str_of(frame, "delivery_profile", "operator");
    const struct profile *p = profile_find(pname);
    if (!p)
        return unknown_profile(pname, err);
    const char *posture = str_of(frame, "posture", "operator");
    size_t pi = N(postures) - 1, si = N(shapes) - 1;
    for (size_t i = 0; i < N(postures); i++)
        if (!strcmp(postures[i].posture, posture))
            pi = i;
    for (size_t i = 0; i < N(shapes); i++)
        if (!strcmp(shapes[i].profile, p->name))
            si = i;
    const char *pl = str_of(frame, "proof_lane", NULL);
    const char *dl = str_of(frame, "domain_lane", NULL);
    cJSON *o = cJSON_CreateObject();
    cJSON *st = split(shapes[si].structure), *ev = split(shapes[si].evidence);
    cJSON *av = split("model preambles|unsupported superlatives|vague "
                      "optimism|performative hedging");
    cJSON *mv = split(postures[pi].moves);
    int ok = o && st && ev && av && mv &&
             cJSON_AddStringToObject(o, "schema",
                                     "forum.communication-contract/v1") &&
             cJSON_AddStringToObject(o, "domain",
                                     str_of(frame, "domain", "general")) &&
             cJSON_AddStringToObject(o, "intent",
                                     str_of(frame, "intent", "coordinate")) &&
             cJSON_AddStringToObject(o, "posture", posture) &&
             cJSON_AddStringToObject(o, "profile", p->name) &&
             add_str_or_null(o, "proof_lane", pl) &&
             add_str_or_null(o, "domain_lane", dl) &&
             cJSON_AddStringToObject(o, "lead", postures[pi].lead) &&
             cJSON_AddStringToObject(o, "human_contract",
                                     str_of(frame, "human_contract", ""));
    if (ok) {
        cJSON_AddItemToObject(o, "structure", st);
        cJSON_AddItemToObject(o, "evidence", ev);
        cJSON_AddItemToObject(o, "avoid", av);
        cJSON_AddItemToObject(o, "required_moves", mv);
        *out = o;
        return FO_OK;
    }
    cJSON_Delete(o);
    cJSON_Delete(st);
    cJSON_Delete(ev);
    cJSON_Delete(av);
    cJSON_Delete(mv);
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

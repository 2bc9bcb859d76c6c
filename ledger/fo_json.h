/* fo_json: strict JSON in, RFC 8785 (JCS) canonical JSON out.
 *
 * cJSON 1.7.15 alone accepts much that forum must refuse and its printer
 * changes numbers (TRAPS.md). fo_json_parse is our own strict reader that
 * builds a cJSON tree; fo_json_write is our own writer that formats numbers
 * as ECMAScript does (JCS), so everything the project serves or hashes goes
 * through it. Never serve or hash cJSON_Print output. */
#ifndef FO_JSON_H
#define FO_JSON_H

#include <stddef.h>

#include <cJSON.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"

/* Deepest nesting accepted: a scalar is depth 0, each array or object adds
 * one. */
#define FO_JSON_MAX_DEPTH 64

/* Parses exactly len bytes of strict JSON (RFC 8259 plus the JCS limits)
 * into a new cJSON tree, which the caller frees with cJSON_Delete. Rejected
 * with FO_E_JSON and a message naming the problem and its byte offset:
 * invalid UTF-8, a BOM, raw control characters in strings, \u0000, lone
 * surrogates, duplicate object keys, leading zeros, `1.`, `.5`, NaN,
 * Infinity, numbers that overflow to infinity (1e400), nesting deeper than
 * FO_JSON_MAX_DEPTH, and anything but white space after the value. Numbers
 * are stored in valuedouble (valueint is set as cJSON does, saturated; do
 * not read it for 64-bit values). Strings may not contain NUL, which cJSON
 * could not hold anyway. */
int fo_json_parse(const char *text, size_t len, cJSON **out,
                  struct fo_err *err);

/* Parse flags. */
/* Each number also keeps its source text (as validated) in valuestring,
 * for echoing a value byte for byte (a JSON-RPC id); the writer ignores it
 * (numbers are written from valuedouble). */
#define FO_JSON_NUMBER_TEXT 1u
/* fo_json_parse with parse flags. */
int fo_json_parse_flags(const char *text, size_t len, unsigned flags,
                        cJSON **out, struct fo_err *err);
/* Frees the source text FO_JSON_NUMBER_TEXT kept in v and everything in it
 * (depth bounded by the parser's). NULL is a no-op. */
void fo_json_drop_number_text(cJSON *v);

/* Writer flags. */
#define FO_JSON_PRETTY 1u /* two-space indentation for people; not JCS */
/* cJSON_Raw nodes are written verbatim (else refused): only for text that
 * came out of our own parser, such as a number's FO_JSON_NUMBER_TEXT. */
#define FO_JSON_WRITE_RAW 2u

/* Appends v to out. With flags 0 the output is the RFC 8785 canonical form:
 * object members sorted by the UTF-16 code units of their keys, no white
 * space, numbers in ECMAScript shortest round-trip form (so 1e21, 1e-7,
 * 0.000001, integers up to 2^53 never in exponent form, -0 as 0), strings
 * with the minimal JCS escaping. With FO_JSON_PRETTY the same numbers,
 * escaping and order, indented. Fails with FO_E_JSON (non-finite number,
 * invalid UTF-8 in a string or key, duplicate keys, nesting deeper than
 * FO_JSON_MAX_DEPTH, a cJSON_Raw node), or the buffer's FO_E_TOO_LARGE /
 * FO_E_NOMEM. On failure out may hold a partial value; reset it. */
int fo_json_write(const cJSON *v, unsigned flags, struct fo_buf *out,
                  struct fo_err *err);

/* The canonical form: fo_json_write with flags 0. */
int fo_json_canon(const cJSON *v, struct fo_buf *out, struct fo_err *err);

/* Formats a finite double as ECMAScript Number::toString does (the JCS
 * number form) into out, which holds at least FO_JSON_NUM_MAX bytes with the
 * NUL. Returns the length, or -1 for NaN or an infinity. */
#define FO_JSON_NUM_MAX 32
int fo_json_number(double d, char out[FO_JSON_NUM_MAX]);

/* Appends s (len bytes of UTF-8) as a JSON string literal with JCS escaping:
 * \" \\ \b \f \n \r \t, other controls as \u00xx (lowercase hex), all else
 * as is. FO_E_JSON for invalid UTF-8 or a NUL byte. */
int fo_json_string(const char *s, size_t len, struct fo_buf *out);

/* Validates len bytes as UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
 * Returns 1 when valid. */
int fo_utf8_valid(const char *s, size_t len);

/* Convenience for building trees: adds a number member holding an int64
 * exactly (values beyond 2^53 lose precision, as JSON numbers do). Returns
 * the new item or NULL when out of memory. */
cJSON *fo_json_add_int(cJSON *obj, const char *key, long long v);

/* Reads an integer member: FO_OK with *out set when obj[key] is a number
 * with an integral value in [min, max]; FO_E_NOT_FOUND when absent;
 * FO_E_INVALID otherwise. Keys are matched case-sensitively. */
int fo_json_get_int(const cJSON *obj, const char *key, long long min,
                    long long max, long long *out);

/* Refuses members outside a closed set: FO_OK when every member of obj has
 * a name among the n names in keys (absent names are not checked here);
 * else FO_E_INVALID with `unknown field "NAME"` in err. Case-sensitive. */
int fo_json_only_keys(const cJSON *obj, const char *const *keys, size_t n,
                      struct fo_err *err);

#endif

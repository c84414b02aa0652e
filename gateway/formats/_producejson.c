/*
 * A JSON produce body -> the Kafka RecordBatch v2 bytes of each partition, in C.
 *
 * The produce hot path (DESIGN.md §1, §8): decoding the body into a Python object per record
 * and field, then handing each record to aiokafka's builder, cost most of a JSON produce. This
 * reads the body once, checks it as strict JSON, and writes the batches straight away: record
 * varints, the batch header with Sluice's VALUES_JSON bit, CRC-32C, split at max.message.bytes
 * as aiokafka's builder splits, the partition of each record chosen as produce.py chooses it.
 *
 * It covers the common shape only: {"records": [...]} whose records have no fields but key
 * (string or null), value (any JSON: stored as its exact text, as the Python path stores it),
 * headers (object of strings or nulls, or null), partition and timestamp (non-negative
 * integers of at most 18 digits, or null). Anything else, and anything the Python path would
 * refuse or might read differently, it hands back (None): base64 encodings, escaped field
 * names, duplicated fields, JSON that is not strict (or not UTF-8, or holds lone surrogates),
 * numbers a double might not hold, nesting past MAX_DEPTH, a partition out of range, a key-less
 * record for a compacted topic, a record too large for a batch of its own. The Python path
 * (codecs.parse_json_records, Producer._group_json) is the reference and then answers, with its
 * exact error; for the bodies this accepts the batches are byte for byte the same
 * (tests/gateway/test_producejson.py and the json_produce_native fuzz target check it).
 *
 * REST Proxy v2's json format (v2_json_batches) is the same body with keys given as JSON values,
 * stored as their compact JSON text (what its route stores: orjson's text of the key) and no
 * headers or timestamps; the records' partitions come back too, and v2_offsets writes v2's
 * answer from them. Keys orjson might write otherwise (escapes, non-integer numbers, objects,
 * arrays) are handed back like anything else (tests/gateway/test_rest_proxy_codecs.py).
 *
 * Every read is bounds-checked against the body; nothing recurses (nesting uses a fixed stack).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../engine/_crc32c.h"

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12 /* base offset and length: the bytes a batch's length leaves out */
#define CRC_AT 17
#define ATTRIBUTES_AT 21
#define VALUES_JSON_MASK 0x4000
#define TRANSACTIONAL_MASK 0x10
#define MAGIC 2

/* Containers open at once, the body's own two levels and a record's included. Python's parser
 * (msgspec) refuses nesting by the interpreter's recursion limit (about 1,000 levels, less
 * the caller's frames) and orjson past 1,024: this stays well below both. */
#define MAX_DEPTH 128
/* A number token longer than this, or one whose exponent could take it past 1e300, is left to
 * Python: a double holds up to about 1.8e308, and orjson refuses what it cannot. */
#define MAX_NUMBER_CHARS 320
#define MAX_MAGNITUDE 300
/* Headers per record: duplicates are looked for one by one, so their number is bounded. */
#define MAX_HEADERS 64
/* Bodies up to this size: every length and sum below then fits in 32 (Kafka's varints) and
 * 63 bits without checks. */
#define MAX_BODY ((Py_ssize_t)1 << 30)

enum outcome { DONE, PYTHON, FAILED };

/* -- Kafka's encodings ---------------------------------------------------------------------- */

static inline uint64_t
zigzag(int64_t v)
{
    return v >= 0 ? (uint64_t)v << 1 : ((uint64_t)(-(v + 1)) << 1) | 1u;
}

static inline Py_ssize_t
varint_size(uint64_t zz)
{
    Py_ssize_t n = 1;
    while (zz >= 0x80) {
        zz >>= 7;
        n++;
    }
    return n;
}

static inline unsigned char *
put_varint(unsigned char *w, uint64_t zz)
{
    while (zz >= 0x80) {
        *w++ = (unsigned char)(zz | 0x80);
        zz >>= 7;
    }
    *w++ = (unsigned char)zz;
    return w;
}

static void
put_be(unsigned char *w, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        w[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

/* Kafka's Utils.murmur2 (seed 0x9747b28c), as gateway/produce/partitioner.py computes it. */
static uint32_t
murmur2(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t whole = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 |
                     (uint32_t)data[i + 2] << 16 | (uint32_t)data[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    switch (length & 3) {
    case 3: h ^= (uint32_t)data[whole + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)data[whole + 1] << 8;  /* fall through */
    case 1:
        h ^= data[whole];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* -- what the body holds -------------------------------------------------------------------- */

/* Bytes of the body, or of the arena (strings that had escapes, unescaped). len -1: null. */
struct span {
    Py_ssize_t at;
    Py_ssize_t len;
    int in_arena;
};

struct header {
    struct span name;
    struct span value;
};

struct record {
    struct span key;
    struct span value;        /* the value's JSON text, always in the body */
    int64_t timestamp;        /* -1: none given */
    int64_t partition;        /* -1: none given; then the partition chosen */
    Py_ssize_t header_first;  /* index into parse.headers */
    Py_ssize_t header_count;
    Py_ssize_t fixed_size;    /* the record's encoded size but its length, delta and offset */
};

struct parse {
    const unsigned char *body;
    Py_ssize_t end;
    Py_ssize_t pos;
    struct record *records;
    Py_ssize_t count, records_cap;
    struct header *headers;
    Py_ssize_t header_total, headers_cap;
    unsigned char *arena;
    Py_ssize_t arena_len, arena_cap;
    int json_keys; /* REST Proxy v2's json format: keys are JSON values, no headers/timestamp */
};

static void
parse_free(struct parse *ps)
{
    PyMem_Free(ps->records);
    PyMem_Free(ps->headers);
    PyMem_Free(ps->arena);
}

/* `items`, an array of `*cap` items of `size` bytes, with room for `more` past `used`: the same
 * array or a larger one (`*cap` updated); NULL with MemoryError set. `more` is at least 1. */
static void *
reserve(void *items, Py_ssize_t *cap, Py_ssize_t used, Py_ssize_t more, size_t size)
{
    if (used + more <= *cap) {
        return items;
    }
    Py_ssize_t grown = *cap ? *cap : 64;
    while (grown < used + more) {
        grown *= 2;
    }
    void *moved = PyMem_Realloc(items, (size_t)grown * size);
    if (moved == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    *cap = grown;
    return moved;
}

static inline const unsigned char *
span_bytes(const struct parse *ps, const struct span *s)
{
    return (s->in_arena ? ps->arena : ps->body) + s->at;
}

static inline void
skip_ws(struct parse *ps)
{
    while (ps->pos < ps->end) {
        unsigned char c = ps->body[ps->pos];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
            return;
        }
        ps->pos++;
    }
}

/* The next byte after whitespace, if it is `c` (consumed); 0 otherwise. */
static inline int
accept(struct parse *ps, unsigned char c)
{
    skip_ws(ps);
    if (ps->pos < ps->end && ps->body[ps->pos] == c) {
        ps->pos++;
        return 1;
    }
    return 0;
}

/* Whether a string starts at the next byte after whitespace. */
static inline int
at_string(struct parse *ps)
{
    skip_ws(ps);
    return ps->pos < ps->end && ps->body[ps->pos] == '"';
}

static int
hex4(const unsigned char *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') {
            v |= (uint32_t)(c - '0');
        }
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
            v |= (uint32_t)((c | 0x20) - 'a' + 10);
        }
        else {
            return -1;
        }
    }
    *out = v;
    return 0;
}

/* A well-formed UTF-8 sequence of 2-4 bytes at p (below end): its length, or 0 if it is not
 * one Python's strict decoder accepts (overlong forms, surrogates, past U+10FFFF). */
static Py_ssize_t
utf8_sequence(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = p[0];
    Py_ssize_t n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    }
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) {
            lo = 0xA0;
        }
        else if (c == 0xED) {
            hi = 0x9F;
        }
    }
    else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) {
            lo = 0x90;
        }
        else if (c == 0xF4) {
            hi = 0x8F;
        }
    }
    else {
        return 0;
    }
    if (end - p < n || p[1] < lo || p[1] > hi) {
        return 0;
    }
    for (Py_ssize_t i = 2; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            return 0;
        }
    }
    return n;
}

/* Whether any of the eight bytes at p ends a string's plain run: a control character, a quote,
 * a backslash or a byte past ASCII. Bitwise on a word (the classic "has a zero byte" test: exact
 * for whether there is one), as most strings are long runs of plain ASCII. */
static inline int
ends_run(const unsigned char *p)
{
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    uint64_t x, quote, backslash;
    memcpy(&x, p, 8);
    quote = x ^ (ones * '"');
    backslash = x ^ (ones * '\\');
    return ((((x - ones * 0x20) & ~x) | ((quote - ones) & ~quote) |
             ((backslash - ones) & ~backslash) | x) &
            highs) != 0;
}

/* A JSON string at pos (its opening quote): checked, and its content's span; with `text`, a
 * content that had escapes is unescaped into the arena. PYTHON if it is not strict JSON, not
 * UTF-8, or escapes a lone surrogate. */
static enum outcome
read_string(struct parse *ps, struct span *out, int text)
{
    const unsigned char *body = ps->body;
    Py_ssize_t end = ps->end;
    Py_ssize_t p = ps->pos + 1;
    Py_ssize_t start = p;
    int escaped = 0;
    for (;;) {
        while (end - p >= 8 && !ends_run(body + p)) {
            p += 8;
        }
        while (p < end && body[p] >= 0x20 && body[p] < 0x80 && body[p] != '"' &&
               body[p] != '\\') {
            p++;
        }
        if (p >= end) {
            return PYTHON;
        }
        unsigned char c = body[p];
        if (c == '"') {
            break;
        }
        if (c < 0x20) {
            return PYTHON;
        }
        if (c >= 0x80) {
            Py_ssize_t n = utf8_sequence(body + p, body + end);
            if (n == 0) {
                return PYTHON;
            }
            p += n;
            continue;
        }
        /* a backslash */
        escaped = 1;
        if (p + 1 >= end) {
            return PYTHON;
        }
        c = body[p + 1];
        if (c == 'u') {
            uint32_t unit;
            if (end - p < 6 || hex4(body + p + 2, &unit) < 0 ||
                (unit >= 0xDC00 && unit <= 0xDFFF)) {
                return PYTHON;
            }
            p += 6;
            if (unit >= 0xD800 && unit <= 0xDBFF) {
                uint32_t low;
                if (end - p < 6 || body[p] != '\\' || body[p + 1] != 'u' ||
                    hex4(body + p + 2, &low) < 0 || low < 0xDC00 || low > 0xDFFF) {
                    return PYTHON;
                }
                p += 6;
            }
        }
        else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
                 c == 'r' || c == 't') {
            p += 2;
        }
        else {
            return PYTHON;
        }
    }
    ps->pos = p + 1;
    if (!text || !escaped) {
        *out = (struct span){start, p - start, 0};
        return DONE;
    }
    /* Unescaped, the text is never longer than its JSON form. */
    unsigned char *arena = reserve(ps->arena, &ps->arena_cap, ps->arena_len, p - start, 1);
    if (arena == NULL) {
        return FAILED;
    }
    ps->arena = arena;
    unsigned char *w = ps->arena + ps->arena_len;
    for (Py_ssize_t i = start; i < p;) {
        unsigned char c = body[i];
        if (c != '\\') {
            *w++ = c;
            i++;
            continue;
        }
        c = body[i + 1];
        if (c != 'u') {
            switch (c) {
            case 'b': *w++ = '\b'; break;
            case 'f': *w++ = '\f'; break;
            case 'n': *w++ = '\n'; break;
            case 'r': *w++ = '\r'; break;
            case 't': *w++ = '\t'; break;
            default: *w++ = c; /* a quote, backslash or slash */
            }
            i += 2;
            continue;
        }
        uint32_t cp = 0, low = 0;
        hex4(body + i + 2, &cp);
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            hex4(body + i + 2, &low);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            i += 6;
        }
        if (cp < 0x80) {
            *w++ = (unsigned char)cp;
        }
        else if (cp < 0x800) {
            *w++ = (unsigned char)(0xC0 | cp >> 6);
            *w++ = (unsigned char)(0x80 | (cp & 0x3F));
        }
        else if (cp < 0x10000) {
            *w++ = (unsigned char)(0xE0 | cp >> 12);
            *w++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            *w++ = (unsigned char)(0x80 | (cp & 0x3F));
        }
        else {
            *w++ = (unsigned char)(0xF0 | cp >> 18);
            *w++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
            *w++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            *w++ = (unsigned char)(0x80 | (cp & 0x3F));
        }
    }
    Py_ssize_t len = w - (ps->arena + ps->arena_len);
    *out = (struct span){ps->arena_len, len, 1};
    ps->arena_len += len;
    return DONE;
}

static inline int
is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* A JSON number at pos, checked; PYTHON if it is not strict JSON or a double might not hold
 * it (see MAX_NUMBER_CHARS). */
static enum outcome
read_number(struct parse *ps)
{
    const unsigned char *body = ps->body;
    Py_ssize_t end = ps->end;
    Py_ssize_t start = ps->pos, p = start;
    if (body[p] == '-') {
        p++;
    }
    Py_ssize_t int_start = p;
    if (p < end && body[p] == '0') {
        p++;
    }
    else if (p < end && body[p] >= '1' && body[p] <= '9') {
        while (p < end && is_digit(body[p])) {
            p++;
        }
    }
    else {
        return PYTHON;
    }
    Py_ssize_t int_digits = p - int_start;
    if (p < end && body[p] == '.') {
        p++;
        if (p >= end || !is_digit(body[p])) {
            return PYTHON;
        }
        while (p < end && is_digit(body[p])) {
            p++;
        }
    }
    if (p < end && (body[p] == 'e' || body[p] == 'E')) {
        p++;
        int negative = p < end && body[p] == '-';
        if (p < end && (body[p] == '+' || body[p] == '-')) {
            p++;
        }
        if (p >= end || !is_digit(body[p])) {
            return PYTHON;
        }
        Py_ssize_t exponent = 0;
        while (p < end && is_digit(body[p])) {
            if (exponent <= MAX_MAGNITUDE) {
                exponent = exponent * 10 + (body[p] - '0');
            }
            p++;
        }
        if (!negative && int_digits + exponent > MAX_MAGNITUDE) {
            return PYTHON;
        }
    }
    if (p - start > MAX_NUMBER_CHARS || int_digits > MAX_MAGNITUDE) {
        return PYTHON;
    }
    ps->pos = p;
    return DONE;
}

static enum outcome
read_literal(struct parse *ps, const char *word, Py_ssize_t len)
{
    if (ps->end - ps->pos < len || memcmp(ps->body + ps->pos, word, (size_t)len) != 0) {
        return PYTHON;
    }
    ps->pos += len;
    return DONE;
}

/* Any JSON value at pos (after whitespace), checked, nested at most MAX_DEPTH - `depth`
 * deeper; its text's span. Iterative: a stack of the containers open. */
static enum outcome
read_value(struct parse *ps, int depth, struct span *out)
{
    char open[MAX_DEPTH]; /* '{' or '[' per container open */
    int top = 0;
    enum outcome done;
    struct span ignored;
    skip_ws(ps);
    Py_ssize_t start = ps->pos;
    for (;;) {
        /* A value: scalar, or a container opened (and perhaps closed at once). */
        skip_ws(ps);
        if (ps->pos >= ps->end) {
            return PYTHON;
        }
        unsigned char c = ps->body[ps->pos];
        int expect_member = 0;
        if (c == '{' || c == '[') {
            if (depth + top >= MAX_DEPTH) {
                return PYTHON;
            }
            open[top++] = (char)c;
            ps->pos++;
            if (accept(ps, c == '{' ? '}' : ']')) {
                top--;
            }
            else if (c == '[') {
                continue;
            }
            else {
                expect_member = 1;
            }
        }
        else {
            if (c == '"') {
                done = read_string(ps, &ignored, 0);
            }
            else if (c == '-' || is_digit(c)) {
                done = read_number(ps);
            }
            else if (c == 't') {
                done = read_literal(ps, "true", 4);
            }
            else if (c == 'f') {
                done = read_literal(ps, "false", 5);
            }
            else if (c == 'n') {
                done = read_literal(ps, "null", 4);
            }
            else {
                return PYTHON;
            }
            if (done != DONE) {
                return done;
            }
        }
        /* After a value: close containers, or move to the next element or member. */
        while (!expect_member) {
            if (top == 0) {
                *out = (struct span){start, ps->pos - start, 0};
                return DONE;
            }
            if (accept(ps, ',')) {
                expect_member = open[top - 1] == '{';
                if (!expect_member) {
                    break; /* the next element */
                }
            }
            else if (accept(ps, open[top - 1] == '{' ? '}' : ']')) {
                top--;
            }
            else {
                return PYTHON;
            }
        }
        if (expect_member) {
            if (!at_string(ps)) {
                return PYTHON;
            }
            if ((done = read_string(ps, &ignored, 0)) != DONE) {
                return done;
            }
            if (!accept(ps, ':')) {
                return PYTHON;
            }
        }
    }
}

/* A partition or timestamp: a non-negative integer of at most 18 digits (so below 2**63), or
 * null (-1). */
static enum outcome
read_count(struct parse *ps, int64_t *out)
{
    skip_ws(ps);
    const unsigned char *body = ps->body;
    Py_ssize_t p = ps->pos;
    if (p < ps->end && body[p] == 'n') {
        *out = -1;
        return read_literal(ps, "null", 4);
    }
    int64_t v = 0;
    Py_ssize_t start = p;
    while (p < ps->end && is_digit(body[p])) {
        if (p - start == 18) {
            return PYTHON; /* a 19th digit: checked before it is added, as v * 10 may overflow */
        }
        v = v * 10 + (body[p] - '0');
        p++;
    }
    if (p == start || (body[start] == '0' && p - start > 1) ||
        (p < ps->end && (body[p] == '.' || body[p] == 'e' || body[p] == 'E'))) {
        return PYTHON;
    }
    ps->pos = p;
    *out = v;
    return DONE;
}

/* A string, or null (a span of length -1). */
static enum outcome
read_text(struct parse *ps, struct span *out)
{
    skip_ws(ps);
    if (ps->pos < ps->end && ps->body[ps->pos] == 'n') {
        *out = (struct span){0, -1, 0};
        return read_literal(ps, "null", 4);
    }
    if (!at_string(ps)) {
        return PYTHON;
    }
    return read_string(ps, out, 1);
}

static int
same_text(const struct parse *ps, const struct span *a, const struct span *b)
{
    return a->len == b->len && memcmp(span_bytes(ps, a), span_bytes(ps, b), (size_t)a->len) == 0;
}

/* A record's headers: an object of strings or nulls, or null. A name given twice keeps its
 * first place and its last value, as a Python dict does. */
static enum outcome
read_headers(struct parse *ps, struct record *rec)
{
    enum outcome done;
    skip_ws(ps);
    if (ps->pos < ps->end && ps->body[ps->pos] == 'n') {
        return read_literal(ps, "null", 4);
    }
    if (!accept(ps, '{')) {
        return PYTHON;
    }
    if (accept(ps, '}')) {
        return DONE;
    }
    do {
        struct header h;
        if (!at_string(ps)) {
            return PYTHON;
        }
        if ((done = read_string(ps, &h.name, 1)) != DONE) {
            return done;
        }
        if (!accept(ps, ':')) {
            return PYTHON;
        }
        if ((done = read_text(ps, &h.value)) != DONE) {
            return done;
        }
        Py_ssize_t i = rec->header_first;
        Py_ssize_t last = rec->header_first + rec->header_count;
        while (i < last && !same_text(ps, &ps->headers[i].name, &h.name)) {
            i++;
        }
        if (i < last) {
            ps->headers[i].value = h.value;
            continue;
        }
        if (rec->header_count == MAX_HEADERS) {
            return PYTHON;
        }
        struct header *headers =
            reserve(ps->headers, &ps->headers_cap, ps->header_total, 1, sizeof(struct header));
        if (headers == NULL) {
            return FAILED;
        }
        ps->headers = headers;
        ps->headers[ps->header_total++] = h;
        rec->header_count++;
    } while (accept(ps, ','));
    return accept(ps, '}') ? DONE : PYTHON;
}

static Py_ssize_t
bytes_size(const struct span *s)
{
    return s->len < 0 ? 1 : varint_size(zigzag(s->len)) + s->len;
}

enum field { KEY, VALUE, HEADERS, PARTITION, TIMESTAMP, FIELDS };

static int
field_of(const struct parse *ps, const struct span *name)
{
    static const char *const names[FIELDS] = {"key", "value", "headers", "partition",
                                              "timestamp"};
    static const Py_ssize_t lengths[FIELDS] = {3, 5, 7, 9, 9};
    for (int f = 0; f < FIELDS; f++) {
        if (name->len == lengths[f] &&
            memcmp(span_bytes(ps, name), names[f], (size_t)name->len) == 0) {
            return f;
        }
    }
    return -1;
}

/* A key given as a JSON value (REST Proxy v2's json format), stored as its compact JSON text as
 * the Python path (orjson) writes it: the span of a string without escapes (quotes included),
 * of an integer of at most 18 digits (not -0), of true or false; null: no key. Anything else
 * (escapes, other numbers, objects, arrays) might be written differently: PYTHON. */
static enum outcome
read_json_key(struct parse *ps, struct span *out)
{
    enum outcome done;
    skip_ws(ps);
    if (ps->pos >= ps->end) {
        return PYTHON;
    }
    Py_ssize_t start = ps->pos;
    unsigned char c = ps->body[start];
    if (c == 'n') {
        *out = (struct span){0, -1, 0};
        return read_literal(ps, "null", 4);
    }
    if (c == '"') {
        struct span content;
        if ((done = read_string(ps, &content, 0)) != DONE) {
            return done;
        }
        if (memchr(ps->body + content.at, '\\', (size_t)content.len) != NULL) {
            return PYTHON;
        }
    }
    else if (c == '-' || is_digit(c)) {
        if ((done = read_number(ps)) != DONE) {
            return done;
        }
        Py_ssize_t digits = ps->pos - start - (c == '-');
        for (Py_ssize_t i = start + (c == '-'); i < ps->pos; i++) {
            if (!is_digit(ps->body[i])) {
                return PYTHON;
            }
        }
        if (digits > 18 || (c == '-' && ps->body[start + 1] == '0')) {
            return PYTHON;
        }
    }
    else if (c == 't') {
        done = read_literal(ps, "true", 4);
    }
    else if (c == 'f') {
        done = read_literal(ps, "false", 5);
    }
    else {
        return PYTHON;
    }
    if (c == 't' || c == 'f') {
        if (done != DONE) {
            return done;
        }
    }
    *out = (struct span){start, ps->pos - start, 0};
    return DONE;
}

/* One record object, appended to ps->records. */
static enum outcome
read_record(struct parse *ps)
{
    enum outcome done;
    if (!accept(ps, '{')) {
        return PYTHON;
    }
    struct record *records =
        reserve(ps->records, &ps->records_cap, ps->count, 1, sizeof(struct record));
    if (records == NULL) {
        return FAILED;
    }
    ps->records = records;
    struct record *rec = &ps->records[ps->count];
    *rec = (struct record){.key = {0, -1, 0},
                           .value = {0, -1, 0},
                           .timestamp = -1,
                           .partition = -1,
                           .header_first = ps->header_total};
    int seen = 0;
    if (!accept(ps, '}')) {
        do {
            struct span name;
            if (!at_string(ps)) {
                return PYTHON;
            }
            /* Not unescaped: a field name with escapes is left to Python. */
            if ((done = read_string(ps, &name, 0)) != DONE) {
                return done;
            }
            int field = field_of(ps, &name);
            if (field < 0 || seen & (1 << field) || !accept(ps, ':')) {
                return PYTHON;
            }
            seen |= 1 << field;
            if (ps->json_keys && (field == HEADERS || field == TIMESTAMP)) {
                return PYTHON; /* not v2 fields: Python's error */
            }
            switch (field) {
            case KEY:
                done = ps->json_keys ? read_json_key(ps, &rec->key) : read_text(ps, &rec->key);
                break;
            case VALUE: done = read_value(ps, 3, &rec->value); break;
            case HEADERS: done = read_headers(ps, rec); break;
            case PARTITION: done = read_count(ps, &rec->partition); break;
            default: done = read_count(ps, &rec->timestamp); break;
            }
            if (done != DONE) {
                return done;
            }
        } while (accept(ps, ','));
        if (!accept(ps, '}')) {
            return PYTHON;
        }
    }
    if (rec->value.len == 4 && memcmp(ps->body + rec->value.at, "null", 4) == 0) {
        rec->value.len = -1;
    }
    Py_ssize_t size = 1 + bytes_size(&rec->key) + bytes_size(&rec->value) +
                      varint_size(zigzag(rec->header_count));
    for (Py_ssize_t i = rec->header_first; i < rec->header_first + rec->header_count; i++) {
        size += bytes_size(&ps->headers[i].name) + bytes_size(&ps->headers[i].value);
    }
    rec->fixed_size = size;
    ps->count++;
    return DONE;
}

/* The whole body: {"records": [record, ...]} and nothing after but whitespace. */
static enum outcome
read_body(struct parse *ps)
{
    enum outcome done;
    struct span name;
    if (!accept(ps, '{') || !at_string(ps)) {
        return PYTHON;
    }
    if ((done = read_string(ps, &name, 0)) != DONE) {
        return done;
    }
    if (name.len != 7 || memcmp(ps->body + name.at, "records", 7) != 0 || !accept(ps, ':') ||
        !accept(ps, '[') || accept(ps, ']')) {
        return PYTHON; /* another field, or no records: Python's error */
    }
    do {
        if ((done = read_record(ps)) != DONE) {
            return done;
        }
    } while (accept(ps, ','));
    if (!accept(ps, ']') || !accept(ps, '}')) {
        return PYTHON;
    }
    skip_ws(ps);
    return ps->pos == ps->end ? DONE : PYTHON;
}

/* -- batches -------------------------------------------------------------------------------- */

struct batching {
    const struct parse *ps;
    int64_t now;             /* the timestamp of records that give none */
    int64_t max_batch_bytes; /* max.message.bytes */
    int transactional;       /* batches of a transaction: of this producer, at this epoch */
    int64_t producer_id;
    int16_t producer_epoch;
};

static unsigned char *
put_bytes(unsigned char *w, const struct parse *ps, const struct span *s)
{
    if (s->len < 0) {
        *w++ = 1; /* zigzag(-1) */
        return w;
    }
    w = put_varint(w, zigzag(s->len));
    memcpy(w, span_bytes(ps, s), (size_t)s->len);
    return w + s->len;
}

static void
finish_batch(const struct batching *b, unsigned char *batch, Py_ssize_t size, int32_t count,
             int64_t first_timestamp, int64_t max_timestamp)
{
    put_be(batch, 0, 8);                                  /* base offset: the log's */
    put_be(batch + 8, (uint64_t)(size - LOG_OVERHEAD), 4);
    put_be(batch + 12, UINT32_MAX, 4);                    /* leader epoch: the log's */
    batch[16] = MAGIC;
    put_be(batch + ATTRIBUTES_AT,
           VALUES_JSON_MASK | (b->transactional ? TRANSACTIONAL_MASK : 0), 2);
    put_be(batch + 23, (uint64_t)(count - 1), 4);         /* last offset delta */
    put_be(batch + 27, (uint64_t)first_timestamp, 8);
    put_be(batch + 35, (uint64_t)max_timestamp, 8);
    /* producer id and epoch: -1 outside a transaction */
    put_be(batch + 43, b->transactional ? (uint64_t)b->producer_id : UINT64_MAX, 8);
    put_be(batch + 51, b->transactional ? (uint16_t)b->producer_epoch : UINT16_MAX, 2);
    put_be(batch + 53, UINT32_MAX, 4);                    /* base sequence -1 */
    put_be(batch + 57, (uint64_t)count, 4);
    put_be(batch + CRC_AT,
           crc32c(batch + ATTRIBUTES_AT, (size_t)(size - ATTRIBUTES_AT)), 4);
}

/* The records at `order[0..n)` (indexes into ps->records) as batches, the way
 * engine.batch.encode_batches builds them with aiokafka: a record joins the open batch unless
 * that would bring the batch to max.message.bytes or more (the first record of a batch always
 * joins). With `out` NULL, only sizes: the bytes needed, or -1 when a record is too large for a
 * batch of its own (Python names it). With `out`, the batches written there. */
static Py_ssize_t
encode_group(const struct batching *b, const uint32_t *order, Py_ssize_t n, unsigned char *out)
{
    const struct parse *ps = b->ps;
    Py_ssize_t pos = 0, batch_start = 0;
    int32_t count = 0;
    int64_t first_timestamp = 0, max_timestamp = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const struct record *rec = &ps->records[order[i]];
        int64_t timestamp = rec->timestamp >= 0 ? rec->timestamp : b->now;
        int64_t delta = count ? timestamp - first_timestamp : 0;
        Py_ssize_t body = rec->fixed_size + varint_size(zigzag(delta)) + varint_size(zigzag(count));
        Py_ssize_t size = body + varint_size(zigzag(body));
        if (count && pos - batch_start + size >= b->max_batch_bytes) {
            if (out != NULL) {
                finish_batch(b, out + batch_start, pos - batch_start, count, first_timestamp,
                             max_timestamp);
            }
            batch_start = pos;
            count = 0;
            delta = 0;
            body = rec->fixed_size + 2; /* one byte each for delta 0 and offset 0 */
            size = body + varint_size(zigzag(body));
        }
        if (count == 0) {
            pos += HEADER_SIZE;
            first_timestamp = max_timestamp = timestamp;
        }
        if (out != NULL) {
            unsigned char *w = out + pos;
            w = put_varint(w, zigzag(body));
            *w++ = 0; /* attributes */
            w = put_varint(w, zigzag(delta));
            w = put_varint(w, zigzag(count));
            w = put_bytes(w, ps, &rec->key);
            w = put_bytes(w, ps, &rec->value);
            w = put_varint(w, zigzag(rec->header_count));
            for (Py_ssize_t h = rec->header_first; h < rec->header_first + rec->header_count;
                 h++) {
                w = put_bytes(w, ps, &ps->headers[h].name);
                w = put_bytes(w, ps, &ps->headers[h].value);
            }
        }
        pos += size;
        count++;
        if (timestamp > max_timestamp) {
            max_timestamp = timestamp;
        }
        if (count == 1 && pos - batch_start > b->max_batch_bytes) {
            return -1;
        }
    }
    if (out != NULL) {
        finish_batch(b, out + batch_start, pos - batch_start, count, first_timestamp,
                     max_timestamp);
    }
    return pos;
}

/* Each partition's batches, in partition order: a list of (partition, bytearray, count); None
 * if a record is too large for a batch of its own. `keys` are (partition << 32 | record index),
 * sorted. */
static PyObject *
encode_partitions(const struct batching *b, const uint64_t *keys, Py_ssize_t n)
{
    PyObject *result = NULL;
    uint32_t *order = PyMem_Malloc((size_t)n * sizeof(uint32_t));
    if (order == NULL) {
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        order[i] = (uint32_t)keys[i];
    }
    PyObject *groups = PyList_New(0);
    if (groups == NULL) {
        goto done;
    }
    for (Py_ssize_t first = 0, last; first < n; first = last) {
        uint32_t partition = (uint32_t)(keys[first] >> 32);
        for (last = first + 1; last < n && (uint32_t)(keys[last] >> 32) == partition; last++) {
        }
        Py_ssize_t size = encode_group(b, order + first, last - first, NULL);
        if (size < 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        PyObject *data = PyByteArray_FromStringAndSize(NULL, size);
        if (data == NULL) {
            goto done;
        }
        encode_group(b, order + first, last - first, (unsigned char *)PyByteArray_AS_STRING(data));
        PyObject *group = Py_BuildValue("(INn)", partition, data, last - first);
        if (group == NULL) {
            goto done;
        }
        int failed = PyList_Append(groups, group);
        Py_DECREF(group);
        if (failed) {
            goto done;
        }
    }
    result = Py_NewRef(groups);
done:
    Py_XDECREF(groups);
    PyMem_Free(order);
    return result;
}

static int
compare_keys(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The partition of every record, as Producer._group_json chooses it, then the batches.
 * `keyless` is called (once) exactly when the Python path would call it: the body is valid,
 * the URL names no partition and every record's partition exists. */
static PyObject *
build(struct parse *ps, Py_ssize_t partitions, Py_ssize_t url_partition, PyObject *keyless,
      int compact, const struct batching *b)
{
    Py_ssize_t n = ps->count;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = ps->records[i].partition;
        if (p >= 0 && (url_partition >= 0 ? p != url_partition : p >= partitions)) {
            Py_RETURN_NONE;
        }
    }
    int64_t keyless_partition = url_partition;
    if (url_partition < 0) {
        PyObject *chosen = PyObject_CallNoArgs(keyless);
        if (chosen == NULL) {
            return NULL;
        }
        keyless_partition = PyLong_AsLongLong(chosen);
        Py_DECREF(chosen);
        if (keyless_partition == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (keyless_partition < 0 || keyless_partition >= partitions) {
            PyErr_SetString(PyExc_ValueError, "keyless() chose a partition out of range");
            return NULL;
        }
    }
    uint64_t *keys = PyMem_Malloc((size_t)n * sizeof(uint64_t));
    if (keys == NULL) {
        return PyErr_NoMemory();
    }
    int sorted = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const struct record *rec = &ps->records[i];
        if (compact && rec->key.len < 0) {
            PyMem_Free(keys);
            Py_RETURN_NONE; /* Python refuses it */
        }
        int64_t p = keyless_partition;
        if (url_partition < 0) {
            if (rec->partition >= 0) {
                p = rec->partition;
            }
            else if (rec->key.len >= 0) {
                p = (int64_t)((murmur2(span_bytes(ps, &rec->key), rec->key.len) & 0x7fffffffu) %
                              (uint64_t)partitions);
            }
        }
        keys[i] = (uint64_t)p << 32 | (uint64_t)i;
        sorted &= i == 0 || keys[i] > keys[i - 1];
    }
    PyObject *owners = NULL;
    if (ps->json_keys) { /* each record's partition, in request order (for v2's answer) */
        owners = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint32_t));
        if (owners == NULL) {
            PyMem_Free(keys);
            return NULL;
        }
        uint32_t *each = (uint32_t *)PyBytes_AS_STRING(owners);
        for (Py_ssize_t i = 0; i < n; i++) {
            each[i] = (uint32_t)(keys[i] >> 32);
        }
    }
    if (!sorted) {
        qsort(keys, (size_t)n, sizeof(uint64_t), compare_keys);
    }
    PyObject *result = encode_partitions(b, keys, n);
    PyMem_Free(keys);
    if (owners == NULL || result == NULL || result == Py_None) {
        Py_XDECREF(owners);
        return result;
    }
    return Py_BuildValue("(NN)", result, owners);
}

PyDoc_STRVAR(json_batches_doc,
"json_batches(body, partitions, url_partition, keyless, max_batch_bytes, now, compact,\n"
"             producer=None, /)\n"
"--\n\n"
"A JSON produce body of the common shape -> [(partition, batches, record count)], in\n"
"partition order: what Producer._build makes of it without the Idempotency-Key. keyless()\n"
"gives the partition of key-less records (called at most once). producer: (producer id,\n"
"epoch) of the transaction the batches are written in; they are built as\n"
"engine.batch.set_producers would stamp them. None when the body is not one this path\n"
"covers, or is refused: take the Python path, which gives the error.");

static PyObject *
batches_of(PyObject *const *args, Py_ssize_t nargs, int json_keys)
{
    if (nargs != 7 && nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "json_batches takes 7 or 8 positional arguments");
        return NULL;
    }
    Py_ssize_t partitions = PyLong_AsSsize_t(args[1]);
    if (partitions == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t url_partition = -1;
    if (args[2] != Py_None) {
        url_partition = PyLong_AsSsize_t(args[2]);
        if (url_partition == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    struct batching b = {.ps = NULL};
    if ((b.max_batch_bytes = PyLong_AsLongLong(args[4])) == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if ((b.now = PyLong_AsLongLong(args[5])) == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int compact = PyObject_IsTrue(args[6]);
    if (compact < 0) {
        return NULL;
    }
    if (nargs == 8 && args[7] != Py_None) {
        long long producer_id;
        int epoch;
        if (!PyTuple_Check(args[7])) {
            PyErr_SetString(PyExc_TypeError, "json_batches: producer must be a tuple or None");
            return NULL;
        }
        if (!PyArg_ParseTuple(args[7], "Li", &producer_id, &epoch)) {
            return NULL;
        }
        if (producer_id < 0 || epoch < 0 || epoch > INT16_MAX) {
            PyErr_SetString(PyExc_ValueError, "json_batches: producer id or epoch out of range");
            return NULL;
        }
        b.transactional = 1;
        b.producer_id = producer_id;
        b.producer_epoch = (int16_t)epoch;
    }
    if (partitions < 1 || partitions > INT32_MAX || url_partition >= partitions ||
        (args[2] != Py_None && url_partition < 0) || b.now < 0) {
        PyErr_SetString(PyExc_ValueError, "json_batches: partitions, url_partition or now");
        return NULL;
    }
    if (!PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "keyless must be callable");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (view.len > MAX_BODY || b.max_batch_bytes > INT32_MAX) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    struct parse ps = {.body = view.buf, .end = view.len, .json_keys = json_keys};
    b.ps = &ps;
    PyObject *result;
    switch (read_body(&ps)) {
    case DONE:
        result = build(&ps, partitions, url_partition, args[3], compact, &b);
        break;
    case PYTHON:
        result = Py_NewRef(Py_None);
        break;
    default:
        result = NULL;
    }
    parse_free(&ps);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
json_batches(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    return batches_of(args, nargs, 0);
}

PyDoc_STRVAR(v2_json_batches_doc,
"v2_json_batches(body, partitions, url_partition, keyless, max_batch_bytes, now, compact, /)\n"
"--\n\n"
"json_batches for a REST Proxy v2 json-format body ({\"records\": [{key, value, partition}]},\n"
"keys any JSON value, stored as their compact JSON text): ([(partition, batches, record\n"
"count)], each record's partition as native uint32s in request order). None: not the common\n"
"shape (escaped or non-integer keys, other fields), or refused: take the general path.");

static PyObject *
v2_json_batches(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    return batches_of(args, nargs, 1);
}

/* A non-negative integer's decimal digits at w; the position after them. */
static char *
put_decimal(char *w, uint64_t v)
{
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) {
        *w++ = digits[--n];
    }
    return w;
}

PyDoc_STRVAR(v2_offsets_doc,
"v2_offsets(owners, bases, /)\n"
"--\n\n"
"REST Proxy v2's produce answer: each record's partition (owners: native uint32s, request\n"
"order, as v2_json_batches gives them) and offset, counted up from its partition's base offset\n"
"(bases: {partition: base offset}), with null schema ids and errors; what orjson writes of\n"
"the same document. None if a partition has no base offset (it refused the records).");

static PyObject *
v2_offsets(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "v2_offsets(owners: bytes, bases: dict)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = view.len / (Py_ssize_t)sizeof(uint32_t);
    Py_ssize_t known = PyDict_GET_SIZE(args[1]);
    uint32_t *partitions = PyMem_Malloc((size_t)(known ? known : 1) * sizeof(uint32_t));
    int64_t *next = PyMem_Malloc((size_t)(known ? known : 1) * sizeof(int64_t));
    /* 61 bytes per entry at most besides the two numbers (10 and 19 digits) */
    char *out = PyMem_Malloc((size_t)(64 + n * 96));
    if (partitions == NULL || next == NULL || out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *name, *value;
    Py_ssize_t at = 0, i = 0;
    while (PyDict_Next(args[1], &at, &name, &value)) {
        long long p = PyLong_AsLongLong(name), base = PyLong_AsLongLong(value);
        if (PyErr_Occurred()) {
            goto done;
        }
        if (p < 0 || p > UINT32_MAX || base < 0) {
            PyErr_SetString(PyExc_ValueError, "v2_offsets: partitions and offsets are >= 0");
            goto done;
        }
        partitions[i] = (uint32_t)p;
        next[i++] = base;
    }
    static const char head[] = "{\"key_schema_id\":null,\"value_schema_id\":null,\"offsets\":[";
    char *w = out;
    memcpy(w, head, sizeof(head) - 1);
    w += sizeof(head) - 1;
    const uint32_t *owners = view.buf;
    Py_ssize_t last = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        uint32_t p;
        memcpy(&p, owners + r, sizeof(p));
        if (last >= known || partitions[last] != p) {
            for (last = 0; last < known && partitions[last] != p; last++) {
            }
            if (last == known) {
                result = Py_NewRef(Py_None);
                goto done;
            }
        }
        if (r) {
            *w++ = ',';
        }
        memcpy(w, "{\"partition\":", 13);
        w = put_decimal(w + 13, p);
        memcpy(w, ",\"offset\":", 10);
        w = put_decimal(w + 10, (uint64_t)next[last]++);
        memcpy(w, ",\"error_code\":null,\"error\":null}", 32);
        w += 32;
    }
    *w++ = ']';
    *w++ = '}';
    result = PyBytes_FromStringAndSize(out, w - out);
done:
    PyMem_Free(partitions);
    PyMem_Free(next);
    PyMem_Free(out);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"v2_offsets", (PyCFunction)(void (*)(void))v2_offsets, METH_FASTCALL, v2_offsets_doc},
    {"json_batches", (PyCFunction)(void (*)(void))json_batches, METH_FASTCALL, json_batches_doc},
    {"v2_json_batches", (PyCFunction)(void (*)(void))v2_json_batches, METH_FASTCALL,
     v2_json_batches_doc},
    {NULL, NULL, 0, NULL},
};

static int
module_exec(PyObject *module)
{
    (void)module;
    crc32c_setup();
    return 0;
}

/* No Py_mod_multiple_interpreters slot: the CRC tables are process-wide, so interpreters
 * with a GIL of their own do not load this module. */
static struct PyModuleDef_Slot slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gateway.formats._producejson",
    .m_doc = "A JSON produce body of the common shape -> Kafka RecordBatch v2 bytes, in C.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__producejson(void)
{
    return PyModuleDef_Init(&module_def);
}

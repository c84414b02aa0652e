/*
 * One uncompressed, JSON-valued Kafka RecordBatch v2 -> the JSON objects a fetch answers, in C.
 *
 * The fetch hot path (DESIGN.md §1, §8): decoding each record with aiokafka and building a
 * Python object per field cost most of a JSON fetch. This reads the records' varints straight
 * from the batch and writes each record's JSON text, wrapped in msgspec.Raw so the encoders
 * embed it as is. It covers the common shape only: values flagged as JSON, no record headers
 * (except the idempotency key Sluice puts on an idempotent batch's first record), keys that are
 * null or UTF-8. For anything else, including anything malformed, it returns None and the
 * caller decodes the batch in Python, which is the reference: for the batches this accepts the
 * output is byte for byte the same (tests/gateway/test_fetchjson.py checks it on arbitrary
 * and damaged batches).
 *
 * The same records in REST Proxy v2's shapes (json: keys and values as JSON; binary: base64; a
 * timestamp, as Karapace gives it; no headers) are what codecs.rest_proxy_records writes in Python
 * (tests/gateway/test_rest_proxy_codecs.py).
 *
 * A share group's acquire answers records as a fetch does, each closed by its delivery: the
 * delivery count, the lock's deadline and the token, the same for consecutive records but for
 * the offset in the token (share_json; gateway/formats/share_records.py is the Python path,
 * tests/gateway/test_share_json.py compares them).
 *
 * Every read is bounds-checked against the buffer, and within a record against its length.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_records.h"

#define LOG_APPEND_TIME_MASK 0x08
#define IDEMPOTENT_MASK 0x2000
#define VALUES_JSON_MASK 0x4000

static const char IDEMPOTENCY_HEADER[] = "sluice-idempotency-key";
#define IDEMPOTENCY_HEADER_LEN ((Py_ssize_t)(sizeof(IDEMPOTENCY_HEADER) - 1))

/* What a record's fixed parts may add around its prefix, key and value: the field names, two
 * 20-digit integers with signs, "null" twice and the closing braces, rounded up. */
#define RECORD_OVERHEAD 128
#define LAST_OFFSET_DELTA_AT 23

/* The record's headers: 0 if the caller may go on (see the mode), -1 to leave the batch to
 * Python. Skipped records (below the fetch offset) may hold any header whose name decodes; the
 * first emitted record of an idempotent batch may hold only the idempotency key; others none. */
enum header_mode { HEADERS_SKIPPED, HEADERS_IDEMPOTENCY_ONLY, HEADERS_NONE };

static int
check_headers(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t count,
              enum header_mode mode)
{
    if (mode == HEADERS_SKIPPED) {
        return skip_headers(buf, end, pos, count);
    }
    if (count < 0 || (count > 0 && mode == HEADERS_NONE)) {
        return -1;
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t name_len, value_len;
        Py_ssize_t name_at, value_at;
        if (read_bytes(buf, end, pos, &name_len, &name_at) < 0 ||
            name_len != IDEMPOTENCY_HEADER_LEN ||
            memcmp(buf + name_at, IDEMPOTENCY_HEADER, IDEMPOTENCY_HEADER_LEN) != 0 ||
            read_bytes(buf, end, pos, &value_len, &value_at) < 0) {
            return -1;
        }
    }
    return 0;
}

static char *
write_literal(char *w, const char *s)
{
    size_t n = strlen(s);
    memcpy(w, s, n);
    return w + n;
}

/* An integer's decimal text, kept from one record to the next: a batch's records mostly share
 * a timestamp, and their offsets count up by one. */
struct int_text {
    int valid;
    int len;
    int64_t value;
    char text[20]; /* "-9223372036854775808" */
};

static char *
write_int(char *w, struct int_text *t, int64_t v)
{
    if (!t->valid || v != t->value) {
        if (t->valid && t->value >= 0 && t->value < INT64_MAX && v == t->value + 1) {
            int i = t->len - 1;
            while (i >= 0 && t->text[i] == '9') {
                t->text[i--] = '0';
            }
            if (i >= 0) {
                t->text[i]++;
            }
            else { /* 99 -> 100: at most 19 digits become 20 characters */
                memmove(t->text + 1, t->text, (size_t)t->len);
                t->text[0] = '1';
                t->len++;
            }
        }
        else {
            char digits[20];
            int n = 0, len = 0;
            uint64_t u = (uint64_t)v;
            if (v < 0) {
                t->text[len++] = '-';
                u = (uint64_t)0 - u;
            }
            do {
                digits[n++] = (char)('0' + u % 10);
                u /= 10;
            } while (u);
            while (n) {
                t->text[len++] = digits[--n];
            }
            t->len = len;
        }
        t->value = v;
        t->valid = 1;
    }
    memcpy(w, t->text, (size_t)t->len);
    return w + t->len;
}

/* A JSON string, escaped as msgspec escapes it: quote, backslash and control characters;
 * everything else (DEL and non-ASCII UTF-8 included) as is. At most 6 bytes per input byte. */
static char *
write_string(char *w, const unsigned char *s, Py_ssize_t n)
{
    static const char hex[] = "0123456789abcdef";
    *w++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *w++ = (char)c;
            continue;
        }
        *w++ = '\\';
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '\b': *w++ = 'b'; break;
        case '\t': *w++ = 't'; break;
        case '\n': *w++ = 'n'; break;
        case '\f': *w++ = 'f'; break;
        case '\r': *w++ = 'r'; break;
        default:
            *w++ = 'u';
            *w++ = '0';
            *w++ = '0';
            *w++ = hex[c >> 4];
            *w++ = hex[c & 0xf];
        }
    }
    *w++ = '"';
    return w;
}

enum outcome { DONE, PYTHON, FAILED };

/* What a record's JSON looks like: Sluice's /v1 (offset, timestamp, key as text, value, headers),
 * or REST Proxy v2's records (offset, key, value: json, keys and values as JSON; binary, both
 * base64), each after the caller's prefix (which names topic and partition for v2); or /v1's
 * closed by a share group's delivery (`struct delivery`). batch_json takes the first three. */
enum shape { SHAPE_V1, SHAPE_V2_JSON, SHAPE_V2_BINARY, SHAPE_SHARE };
#define FETCH_SHAPES SHAPE_SHARE

/* What closes each record of a share group's delivery after its headers: `middle` (the delivery
 * count, the lock's deadline and the token up to its offset), the record's offset, `tail`. */
struct delivery {
    const char *middle;
    Py_ssize_t middle_len;
    const char *tail;
    Py_ssize_t tail_len;
};

/* How v2's json format writes a key, as the Python path decides it (orjson.loads succeeds: the
 * key as it is; else the key as a JSON string): 1 as it is, 0 as a string, -1 unsure (Python).
 * Sure here: a string token without escapes, a plain integer, true/false/null; and a key whose
 * first byte cannot start JSON. The key is valid UTF-8 already. */
static int
json_key_kind(const unsigned char *k, Py_ssize_t n)
{
    if (n == 0) {
        return 0;
    }
    unsigned char c = k[0];
    if (c == '"') {
        if (n < 2 || k[n - 1] != '"') {
            return -1;
        }
        for (Py_ssize_t i = 1; i < n - 1; i++) {
            if (k[i] < 0x20 || k[i] == '"' || k[i] == '\\') {
                return -1;
            }
        }
        return 1;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        Py_ssize_t i = c == '-';
        if (i >= n || n - i > 18 || (k[i] == '0' && n - i > 1)) {
            return -1;
        }
        for (; i < n; i++) {
            if (k[i] < '0' || k[i] > '9') {
                return -1;
            }
        }
        return 1;
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int w = 0; w < 3; w++) {
        Py_ssize_t len = (Py_ssize_t)strlen(words[w]);
        if (c == words[w][0]) {
            if (n == len && memcmp(k, words[w], (size_t)len) == 0) {
                return 1;
            }
            return n >= len && memcmp(k, words[w], (size_t)len) == 0 ? -1 : 0;
        }
    }
    if (c == '{' || c == '[' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        return -1;
    }
    return 0;
}

/* Standard base64 with padding, as Python's base64.b64encode writes it, in quotes. */
static char *
write_base64(char *w, const unsigned char *s, Py_ssize_t n)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    *w++ = '"';
    Py_ssize_t i = 0;
    for (; n - i >= 3; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *w++ = alphabet[v >> 18];
        *w++ = alphabet[(v >> 12) & 63];
        *w++ = alphabet[(v >> 6) & 63];
        *w++ = alphabet[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        *w++ = alphabet[v >> 18];
        *w++ = alphabet[(v >> 12) & 63];
        *w++ = '=';
        *w++ = '=';
    }
    else if (n - i == 2) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
        *w++ = alphabet[v >> 18];
        *w++ = alphabet[(v >> 12) & 63];
        *w++ = alphabet[(v >> 6) & 63];
        *w++ = '=';
    }
    *w++ = '"';
    return w;
}

struct scratch {
    char *data;
    Py_ssize_t size;
};

/* Append the records' JSON to `records`: DONE, PYTHON (leave the batch to Python; the list is
 * then discarded) or FAILED (a Python exception is set). */
/* `budget`: the key and value bytes the records may take (negative: no bound); a record that
 * would go over it ends the batch, unless it is the first and `first_free`. What they took is
 * added to `*spent`. The walk starts at record `index`, at byte `pos` (0 and HEADER_SIZE: the
 * first). Each record is raw(bytes), or the bytes if raw is NULL. `delivery`: SHAPE_SHARE's. */
static enum outcome
encode_records(const unsigned char *buf, Py_ssize_t end, int64_t start, Py_ssize_t limit,
               const char *prefix, Py_ssize_t prefix_len, PyObject *raw, PyObject *records,
               struct scratch *scratch, int64_t *last_offset, enum shape shape,
               int64_t budget, int first_free, int64_t *spent, int32_t index, Py_ssize_t pos,
               const struct delivery *delivery)
{
    if (end < HEADER_SIZE) {
        return PYTHON;
    }
    int attributes = be_i16(buf + ATTRIBUTES_AT);
    if ((attributes & COMPRESSION_MASK) ||
        (shape != SHAPE_V2_BINARY && !(attributes & VALUES_JSON_MASK))) {
        return PYTHON;
    }
    int64_t base_offset = be_i64(buf);
    int64_t first_timestamp = be_i64(buf + FIRST_TIMESTAMP_AT);
    int64_t max_timestamp = be_i64(buf + MAX_TIMESTAMP_AT);
    int32_t count = be_i32(buf + RECORD_COUNT_AT);
    int log_append_time = attributes & LOG_APPEND_TIME_MASK;
    int idempotent = attributes & IDEMPOTENT_MASK;
    if (count < 0) {
        return PYTHON;
    }
    struct int_text offset_text = {0}, timestamp_text = {0};
    int v2 = shape == SHAPE_V2_JSON || shape == SHAPE_V2_BINARY;
    for (int32_t i = index; i < count && PyList_GET_SIZE(records) < limit; i++) {
        int64_t length, attrs, timestamp_delta, offset_delta, key_len, value_len, headers;
        Py_ssize_t key_at, value_at;
        if (read_varint32(buf, end, &pos, &length) < 0 || length < 0 || length > end - pos) {
            return PYTHON;
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        if (read_varint32(buf, record_end, &pos, &attrs) < 0 || attrs != 0 ||
            read_varint(buf, record_end, &pos, 10, &timestamp_delta) < 0 ||
            read_varint32(buf, record_end, &pos, &offset_delta) < 0 ||
            read_bytes(buf, record_end, &pos, &key_len, &key_at) < 0 ||
            read_bytes(buf, record_end, &pos, &value_len, &value_at) < 0 ||
            read_varint32(buf, record_end, &pos, &headers) < 0) {
            return PYTHON;
        }
        int64_t offset;
        if (__builtin_add_overflow(base_offset, offset_delta, &offset) || offset == INT64_MAX) {
            return PYTHON; /* the next offset would not fit in 64 bits */
        }
        int emit = offset >= start;
        /* v2 shows no headers: any that decode are passed over. */
        enum header_mode mode = !emit || v2                ? HEADERS_SKIPPED
                                : idempotent              ? HEADERS_IDEMPOTENCY_ONLY
                                                          : HEADERS_NONE;
        if (check_headers(buf, record_end, &pos, headers, mode) < 0 || pos != record_end) {
            return PYTHON;
        }
        if (!emit) {
            continue;
        }
        if (delivery != NULL && offset != start + PyList_GET_SIZE(records)) {
            return PYTHON; /* a delivery's records are at consecutive offsets */
        }
        int64_t size = (key_len > 0 ? key_len : 0) + (value_len > 0 ? value_len : 0);
        if (budget >= 0 && *spent + size > budget &&
            !(first_free && PyList_GET_SIZE(records) == 0)) {
            return DONE; /* the records so far; the rest waits for the next read */
        }
        *spent += size;
        idempotent = 0; /* only the first record emitted carries the key */
        int64_t timestamp = max_timestamp;
        if (!log_append_time &&
            __builtin_add_overflow(first_timestamp, timestamp_delta, &timestamp)) {
            return PYTHON;
        }
        if (shape != SHAPE_V2_BINARY && key_len > 0 &&
            !valid_utf8((const char *)buf + key_at, (Py_ssize_t)key_len)) {
            return PYTHON;
        }
        int key_kind = 0;
        if (shape == SHAPE_V2_JSON && key_len >= 0) {
            key_kind = json_key_kind(buf + key_at, (Py_ssize_t)key_len);
            if (key_kind < 0) {
                return PYTHON;
            }
        }
        /* base64 takes 4 bytes per 3 (plus padding), within twice the size */
        Py_ssize_t need = prefix_len + RECORD_OVERHEAD + 6 * (key_len > 0 ? key_len : 0) +
                          2 * (value_len > 0 ? value_len : 0) +
                          (delivery ? delivery->middle_len + delivery->tail_len : 0);
        if (need > scratch->size) {
            char *grown = PyMem_Realloc(scratch->data, (size_t)need);
            if (grown == NULL) {
                PyErr_NoMemory();
                return FAILED;
            }
            scratch->data = grown;
            scratch->size = need;
        }
        char *w = scratch->data;
        memcpy(w, prefix, (size_t)prefix_len);
        w += prefix_len;
        if (v2) {
            w = write_literal(w, "\"offset\":");
            w = write_int(w, &offset_text, offset);
            w = write_literal(w, ",\"timestamp\":");
            w = write_int(w, &timestamp_text, timestamp);
            w = write_literal(w, ",\"key\":");
            if (key_len < 0) {
                w = write_literal(w, "null");
            }
            else if (shape == SHAPE_V2_BINARY) {
                w = write_base64(w, buf + key_at, (Py_ssize_t)key_len);
            }
            else if (key_kind) {
                memcpy(w, buf + key_at, (size_t)key_len);
                w += key_len;
            }
            else {
                w = write_string(w, buf + key_at, (Py_ssize_t)key_len);
            }
            w = write_literal(w, ",\"value\":");
            if (value_len < 0) {
                w = write_literal(w, "null");
            }
            else if (shape == SHAPE_V2_BINARY) {
                w = write_base64(w, buf + value_at, (Py_ssize_t)value_len);
            }
            else {
                memcpy(w, buf + value_at, (size_t)value_len);
                w += value_len;
            }
            *w++ = '}';
            goto emitted;
        }
        w = write_literal(w, "\"offset\":");
        w = write_int(w, &offset_text, offset);
        w = write_literal(w, ",\"timestamp\":");
        w = write_int(w, &timestamp_text, timestamp);
        w = write_literal(w, ",\"key\":");
        if (key_len < 0) {
            w = write_literal(w, "null");
        }
        else {
            w = write_string(w, buf + key_at, (Py_ssize_t)key_len);
        }
        w = write_literal(w, ",\"value\":");
        if (value_len < 0) {
            w = write_literal(w, "null");
        }
        else {
            memcpy(w, buf + value_at, (size_t)value_len);
            w += value_len;
        }
        if (delivery != NULL) {
            w = write_literal(w, ",\"headers\":{}");
            memcpy(w, delivery->middle, (size_t)delivery->middle_len);
            w = write_int(w + delivery->middle_len, &offset_text, offset);
            memcpy(w, delivery->tail, (size_t)delivery->tail_len);
            w += delivery->tail_len;
        }
        else {
            w = write_literal(w, ",\"headers\":{}}");
        }
    emitted:;
        PyObject *text = PyBytes_FromStringAndSize(scratch->data, w - scratch->data);
        if (text == NULL) {
            return FAILED;
        }
        PyObject *item = text;
        if (raw != NULL) {
            item = PyObject_CallOneArg(raw, text);
            Py_DECREF(text);
            if (item == NULL) {
                return FAILED;
            }
        }
        int failed = PyList_Append(records, item);
        Py_DECREF(item);
        if (failed) {
            return FAILED;
        }
        *last_offset = offset;
    }
    /* Every record read without reaching the limit: like aiokafka's iterator, refuse a batch
     * whose records leave bytes over. */
    if (PyList_GET_SIZE(records) < limit && pos != end) {
        return PYTHON;
    }
    return DONE;
}

PyDoc_STRVAR(batch_json_doc,
"batch_json(batch, start, limit, prefix, raw, shape=0, budget=-1, first_free=0, /)\n"
"--\n\n"
"The JSON objects of one batch's records at offsets >= start (at most limit), each as\n"
"raw(bytes) and opened with prefix, and the offset after the last: (records, next_offset),\n"
"next_offset being start if there is none. None when the batch is not one this path covers\n"
"or is malformed: decode it in Python. shape: 0 Sluice's /v1 records, 1 REST Proxy v2's json\n"
"format, 2 its binary format (see enum shape). With a budget (>= 0), the records' key and\n"
"value bytes stay within it (the first may exceed it if first_free), and the answer is\n"
"(records, next_offset, bytes they took).");

static PyObject *
batch_json(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs < 5 || nargs > 8) {
        PyErr_SetString(PyExc_TypeError, "batch_json takes 5 to 8 positional arguments");
        return NULL;
    }
    long shape = nargs >= 6 ? PyLong_AsLong(args[5]) : SHAPE_V1;
    if (shape == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long budget = nargs >= 7 ? PyLong_AsLongLong(args[6]) : -1;
    if (budget == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int first_free = nargs == 8 ? PyObject_IsTrue(args[7]) : 0;
    if (first_free < 0) {
        return NULL;
    }
    if (shape < 0 || shape >= FETCH_SHAPES) {
        PyErr_SetString(PyExc_ValueError, "batch_json: shape must be 0 (v1), 1 or 2 (v2)");
        return NULL;
    }
    if (!PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "prefix must be bytes");
        return NULL;
    }
    long long start = PyLong_AsLongLong(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *records = PyList_New(0);
    if (records == NULL) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(records);
        return NULL;
    }
    struct scratch scratch = {NULL, 0};
    int64_t last_offset = 0, spent = 0;
    enum outcome outcome = encode_records(
        (const unsigned char *)view.buf, view.len, start, limit, PyBytes_AS_STRING(args[3]),
        PyBytes_GET_SIZE(args[3]), args[4], records, &scratch, &last_offset,
        (enum shape)shape, budget, first_free, &spent, 0, HEADER_SIZE, NULL);
    PyMem_Free(scratch.data);
    PyBuffer_Release(&view);
    if (outcome != DONE) {
        Py_DECREF(records);
        if (outcome == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    long long next_offset = PyList_GET_SIZE(records) ? last_offset + 1 : start;
    if (budget >= 0) {
        return Py_BuildValue("(NLL)", records, next_offset, (long long)spent);
    }
    return Py_BuildValue("(NL)", records, next_offset);
}

PyDoc_STRVAR(share_json_doc,
"share_json(batch, first, count, prefix, middle, tail, /)\n"
"--\n\n"
"The JSON objects of `count` records of one batch from offset `first` on, consecutive\n"
"offsets (a share group's delivery), each opened with prefix and closed, after its headers,\n"
"with middle, its offset and tail: a list of bytes. None when the batch is not one this path\n"
"covers, is malformed or has fewer: decode it in Python. In a batch without gaps the records\n"
"before `first` are passed over by their lengths alone.");

static PyObject *
share_json(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "share_json takes 6 positional arguments");
        return NULL;
    }
    if (!PyBytes_Check(args[3]) || !PyBytes_Check(args[4]) || !PyBytes_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "prefix, middle and tail must be bytes");
        return NULL;
    }
    long long first = PyLong_AsLongLong(args[1]);
    if (first == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len;
    int32_t index = 0;
    Py_ssize_t pos = HEADER_SIZE;
    if (end >= HEADER_SIZE) {
        int64_t base_offset = be_i64(buf);
        int32_t records_in = be_i32(buf + RECORD_COUNT_AT);
        if (records_in > 0 && be_i32(buf + LAST_OFFSET_DELTA_AT) == records_in - 1 &&
            first > base_offset && first - base_offset < records_in) {
            /* No gaps: record i is at offset base + i, so only the lengths are read. */
            for (; index < first - base_offset; index++) {
                int64_t length;
                if (read_varint32(buf, end, &pos, &length) < 0 || length < 0 ||
                    length > end - pos) {
                    PyBuffer_Release(&view);
                    Py_RETURN_NONE;
                }
                pos += (Py_ssize_t)length;
            }
        }
    }
    PyObject *records = PyList_New(0);
    if (records == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    struct delivery delivery = {
        PyBytes_AS_STRING(args[4]), PyBytes_GET_SIZE(args[4]),
        PyBytes_AS_STRING(args[5]), PyBytes_GET_SIZE(args[5]),
    };
    struct scratch scratch = {NULL, 0};
    int64_t last_offset = 0, spent = 0;
    enum outcome outcome = encode_records(
        buf, end, first, count, PyBytes_AS_STRING(args[3]), PyBytes_GET_SIZE(args[3]), NULL,
        records, &scratch, &last_offset, SHAPE_SHARE, -1, 0, &spent, index, pos, &delivery);
    PyMem_Free(scratch.data);
    PyBuffer_Release(&view);
    if (outcome != DONE || PyList_GET_SIZE(records) != count) {
        Py_DECREF(records);
        if (outcome == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    return records;
}

static PyMethodDef methods[] = {
    {"batch_json", (PyCFunction)(void (*)(void))batch_json, METH_FASTCALL, batch_json_doc},
    {"share_json", (PyCFunction)(void (*)(void))share_json, METH_FASTCALL, share_json_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gateway.formats._fetchjson",
    .m_doc = "Fetched records of a plain JSON batch -> their JSON text, in C.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__fetchjson(void)
{
    return PyModuleDef_Init(&module_def);
}

/*
 * Readers of Kafka RecordBatch v2 fields shared by the C paths that walk a batch's records
 * (gateway/formats/_fetchjson.c, gateway/formats/_batchcheck.c). Every read is bounds-checked against `end`.
 */
#ifndef SLUICE_RECORDS_H
#define SLUICE_RECORDS_H

#include <Python.h>
#include <stdint.h>

#define HEADER_SIZE 61
#define ATTRIBUTES_AT 21
#define FIRST_TIMESTAMP_AT 27
#define MAX_TIMESTAMP_AT 35
#define RECORD_COUNT_AT 57
#define COMPRESSION_MASK 0x07

static inline uint64_t
be_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

static inline int64_t
be_i64(const unsigned char *p)
{
    return (int64_t)be_u64(p);
}

static inline int32_t
be_i32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

static inline int16_t
be_i16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

/* A zigzag varint of at most `max_bytes` bytes below `end`; -1 if truncated or longer. */
static inline int
read_varint(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, int max_bytes,
            int64_t *out)
{
    uint64_t value = 0;
    Py_ssize_t p = *pos;
    if (p < end && buf[p] < 0x80) { /* one byte: most fields of a small record */
        value = buf[p];
        *pos = p + 1;
        *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
        return 0;
    }
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end) {
            return -1;
        }
        unsigned char b = buf[p++];
        if (i == 9 && b > 1) {
            return -1; /* more than 64 bits */
        }
        value |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pos = p;
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            return 0;
        }
    }
    return -1;
}

/* An int32 field (Kafka's varint): at most 5 bytes and within int32's range. */
static inline int
read_varint32(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    if (read_varint(buf, end, pos, 5, out) < 0 || *out < INT32_MIN || *out > INT32_MAX) {
        return -1;
    }
    return 0;
}

/* A nullable byte string: its length (-1 for null) and start; -1 if malformed. */
static inline int
read_bytes(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t *len,
           Py_ssize_t *at)
{
    if (read_varint32(buf, end, pos, len) < 0 || *len < -1) {
        return -1;
    }
    *at = *pos;
    if (*len > 0) {
        if (*len > end - *pos) {
            return -1;
        }
        *pos += (Py_ssize_t)*len;
    }
    return 0;
}

static inline int
all_ascii(const unsigned char *s, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] & 0x80) {
            return 0;
        }
    }
    return 1;
}

/* Whether `s` is what Python's strict UTF-8 decode accepts. */
static inline int
valid_utf8(const char *s, Py_ssize_t n)
{
    if (all_ascii((const unsigned char *)s, n)) {
        return 1;
    }
    PyObject *text = PyUnicode_DecodeUTF8(s, n, "strict");
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(text);
    return 1;
}


/* A record's `count` headers read past: names non-null UTF-8 (aiokafka decodes them), values
 * nullable; -1 if malformed. */
static inline int
skip_headers(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t count)
{
    if (count < 0) {
        return -1;
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t name_len, value_len;
        Py_ssize_t name_at, value_at;
        if (read_bytes(buf, end, pos, &name_len, &name_at) < 0 || name_len < 0 ||
            !valid_utf8((const char *)buf + name_at, (Py_ssize_t)name_len) ||
            read_bytes(buf, end, pos, &value_len, &value_at) < 0) {
            return -1;
        }
    }
    return 0;
}

#endif

/*
 * engine.batch.scan in C: walk the RecordBatch v2 batches of a buffer, checking each header
 * and (if asked) its CRC-32C, stopping at the first incomplete or invalid one.
 *
 * Every produce, follower append, recovery and upload scans its bytes so; in Python that is a
 * header unpacked, a named tuple made and a CRC computed per batch, with the GIL held
 * throughout (a one-record produce is one batch). Here the walk runs over the raw bytes, with
 * the GIL released for a large buffer (a segment's chunk during an upload), and the Python
 * objects are made afterwards: the (position, BatchHeader) pairs, the valid prefix's length,
 * the error (the Python path's words) and the bytes a cut batch needs. engine/batch.py's
 * Python walk is the reference; tests/engine/test_scan.py checks the two agree.
 *
 * stamp_producer does engine.batch.set_producer to each batch of a transactional request's
 * range in one call (a 1000-record produce over 10 partitions is 10 batches a request, each
 * re-CRCed once its producer is known), its Python loop the reference.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#include "_crc32c.h"

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12 /* base offset and length: the bytes a batch's length leaves out */
#define ATTRIBUTES_AT 21
#define CRC_AT 17
#define PRODUCER_ID_AT 43 /* then the producer epoch and the base sequence */
#define TRANSACTIONAL_MASK 0x10
#define MAGIC 2
#define MIN_BATCH_LENGTH (HEADER_SIZE - LOG_OVERHEAD)
#define FIELDS 13               /* BatchHeader's */
#define RELEASE_GIL_FROM 16384 /* bytes: below this, releasing the GIL costs more than it frees */

typedef struct {
    Py_ssize_t position;
    int64_t base_offset;
    int32_t length;
    int32_t leader_epoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t first_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t record_count;
} Header;

enum stop { WHOLE, TRUNCATED_HEADER, BAD_MAGIC, TOO_SMALL, NEGATIVE_COUNT, TRUNCATED, BAD_CRC,
            NO_MEMORY };

typedef struct {
    Header *headers;
    Py_ssize_t count;
    Py_ssize_t capacity;
    Py_ssize_t valid; /* where the walk stopped */
    enum stop stop;
    Py_ssize_t needed;
} Walk;

static uint64_t
be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = v << 8 | p[i];
    }
    return v;
}

static uint32_t
be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint16_t
be16(const unsigned char *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static void
read_header(const unsigned char *p, Header *h)
{
    h->base_offset = (int64_t)be64(p);
    h->length = (int32_t)be32(p + 8);
    h->leader_epoch = (int32_t)be32(p + 12);
    h->magic = (int8_t)p[16];
    h->crc = be32(p + 17);
    h->attributes = (int16_t)be16(p + 21);
    h->last_offset_delta = (int32_t)be32(p + 23);
    h->first_timestamp = (int64_t)be64(p + 27);
    h->max_timestamp = (int64_t)be64(p + 35);
    h->producer_id = (int64_t)be64(p + 43);
    h->producer_epoch = (int16_t)be16(p + 51);
    h->base_sequence = (int32_t)be32(p + 53);
    h->record_count = (int32_t)be32(p + 57);
}

/* The walk itself: no Python object is touched, so it may run without the GIL. */
static void
walk(const unsigned char *buf, Py_ssize_t end, int check_crc, Walk *w)
{
    Py_ssize_t pos = 0;
    while (pos < end) {
        Header h;
        if (end - pos < HEADER_SIZE) {
            w->stop = TRUNCATED_HEADER;
            w->needed = HEADER_SIZE;
            break;
        }
        read_header(buf + pos, &h);
        h.position = pos;
        if (h.magic != MAGIC) {
            w->stop = BAD_MAGIC;
        }
        else if (h.length < MIN_BATCH_LENGTH) {
            w->stop = TOO_SMALL;
        }
        else if (h.last_offset_delta < 0 || h.record_count < 0) {
            w->stop = NEGATIVE_COUNT;
        }
        else if ((Py_ssize_t)h.length + LOG_OVERHEAD > end - pos) {
            w->stop = TRUNCATED;
            w->needed = (Py_ssize_t)h.length + LOG_OVERHEAD;
        }
        else if (check_crc && crc32c(buf + pos + ATTRIBUTES_AT,
                                     (size_t)h.length + LOG_OVERHEAD - ATTRIBUTES_AT) != h.crc) {
            w->stop = BAD_CRC;
        }
        if (w->stop != WHOLE) {
            w->headers[w->count] = h; /* the refused header: its fields name the error */
            break;
        }
        w->headers[w->count++] = h;
        if (w->count == w->capacity) {
            Py_ssize_t grown = w->capacity * 2;
            Header *more = realloc(w->headers, (size_t)grown * sizeof(Header));
            if (more == NULL) {
                w->stop = NO_MEMORY;
                break;
            }
            w->headers = more;
            w->capacity = grown;
        }
        pos += (Py_ssize_t)h.length + LOG_OVERHEAD;
    }
    w->valid = pos;
}

static PyObject *
header_object(PyTypeObject *type, const Header *h)
{
    PyObject *fields[FIELDS] = {
        PyLong_FromLongLong(h->base_offset),      PyLong_FromLong(h->length),
        PyLong_FromLong(h->leader_epoch),         PyLong_FromLong(h->magic),
        PyLong_FromUnsignedLong(h->crc),          PyLong_FromLong(h->attributes),
        PyLong_FromLong(h->last_offset_delta),    PyLong_FromLongLong(h->first_timestamp),
        PyLong_FromLongLong(h->max_timestamp),    PyLong_FromLongLong(h->producer_id),
        PyLong_FromLong(h->producer_epoch),       PyLong_FromLong(h->base_sequence),
        PyLong_FromLong(h->record_count),
    };
    PyObject *header = type->tp_alloc(type, FIELDS);
    for (int i = 0; i < FIELDS; i++) {
        if (fields[i] == NULL || header == NULL) {
            for (int j = i; j < FIELDS; j++) {
                Py_XDECREF(fields[j]);
            }
            Py_XDECREF(header);
            return NULL;
        }
        PyTuple_SET_ITEM(header, i, fields[i]);
    }
    return header;
}

static PyObject *
stop_reason(const Walk *w)
{
    const Header *refused = &w->headers[w->count];
    switch (w->stop) {
    case WHOLE:
        Py_RETURN_NONE;
    case TRUNCATED_HEADER:
        return PyUnicode_FromString("truncated batch header");
    case BAD_MAGIC:
        return PyUnicode_FromFormat("unsupported magic %d", (int)refused->magic);
    case TOO_SMALL:
        return PyUnicode_FromFormat("batch length %d is too small", (int)refused->length);
    case NEGATIVE_COUNT:
        return PyUnicode_FromString("negative record count");
    case TRUNCATED:
        return PyUnicode_FromString("truncated batch");
    case BAD_CRC:
        return PyUnicode_FromString("CRC mismatch");
    case NO_MEMORY:
        break;
    }
    return PyErr_NoMemory();
}

PyDoc_STRVAR(scan_doc,
             "scan(buf, check_crc, header_type) -> (headers, valid_bytes, error, needed)\n\n"
             "engine.batch.scan's walk: (position, header_type(...)) of each valid batch, where\n"
             "the walk stopped, why (None at the end of the buffer) and the bytes a batch cut\n"
             "by the buffer's end needs from its start (0 if none).");

static PyObject *
scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "scan() takes buf, check_crc and header_type");
        return NULL;
    }
    if (!PyType_Check(args[2]) || !PyType_IsSubtype((PyTypeObject *)args[2], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "header_type must be a tuple type");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[2];
    int check_crc = PyObject_IsTrue(args[1]);
    if (check_crc < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Walk w = {.capacity = 16, .stop = WHOLE};
    w.headers = malloc((size_t)w.capacity * sizeof(Header));
    if (w.headers == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    if (view.len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        walk(view.buf, view.len, check_crc, &w);
        Py_END_ALLOW_THREADS
    }
    else {
        walk(view.buf, view.len, check_crc, &w);
    }
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    PyObject *error = stop_reason(&w);
    PyObject *found = error == NULL ? NULL : PyList_New(w.count);
    if (found != NULL) {
        for (Py_ssize_t i = 0; i < w.count; i++) {
            PyObject *header = header_object(type, &w.headers[i]);
            PyObject *pair = header == NULL ? NULL : PyTuple_New(2);
            PyObject *position = pair == NULL ? NULL : PyLong_FromSsize_t(w.headers[i].position);
            if (position == NULL) {
                Py_XDECREF(pair);
                Py_XDECREF(header);
                Py_CLEAR(found);
                break;
            }
            PyTuple_SET_ITEM(pair, 0, position);
            PyTuple_SET_ITEM(pair, 1, header);
            PyList_SET_ITEM(found, i, pair);
        }
    }
    if (found != NULL) {
        result = Py_BuildValue("(NnNn)", found, w.valid, error, w.needed);
        error = NULL; /* stolen, as `found` */
    }
    Py_XDECREF(error);
    free(w.headers);
    return result;
}

static void
put_be(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

PyDoc_STRVAR(stamp_producer_doc,
             "stamp_producer(buf, start, end, producer_id, producer_epoch, header_type)\n"
             "-> [(position, header_type(...)), ...]\n\n"
             "engine.batch.set_producer over every batch of buf[start:end] (whole batches,\n"
             "checked before): each made transactional, of the producer at that epoch, base\n"
             "sequence -1, its CRC computed again; each one's position and header as stamped.");

static PyObject *
stamp_producer(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "stamp_producer() takes buf, start, end, producer_id, producer_epoch "
                        "and header_type");
        return NULL;
    }
    if (!PyType_Check(args[5]) || !PyType_IsSubtype((PyTypeObject *)args[5], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "header_type must be a tuple type");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[5];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    long long producer_id = PyLong_AsLongLong(args[3]);
    long epoch = PyLong_AsLong(args[4]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (epoch < INT16_MIN || epoch > INT16_MAX) {
        PyErr_SetString(PyExc_ValueError, "producer_epoch out of range");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start and end must lie within the buffer");
        return NULL;
    }
    unsigned char *buf = view.buf;
    PyObject *stamped = PyList_New(0);
    Py_ssize_t pos = start;
    while (stamped != NULL && pos < end) {
        Header h;
        if (end - pos < HEADER_SIZE) {
            PyErr_SetString(PyExc_ValueError, "truncated batch header");
            Py_CLEAR(stamped);
            break;
        }
        read_header(buf + pos, &h);
        Py_ssize_t size = (Py_ssize_t)h.length + LOG_OVERHEAD;
        if (h.length < MIN_BATCH_LENGTH || size > end - pos) {
            PyErr_SetString(PyExc_ValueError, "truncated batch");
            Py_CLEAR(stamped);
            break;
        }
        if (!((h.attributes & TRANSACTIONAL_MASK) && h.producer_id == producer_id &&
              h.producer_epoch == epoch && h.base_sequence == -1)) {
            /* else built for this producer already (json_batches): nothing to change */
            h.attributes = (int16_t)(h.attributes | TRANSACTIONAL_MASK);
            h.producer_id = producer_id;
            h.producer_epoch = (int16_t)epoch;
            h.base_sequence = -1;
            put_be(buf + pos + ATTRIBUTES_AT, (uint16_t)h.attributes, 2);
            put_be(buf + pos + PRODUCER_ID_AT, (uint64_t)h.producer_id, 8);
            put_be(buf + pos + PRODUCER_ID_AT + 8, (uint16_t)h.producer_epoch, 2);
            put_be(buf + pos + PRODUCER_ID_AT + 10, (uint32_t)h.base_sequence, 4);
            h.crc = crc32c(buf + pos + ATTRIBUTES_AT, (size_t)(size - ATTRIBUTES_AT));
            put_be(buf + pos + CRC_AT, h.crc, 4);
        }
        PyObject *header = header_object(type, &h);
        PyObject *pair = header == NULL ? NULL : Py_BuildValue("(nN)", pos, header);
        if (pair == NULL || PyList_Append(stamped, pair) < 0) {
            Py_XDECREF(pair);
            Py_CLEAR(stamped);
            break;
        }
        Py_DECREF(pair);
        pos += size;
    }
    PyBuffer_Release(&view);
    return stamped;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL, scan_doc},
    {"stamp_producer", (PyCFunction)(void (*)(void))stamp_producer, METH_FASTCALL,
     stamp_producer_doc},
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
    .m_name = "engine._scan",
    .m_doc = "engine.batch.scan's walk over record batches, and set_producer's stamping, in C.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    return PyModuleDef_Init(&module_def);
}

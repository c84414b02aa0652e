/*
 * Whether a produced RecordBatch v2's records are well formed, in C, without decoding them.
 *
 * A binary produce body is checked record by record before it is appended (its records must
 * decode, at the offset deltas 0..count-1 the log gives them). In Python that meant aiokafka's
 * iterator building an object per record, a third to a half of a binary produce's CPU. This
 * walks the same fields with bounds-checked reads and builds nothing. It only ever answers
 * "well formed": anything it does not cover (a compressed batch) or finds odd makes it answer
 * False, and the caller then walks the batch in Python (engine/record_check.py, the same rules,
 * the reference), which words the error. It is stricter than aiokafka's reader (varints of
 * Kafka's widths, lengths within the record), never laxer: tests/gateway/test_batchcheck.py and
 * the batch_check_native fuzz target check that every batch it accepts, the Python path accepts
 * too. It also gathers the schema ids of records in Confluent's wire format, for topics that
 * validate their records' schemas.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_records.h"

/* Whether the batch's records all read, with offset deltas 0..count-1. */
static int
well_formed(const unsigned char *buf, Py_ssize_t end)
{
    if (end < HEADER_SIZE || (be_i16(buf + ATTRIBUTES_AT) & COMPRESSION_MASK)) {
        return 0;
    }
    int64_t base_offset = be_i64(buf);
    int32_t count = be_i32(buf + RECORD_COUNT_AT);
    int64_t next_offset;
    if (count < 0 || __builtin_add_overflow(base_offset, (int64_t)count, &next_offset)) {
        return 0; /* Python's offsets, base + delta in 64 bits, would not count up */
    }
    Py_ssize_t pos = HEADER_SIZE;
    for (int32_t i = 0; i < count; i++) {
        int64_t length, attributes, timestamp_delta, offset_delta, key_len, value_len, headers;
        Py_ssize_t key_at, value_at;
        if (read_varint32(buf, end, &pos, &length) < 0 || length < 0 || length > end - pos) {
            return 0;
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        if (read_varint(buf, record_end, &pos, 10, &attributes) < 0 ||
            read_varint(buf, record_end, &pos, 10, &timestamp_delta) < 0 ||
            read_varint(buf, record_end, &pos, 10, &offset_delta) < 0 || offset_delta != i ||
            read_bytes(buf, record_end, &pos, &key_len, &key_at) < 0 ||
            read_bytes(buf, record_end, &pos, &value_len, &value_at) < 0 ||
            read_varint32(buf, record_end, &pos, &headers) < 0 ||
            skip_headers(buf, record_end, &pos, headers) < 0) {
            return 0;
        }
        if (pos != record_end) {
            return 0;
        }
    }
    return pos == end; /* as aiokafka's iterator, no bytes left over */
}

PyDoc_STRVAR(records_well_formed_doc,
"records_well_formed(batch, /)\n"
"--\n\n"
"True when one whole RecordBatch v2 (its header included) is uncompressed and its records\n"
"all read, with offset deltas 0..count-1; False when it cannot say so: decode it in Python.");

static PyObject *
records_well_formed(PyObject *module, PyObject *batch)
{
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    int ok = well_formed((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

#define MAX_WIRE_IDS 16

/* Walk one uncompressed batch's records, gathering the distinct schema ids of their keys
 * (`key`) or values in Confluent's wire format (magic byte 0, a 4-byte big-endian id).
 * Returns the index of the first record whose field is not framed (null, shorter than the
 * header, another magic byte), -1 if all are, or -2 when it cannot say (compressed, odd,
 * more distinct ids than MAX_WIRE_IDS). */
static int32_t
wire_ids(const unsigned char *buf, Py_ssize_t end, int key, uint32_t *ids, int *count)
{
    if (end < HEADER_SIZE || (be_i16(buf + ATTRIBUTES_AT) & COMPRESSION_MASK)) {
        return -2;
    }
    int32_t records = be_i32(buf + RECORD_COUNT_AT);
    Py_ssize_t pos = HEADER_SIZE;
    for (int32_t i = 0; i < records; i++) {
        int64_t length, attributes, timestamp_delta, offset_delta, key_len, value_len;
        Py_ssize_t key_at, value_at;
        if (read_varint32(buf, end, &pos, &length) < 0 || length < 0 || length > end - pos) {
            return -2;
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        if (read_varint(buf, record_end, &pos, 10, &attributes) < 0 ||
            read_varint(buf, record_end, &pos, 10, &timestamp_delta) < 0 ||
            read_varint(buf, record_end, &pos, 10, &offset_delta) < 0 ||
            read_bytes(buf, record_end, &pos, &key_len, &key_at) < 0 ||
            read_bytes(buf, record_end, &pos, &value_len, &value_at) < 0) {
            return -2;
        }
        int64_t len = key ? key_len : value_len;
        const unsigned char *field = buf + (key ? key_at : value_at);
        if (len < 5 || field[0] != 0) {
            return i;
        }
        uint32_t id = ((uint32_t)field[1] << 24) | ((uint32_t)field[2] << 16) |
                      ((uint32_t)field[3] << 8) | (uint32_t)field[4];
        int known = 0;
        for (int j = 0; j < *count && !known; j++) {
            known = ids[j] == id;
        }
        if (!known) {
            if (*count == MAX_WIRE_IDS) {
                return -2;
            }
            ids[(*count)++] = id;
        }
        pos = record_end;
    }
    return pos == end ? -1 : -2;
}

PyDoc_STRVAR(wire_schema_ids_doc,
"wire_schema_ids(batch, key, /)\n"
"--\n\n"
"The schema ids of one whole uncompressed batch's keys (key true) or values in Confluent's\n"
"wire format: (-1, ids) when every one is framed; (index, ids before it) at the first that\n"
"is not; None when C cannot say (compressed, malformed, many ids): walk it in Python.");

static PyObject *
wire_schema_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "wire_schema_ids(batch, key) takes two arguments");
        return NULL;
    }
    int key = PyObject_IsTrue(args[1]);
    if (key < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t ids[MAX_WIRE_IDS];
    int count = 0;
    int32_t bad = wire_ids((const unsigned char *)view.buf, view.len, key, ids, &count);
    PyBuffer_Release(&view);
    if (bad == -2) {
        Py_RETURN_NONE;
    }
    PyObject *found = PyTuple_New(count);
    if (found == NULL) {
        return NULL;
    }
    for (int j = 0; j < count; j++) {
        PyObject *id = PyLong_FromUnsignedLong(ids[j]);
        if (id == NULL) {
            Py_DECREF(found);
            return NULL;
        }
        PyTuple_SET_ITEM(found, j, id);
    }
    return Py_BuildValue("(iN)", bad, found);
}

static PyMethodDef methods[] = {
    {"records_well_formed", records_well_formed, METH_O, records_well_formed_doc},
    {"wire_schema_ids", (PyCFunction)(void (*)(void))wire_schema_ids, METH_FASTCALL,
     wire_schema_ids_doc},
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
    .m_name = "gateway.formats._batchcheck",
    .m_doc = "Whether a produced batch's records are well formed, in C.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__batchcheck(void)
{
    return PyModuleDef_Init(&module_def);
}

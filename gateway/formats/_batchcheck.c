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
 * too.
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

static PyMethodDef methods[] = {
    {"records_well_formed", records_well_formed, METH_O, records_well_formed_doc},
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

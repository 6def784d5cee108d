/* The records of Kafka's v2 record batches, parsed into and written from Arrow column buffers.
 *
 * The batch header, the CRC and the codecs are handled in record_batch.py (once per batch); this file does
 * the per-record work, which a Python loop would cap at a few hundred thousand records a second.
 *
 * A record, as Kafka's DefaultRecord defines it (varint: zigzag LEB128 of an int32, at most 5 bytes;
 * varlong: of an int64, at most 10 bytes):
 *     length varint (of what follows), attributes int8 (unused), timestampDelta varlong,
 *     offsetDelta varint, keyLength varint (-1: null key), key bytes, valueLength varint (-1: null value),
 *     value bytes, headerCount varint, then per header: keyLength varint (>= 0), key bytes (UTF-8),
 *     valueLength varint (-1: null value), value bytes.
 *
 * Columns are Arrow's layouts: a binary column is a validity bitmap (bit i set: row i not null; absent when
 * no row is null), int32 offsets (n + 1 of them) and the data; headers are a list<struct<key, value>> whose
 * list offsets index the header entries.
 *
 * decode_records() rejects anything Kafka's reader would not read as it was written: a varint longer than
 * its type, a length past its record or batch, a record whose fields do not fill its length exactly, bytes
 * left after a batch's last record. It raises ValueError with a one-line message (record_batch.py turns it
 * into CorruptRecordError). Both loops run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The smallest record: length, attributes, timestampDelta, offsetDelta, keyLength, valueLength and
 * headerCount of one byte each. Bounds how many records a section of n bytes can hold. */
#define MIN_RECORD_BYTES 7
/* The most a record's framing can take besides its key, value and headers' bytes: length 5, attributes 1,
 * timestampDelta 10, offsetDelta 5, keyLength 5, valueLength 5, headerCount 5. */
#define MAX_RECORD_OVERHEAD 36
#define MAX_HEADER_OVERHEAD 10 /* a header's keyLength and valueLength */

/* ---------------------------------------------------------------- varints */

/* 0 and *out set, or -1: truncated, -2: longer than 5 bytes or above 32 bits. */
static inline int read_varint(const uint8_t **p, const uint8_t *end, int32_t *out) {
    const uint8_t *q = *p;
    uint32_t raw = 0;
    for (int i = 0; i < 5; i++) {
        if (q >= end)
            return -1;
        uint8_t b = *q++;
        raw |= (uint32_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (i == 4 && b > 0x0f)
                return -2;
            *p = q;
            *out = (int32_t)((raw >> 1) ^ (~(raw & 1) + 1));
            return 0;
        }
    }
    return -2;
}

static inline int read_varlong(const uint8_t **p, const uint8_t *end, int64_t *out) {
    const uint8_t *q = *p;
    uint64_t raw = 0;
    for (int i = 0; i < 10; i++) {
        if (q >= end)
            return -1;
        uint8_t b = *q++;
        raw |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (i == 9 && b > 0x01)
                return -2;
            *p = q;
            *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
            return 0;
        }
    }
    return -2;
}

static inline int varint_size(int32_t v) {
    uint32_t raw = ((uint32_t)v << 1) ^ (uint32_t)(v >> 31);
    int n = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        n++;
    }
    return n;
}

static inline int varlong_size(int64_t v) {
    uint64_t raw = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *write_varint(uint8_t *p, int32_t v) {
    uint32_t raw = ((uint32_t)v << 1) ^ (uint32_t)(v >> 31);
    while (raw >= 0x80) {
        *p++ = (uint8_t)(raw | 0x80);
        raw >>= 7;
    }
    *p++ = (uint8_t)raw;
    return p;
}

static inline uint8_t *write_varlong(uint8_t *p, int64_t v) {
    uint64_t raw = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (raw >= 0x80) {
        *p++ = (uint8_t)(raw | 0x80);
        raw >>= 7;
    }
    *p++ = (uint8_t)raw;
    return p;
}

/* ---------------------------------------------------------------- growable buffers (header columns) */

typedef struct {
    uint8_t *data;
    size_t size;
    size_t capacity;
} Growable;

static int grow(Growable *g, size_t more) {
    if (g->size + more <= g->capacity)
        return 1;
    size_t capacity = g->capacity ? g->capacity : 4096;
    while (capacity < g->size + more)
        capacity *= 2;
    uint8_t *data = realloc(g->data, capacity);
    if (!data)
        return 0;
    g->data = data;
    g->capacity = capacity;
    return 1;
}

static int append(Growable *g, const void *src, size_t n) {
    if (!grow(g, n))
        return 0;
    memcpy(g->data + g->size, src, n);
    g->size += n;
    return 1;
}

static PyObject *growable_bytes(Growable *g) {
    return PyBytes_FromStringAndSize(g->size ? (const char *)g->data : "", (Py_ssize_t)g->size);
}

/* ---------------------------------------------------------------- decode */

typedef struct {
    /* outputs sized by the caller: one slot per record (offsets: one more) */
    int32_t *offset_delta;
    int64_t *timestamp;
    uint8_t *key_valid, *value_valid, *headers_valid; /* bitmaps, zeroed */
    int32_t *key_offsets, *value_offsets, *header_list_offsets;
    uint8_t *key_data, *value_data; /* capacity: every section's bytes */
    int64_t key_used, value_used;
    int64_t key_nulls, value_nulls, header_nulls;
    /* header entries: growable */
    Growable hkey_offsets, hkey_data, hvalue_offsets, hvalue_data, hvalue_valid;
    int64_t header_count, hvalue_nulls;
    char error[200];
} Decoded;

#define FAIL(...)                                                       \
    do {                                                                \
        snprintf(d->error, sizeof d->error, __VA_ARGS__);               \
        return -1;                                                      \
    } while (0)

static const char *varint_problem(int rc) { return rc == -1 ? "truncated" : "too long"; }

/* Parse `count` records of one batch from [p, end) into rows [row, row + count). 0, or -1 with d->error. */
static int decode_section(Decoded *d, const uint8_t *p, const uint8_t *end, int64_t row, int32_t count,
                          int64_t base_timestamp, int fixed, int64_t fixed_timestamp, int64_t batch) {
    int rc;
    for (int32_t r = 0; r < count; r++, row++) {
        int32_t length;
        if ((rc = read_varint(&p, end, &length)) != 0)
            FAIL("batch %lld record %d: length varint %s", (long long)batch, r, varint_problem(rc));
        if (length < MIN_RECORD_BYTES - 1 || length > end - p)
            FAIL("batch %lld record %d: length %d outside the %lld bytes left in the batch", (long long)batch, r,
                 length, (long long)(end - p));
        const uint8_t *record_end = p + length;
        p++; /* attributes: unused in v2 */
        int64_t timestamp_delta;
        if ((rc = read_varlong(&p, record_end, &timestamp_delta)) != 0)
            FAIL("batch %lld record %d: timestampDelta varlong %s", (long long)batch, r, varint_problem(rc));
        int32_t offset_delta;
        if ((rc = read_varint(&p, record_end, &offset_delta)) != 0)
            FAIL("batch %lld record %d: offsetDelta varint %s", (long long)batch, r, varint_problem(rc));
        d->offset_delta[row] = offset_delta;
        d->timestamp[row] = fixed ? fixed_timestamp : (int64_t)((uint64_t)base_timestamp + (uint64_t)timestamp_delta);

        int32_t n;
        if ((rc = read_varint(&p, record_end, &n)) != 0)
            FAIL("batch %lld record %d: keyLength varint %s", (long long)batch, r, varint_problem(rc));
        if (n < -1 || n > record_end - p)
            FAIL("batch %lld record %d: key length %d outside the record", (long long)batch, r, n);
        if (n >= 0) {
            memcpy(d->key_data + d->key_used, p, (size_t)n);
            d->key_used += n;
            p += n;
            d->key_valid[row >> 3] |= (uint8_t)(1u << (row & 7));
        } else {
            d->key_nulls++;
        }
        d->key_offsets[row + 1] = (int32_t)d->key_used;

        if ((rc = read_varint(&p, record_end, &n)) != 0)
            FAIL("batch %lld record %d: valueLength varint %s", (long long)batch, r, varint_problem(rc));
        if (n < -1 || n > record_end - p)
            FAIL("batch %lld record %d: value length %d outside the record", (long long)batch, r, n);
        if (n >= 0) {
            memcpy(d->value_data + d->value_used, p, (size_t)n);
            d->value_used += n;
            p += n;
            d->value_valid[row >> 3] |= (uint8_t)(1u << (row & 7));
        } else {
            d->value_nulls++;
        }
        d->value_offsets[row + 1] = (int32_t)d->value_used;

        int32_t headers;
        if ((rc = read_varint(&p, record_end, &headers)) != 0)
            FAIL("batch %lld record %d: headerCount varint %s", (long long)batch, r, varint_problem(rc));
        if (headers < 0 || headers > (record_end - p) / 2)
            FAIL("batch %lld record %d: header count %d outside the record", (long long)batch, r, headers);
        if (headers > 0) {
            d->headers_valid[row >> 3] |= (uint8_t)(1u << (row & 7));
            for (int32_t h = 0; h < headers; h++) {
                if ((rc = read_varint(&p, record_end, &n)) != 0)
                    FAIL("batch %lld record %d: header keyLength varint %s", (long long)batch, r,
                         varint_problem(rc));
                if (n < 0 || n > record_end - p)
                    FAIL("batch %lld record %d: header key length %d outside the record", (long long)batch, r, n);
                if (!append(&d->hkey_data, p, (size_t)n))
                    FAIL("out of memory");
                p += n;
                int32_t position = (int32_t)d->hkey_data.size;
                if (!append(&d->hkey_offsets, &position, 4))
                    FAIL("out of memory");
                if ((rc = read_varint(&p, record_end, &n)) != 0)
                    FAIL("batch %lld record %d: header valueLength varint %s", (long long)batch, r,
                         varint_problem(rc));
                if (n < -1 || n > record_end - p)
                    FAIL("batch %lld record %d: header value length %d outside the record", (long long)batch, r,
                         n);
                int64_t entry = d->header_count++;
                if (!grow(&d->hvalue_valid, (size_t)(entry >> 3) + 1))
                    FAIL("out of memory");
                if ((size_t)(entry >> 3) >= d->hvalue_valid.size) {
                    d->hvalue_valid.data[entry >> 3] = 0;
                    d->hvalue_valid.size = (size_t)(entry >> 3) + 1;
                }
                if (n >= 0) {
                    if (!append(&d->hvalue_data, p, (size_t)n))
                        FAIL("out of memory");
                    p += n;
                    d->hvalue_valid.data[entry >> 3] |= (uint8_t)(1u << (entry & 7));
                } else {
                    d->hvalue_nulls++;
                }
                position = (int32_t)d->hvalue_data.size;
                if (!append(&d->hvalue_offsets, &position, 4))
                    FAIL("out of memory");
            }
        } else {
            d->header_nulls++;
        }
        d->header_list_offsets[row + 1] = (int32_t)d->header_count;
        if (p != record_end)
            FAIL("batch %lld record %d: %lld bytes left inside the record after its last header", (long long)batch,
                 r, (long long)(record_end - p));
    }
    if (p != end)
        FAIL("batch %lld: %lld bytes after its last record", (long long)batch, (long long)(end - p));
    return 0;
}

typedef struct {
    Py_buffer *views;
    Py_ssize_t batches;
} Views;

static void release_views(Views *v) {
    for (Py_ssize_t i = 0; i < v->batches; i++)
        if (v->views[i].obj)
            PyBuffer_Release(&v->views[i]);
    PyMem_Free(v->views);
}

static void free_growables(Decoded *d) {
    free(d->hkey_offsets.data);
    free(d->hkey_data.data);
    free(d->hvalue_offsets.data);
    free(d->hvalue_data.data);
    free(d->hvalue_valid.data);
}

static PyObject *new_bytes(Py_ssize_t n, uint8_t **data, int zero) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, n);
    if (b) {
        *data = (uint8_t *)PyBytes_AS_STRING(b);
        if (zero)
            memset(*data, 0, (size_t)n);
    }
    return b;
}

/* decode_records(sections, counts, base_timestamps, fixed, fixed_timestamps) -> tuple of column buffers.
 * sections: a list of buffers, one batch's (uncompressed) records each; counts int32, base_timestamps
 * int64, fixed uint8 (1: every record's timestamp is fixed_timestamps[b], Kafka's LogAppendTime),
 * fixed_timestamps int64: one per batch. */
static PyObject *decode_records(PyObject *self, PyObject *args) {
    PyObject *sections;
    Py_buffer counts_view, base_view, fixed_view, fixed_ts_view;
    if (!PyArg_ParseTuple(args, "O!y*y*y*y*", &PyList_Type, &sections, &counts_view, &base_view, &fixed_view,
                          &fixed_ts_view))
        return NULL;
    PyObject *result = NULL;
    PyObject *offset_delta = NULL, *timestamp = NULL, *key_valid = NULL, *key_offsets = NULL, *key_data = NULL,
             *value_valid = NULL, *value_offsets = NULL, *value_data = NULL, *headers_valid = NULL,
             *header_list_offsets = NULL;
    Decoded d;
    memset(&d, 0, sizeof d);
    Views v = {NULL, 0};
    Py_ssize_t batches = PyList_GET_SIZE(sections);
    const int32_t *counts = counts_view.buf;
    const int64_t *base_timestamps = base_view.buf;
    const uint8_t *fixed = fixed_view.buf;
    const int64_t *fixed_timestamps = fixed_ts_view.buf;
    if (counts_view.len != batches * 4 || base_view.len != batches * 8 || fixed_view.len != batches ||
        fixed_ts_view.len != batches * 8) {
        PyErr_SetString(PyExc_TypeError, "decode_records: one count, base timestamp and fixed timestamp a batch");
        goto done;
    }
    v.views = PyMem_Calloc((size_t)(batches ? batches : 1), sizeof(Py_buffer));
    if (!v.views) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t rows = 0, bytes = 0;
    for (Py_ssize_t b = 0; b < batches; b++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(sections, b), &v.views[b], PyBUF_SIMPLE) < 0)
            goto done;
        v.batches = b + 1;
        if (counts[b] < 0 || (int64_t)counts[b] * MIN_RECORD_BYTES > v.views[b].len) {
            PyErr_Format(PyExc_ValueError, "batch %zd: %d records cannot fit its %zd bytes of records", b, counts[b],
                         v.views[b].len);
            goto done;
        }
        rows += counts[b];
        bytes += v.views[b].len;
    }
    if (bytes > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%lld bytes of records: more than a binary column's 2 GiB",
                     (long long)bytes);
        goto done;
    }
    uint8_t *p;
    if (!(offset_delta = new_bytes(rows * 4, &p, 0)))
        goto done;
    d.offset_delta = (int32_t *)p;
    if (!(timestamp = new_bytes(rows * 8, &p, 0)))
        goto done;
    d.timestamp = (int64_t *)p;
    Py_ssize_t bitmap = (rows + 7) / 8;
    if (!(key_valid = new_bytes(bitmap, &d.key_valid, 1)) || !(value_valid = new_bytes(bitmap, &d.value_valid, 1)) ||
        !(headers_valid = new_bytes(bitmap, &d.headers_valid, 1)))
        goto done;
    if (!(key_offsets = new_bytes((rows + 1) * 4, &p, 0)))
        goto done;
    d.key_offsets = (int32_t *)p;
    if (!(value_offsets = new_bytes((rows + 1) * 4, &p, 0)))
        goto done;
    d.value_offsets = (int32_t *)p;
    if (!(header_list_offsets = new_bytes((rows + 1) * 4, &p, 0)))
        goto done;
    d.header_list_offsets = (int32_t *)p;
    if (!(key_data = new_bytes(bytes, &d.key_data, 0)) || !(value_data = new_bytes(bytes, &d.value_data, 0)))
        goto done;
    d.key_offsets[0] = d.value_offsets[0] = d.header_list_offsets[0] = 0;
    int32_t zero = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    if (!append(&d.hkey_offsets, &zero, 4) || !append(&d.hvalue_offsets, &zero, 4)) {
        snprintf(d.error, sizeof d.error, "out of memory");
        failed = 1;
    }
    int64_t row = 0;
    for (Py_ssize_t b = 0; b < batches && !failed; b++) {
        const uint8_t *start = v.views[b].buf;
        failed = decode_section(&d, start, start + v.views[b].len, row, counts[b], base_timestamps[b], fixed[b],
                                fixed_timestamps[b], (int64_t)b) != 0;
        row += counts[b];
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        if (strcmp(d.error, "out of memory") == 0)
            PyErr_NoMemory();
        else
            PyErr_SetString(PyExc_ValueError, d.error);
        goto done;
    }
    if (_PyBytes_Resize(&key_data, d.key_used) < 0 || _PyBytes_Resize(&value_data, d.value_used) < 0)
        goto done;
    result = Py_BuildValue("(NNNNNLNNNLNNLNNNNNLL)", offset_delta, timestamp, key_valid, key_offsets, key_data,
                           (long long)d.key_nulls, value_valid, value_offsets, value_data, (long long)d.value_nulls,
                           headers_valid, header_list_offsets, (long long)d.header_nulls,
                           growable_bytes(&d.hkey_offsets), growable_bytes(&d.hkey_data),
                           growable_bytes(&d.hvalue_valid), growable_bytes(&d.hvalue_offsets),
                           growable_bytes(&d.hvalue_data), (long long)d.hvalue_nulls, (long long)d.header_count);
    /* Py_BuildValue's N took the references (also on failure) */
    offset_delta = timestamp = key_valid = key_offsets = key_data = value_valid = value_offsets = value_data =
        headers_valid = header_list_offsets = NULL;
done:
    Py_XDECREF(offset_delta);
    Py_XDECREF(timestamp);
    Py_XDECREF(key_valid);
    Py_XDECREF(key_offsets);
    Py_XDECREF(key_data);
    Py_XDECREF(value_valid);
    Py_XDECREF(value_offsets);
    Py_XDECREF(value_data);
    Py_XDECREF(headers_valid);
    Py_XDECREF(header_list_offsets);
    free_growables(&d);
    if (v.views)
        release_views(&v);
    PyBuffer_Release(&counts_view);
    PyBuffer_Release(&base_view);
    PyBuffer_Release(&fixed_view);
    PyBuffer_Release(&fixed_ts_view);
    return result;
}

/* ---------------------------------------------------------------- encode */

/* A binary column: validity bitmap (NULL: no nulls) read from bit valid_offset, offsets already positioned at
 * the column's first row, data. */
typedef struct {
    const uint8_t *valid;
    int64_t valid_offset;
    const int32_t *offsets;
    const uint8_t *data;
} Binary;

static inline int is_valid(const uint8_t *bitmap, int64_t offset, int64_t i) {
    if (!bitmap)
        return 1;
    i += offset;
    return (bitmap[i >> 3] >> (i & 7)) & 1;
}

static inline int32_t binary_length(const Binary *c, int64_t i) {
    return is_valid(c->valid, c->valid_offset, i) ? c->offsets[i + 1] - c->offsets[i] : -1;
}

typedef struct {
    int present;
    const uint8_t *list_valid;
    int64_t list_valid_offset;
    const int32_t *list_offsets; /* positioned at the first row; values index header entries */
    Binary key, value;          /* header entries, positioned at entry 0 */
} Headers;

static inline int64_t record_body_size(int64_t timestamp_delta, int32_t offset_delta, int32_t key_length,
                                       int32_t value_length, const Headers *h, int64_t i, int32_t *header_count) {
    int64_t size = 1 + varlong_size(timestamp_delta) + varint_size(offset_delta);
    size += varint_size(key_length) + (key_length > 0 ? key_length : 0);
    size += varint_size(value_length) + (value_length > 0 ? value_length : 0);
    int32_t count = 0;
    if (h->present && is_valid(h->list_valid, h->list_valid_offset, i)) {
        int32_t first = h->list_offsets[i], last = h->list_offsets[i + 1];
        count = last - first;
        for (int32_t e = first; e < last; e++) {
            int32_t k = binary_length(&h->key, e), v = binary_length(&h->value, e);
            size += varint_size(k) + k + varint_size(v) + (v > 0 ? v : 0);
        }
    }
    *header_count = count;
    return size + varint_size(count);
}

static int binary_arg(PyObject *tuple, Py_buffer views[3], Binary *c) {
    /* (validity buffer or None, validity bit offset, offsets buffer, data buffer) */
    PyObject *valid, *offsets, *data;
    long long valid_offset;
    if (!PyArg_ParseTuple(tuple, "OLOO", &valid, &valid_offset, &offsets, &data))
        return 0;
    if (valid != Py_None) {
        if (PyObject_GetBuffer(valid, &views[0], PyBUF_SIMPLE) < 0)
            return 0;
        c->valid = views[0].buf;
    }
    c->valid_offset = valid_offset;
    if (PyObject_GetBuffer(offsets, &views[1], PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(data, &views[2], PyBUF_SIMPLE) < 0)
        return 0;
    c->offsets = views[1].buf;
    c->data = views[2].buf;
    return 1;
}

/* encode_records(firsts, lasts, base_offsets, base_timestamps, offsets, timestamps, key, value, headers, room)
 *   -> list of bytearrays, one a batch: `room` bytes left for the batch header, then the batch's records.
 * Batch b holds rows [firsts[b], lasts[b]) (an empty batch: none); firsts and lasts int64, base_offsets and base_timestamps int64 (one a batch), offsets
 * and timestamps int64 (one a row), key and value: (validity or None, bit offset, offsets, data), headers:
 * None or (list validity or None, bit offset, list offsets, key column tuple, value column tuple). */
static PyObject *encode_records(PyObject *self, PyObject *args) {
    Py_buffer firsts_view, lasts_view, base_offsets_view, base_ts_view, offsets_view, ts_view;
    PyObject *key_arg, *value_arg, *headers_arg;
    Py_ssize_t room;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*O!O!On", &firsts_view, &lasts_view, &base_offsets_view, &base_ts_view, &offsets_view,
                          &ts_view, &PyTuple_Type, &key_arg, &PyTuple_Type, &value_arg, &headers_arg, &room))
        return NULL;
    Py_buffer views[14]; /* key 0-2, value 3-5, header lists 6-7, header keys 8-10, values 11-13 */
    memset(views, 0, sizeof views);
    Binary key = {0}, value = {0};
    Headers headers;
    memset(&headers, 0, sizeof headers);
    PyObject *result = NULL;
    if (!binary_arg(key_arg, views, &key) || !binary_arg(value_arg, views + 3, &value))
        goto done;
    if (headers_arg != Py_None) {
        PyObject *list_valid, *list_offsets, *hkey, *hvalue;
        long long list_valid_offset;
        if (!PyArg_ParseTuple(headers_arg, "OLOO!O!", &list_valid, &list_valid_offset, &list_offsets, &PyTuple_Type,
                              &hkey, &PyTuple_Type, &hvalue))
            goto done;
        headers.present = 1;
        if (list_valid != Py_None) {
            if (PyObject_GetBuffer(list_valid, &views[6], PyBUF_SIMPLE) < 0)
                goto done;
            headers.list_valid = views[6].buf;
        }
        headers.list_valid_offset = list_valid_offset;
        if (PyObject_GetBuffer(list_offsets, &views[7], PyBUF_SIMPLE) < 0)
            goto done;
        headers.list_offsets = views[7].buf;
        if (!binary_arg(hkey, views + 8, &headers.key) || !binary_arg(hvalue, views + 11, &headers.value))
            goto done;
    }
    {
        const int64_t *firsts = firsts_view.buf, *lasts = lasts_view.buf, *base_offsets = base_offsets_view.buf, *base_ts = base_ts_view.buf;
        const int64_t *offsets = offsets_view.buf, *timestamps = ts_view.buf;
        Py_ssize_t batches = base_offsets_view.len / 8;
        if (firsts_view.len != batches * 8 || lasts_view.len != batches * 8 || base_ts_view.len != batches * 8 || ts_view.len != offsets_view.len) {
            PyErr_SetString(PyExc_TypeError, "encode_records: batch and row arguments disagree in length");
            goto done;
        }
        Py_ssize_t rows = offsets_view.len / 8;
        result = PyList_New(batches);
        if (!result)
            goto done;
        for (Py_ssize_t b = 0; b < batches; b++) {
            int64_t first = firsts[b], last = lasts[b];
            if (first < 0 || last < first || last > rows) {
                PyErr_SetString(PyExc_ValueError, "encode_records: bounds outside the rows");
                Py_CLEAR(result);
                goto done;
            }
            /* an upper bound of the batch's size, then the records written, then the bytearray trimmed */
            int64_t capacity = room;
            for (int64_t i = first; i < last; i++) {
                int32_t k = binary_length(&key, i), v = binary_length(&value, i);
                capacity += MAX_RECORD_OVERHEAD + (k > 0 ? k : 0) + (v > 0 ? v : 0);
                if (headers.present && is_valid(headers.list_valid, headers.list_valid_offset, i))
                    for (int32_t e = headers.list_offsets[i]; e < headers.list_offsets[i + 1]; e++) {
                        int32_t hv = binary_length(&headers.value, e);
                        capacity += MAX_HEADER_OVERHEAD + binary_length(&headers.key, e) + (hv > 0 ? hv : 0);
                    }
            }
            PyObject *out = PyByteArray_FromStringAndSize(NULL, capacity);
            if (!out) {
                Py_CLEAR(result);
                goto done;
            }
            uint8_t *start = (uint8_t *)PyByteArray_AS_STRING(out);
            uint8_t *p = start + room;
            int overflow = 0;
            Py_BEGIN_ALLOW_THREADS
            memset(start, 0, (size_t)room);
            for (int64_t i = first; i < last; i++) {
                int64_t timestamp_delta = (int64_t)((uint64_t)timestamps[i] - (uint64_t)base_ts[b]);
                int64_t delta = offsets[i] - base_offsets[b];
                if (delta < 0 || delta > INT32_MAX) {
                    overflow = 1;
                    break;
                }
                int32_t offset_delta = (int32_t)delta;
                int32_t k = binary_length(&key, i), v = binary_length(&value, i), header_count;
                int64_t body = record_body_size(timestamp_delta, offset_delta, k, v, &headers, i, &header_count);
                p = write_varint(p, (int32_t)body);
                *p++ = 0; /* attributes */
                p = write_varlong(p, timestamp_delta);
                p = write_varint(p, offset_delta);
                p = write_varint(p, k);
                if (k > 0) {
                    memcpy(p, key.data + key.offsets[i], (size_t)k);
                    p += k;
                }
                p = write_varint(p, v);
                if (v > 0) {
                    memcpy(p, value.data + value.offsets[i], (size_t)v);
                    p += v;
                }
                p = write_varint(p, header_count);
                if (header_count) {
                    for (int32_t e = headers.list_offsets[i]; e < headers.list_offsets[i + 1]; e++) {
                        int32_t hk = binary_length(&headers.key, e), hv = binary_length(&headers.value, e);
                        p = write_varint(p, hk);
                        memcpy(p, headers.key.data + headers.key.offsets[e], (size_t)hk);
                        p += hk;
                        p = write_varint(p, hv);
                        if (hv > 0) {
                            memcpy(p, headers.value.data + headers.value.offsets[e], (size_t)hv);
                            p += hv;
                        }
                    }
                }
            }
            Py_END_ALLOW_THREADS
            if (overflow) {
                Py_DECREF(out);
                Py_CLEAR(result);
                PyErr_SetString(PyExc_ValueError, "encode_records: an offset below its batch's base or 2^31 past it");
                goto done;
            }
            if (PyByteArray_Resize(out, p - start) < 0) {
                Py_DECREF(out);
                Py_CLEAR(result);
                goto done;
            }
            PyList_SET_ITEM(result, b, out);
        }
    }
done:
    for (int i = 0; i < 14; i++)
        if (views[i].obj)
            PyBuffer_Release(&views[i]);
    PyBuffer_Release(&firsts_view);
    PyBuffer_Release(&lasts_view);
    PyBuffer_Release(&base_offsets_view);
    PyBuffer_Release(&base_ts_view);
    PyBuffer_Release(&offsets_view);
    PyBuffer_Release(&ts_view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS, "Kafka v2 records of batches into Arrow column buffers."},
    {"encode_records", encode_records, METH_VARARGS, "Arrow columns into the records of Kafka v2 batches."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_batch", "Kafka v2 records to and from Arrow column buffers, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__record_batch(void) { return PyModule_Create(&module); }

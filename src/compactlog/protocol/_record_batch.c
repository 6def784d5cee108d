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
 *
 * The broker's storage threads call this module at the same time: it keeps no state between calls but the
 * CRC-32C table and the SSE 4.2 flag, both set once when the module is imported. Keep it so (no static
 * buffers): every call's work lives on its stack and in the objects it returns.
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
    int64_t timestamp_min, timestamp_max; /* over every record decoded */
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
        int64_t timestamp = fixed ? fixed_timestamp : (int64_t)((uint64_t)base_timestamp + (uint64_t)timestamp_delta);
        d->timestamp[row] = timestamp;
        if (timestamp < d->timestamp_min)
            d->timestamp_min = timestamp;
        if (timestamp > d->timestamp_max)
            d->timestamp_max = timestamp;

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

/* decode_records(sections, counts, base_timestamps, fixed, fixed_timestamps) -> tuple of column buffers, then
 * the smallest and the largest timestamp of all the records (INT64_MAX and INT64_MIN when there are none).
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
    d.timestamp_min = INT64_MAX;
    d.timestamp_max = INT64_MIN;
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
    result = Py_BuildValue("(NNNNNLNNNLNNLNNNNNLLLL)", offset_delta, timestamp, key_valid, key_offsets, key_data,
                           (long long)d.key_nulls, value_valid, value_offsets, value_data, (long long)d.value_nulls,
                           headers_valid, header_list_offsets, (long long)d.header_nulls,
                           growable_bytes(&d.hkey_offsets), growable_bytes(&d.hkey_data),
                           growable_bytes(&d.hvalue_valid), growable_bytes(&d.hvalue_offsets),
                           growable_bytes(&d.hvalue_data), (long long)d.hvalue_nulls, (long long)d.header_count,
                           (long long)d.timestamp_min, (long long)d.timestamp_max);
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

/* ---------------------------------------------------------------- CRC-32C */

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as Kafka's Crc32C: with the SSE 4.2 instruction
 * where the CPU has it, else a table a byte at a time. */
static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (~(c & 1) + 1));
        crc_table[i] = c;
    }
}

static uint32_t crc32c_table(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(const uint8_t *p, size_t n) {
    uint64_t crc = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        crc = _mm_crc32_u64(crc, v);
        p += 8;
        n -= 8;
    }
    uint32_t c = (uint32_t)crc;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return ~c;
}
static int have_sse42;
#define CRC_SETUP() (have_sse42 = __builtin_cpu_supports("sse4.2"))
static uint32_t crc32c(const uint8_t *p, size_t n) { return have_sse42 ? crc32c_sse42(p, n) : crc32c_table(p, n); }
#else
#define CRC_SETUP() 0
static uint32_t crc32c(const uint8_t *p, size_t n) { return crc32c_table(p, n); }
#endif

static PyObject *crc32c_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc32c(view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
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

/* The rows' columns, as encode_records and encode_batches take them. */
typedef struct {
    const int64_t *offsets, *timestamps;
    int64_t rows;
    Binary key, value;
    Headers headers;
    Py_buffer views[16]; /* offsets 0, timestamps 1, key 2-4, value 5-7, header lists 8-9, keys 10-12,
                            values 13-15 */
} Columns;

static void release_columns(Columns *c) {
    for (int i = 0; i < 16; i++)
        if (c->views[i].obj)
            PyBuffer_Release(&c->views[i]);
}

static int binary_arg(PyObject *tuple, Py_buffer views[3], Binary *c) {
    /* (validity buffer or None, validity bit offset, offsets buffer, data buffer) */
    PyObject *valid, *offsets, *data;
    long long valid_offset;
    if (!PyTuple_Check(tuple)) {
        PyErr_SetString(PyExc_TypeError, "a binary column is a tuple (validity, bit offset, offsets, data)");
        return 0;
    }
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

/* offsets, timestamps: int64 buffers; key, value: binary column tuples; headers: None or (list validity or
 * None, bit offset, list offsets, key column tuple, value column tuple). 1, or 0 with an exception set. */
static int columns_arg(Columns *c, PyObject *offsets, PyObject *timestamps, PyObject *key, PyObject *value,
                       PyObject *headers) {
    memset(c, 0, sizeof *c);
    if (PyObject_GetBuffer(offsets, &c->views[0], PyBUF_SIMPLE) < 0 ||
        PyObject_GetBuffer(timestamps, &c->views[1], PyBUF_SIMPLE) < 0)
        return 0;
    c->offsets = c->views[0].buf;
    c->timestamps = c->views[1].buf;
    c->rows = c->views[0].len / 8;
    if (c->views[1].len != c->views[0].len) {
        PyErr_SetString(PyExc_TypeError, "offsets and timestamps of different lengths");
        return 0;
    }
    if (!binary_arg(key, c->views + 2, &c->key) || !binary_arg(value, c->views + 5, &c->value))
        return 0;
    if (headers != Py_None) {
        PyObject *list_valid, *list_offsets, *hkey, *hvalue;
        long long list_valid_offset;
        if (!PyArg_ParseTuple(headers, "OLOOO", &list_valid, &list_valid_offset, &list_offsets, &hkey, &hvalue))
            return 0;
        c->headers.present = 1;
        if (list_valid != Py_None) {
            if (PyObject_GetBuffer(list_valid, &c->views[8], PyBUF_SIMPLE) < 0)
                return 0;
            c->headers.list_valid = c->views[8].buf;
        }
        c->headers.list_valid_offset = list_valid_offset;
        if (PyObject_GetBuffer(list_offsets, &c->views[9], PyBUF_SIMPLE) < 0)
            return 0;
        c->headers.list_offsets = c->views[9].buf;
        if (!binary_arg(hkey, c->views + 10, &c->headers.key) || !binary_arg(hvalue, c->views + 13, &c->headers.value))
            return 0;
    }
    return 1;
}

/* At least the bytes rows [first, last) take as records. */
static int64_t records_capacity(const Columns *c, int64_t first, int64_t last) {
    int64_t capacity = 0;
    const Headers *h = &c->headers;
    for (int64_t i = first; i < last; i++) {
        int32_t k = binary_length(&c->key, i), v = binary_length(&c->value, i);
        capacity += MAX_RECORD_OVERHEAD + (k > 0 ? k : 0) + (v > 0 ? v : 0);
        if (h->present && is_valid(h->list_valid, h->list_valid_offset, i))
            for (int32_t e = h->list_offsets[i]; e < h->list_offsets[i + 1]; e++) {
                int32_t hv = binary_length(&h->value, e);
                capacity += MAX_HEADER_OVERHEAD + binary_length(&h->key, e) + (hv > 0 ? hv : 0);
            }
    }
    return capacity;
}

/* Rows [first, last) written as records at p (room: records_capacity); the end, or NULL where an offset is
 * below base_offset or 2^31 past it. */
static uint8_t *write_records(const Columns *c, int64_t first, int64_t last, int64_t base_offset,
                              int64_t base_timestamp, uint8_t *p) {
    const Headers *h = &c->headers;
    for (int64_t i = first; i < last; i++) {
        int64_t timestamp_delta = (int64_t)((uint64_t)c->timestamps[i] - (uint64_t)base_timestamp);
        int64_t delta = c->offsets[i] - base_offset;
        if (delta < 0 || delta > INT32_MAX)
            return NULL;
        int32_t offset_delta = (int32_t)delta;
        int32_t k = binary_length(&c->key, i), v = binary_length(&c->value, i), header_count = 0;
        int64_t body = 1 + varlong_size(timestamp_delta) + varint_size(offset_delta);
        body += varint_size(k) + (k > 0 ? k : 0) + varint_size(v) + (v > 0 ? v : 0);
        if (h->present && is_valid(h->list_valid, h->list_valid_offset, i)) {
            header_count = h->list_offsets[i + 1] - h->list_offsets[i];
            for (int32_t e = h->list_offsets[i]; e < h->list_offsets[i + 1]; e++) {
                int32_t hk = binary_length(&h->key, e), hv = binary_length(&h->value, e);
                body += varint_size(hk) + hk + varint_size(hv) + (hv > 0 ? hv : 0);
            }
        }
        body += varint_size(header_count);
        p = write_varint(p, (int32_t)body);
        *p++ = 0; /* attributes */
        p = write_varlong(p, timestamp_delta);
        p = write_varint(p, offset_delta);
        p = write_varint(p, k);
        if (k > 0) {
            memcpy(p, c->key.data + c->key.offsets[i], (size_t)k);
            p += k;
        }
        p = write_varint(p, v);
        if (v > 0) {
            memcpy(p, c->value.data + c->value.offsets[i], (size_t)v);
            p += v;
        }
        p = write_varint(p, header_count);
        if (header_count) {
            for (int32_t e = h->list_offsets[i]; e < h->list_offsets[i + 1]; e++) {
                int32_t hk = binary_length(&h->key, e), hv = binary_length(&h->value, e);
                p = write_varint(p, hk);
                memcpy(p, h->key.data + h->key.offsets[e], (size_t)hk);
                p += hk;
                p = write_varint(p, hv);
                if (hv > 0) {
                    memcpy(p, h->value.data + h->value.offsets[e], (size_t)hv);
                    p += hv;
                }
            }
        }
    }
    return p;
}

static inline uint8_t *put16(uint8_t *p, int64_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    return p + 2;
}

static inline uint8_t *put32(uint8_t *p, int64_t v) {
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
    return p + 4;
}

static inline uint8_t *put64(uint8_t *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--, u >>= 8)
        p[i] = (uint8_t)u;
    return p + 8;
}

/* The fields of one batch, as encode_batches takes them: one row of an int64 array. */
enum { F_FIRST, F_LAST, F_BASE_OFFSET, F_BASE_TIMESTAMP, F_MAX_TIMESTAMP, F_LAST_OFFSET_DELTA, F_PRODUCER_ID,
       F_PRODUCER_EPOCH, F_BASE_SEQUENCE, F_ATTRIBUTES, F_FIELDS };

#define BATCH_HEADER 61

/* The 61-byte header of a batch whose records take `records` bytes, CRC over attributes .. end included. */
static void write_header(uint8_t *start, const int64_t *f, int64_t partition_leader_epoch, int64_t records) {
    uint8_t *p = put64(start, f[F_BASE_OFFSET]);
    p = put32(p, BATCH_HEADER - 12 + records);
    p = put32(p, partition_leader_epoch);
    *p++ = 2; /* magic */
    uint8_t *crc_at = p;
    p += 4;
    p = put16(p, f[F_ATTRIBUTES]);
    p = put32(p, f[F_LAST_OFFSET_DELTA]);
    p = put64(p, f[F_BASE_TIMESTAMP]);
    p = put64(p, f[F_MAX_TIMESTAMP]);
    p = put64(p, f[F_PRODUCER_ID]);
    p = put16(p, f[F_PRODUCER_EPOCH]);
    p = put32(p, f[F_BASE_SEQUENCE]);
    put32(p, f[F_LAST] - f[F_FIRST]);
    put32(crc_at, crc32c(start + 21, (size_t)(BATCH_HEADER - 21 + records)));
}

/* encode_records(firsts, lasts, base_offsets, base_timestamps, offsets, timestamps, key, value, headers)
 *   -> list of bytes, one a batch: its records, not compressed (the caller compresses them).
 * Batch b holds rows [firsts[b], lasts[b]); firsts, lasts, base_offsets and base_timestamps int64. */
static PyObject *encode_records(PyObject *self, PyObject *args) {
    Py_buffer firsts_view, lasts_view, base_offsets_view, base_ts_view;
    PyObject *offsets, *timestamps, *key_arg, *value_arg, *headers_arg;
    if (!PyArg_ParseTuple(args, "y*y*y*y*OOOOO", &firsts_view, &lasts_view, &base_offsets_view, &base_ts_view,
                          &offsets, &timestamps, &key_arg, &value_arg, &headers_arg))
        return NULL;
    Columns c;
    PyObject *result = NULL;
    if (!columns_arg(&c, offsets, timestamps, key_arg, value_arg, headers_arg))
        goto done;
    const int64_t *firsts = firsts_view.buf, *lasts = lasts_view.buf, *base_offsets = base_offsets_view.buf;
    const int64_t *base_ts = base_ts_view.buf;
    Py_ssize_t batches = base_offsets_view.len / 8;
    if (firsts_view.len != batches * 8 || lasts_view.len != batches * 8 || base_ts_view.len != batches * 8) {
        PyErr_SetString(PyExc_TypeError, "encode_records: batch arguments disagree in length");
        goto done;
    }
    if (!(result = PyList_New(batches)))
        goto done;
    for (Py_ssize_t b = 0; b < batches; b++) {
        int64_t first = firsts[b], last = lasts[b];
        if (first < 0 || last < first || last > c.rows) {
            PyErr_SetString(PyExc_ValueError, "encode_records: a batch's rows outside the rows");
            Py_CLEAR(result);
            goto done;
        }
        PyObject *out = PyBytes_FromStringAndSize(NULL, records_capacity(&c, first, last));
        if (!out) {
            Py_CLEAR(result);
            goto done;
        }
        uint8_t *start = (uint8_t *)PyBytes_AS_STRING(out), *end;
        Py_BEGIN_ALLOW_THREADS
        end = write_records(&c, first, last, base_offsets[b], base_ts[b], start);
        Py_END_ALLOW_THREADS
        if (!end) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_ValueError, "encode_records: an offset below its batch's base or 2^31 past it");
            Py_CLEAR(result);
            goto done;
        }
        if (_PyBytes_Resize(&out, end - start) < 0) { /* out is NULL then */
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, b, out);
    }
done:
    release_columns(&c);
    PyBuffer_Release(&firsts_view);
    PyBuffer_Release(&lasts_view);
    PyBuffer_Release(&base_offsets_view);
    PyBuffer_Release(&base_ts_view);
    return result;
}

/* encode_batches(fields, partition_leader_epoch, max_bytes, offsets, timestamps, key, value, headers) -> bytes
 * Uncompressed batches, headers and CRCs included, one after another. fields: int64, F_FIELDS a batch (see
 * the enum). max_bytes >= 0: stop before the batch that would pass it, but write at least one. */
static PyObject *encode_batches(PyObject *self, PyObject *args) {
    Py_buffer fields_view;
    long long partition_leader_epoch, max_bytes;
    PyObject *offsets, *timestamps, *key_arg, *value_arg, *headers_arg;
    if (!PyArg_ParseTuple(args, "y*LLOOOOO", &fields_view, &partition_leader_epoch, &max_bytes, &offsets,
                          &timestamps, &key_arg, &value_arg, &headers_arg))
        return NULL;
    Columns c;
    PyObject *out = NULL;
    if (!columns_arg(&c, offsets, timestamps, key_arg, value_arg, headers_arg))
        goto done;
    const int64_t *fields = fields_view.buf;
    Py_ssize_t batches = fields_view.len / (8 * F_FIELDS);
    if (fields_view.len != batches * 8 * F_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "encode_batches: fields are not whole batches");
        goto done;
    }
    int64_t capacity = 0;
    for (Py_ssize_t b = 0; b < batches; b++) {
        const int64_t *f = fields + b * F_FIELDS;
        if (f[F_FIRST] < 0 || f[F_LAST] < f[F_FIRST] || f[F_LAST] > c.rows) {
            PyErr_SetString(PyExc_ValueError, "encode_batches: a batch's rows outside the rows");
            goto done;
        }
        capacity += BATCH_HEADER + records_capacity(&c, f[F_FIRST], f[F_LAST]);
    }
    if (!(out = PyBytes_FromStringAndSize(NULL, capacity)))
        goto done;
    uint8_t *start = (uint8_t *)PyBytes_AS_STRING(out), *p = start;
    int overflow = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < batches; b++) {
        const int64_t *f = fields + b * F_FIELDS;
        uint8_t *end = write_records(&c, f[F_FIRST], f[F_LAST], f[F_BASE_OFFSET], f[F_BASE_TIMESTAMP],
                                     p + BATCH_HEADER);
        if (!end) {
            overflow = 1;
            break;
        }
        if (max_bytes >= 0 && b > 0 && end - start > max_bytes)
            break; /* p stays at this batch's start */
        write_header(p, f, partition_leader_epoch, end - p - BATCH_HEADER);
        p = end;
    }
    Py_END_ALLOW_THREADS
    if (overflow) {
        PyErr_SetString(PyExc_ValueError, "encode_batches: an offset below its batch's base or 2^31 past it");
        Py_CLEAR(out);
        goto done;
    }
    _PyBytes_Resize(&out, p - start); /* on failure out is NULL with the exception set */
done:
    release_columns(&c);
    PyBuffer_Release(&fields_view);
    return out;
}

/* write_header(buffer, fields, partition_leader_epoch): the 61-byte header (CRC included) written at the
 * start of a bytearray that holds one batch: the header's room, then its (compressed) records. */
static PyObject *write_header_py(PyObject *self, PyObject *args) {
    Py_buffer target, fields_view;
    long long partition_leader_epoch;
    if (!PyArg_ParseTuple(args, "w*y*L", &target, &fields_view, &partition_leader_epoch))
        return NULL;
    PyObject *result = NULL;
    if (fields_view.len != 8 * F_FIELDS || target.len < BATCH_HEADER)
        PyErr_SetString(PyExc_TypeError, "write_header: one batch's fields and a buffer of at least its header");
    else {
        write_header(target.buf, fields_view.buf, partition_leader_epoch, target.len - BATCH_HEADER);
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&target);
    PyBuffer_Release(&fields_view);
    return result;
}

/* ---------------------------------------------------------------- batch headers */

static inline int64_t get16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

static inline int64_t get32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

/* The fields scan_batches gives for each batch, in this order. */
enum { S_BASE_OFFSET, S_BATCH_LENGTH, S_LEADER_EPOCH, S_MAGIC, S_CRC, S_ATTRIBUTES, S_LAST_OFFSET_DELTA,
       S_BASE_TIMESTAMP, S_MAX_TIMESTAMP, S_PRODUCER_ID, S_PRODUCER_EPOCH, S_BASE_SEQUENCE, S_COUNT, S_START,
       S_FIELDS };

/* scan_batches(data) -> bytes of int64, S_FIELDS a batch: every batch's header, each checked: a whole header,
 * a batchLength that fits, magic 2, its CRC-32C, no negative count or lastOffsetDelta. ValueError otherwise. */
static PyObject *scan_batches(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    const uint8_t *data = view.buf;
    int64_t total = view.len, position = 0, batches = 0;
    char error[200] = "";
    /* a first pass for the count (lengths only), then the checks and fields */
    while (position < total && total - position >= 12) {
        int64_t length = get32(data + position + 8);
        if (length < BATCH_HEADER - 12)
            break;
        position += 12 + length;
        batches++;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(batches + 1) * S_FIELDS * 8);
    if (!out) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t *fields = (int64_t *)PyBytes_AS_STRING(out);
    int64_t found = 0;
    position = 0;
    Py_BEGIN_ALLOW_THREADS
    while (position < total) {
        const uint8_t *p = data + position;
        if (total - position < BATCH_HEADER) {
            snprintf(error, sizeof error, "batch at byte %lld: %lld bytes, fewer than the %d of a batch header",
                     (long long)position, (long long)(total - position), BATCH_HEADER);
            break;
        }
        int64_t length = get32(p + 8);
        if (length < BATCH_HEADER - 12 || length > total - position - 12) {
            snprintf(error, sizeof error, "batch at byte %lld: batchLength %lld does not fit the %lld bytes after it",
                     (long long)position, (long long)length, (long long)(total - position - 12));
            break;
        }
        if (p[16] != 2) {
            snprintf(error, sizeof error, "batch at byte %lld: magic %d; only v2 batches (magic 2) are read",
                     (long long)position, (int8_t)p[16]);
            break;
        }
        uint32_t stored = (uint32_t)get32(p + 17), actual = crc32c(p + 21, (size_t)(length + 12 - 21));
        if (stored != actual) {
            snprintf(error, sizeof error, "batch at byte %lld: CRC-32C %#010x, header says %#010x", (long long)position,
                     actual, stored);
            break;
        }
        if (found >= batches) { /* the first pass stopped early: cannot happen once lengths check out */
            snprintf(error, sizeof error, "batch at byte %lld: more batches than counted", (long long)position);
            break;
        }
        int64_t *f = fields + found * S_FIELDS;
        f[S_BASE_OFFSET] = get64(p);
        f[S_BATCH_LENGTH] = length;
        f[S_LEADER_EPOCH] = get32(p + 12);
        f[S_MAGIC] = 2;
        f[S_CRC] = stored;
        f[S_ATTRIBUTES] = get16(p + 21);
        f[S_LAST_OFFSET_DELTA] = get32(p + 23);
        f[S_BASE_TIMESTAMP] = get64(p + 27);
        f[S_MAX_TIMESTAMP] = get64(p + 35);
        f[S_PRODUCER_ID] = get64(p + 43);
        f[S_PRODUCER_EPOCH] = get16(p + 51);
        f[S_BASE_SEQUENCE] = get32(p + 53);
        f[S_COUNT] = get32(p + 57);
        f[S_START] = position;
        if (f[S_COUNT] < 0 || f[S_LAST_OFFSET_DELTA] < 0) {
            snprintf(error, sizeof error, "batch at byte %lld: recordsCount %lld, lastOffsetDelta %lld: negative",
                     (long long)position, (long long)f[S_COUNT], (long long)f[S_LAST_OFFSET_DELTA]);
            break;
        }
        found++;
        position += 12 + length;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (error[0]) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    if (_PyBytes_Resize(&out, (Py_ssize_t)found * S_FIELDS * 8) < 0)
        return NULL;
    return out;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS, "Kafka v2 records of batches into Arrow column buffers."},
    {"encode_records", encode_records, METH_VARARGS, "Arrow columns into the records of Kafka v2 batches."},
    {"encode_batches", encode_batches, METH_VARARGS, "Arrow columns into uncompressed Kafka v2 batches."},
    {"write_header", write_header_py, METH_VARARGS, "A v2 batch header, CRC-32C included."},
    {"crc32c", crc32c_py, METH_VARARGS, "CRC-32C (Castagnoli) of a buffer."},
    {"scan_batches", scan_batches, METH_VARARGS, "Every v2 batch header of a buffer, checked."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_batch", "Kafka v2 records to and from Arrow column buffers, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__record_batch(void) {
    crc_init();
    CRC_SETUP();
    return PyModule_Create(&module);
}

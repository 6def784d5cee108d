/* The offset map's table: exact keys to their newest offsets (see offset_map.py for the map's rules).
 *
 * Layout, chosen so that finding a key costs two cache misses, fetched ahead (see visit()):
 *   - entries are records appended to one arena in order of insertion, each 8-byte aligned:
 *     [int64 offset][uint32 key length][key bytes]; an entry's handle is its position / 8;
 *   - an open-addressing index (linear probing, at most half full) of 64-bit slots: 0 is empty, else the
 *     high 32 bits of the key's hash above (handle + 1), so most probes are decided without reading a key;
 *   - a key is found by its hash and confirmed by comparing its bytes: a collision never merges two keys;
 *   - the hash is seeded per table (the caller passes a random seed), so no fixed set of keys collides.
 *
 * Keys come as the two buffers of an Arrow binary array: offsets (int32 or int64, one more than rows) and
 * data. Every loop runs without the GIL; a table is used by one thread at a time (a second caller gets an
 * error, never a torn table). Memory per entry: 12 bytes of record header, the key, up to 7 bytes of
 * alignment, and 16-32 bytes of index.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE /* mremap */
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TAG_MASK 0xFFFFFFFF00000000ULL
#define HEADER 12                     /* int64 offset, uint32 key length */
#define MAX_ARENA (((int64_t)1) << 34) /* handles (position / 8) must fit an int32 */
/* How far ahead rows are fetched (see visit()). Measured, 1M keys, 5M rows: 68 ns a put and 52 a find with
 * blocks of 8 to 64 rows, against 104 and 65-96 fetching one row at a time 8 and 16 rows ahead. */
#define BLOCK 16
#define RING (4 * BLOCK) /* hashes of rows from the one visited to the end of the block after next */
#define AHEAD_SLOT 16     /* rebuild_index(): entries hashed (and their new slots fetched) this far ahead */

typedef struct {
    PyObject_HEAD
    uint64_t seed;
    uint64_t hash_mask; /* all ones; fewer bits only in tests, to make every key collide */
    uint64_t *slots;
    uint64_t mask; /* slot count - 1 */
    int64_t count;
    int64_t key_bytes; /* the entries' keys, without headers */
    uint8_t *arena;
    int64_t used; /* arena bytes written */
    int64_t arena_capacity;
    int busy;
} KeyTable;

/* The keys of one call: row i is data[off(i) : off(i + 1)]. */
typedef struct {
    const void *offsets;
    int wide; /* int64 offsets */
    const uint8_t *data;
    Py_ssize_t rows;
} Keys;

static inline int64_t key_at(const Keys *k, Py_ssize_t i) {
    return k->wide ? ((const int64_t *)k->offsets)[i] : (int64_t)((const int32_t *)k->offsets)[i];
}

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline int64_t record_offset(const KeyTable *t, int64_t handle) {
    int64_t v;
    memcpy(&v, t->arena + handle * 8, 8);
    return v;
}

static inline void set_record_offset(KeyTable *t, int64_t handle, int64_t offset) {
    memcpy(t->arena + handle * 8, &offset, 8);
}

static inline int64_t record_length(const KeyTable *t, int64_t position) {
    uint32_t n;
    memcpy(&n, t->arena + position + 8, 4);
    return n;
}

static inline int64_t record_size(int64_t n) { return (HEADER + n + 7) & ~(int64_t)7; }

static inline uint64_t finish(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static inline uint64_t hash_bytes(uint64_t seed, const uint8_t *p, int64_t n) {
    uint64_t h = seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL);
    while (n >= 8) {
        h = (h ^ load64(p)) * 0x94d049bb133111ebULL;
        h = (h << 29) | (h >> 35);
        p += 8;
        n -= 8;
    }
    if (n > 0) {
        uint64_t tail = 0;
        memcpy(&tail, p, (size_t)n);
        h = (h ^ tail) * 0xbf58476d1ce4e5b9ULL;
    }
    return finish(h);
}

static inline uint64_t key_hash(const KeyTable *t, const uint8_t *p, int64_t n) {
    return hash_bytes(t->seed, p, n) & t->hash_mask;
}

/* Whether two runs of n bytes are equal (keys are mostly short: no call for 16 bytes or fewer). */
static inline int same_bytes(const uint8_t *x, const uint8_t *y, int64_t n) {
    if (n >= 8 && n <= 16)
        return load64(x) == load64(y) && load64(x + n - 8) == load64(y + n - 8);
    if (n > 16)
        return memcmp(x, y, (size_t)n) == 0;
    for (int64_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return 0;
    return 1;
}

/* The handle of the entry holding the key, or -1 with *empty set to the slot where it would go. */
static inline int64_t probe(const KeyTable *t, uint64_t h, const uint8_t *key, int64_t n, uint64_t **empty) {
    uint64_t tag = h & TAG_MASK;
    uint64_t i = h & t->mask;
    for (;;) {
        uint64_t s = t->slots[i];
        if (s == 0) {
            *empty = &t->slots[i];
            return -1;
        }
        if ((s & TAG_MASK) == tag) {
            int64_t handle = (int64_t)(s & 0xFFFFFFFFULL) - 1;
            const uint8_t *record = t->arena + handle * 8;
            uint32_t length;
            memcpy(&length, record + 8, 4);
            if (length == n && same_bytes(record + HEADER, key, n))
                return handle;
        }
        i = (i + 1) & t->mask;
    }
}

/* The table's arrays are mapped from the OS (zeroed, freed at once on release) with huge pages asked for: a
 * table larger than the cache otherwise pays a TLB miss on top of the cache miss of every random access. */
static void *region_alloc(size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (size >= (2u << 20))
        madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
}

static void region_free(void *p, size_t size) {
    if (p)
        munmap(p, size);
}

/* A region made larger. Where the OS can move pages (mremap), nothing is copied and the old and new
 * regions never take memory at once (a copy would, for a moment, hold both). */
static void *region_grow(void *p, size_t old, size_t size) {
#ifdef MREMAP_MAYMOVE
    if (p) {
        void *q = mremap(p, old, size, MREMAP_MAYMOVE);
        if (q != MAP_FAILED) {
#ifdef MADV_HUGEPAGE
            if (size >= (2u << 20))
                madvise(q, size, MADV_HUGEPAGE);
#endif
            return q;
        }
    }
#endif
    void *q = region_alloc(size);
    if (q && p) {
        memcpy(q, p, old);
        region_free(p, old);
    }
    return q;
}

/* Place every entry in a fresh index of `slots` slots (entries hashed a few ahead, their slots fetched). */
static int rebuild_index(KeyTable *t, uint64_t slots) {
    uint64_t *index = region_alloc((size_t)slots * 8);
    if (!index)
        return 0;
    uint64_t mask = slots - 1;
    uint64_t hashes[RING];
    int64_t handles[RING];
    int64_t next = 0; /* arena position of the next entry to hash */
    for (int64_t e = 0; e < t->count + AHEAD_SLOT; e++) {
        if (e < t->count) {
            int64_t n = record_length(t, next);
            uint64_t h = key_hash(t, t->arena + next + HEADER, n);
            hashes[e & (RING - 1)] = h;
            handles[e & (RING - 1)] = next / 8;
            __builtin_prefetch(&index[h & mask], 1);
            next += record_size(n);
        }
        int64_t placed = e - AHEAD_SLOT;
        if (placed < 0)
            continue;
        uint64_t h = hashes[placed & (RING - 1)];
        uint64_t i = h & mask;
        while (index[i])
            i = (i + 1) & mask;
        index[i] = (h & TAG_MASK) | (uint64_t)(handles[placed & (RING - 1)] + 1);
    }
    region_free(t->slots, (size_t)(t->mask + 1) * 8);
    t->slots = index;
    t->mask = mask;
    return 1;
}

/* Room for one more entry of n key bytes; 0 on failure (out of memory). */
static int reserve(KeyTable *t, int64_t n) {
    int64_t need = t->used + record_size(n);
    if (need > t->arena_capacity) {
        int64_t size = t->arena_capacity ? t->arena_capacity : 1 << 16;
        while (size < need)
            size *= 2;
        uint8_t *arena = region_grow(t->arena, (size_t)t->arena_capacity, (size_t)size);
        if (!arena)
            return 0;
        t->arena = arena;
        t->arena_capacity = size;
    }
    if (2 * (uint64_t)(t->count + 1) > t->mask + 1)
        return rebuild_index(t, 2 * (t->mask + 1));
    return 1;
}

/* Append an entry (reserve() succeeded, and probe() gave the slot since). */
static inline int64_t insert(KeyTable *t, uint64_t h, uint64_t *slot, const uint8_t *key, int64_t n, int64_t offset) {
    int64_t position = t->used;
    uint8_t *record = t->arena + position;
    uint32_t length = (uint32_t)n;
    memcpy(record, &offset, 8);
    memcpy(record + 8, &length, 4);
    memcpy(record + HEADER, key, (size_t)n);
    t->used = position + record_size(n);
    t->count++;
    t->key_bytes += n;
    *slot = (h & TAG_MASK) | (uint64_t)(position / 8 + 1);
    return position / 8;
}

/* Remove the entries written from arena position `from` on, newest first (exact for linear probing: no later
 * entry's probe sequence can pass through a slot that is emptied). */
static int truncate_to(KeyTable *t, int64_t from) {
    int64_t removed = 0;
    for (int64_t p = from; p < t->used; p += record_size(record_length(t, p)))
        removed++;
    int64_t *positions = malloc((size_t)(removed ? removed : 1) * sizeof(int64_t));
    if (!positions)
        return 0;
    int64_t r = 0;
    for (int64_t p = from; p < t->used; p += record_size(record_length(t, p)))
        positions[r++] = p;
    while (r > 0) {
        int64_t p = positions[--r];
        t->key_bytes -= record_length(t, p);
        uint64_t h = key_hash(t, t->arena + p + HEADER, record_length(t, p));
        uint64_t i = h & t->mask;
        while ((t->slots[i] & 0xFFFFFFFFULL) != (uint64_t)(p / 8 + 1))
            i = (i + 1) & t->mask;
        t->slots[i] = 0;
    }
    free(positions);
    t->count -= removed;
    t->used = from;
    return 1;
}

/* Fetching ahead. A probe is a chain of two dependent loads (slot, then record), each a cache miss once the
 * table outgrows the cache, so rows are visited in a pipeline: while a block of rows is probed, the next
 * block's records and the block after's slots are being fetched. The fetches are hints computed from the
 * table as it is then; probe() alone decides. */
typedef struct {
    const Keys *keys;
    int backward; /* rows visited from the last */
    uint64_t hash[RING];
} Ahead;

static inline Py_ssize_t row_of(const Ahead *p, Py_ssize_t j) { return p->backward ? p->keys->rows - 1 - j : j; }

static inline void fetch_slot(const KeyTable *t, Ahead *p, Py_ssize_t j) {
    Py_ssize_t i = row_of(p, j);
    int64_t a = key_at(p->keys, i);
    uint64_t h = key_hash(t, p->keys->data + a, key_at(p->keys, i + 1) - a);
    p->hash[j & (RING - 1)] = h;
    __builtin_prefetch(&t->slots[h & t->mask]);
}

static inline void fetch_record(const KeyTable *t, Ahead *p, Py_ssize_t j) {
    uint64_t h = p->hash[j & (RING - 1)];
    uint64_t s = t->slots[h & t->mask];
    if (s && (s & TAG_MASK) == (h & TAG_MASK)) {
        int64_t position = ((int64_t)(s & 0xFFFFFFFFULL) - 1) * 8;
        if (position < t->used) {
            __builtin_prefetch(t->arena + position, 1);
            __builtin_prefetch(t->arena + position + 31);
        }
    }
}

/* The hash of the j-th row visited, with the rows after it fetched ahead, a block at a time: at the start of
 * each block of BLOCK rows, the slots of the block after next and the records of the next block are asked
 * for, so every fetch has at least a block's worth of work to arrive in, and the fetches of a block are
 * independent of each other (their misses overlap). */
static inline uint64_t visit(const KeyTable *t, Ahead *p, Py_ssize_t j) {
    Py_ssize_t rows = p->keys->rows;
    if ((j & (BLOCK - 1)) == 0) {
        if (j == 0) {
            for (Py_ssize_t q = 0; q < 2 * BLOCK && q < rows; q++)
                fetch_slot(t, p, q);
            for (Py_ssize_t q = 0; q < BLOCK && q < rows; q++)
                fetch_record(t, p, q);
        }
        for (Py_ssize_t q = j + 2 * BLOCK; q < j + 3 * BLOCK && q < rows; q++)
            fetch_slot(t, p, q);
        for (Py_ssize_t q = j + BLOCK; q < j + 2 * BLOCK && q < rows; q++)
            fetch_record(t, p, q);
    }
    return p->hash[j & (RING - 1)];
}

/* ---- argument handling ---------------------------------------------------------------------------- */

typedef struct {
    Py_buffer offsets, data;
    int have_offsets, have_data;
} KeyBuffers;

static void release_keys(KeyBuffers *b) {
    if (b->have_offsets)
        PyBuffer_Release(&b->offsets);
    if (b->have_data)
        PyBuffer_Release(&b->data);
}

static int get_keys(PyObject *offsets, PyObject *data, KeyBuffers *b, Keys *k) {
    b->have_offsets = b->have_data = 0;
    if (PyObject_GetBuffer(offsets, &b->offsets, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return 0;
    b->have_offsets = 1;
    Py_ssize_t size = b->offsets.itemsize;
    if ((size != 4 && size != 8) || b->offsets.len < size) {
        PyErr_SetString(PyExc_ValueError, "key offsets must be int32 or int64 with at least one element");
        return 0;
    }
    if (PyObject_GetBuffer(data, &b->data, PyBUF_C_CONTIGUOUS) < 0)
        return 0;
    b->have_data = 1;
    k->offsets = b->offsets.buf;
    k->wide = size == 8;
    k->data = b->data.buf;
    k->rows = b->offsets.len / size - 1;
    int64_t low = key_at(k, 0), high = key_at(k, k->rows);
    if (low < 0 || high > b->data.len || high < low) {
        PyErr_SetString(PyExc_ValueError, "key offsets point outside the key data");
        return 0;
    }
    for (Py_ssize_t i = 0; i < k->rows; i++) {
        int64_t n = key_at(k, i + 1) - key_at(k, i);
        if (n < 0 || n > UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "key offsets must not decrease (nor a key pass 4 GiB)");
            return 0;
        }
    }
    return 1;
}

static int get_array(PyObject *object, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t rows, int writable,
                     const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, view, flags) < 0)
        return 0;
    if (view->itemsize != itemsize || view->len != rows * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd items of %zd bytes", what, rows, itemsize);
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

static int enter(KeyTable *t) {
    if (t->busy) {
        PyErr_SetString(PyExc_RuntimeError, "key table used by two threads at once");
        return 0;
    }
    t->busy = 1;
    return 1;
}

/* ---- methods ---------------------------------------------------------------------------------------- */

/* The buffers of one call: keys, and the int64 record offsets and int32 entries when the call takes them. */
typedef struct {
    KeyBuffers b;
    Keys k;
    Py_buffer records, entries;
    int have_records, have_entries, entered;
} Call;

static void end_call(KeyTable *t, Call *c) {
    if (c->entered)
        t->busy = 0;
    if (c->have_entries)
        PyBuffer_Release(&c->entries);
    if (c->have_records)
        PyBuffer_Release(&c->records);
    release_keys(&c->b);
}

/* Take a call's buffers (records, entries: NULL or None when not given; `needs_entries`, when not NULL, is
 * the error for entries of None; `entry_size`: 4 for int32 entry handles, 8 for int64 offsets) and the
 * table; 0 with an error set and nothing held otherwise. end_call() releases what a successful call took. */
static int begin_call(KeyTable *t, Call *c, PyObject *offsets, PyObject *data, PyObject *records, PyObject *entries,
                      const char *needs_entries, Py_ssize_t entry_size) {
    c->have_records = c->have_entries = c->entered = 0;
    c->b.have_offsets = c->b.have_data = 0;
    if (needs_entries && entries == Py_None) {
        PyErr_SetString(PyExc_ValueError, needs_entries);
        return 0;
    }
    if (!get_keys(offsets, data, &c->b, &c->k) ||
        (records && !(c->have_records = get_array(records, &c->records, 8, c->k.rows, 0, "record offsets"))) ||
        (entries && entries != Py_None &&
         !(c->have_entries = get_array(entries, &c->entries, entry_size, c->k.rows, 1,
                                       entry_size == 8 ? "offsets" : "entries"))) ||
        !(c->entered = enter(t))) {
        end_call(t, c);
        return 0;
    }
    return 1;
}

/* find (want_offsets 0): each key's entry handle (int32); lookup (1): its newest offset (int64); -1 if absent. */
static PyObject *find(KeyTable *t, PyObject *args, int want_offsets) {
    PyObject *offsets, *data, *out;
    if (!PyArg_ParseTuple(args, "OOO", &offsets, &data, &out))
        return NULL;
    Call c;
    if (!begin_call(t, &c, offsets, data, NULL, out,
                    want_offsets ? "lookup needs an offsets array" : "find needs an entries array",
                    want_offsets ? 8 : 4))
        return NULL;
    const Keys *k = &c.k;
    int32_t *entry_of = want_offsets ? NULL : c.entries.buf;
    int64_t *offset_of = want_offsets ? c.entries.buf : NULL;
    Py_BEGIN_ALLOW_THREADS
    Ahead ahead = {.keys = k, .backward = 0};
    for (Py_ssize_t i = 0; i < k->rows; i++) {
        int64_t e = -1;
        if (t->count) {
            uint64_t h = visit(t, &ahead, i);
            int64_t a = key_at(k, i);
            uint64_t *slot;
            e = probe(t, h, k->data + a, key_at(k, i + 1) - a, &slot);
        }
        if (offset_of)
            offset_of[i] = e < 0 ? -1 : record_offset(t, e);
        else
            entry_of[i] = (int32_t)e;
    }
    Py_END_ALLOW_THREADS
    end_call(t, &c);
    Py_RETURN_NONE;
}

static PyObject *KeyTable_find(KeyTable *t, PyObject *args) { return find(t, args, 0); }
static PyObject *KeyTable_lookup(KeyTable *t, PyObject *args) { return find(t, args, 1); }

enum { PUT_LATEST, PUT_OLDER, PUT_MAX };

/* The three ways records enter the map (see offset_map.py); each returns how many rows it took:
 *   PUT_LATEST: rows in offset order, a row's offset replaces its key's; stops before the first row whose new
 *               key does not fit `room` bytes (the rows before it stay in).
 *   PUT_OLDER:  rows older than every entry, in offset order: walked from the last, so a new key gets its
 *               newest row's offset and a key present keeps its own; all or nothing (-1: nothing changed).
 *   PUT_MAX:    distinct keys with offsets: a new key is added, a present key keeps the larger offset; all or
 *               nothing, as PUT_OLDER.
 * A new key costs its length plus `overhead` bytes of `room`. The output array (None for PUT_LATEST and
 * PUT_OLDER) gets, for PUT_LATEST and PUT_MAX, each row's entry handle (int32); for PUT_OLDER, the newest
 * offset of each row's key (int64): the row's own offset exactly when the row is its key's newest. */
static PyObject *put(KeyTable *t, PyObject *args, int mode) {
    PyObject *offsets, *data, *record_offsets, *out;
    long long room, overhead;
    if (!PyArg_ParseTuple(args, "OOOOLL", &offsets, &data, &record_offsets, &out, &room, &overhead))
        return NULL;
    Call c;
    if (!begin_call(t, &c, offsets, data, record_offsets, out,
                    mode == PUT_MAX ? "put_max needs an entries array" : NULL, mode == PUT_OLDER ? 8 : 4))
        return NULL;
    const Keys *k = &c.k;
    const int64_t *record = c.records.buf;
    int32_t *entry_of = c.have_entries && mode != PUT_OLDER ? c.entries.buf : NULL;
    int64_t *newest_of = c.have_entries && mode == PUT_OLDER ? c.entries.buf : NULL;
    int64_t before = t->used, used = 0;
    Py_ssize_t taken = 0;
    int refused = 0, no_memory = 0;
    Py_BEGIN_ALLOW_THREADS
    Ahead ahead = {.keys = k, .backward = mode == PUT_OLDER};
    for (Py_ssize_t j = 0; j < k->rows; j++) {
        /* PUT_OLDER walks the rows from the last: the first row met of a new key is its newest. */
        Py_ssize_t i = row_of(&ahead, j);
        uint64_t h = visit(t, &ahead, j);
        int64_t a = key_at(k, i), n = key_at(k, i + 1) - a;
        uint64_t *slot = NULL;
        int64_t e = probe(t, h, k->data + a, n, &slot);
        if (e < 0) {
            if (used + n + overhead > room || t->used + record_size(n) > MAX_ARENA) {
                refused = 1;
                break;
            }
            uint64_t mask = t->mask;
            if (!reserve(t, n)) {
                no_memory = refused = 1;
                break;
            }
            if (t->mask != mask) /* the index grew: the key's empty slot moved */
                probe(t, h, k->data + a, n, &slot);
            e = insert(t, h, slot, k->data + a, n, record[i]);
            used += n + overhead;
        } else if (mode == PUT_LATEST) {
            set_record_offset(t, e, record[i]);
        }
        if (entry_of)
            entry_of[i] = (int32_t)e;
        else if (newest_of) /* the record was just read by probe() or written by insert(): in the cache */
            newest_of[i] = record_offset(t, e);
        taken++;
    }
    if (refused && mode != PUT_LATEST) {
        if (!truncate_to(t, before))
            no_memory = 1;
        taken = -1;
    } else if (mode == PUT_MAX) {
        for (Py_ssize_t i = 0; i < k->rows; i++) {
            int64_t e = entry_of[i];
            if (e * 8 < before && record[i] > record_offset(t, e))
                set_record_offset(t, e, record[i]);
        }
    }
    Py_END_ALLOW_THREADS
    end_call(t, &c);
    if (no_memory)
        return PyErr_NoMemory();
    return PyLong_FromSsize_t(taken);
}

static PyObject *KeyTable_put_latest(KeyTable *t, PyObject *args) { return put(t, args, PUT_LATEST); }
static PyObject *KeyTable_put_older(KeyTable *t, PyObject *args) { return put(t, args, PUT_OLDER); }
static PyObject *KeyTable_put_max(KeyTable *t, PyObject *args) { return put(t, args, PUT_MAX); }

/* offsets_of(entries int32, out int64): each entry's offset, -1 for a negative entry. Handles are checked
 * only against the arena's end (a handle is trusted to come from this table). */
static PyObject *KeyTable_offsets_of(KeyTable *t, PyObject *args) {
    PyObject *in, *out;
    if (!PyArg_ParseTuple(args, "OO", &in, &out))
        return NULL;
    Py_buffer entries, found;
    if (PyObject_GetBuffer(in, &entries, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (entries.itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "entries must be int32");
        PyBuffer_Release(&entries);
        return NULL;
    }
    Py_ssize_t rows = entries.len / 4;
    if (!get_array(out, &found, 8, rows, 1, "offsets")) {
        PyBuffer_Release(&entries);
        return NULL;
    }
    const int32_t *e = entries.buf;
    int64_t *o = found.buf;
    int bad = 0;
    if (!enter(t)) {
        PyBuffer_Release(&found);
        PyBuffer_Release(&entries);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++) {
        int64_t x = e[i];
        if (x * 8 >= t->used) {
            bad = 1;
            x = -1;
        }
        o[i] = x < 0 ? -1 : record_offset(t, x);
    }
    Py_END_ALLOW_THREADS
    t->busy = 0;
    PyBuffer_Release(&found);
    PyBuffer_Release(&entries);
    if (bad) {
        PyErr_SetString(PyExc_IndexError, "entry handle past the table's entries");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* export() -> (starts, keys, offsets): the entries in order of insertion, as bytes: int64 key starts (one
 * more than entries), the key bytes, int64 offsets. */
static PyObject *KeyTable_export(KeyTable *t, PyObject *Py_UNUSED(ignored)) {
    int64_t n = t->count, key_bytes = t->key_bytes;
    PyObject *starts = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n + 1) * 8));
    PyObject *keys = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)key_bytes);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
    if (!starts || !keys || !offsets) {
        Py_XDECREF(starts);
        Py_XDECREF(keys);
        Py_XDECREF(offsets);
        return NULL;
    }
    int64_t *s = (int64_t *)PyBytes_AS_STRING(starts), *o = (int64_t *)PyBytes_AS_STRING(offsets);
    uint8_t *d = (uint8_t *)PyBytes_AS_STRING(keys);
    int64_t e = 0, at = 0;
    s[0] = 0;
    for (int64_t p = 0; p < t->used; p += record_size(record_length(t, p)), e++) {
        int64_t length = record_length(t, p);
        memcpy(d + at, t->arena + p + HEADER, (size_t)length);
        at += length;
        s[e + 1] = at;
        o[e] = record_offset(t, p / 8);
    }
    return Py_BuildValue("(NNN)", starts, keys, offsets);
}

/* arena() -> bytes: the entries as they lie (what restore() takes; handles stay valid across the two). */
static PyObject *KeyTable_arena(KeyTable *t, PyObject *Py_UNUSED(ignored)) {
    return PyBytes_FromStringAndSize(t->arena ? (const char *)t->arena : "", (Py_ssize_t)t->used);
}

/* restore(arena): an empty table takes the entries arena() gave, and indexes them. */
static PyObject *KeyTable_restore(KeyTable *t, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    const uint8_t *data = view.buf;
    int64_t size = view.len, count = 0, key_bytes = 0, p = 0;
    while (p < size) {
        uint32_t n;
        if (p + HEADER > size) {
            p = -1;
            break;
        }
        memcpy(&n, data + p + 8, 4);
        p += record_size(n);
        count++;
        key_bytes += n;
    }
    if (p != size || size > MAX_ARENA || t->count || t->busy) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, p != size ? "not an arena of entries" : "restore needs an empty table");
        return NULL;
    }
    int ok = 1;
    if (size) {
        uint64_t slots = 16;
        while (slots < 2 * (uint64_t)count + 2)
            slots *= 2;
        t->arena = region_alloc((size_t)size);
        if (t->arena) {
            memcpy(t->arena, data, (size_t)size);
            t->arena_capacity = t->used = size;
            t->count = count;
            t->key_bytes = key_bytes;
            ok = rebuild_index(t, slots);
        } else {
            ok = 0;
        }
    }
    PyBuffer_Release(&view);
    if (!ok)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static Py_ssize_t KeyTable_len(KeyTable *t) { return (Py_ssize_t)t->count; }

static PyObject *KeyTable_key_bytes(KeyTable *t, void *Py_UNUSED(closure)) {
    return PyLong_FromLongLong((long long)t->key_bytes);
}

static int KeyTable_init(KeyTable *t, PyObject *args, PyObject *kwds) {
    static char *names[] = {"seed", "hash_mask", NULL};
    unsigned long long seed, hash_mask = ~0ULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "K|K", names, &seed, &hash_mask))
        return -1;
    if (t->slots) {
        PyErr_SetString(PyExc_RuntimeError, "a key table is initialised once");
        return -1;
    }
    t->seed = seed;
    t->hash_mask = hash_mask;
    t->slots = region_alloc(16 * 8);
    if (!t->slots) {
        PyErr_NoMemory();
        return -1;
    }
    t->mask = 15;
    return 0;
}

static void KeyTable_dealloc(KeyTable *t) {
    region_free(t->slots, (size_t)(t->mask + 1) * 8);
    region_free(t->arena, (size_t)t->arena_capacity);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyMethodDef KeyTable_methods[] = {
    {"find", (PyCFunction)KeyTable_find, METH_VARARGS,
     "find(key_offsets, key_data, entries): each key's entry handle into entries (int32), -1 if absent."},
    {"put_latest", (PyCFunction)KeyTable_put_latest, METH_VARARGS,
     "put_latest(key_offsets, key_data, offsets, entries, room, overhead) -> rows taken (offset order, "
     "newest wins; stops at the first new key that does not fit room bytes)."},
    {"lookup", (PyCFunction)KeyTable_lookup, METH_VARARGS,
     "lookup(key_offsets, key_data, offsets): each key's newest offset into offsets (int64), -1 if absent."},
    {"put_older", (PyCFunction)KeyTable_put_older, METH_VARARGS,
     "put_older(key_offsets, key_data, offsets, newest, room, overhead) -> rows, or -1 changing nothing; "
     "newest (int64 or None) gets each row's key's newest offset."},
    {"put_max", (PyCFunction)KeyTable_put_max, METH_VARARGS,
     "put_max(key_offsets, key_data, offsets, entries, room, overhead) -> rows, or -1 changing nothing."},
    {"offsets_of", (PyCFunction)KeyTable_offsets_of, METH_VARARGS,
     "offsets_of(entries, out): each entry's offset (int64), -1 for a negative entry."},
    {"arena", (PyCFunction)KeyTable_arena, METH_NOARGS, "arena() -> bytes: the entries as they lie."},
    {"restore", (PyCFunction)KeyTable_restore, METH_VARARGS,
     "restore(arena): an empty table takes the entries arena() gave (entry handles stay valid)."},
    {"export", (PyCFunction)KeyTable_export, METH_NOARGS,
     "export() -> (starts, keys, offsets) as bytes, in order of insertion."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef KeyTable_getset[] = {
    {"key_bytes", (getter)KeyTable_key_bytes, NULL, "bytes of the keys held", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods KeyTable_sequence = {.sq_length = (lenfunc)KeyTable_len};

static PyTypeObject KeyTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "compactlog.cleaner._key_table.KeyTable",
    .tp_basicsize = sizeof(KeyTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KeyTable(seed, hash_mask=2**64-1): exact keys to entry handles and offsets (the offset map's "
              "table).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)KeyTable_init,
    .tp_dealloc = (destructor)KeyTable_dealloc,
    .tp_methods = KeyTable_methods,
    .tp_getset = KeyTable_getset,
    .tp_as_sequence = &KeyTable_sequence,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_key_table", "The offset map's table of exact keys, in C.", -1, NULL,
};

PyMODINIT_FUNC PyInit__key_table(void) {
    if (PyType_Ready(&KeyTableType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&KeyTableType);
    if (PyModule_AddObject(m, "KeyTable", (PyObject *)&KeyTableType) < 0) {
        Py_DECREF(&KeyTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

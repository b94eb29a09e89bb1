/* larbinpy.frontier._seenbits: the C twin of seen.py's test of a page's links against the
 * seen-set (`BitmapSeenSet.missing`, and `ExactSeenSet.missing` without a legacy bitmap and
 * with its fingerprint table read through memory).
 *
 * missing(keys, recent, older, bitmap, bits, k, table, buckets) -> (missing, seen)
 *
 * For each key, in order: a key in the set `recent` or `older` is seen. Else its bit
 * positions in the buffer `bitmap` of `bits` bits (one xxh3-64 of its UTF-8 for k == 1; for
 * k > 1 xxh3-128's halves h1, h2 | 1 and positions (h1 + i * h2) % bits, i < k, as
 * `BitmapSeenSet.positions`): a clear one means missing. All set: with `table` None the key is
 * seen; else its fingerprint (xxh3-64 seeded with seen._FP_SEED, 0 made 1) is looked up in the
 * buffer `table` of `buckets` buckets the way `FingerprintTable.contains` does: found, seen;
 * absent, missing. `missing` is the missing keys in the order given; `seen` the keys found
 * seen past the two sets (seen.py remembers them). tests/test_seen.py holds it to seen.py.
 * Keys are answered a batch at a time, the memory their tests read asked for first (BATCH).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL /* xxHash 0.8.4 (xxhash/LICENSE), the xxhash package's algorithm */
#include "xxhash/xxhash.h"

#define FP_SEED 0x9E3779B97F4A7C15ULL /* seen._FP_SEED */
#define SLOTS 256                     /* fptable.SLOTS: uint64 slots a bucket */
#define WINDOW 16                     /* fptable.WINDOW: slots read from the home slot */
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

#define PREFETCHED 4 /* bit positions a key computes (and asks memory for) before its test */

/* A key's answer: what it goes into (`missing`, `seen`, neither), or not known yet. */
enum { MISSING, IN_SETS, SEEN_PAST_SETS, UNTESTED };

/* A key of the batch being answered: its answer so far, and what its bits and fingerprint
 * are computed from. */
typedef struct {
    PyObject *key; /* a reference held while the batch is answered */
    int answer;    /* MISSING, IN_SETS, SEEN_PAST_SETS or UNTESTED */
    uint64_t h1, h2, fp;
    uint64_t pos[PREFETCHED]; /* its first bit positions (all of them for k <= PREFETCHED) */
} Pending;

/* Keys are answered BATCH at a time: their hashes first, with the bitmap's bytes and the
 * table's windows they will read asked of memory at once (prefetched), then the tests. On a
 * large crawl those reads are cache misses; one after another they were most of the cost. */
#define BATCH 32

/* The key's i-th bit position for k > 1. Python's integers do not wrap: the sum is taken in
 * 128 bits before the modulo. */
static uint64_t position(const Pending *pk, long i, uint64_t bits) {
    return (uint64_t)(((unsigned __int128)pk->h1 + (unsigned __int128)i * pk->h2) % bits);
}

/* The key's bit positions' source (h1, h2), its fingerprint, and the memory they read asked
 * for: 0, or -1 on an error (a key that is not str, or has a lone surrogate). */
static int prepare(Pending *pk, const unsigned char *map, uint64_t bits, long k,
                   const uint64_t *table, uint64_t buckets) {
    const char *s;
    Py_ssize_t n;
    long i;
    if (!PyUnicode_Check(pk->key)) {
        PyErr_SetString(PyExc_TypeError, "keys must be str");
        return -1;
    }
    if ((s = PyUnicode_AsUTF8AndSize(pk->key, &n)) == NULL)
        return -1; /* (as key.encode() fails: a lone surrogate) */
    if (k == 1) {
        pk->h1 = XXH3_64bits(s, (size_t)n);
        pk->h2 = 0;
        pk->pos[0] = pk->h1 % bits;
    } else {
        XXH128_hash_t h = XXH3_128bits(s, (size_t)n);
        pk->h1 = h.low64, pk->h2 = h.high64 | 1;
        for (i = 0; i < k && i < PREFETCHED; i++)
            pk->pos[i] = position(pk, i, bits);
    }
    for (i = 0; i < k && i < PREFETCHED; i++)
        PREFETCH(map + (pk->pos[i] >> 3));
    if (table != NULL) {
        uint64_t fp = XXH3_64bits_withSeed(s, (size_t)n, FP_SEED);
        const uint64_t *home;
        pk->fp = fp ? fp : 1;
        home = table + (pk->fp % buckets) * SLOTS + (unsigned)((pk->fp >> 40) % SLOTS);
        PREFETCH(home);
        PREFETCH(home + WINDOW - 1);
    }
    return 0;
}

/* Whether every bit of the key is set (1), or not (0). */
static int all_set(const Pending *pk, const unsigned char *map, uint64_t bits, long k) {
    long i;
    for (i = 0; i < k; i++) {
        uint64_t p = i < PREFETCHED ? pk->pos[i] : position(pk, i, bits);
        if (!((map[p >> 3] >> (p & 7)) & 1))
            return 0;
    }
    return 1;
}

/* Whether `fp` is stored: the home window's slots hold it, else one of them is 0 (absent),
 * else the whole bucket is searched (FingerprintTable.contains). */
static int stored(const uint64_t *table, uint64_t buckets, uint64_t fp) {
    const uint64_t *bucket = table + (fp % buckets) * SLOTS;
    unsigned home = (unsigned)((fp >> 40) % SLOTS), end = home + WINDOW, i;
    int empty = 0;
    if (end > SLOTS)
        end = SLOTS; /* a window cut short by its bucket's end */
    for (i = home; i < end; i++) {
        if (bucket[i] == fp)
            return 1;
        empty |= bucket[i] == 0;
    }
    if (empty)
        return 0;
    for (i = 0; i < SLOTS; i++)
        if (bucket[i] == fp)
            return 1;
    return 0;
}

/* Answer one batch into `out` and `seen`: 0, or -1 on an error. The keys' references are
 * given back here, whatever happens. */
static int answer_batch(Pending *batch, Py_ssize_t count, PyObject *recent, PyObject *older,
                        const unsigned char *map, uint64_t bits, long k,
                        const uint64_t *table, uint64_t buckets, PyObject *out,
                        PyObject *seen) {
    Py_ssize_t j;
    int failed = 0;
    for (j = 0; j < count && !failed; j++) {
        Pending *pk = &batch[j];
        int r = PySet_Contains(recent, pk->key);
        if (r == 0)
            r = PySet_Contains(older, pk->key);
        if (r < 0 || (r == 0 && prepare(pk, map, bits, k, table, buckets) < 0))
            failed = 1;
        pk->answer = r ? IN_SETS : UNTESTED;
    }
    for (j = 0; j < count && !failed; j++) {
        Pending *pk = &batch[j];
        if (pk->answer == UNTESTED)
            pk->answer = !all_set(pk, map, bits, k) ? MISSING
                         : table == NULL || stored(table, buckets, pk->fp) ? SEEN_PAST_SETS
                         : MISSING;
        if ((pk->answer == MISSING && PyList_Append(out, pk->key) < 0)
                || (pk->answer == SEEN_PAST_SETS && PyList_Append(seen, pk->key) < 0))
            failed = 1;
    }
    for (j = 0; j < count; j++)
        Py_DECREF(batch[j].key);
    return failed ? -1 : 0;
}

static PyObject *missing(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *keys, *recent, *older, *out = NULL, *seen = NULL, *result = NULL;
    Py_buffer bitmap = {0}, table = {0};
    unsigned long long bits, buckets = 0;
    long k;
    Py_ssize_t i;
    Pending batch[BATCH];
    (void)self;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "missing() takes 8 arguments");
        return NULL;
    }
    keys = args[0], recent = args[1], older = args[2];
    if (!PyList_Check(keys) || !PySet_Check(recent) || !PySet_Check(older)) {
        PyErr_SetString(PyExc_TypeError, "missing(list, set, set, ...)");
        return NULL;
    }
    bits = PyLong_AsUnsignedLongLong(args[4]);
    k = PyLong_AsLong(args[5]);
    if (args[7] != Py_None)
        buckets = PyLong_AsUnsignedLongLong(args[7]);
    if (PyErr_Occurred())
        return NULL;
    if (bits == 0 || k < 1) {
        PyErr_SetString(PyExc_ValueError, "bits and k must be positive");
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &bitmap, PyBUF_SIMPLE) < 0)
        return NULL;
    if ((unsigned long long)bitmap.len < (bits + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "the bitmap is shorter than its bits");
        goto done;
    }
    if (args[6] != Py_None) {
        if (PyObject_GetBuffer(args[6], &table, PyBUF_SIMPLE) < 0)
            goto done;
        if (buckets == 0 || (unsigned long long)table.len / (8 * SLOTS) < buckets
            || ((uintptr_t)table.buf & 7)) {
            PyErr_SetString(PyExc_ValueError, "the table is shorter than its buckets");
            goto done;
        }
    }
    if ((out = PyList_New(0)) == NULL || (seen = PyList_New(0)) == NULL)
        goto done;
    /* the size is read on every key: a set lookup may run Python code (a key's __eq__), and
     * the batch holds its keys' references */
    for (i = 0; i < PyList_GET_SIZE(keys);) {
        Py_ssize_t count = 0;
        while (count < BATCH && i < PyList_GET_SIZE(keys)) {
            batch[count].key = PyList_GET_ITEM(keys, i++);
            Py_INCREF(batch[count++].key);
        }
        if (answer_batch(batch, count, recent, older, (const unsigned char *)bitmap.buf, bits,
                         k, table.buf ? (const uint64_t *)table.buf : NULL, buckets, out,
                         seen) < 0)
            goto done;
    }
    result = PyTuple_Pack(2, out, seen);
done:
    Py_XDECREF(out);
    Py_XDECREF(seen);
    PyBuffer_Release(&bitmap);
    if (table.obj != NULL)
        PyBuffer_Release(&table);
    return result;
}

static PyMethodDef methods[] = {
    {"missing", (PyCFunction)(void (*)(void))missing, METH_FASTCALL,
     "missing(keys, recent, older, bitmap, bits, k, table, buckets) -> (missing, seen)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_seenbits",
    "The C twin of seen.py's test of links against the seen-set.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__seenbits(void) {
    return PyModule_Create(&module);
}

/* larbinpy.links._plainlinks: the C twin of urls.py's loop over a page's cache misses
 * (`Normalizer._resolve_misses`), for the hrefs `Normalizer._tail` and `_plain` answer.
 *
 * tails(hrefs, urls, miss, origin, directory, same, max_length, strip_path, query_check)
 *
 * For each i whose urls[i] is `miss`, in order: a relative href's URL as `_tail` names it (a
 * URL of the table `same`, or a plain link, or None when too long) goes into urls[i]; an
 * absolute href's ("http://", "https://"), as the table or `_plain` answers it. An href neither
 * can answer stays `miss` (ada-url's to answer, and to cache: urls.py). Nothing is cached
 * here: a plain link is checked again in less time than a cache would take to remember it.
 * tests/test_urls.py holds it to the Python loop.
 *
 * cached(hrefs, sub, absolute, miss) and distinct(urls): the rest of `resolve_upto` in C, the
 * caches' answers for a page's hrefs and the URLs each once (see each below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* _PLAIN_RELATIVE's character classes (urls.py): the first character of an href, the rest of
 * its path, its query. */
static unsigned char FIRST[256], PATH[256], QUERY[256];

static void init_classes(void) {
    const char *p;
    int c;
    for (c = 0; c < 256; c++) {
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        FIRST[c] = PATH[c] = QUERY[c] = (unsigned char)alnum;
    }
    for (p = "-_~!$&'()*+,=/"; *p; p++)
        FIRST[(unsigned char)*p] = 1;
    for (p = "-._~!$&'()*+,=/"; *p; p++)
        PATH[(unsigned char)*p] = 1;
    for (p = "-._~!$&()*+,=/?:@"; *p; p++)
        QUERY[(unsigned char)*p] = 1;
}

typedef const unsigned char *ptr;

/* Whether s[0..n) holds the two characters a, b in a row. */
static int has_pair(ptr s, Py_ssize_t n, char a, char b) {
    Py_ssize_t i;
    for (i = 0; i + 1 < n; i++)
        if (s[i] == a && s[i + 1] == b)
            return 1;
    return 0;
}

/* _PLAIN_RELATIVE.fullmatch(s): not '//', a first character, path characters, a query. */
static int plain_relative(ptr s, Py_ssize_t n) {
    Py_ssize_t i;
    if (n == 0 || !FIRST[s[0]] || (n > 1 && s[0] == '/' && s[1] == '/'))
        return 0;
    for (i = 1; i < n && PATH[s[i]]; i++)
        ;
    if (i == n)
        return 1;
    if (s[i] != '?')
        return 0;
    for (i++; i < n; i++)
        if (!QUERY[s[i]])
            return 0;
    return 1;
}

/* _PLAIN_ABSOLUTE's host: lower-case labels of 1-63 letters, digits and '-', the last one
 * starting with a letter; s[0..n) is the host. */
static int plain_host(ptr s, Py_ssize_t n) {
    Py_ssize_t i, label = 0;
    for (i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == '.') {
            if (i == label)
                return 0;  /* an empty label */
            label = i + 1;
        } else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') ||
                   i - label >= 63) {
            return 0;
        }
    }
    return n > label && s[label] >= 'a' && s[label] <= 'z';
}

/* Whether s[0..n) holds "xn--". */
static int has_punycode(ptr s, Py_ssize_t n) {
    Py_ssize_t i;
    for (i = 0; i + 3 < n; i++)
        if (s[i] == 'x' && s[i + 1] == 'n' && s[i + 2] == '-' && s[i + 3] == '-')
            return 1;
    return 0;
}

/* What is the same for every href of the page. */
typedef struct {
    PyObject *miss, *directory, *same, *query_check;
    ptr origin, dir;
    Py_ssize_t origin_len, dir_len, max_length;
    int strip_path;
} Page;

/* `_may_strip_in`: may a stripped path parameter begin in the folder prefix[0..plen) (one
 * named with a '/' can end in the href after it, or end the folder's path)? */
static int may_strip_in(const Page *pg, ptr prefix, Py_ssize_t plen) {
    return pg->strip_path && memchr(prefix, ';', plen) != NULL;
}

/* Does `query_check` find a parameter to strip in the URL's query: 1, 0, -1 on an error. */
static int query_strips(const Page *pg, PyObject *url) {
    PyObject *found;
    int strip;
    if (pg->query_check == Py_None ||
            !memchr(PyUnicode_1BYTE_DATA(url), '?', PyUnicode_GET_LENGTH(url)))
        return 0;
    found = PyObject_CallOneArg(pg->query_check, url);
    strip = found == NULL ? -1 : PyObject_IsTrue(found);
    Py_XDECREF(found);
    return strip;
}

/* `_tail`: a new reference to the URL, to None, to `miss`; NULL on an error. */
static PyObject *tail(const Page *pg, PyObject *href) {
    ptr h, prefix;
    Py_ssize_t n, plen;
    PyObject *url, *known;
    unsigned char first;
    if (!PyUnicode_Check(href) || !PyUnicode_IS_ASCII(href))
        goto miss;  /* neither a canonical URL's tail nor plain */
    h = PyUnicode_1BYTE_DATA(href);
    n = PyUnicode_GET_LENGTH(href);
    if (n == 0 || memchr(h, ':', n) || h[0] == '?' || h[0] == '#')
        goto miss;
    first = h[0];
    prefix = pg->dir;
    plen = pg->dir_len;
    if (first == '/') {
        if (n > 1 && h[1] == '/')
            goto miss;
        prefix = pg->origin;
        plen = pg->origin_len;
    } else if (first == '.') {  /* `_climbed` */
        for (;;) {
            if (n >= 2 && h[0] == '.' && h[1] == '/') {
                h += 2, n -= 2;
            } else if (n >= 3 && h[0] == '.' && h[1] == '.' && h[2] == '/') {
                Py_ssize_t cut;
                h += 3, n -= 3;
                for (cut = plen - 2; cut >= pg->origin_len && prefix[cut] != '/'; cut--)
                    ;
                if (cut >= pg->origin_len)
                    plen = cut + 1;
            } else {
                break;
            }
        }
        if (n == 0) {  /* '../': the folder itself (unless a stripped parameter ends it) */
            if (may_strip_in(pg, prefix, plen))
                goto miss;
            if (plen == pg->dir_len) {
                Py_INCREF(pg->directory);
                return pg->directory;
            }
            return PyUnicode_FromStringAndSize((const char *)prefix, plen);
        }
    }
    if (has_pair(h, n, '.', '/'))
        goto miss;
    url = PyUnicode_New(plen + n, 127);
    if (url == NULL)
        return NULL;
    memcpy(PyUnicode_1BYTE_DATA(url), prefix, plen);
    memcpy(PyUnicode_1BYTE_DATA(url) + plen, h, n);
    known = PyDict_GetItemWithError(pg->same, url);
    if (known != NULL) {
        Py_DECREF(url);
        Py_INCREF(known);
        return known;
    }
    if (PyErr_Occurred())
        goto error;
    if (has_pair(h, n, '/', '.') || !plain_relative(h, n) || (first == '.' && h[0] == '/'))
        goto miss_url;  /* '..//x': an empty segment, not '/x' */
    if (may_strip_in(pg, prefix, plen))
        goto miss_url;
    switch (query_strips(pg, url)) {
    case 0:
        break;
    case 1:
        goto miss_url;
    default:
        goto error;
    }
    if (plen + n > pg->max_length) {
        Py_DECREF(url);
        Py_RETURN_NONE;
    }
    return url;
miss_url:
    Py_DECREF(url);
miss:
    Py_INCREF(pg->miss);
    return pg->miss;
error:
    Py_DECREF(url);
    return NULL;
}

/* `_plain`: a new reference to the URL an absolute href ("http://" or "https://", ASCII) is
 * when it is a plain link, to None when too long, to `miss` when it is not plain. */
static PyObject *plain(const Page *pg, PyObject *href) {
    ptr h = PyUnicode_1BYTE_DATA(href), host, end;
    Py_ssize_t n = PyUnicode_GET_LENGTH(href), i;
    int https = h[4] == 's', strip;
    PyObject *url;
    if (has_pair(h, n, '.', '/') || has_pair(h, n, '/', '.'))
        goto miss;
    host = h + (https ? 8 : 7);
    end = h + n;
    for (i = 0; host + i < end && host[i] != ':' && host[i] != '/'; i++)
        ;
    if (!plain_host(host, i) || has_punycode(host, i))
        goto miss;  /* xn-- labels must be checked (`_punycode_ok`) */
    if (host + i < end && host[i] == ':') {
        long port = 0;
        Py_ssize_t digits;
        ptr p = host + i + 1;
        for (digits = 0; p + digits < end && p[digits] >= '0' && p[digits] <= '9'; digits++)
            if (digits < 5)
                port = port * 10 + (p[digits] - '0');
        if (digits == 0 || digits > 5 || p[0] == '0' || port > 65535 ||
                port == (https ? 443 : 80))
            goto miss;
        i += 1 + digits;
    }
    if (host + i < end) {  /* a path: "/", path characters, a query */
        ptr q = host + i;
        Py_ssize_t k, m = end - q;
        if (q[0] != '/')
            goto miss;
        for (k = 1; k < m && PATH[q[k]]; k++)
            ;
        if (k < m && q[k] != '?')
            goto miss;
        for (k++; k < m; k++)
            if (!QUERY[q[k]])
                goto miss;
        Py_INCREF(href);
        url = href;
    } else {
        url = PyUnicode_New(n + 1, 127);  /* the origin: its path is '/' */
        if (url == NULL)
            return NULL;
        memcpy(PyUnicode_1BYTE_DATA(url), h, n);
        PyUnicode_1BYTE_DATA(url)[n] = '/';
    }
    strip = query_strips(pg, url);
    if (strip != 0) {
        Py_DECREF(url);
        if (strip < 0)
            return NULL;
        goto miss;
    }
    if (PyUnicode_GET_LENGTH(url) > pg->max_length) {
        Py_DECREF(url);
        Py_RETURN_NONE;
    }
    return url;
miss:
    Py_INCREF(pg->miss);
    return pg->miss;
}

/* Whether an href is absolute the way `_resolve_one` tells: "http://" or "https://". */
static int is_absolute(PyObject *href) {
    ptr h;
    Py_ssize_t n;
    if (!PyUnicode_Check(href) || !PyUnicode_IS_ASCII(href))
        return 0;
    h = PyUnicode_1BYTE_DATA(href);
    n = PyUnicode_GET_LENGTH(href);
    return (n >= 7 && memcmp(h, "http://", 7) == 0) || (n >= 8 && memcmp(h, "https://", 8) == 0);
}

/* An absolute href as `_resolve_one` answers it without ada-url: a new reference to the
 * table's URL (canonical already), to a plain link's, to None, or to `miss`; NULL on an error. */
static PyObject *absolute(const Page *pg, PyObject *href) {
    PyObject *url = PyDict_GetItemWithError(pg->same, href);
    if (url != NULL) {
        Py_INCREF(url);
        return url;
    }
    return PyErr_Occurred() ? NULL : plain(pg, href);
}

static PyObject *tails(PyObject *self, PyObject *args) {
    PyObject *hrefs, *urls, *origin;
    Py_ssize_t i;
    Page pg;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!OUUO!npO", &PyList_Type, &hrefs, &PyList_Type, &urls,
                          &pg.miss, &origin, &pg.directory, &PyDict_Type, &pg.same,
                          &pg.max_length, &pg.strip_path, &pg.query_check))
        return NULL;
    if (PyList_GET_SIZE(hrefs) != PyList_GET_SIZE(urls) || !PyUnicode_IS_ASCII(origin)
            || !PyUnicode_IS_ASCII(pg.directory)) {
        PyErr_SetString(PyExc_ValueError, "hrefs and urls differ in length, or a base is not "
                        "canonical (ASCII)");
        return NULL;
    }
    pg.origin = PyUnicode_1BYTE_DATA(origin);
    pg.origin_len = PyUnicode_GET_LENGTH(origin);
    pg.dir = PyUnicode_1BYTE_DATA(pg.directory);
    pg.dir_len = PyUnicode_GET_LENGTH(pg.directory);
    /* (the sizes read again each time: a call of query_check may run any code, which may
     * shorten a list) */
    for (i = 0; i < PyList_GET_SIZE(hrefs) && i < PyList_GET_SIZE(urls); i++) {
        PyObject *href = PyList_GET_ITEM(hrefs, i), *hit;
        if (PyList_GET_ITEM(urls, i) != pg.miss)
            continue;
        Py_INCREF(href);  /* a call of query_check may run any code */
        hit = is_absolute(href) ? absolute(&pg, href) : tail(&pg, href);
        Py_DECREF(href);
        if (hit == NULL)
            return NULL;
        if (hit == pg.miss || i >= PyList_GET_SIZE(urls)) {  /* (a list cut short meanwhile) */
            Py_DECREF(hit);
            continue;
        }
        PyList_SetItem(urls, i, hit);  /* steals hit */
    }
    Py_RETURN_NONE;
}

/* cached(hrefs, sub, absolute, miss) -> (urls, missed): what resolve_upto's two maps give,
 * `sub.get(href, miss)` for each href then, if one missed, `absolute.get(href, urls[i])` for
 * each; `missed`, whether `miss` is still among them. */
static PyObject *cached(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *hrefs, *sub, *absolute, *miss, *urls, *result;
    Py_ssize_t i, n;
    int missed = 0, pass;
    (void)self;
    if (nargs != 4 || !PyList_Check(args[0]) || !PyDict_Check(args[1])
            || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "cached(list, dict, dict, miss)");
        return NULL;
    }
    hrefs = args[0], sub = args[1], absolute = args[2], miss = args[3];
    if ((urls = PyList_New(n = PyList_GET_SIZE(hrefs))) == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        Py_INCREF(miss);
        PyList_SET_ITEM(urls, i, miss);
    }
    for (pass = 0; pass < 2; pass++) {
        PyObject *cache = pass == 0 ? sub : absolute;
        missed = 0;
        /* (sizes read again each time: a key's __eq__ may run code that shortens hrefs) */
        for (i = 0; i < n && i < PyList_GET_SIZE(hrefs); i++) {
            PyObject *href = PyList_GET_ITEM(hrefs, i), *hit;
            Py_INCREF(href);
            hit = PyDict_GetItemWithError(cache, href);
            Py_DECREF(href);
            if (hit != NULL) {
                Py_INCREF(hit);
                PyList_SetItem(urls, i, hit);  /* steals hit */
            } else if (PyErr_Occurred()) {
                Py_DECREF(urls);
                return NULL;
            }
            missed |= PyList_GET_ITEM(urls, i) == miss;
        }
        if (i < n) {  /* hrefs shortened meanwhile: the answers so far, as map() gives them */
            if (PyList_SetSlice(urls, i, n, NULL) < 0) {
                Py_DECREF(urls);
                return NULL;
            }
            n = i;
        }
        if (!missed)
            break;
    }
    result = Py_BuildValue("(OO)", urls, missed ? Py_True : Py_False);
    Py_DECREF(urls);
    return result;
}

/* distinct(urls) -> list: `list(dict.fromkeys(urls))` without None: each URL once, in the
 * order first met (equal as a dict finds keys equal: the same object, or equal hashes and ==).
 */
static PyObject *distinct(PyObject *self, PyObject *urls) {
    PyObject **slot, *out = NULL, *small[512];
    Py_hash_t *hashes, small_hashes[512];
    Py_ssize_t i, n, size = 8;
    (void)self;
    if (!PyList_Check(urls)) {
        PyErr_SetString(PyExc_TypeError, "distinct(list)");
        return NULL;
    }
    n = PyList_GET_SIZE(urls);
    while (size < 2 * n)
        size *= 2;
    if (size <= 512) {
        slot = small, hashes = small_hashes;
    } else {
        slot = PyMem_Malloc(size * sizeof(PyObject *));
        hashes = PyMem_Malloc(size * sizeof(Py_hash_t));
        if (slot == NULL || hashes == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    memset(slot, 0, size * sizeof(PyObject *));
    if ((out = PyList_New(0)) == NULL)
        goto done;
    /* out holds a reference to every object in `slot`: a comparison running code that
     * empties `urls` cannot free them */
    for (i = 0; i < PyList_GET_SIZE(urls); i++) {
        PyObject *url = PyList_GET_ITEM(urls, i);
        Py_hash_t h;
        size_t at;
        int found = 0;
        if (url == Py_None)
            continue;
        if ((h = PyObject_Hash(url)) == -1)
            goto fail;
        Py_INCREF(url);
        for (at = (size_t)h & (size - 1); slot[at] != NULL; at = (at + 1) & (size - 1)) {
            int eq;
            if (slot[at] == url) {
                found = 1;
                break;
            }
            if (hashes[at] != h)
                continue;
            if ((eq = PyObject_RichCompareBool(slot[at], url, Py_EQ)) < 0) {
                Py_DECREF(url);
                goto fail;
            }
            if (eq) {
                found = 1;
                break;
            }
        }
        if (!found) {
            if (PyList_GET_SIZE(out) >= size / 2) {  /* (a list grown meanwhile) */
                Py_DECREF(url);
                PyErr_SetString(PyExc_RuntimeError, "distinct: the list grew");
                goto fail;
            }
            slot[at] = url, hashes[at] = h;
            if (PyList_Append(out, url) < 0) {
                Py_DECREF(url);
                goto fail;
            }
        }
        Py_DECREF(url);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    if (slot != small) {
        PyMem_Free(slot);
        PyMem_Free(hashes);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"tails", tails, METH_VARARGS,
     "Answer a page's cache misses that are tails of known URLs or plain links (urls.py)."},
    {"cached", (PyCFunction)(void (*)(void))cached, METH_FASTCALL,
     "A page's hrefs answered by the folder's cache, then the absolute links' (urls.py)."},
    {"distinct", distinct, METH_O, "Each URL once, in order, without None (urls.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_plainlinks",
    "The C twin of larbinpy.links.urls' loop over a page's cache misses.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__plainlinks(void) {
    init_classes();
    return PyModule_Create(&module);
}

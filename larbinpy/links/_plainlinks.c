/* larbinpy.links._plainlinks: the C twin of urls.py's loop over a page's cache misses
 * (`Normalizer._resolve_misses`), for the hrefs `Normalizer._tail` answers.
 *
 * tails(hrefs, urls, miss, origin, directory, same, max_length, strip_path, query_check,
 *       href_max, room, same_room) -> (checked, added)
 *
 * For each i whose urls[i] is `miss`, in order: the URL `_tail` names (a URL of the table
 * `same`, or a plain link, or None when too long) goes into urls[i] and, when it is a URL and
 * hrefs[i] is at most href_max characters, into the folder's cache `sub` the way `_remember`
 * puts it (its one object from `same`, added there if new). An href `_tail` cannot answer stays
 * `miss` (ada-url's to answer). The loop stops before an href whose caching would need more
 * than `room` cache entries or `same_room` new URLs of the table: emptying a full cache and
 * halving the table are Python's (urls.py). `checked` is where it stopped (len(urls) when it
 * did not); `added`, the cache entries it made. tests/test_urls.py holds it to the Python loop.
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

/* What is the same for every href of the page. */
typedef struct {
    PyObject *miss, *directory, *same, *query_check;
    ptr origin, dir;
    Py_ssize_t origin_len, dir_len, max_length;
    int strip_path;
} Page;

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
        if (n == 0) {  /* '../': the folder itself */
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
    if (pg->strip_path && memchr(prefix, ';', plen))
        goto miss_url;  /* a stripped parameter named with a '/' may span folder and href */
    if (pg->query_check != Py_None && memchr(PyUnicode_1BYTE_DATA(url), '?', plen + n)) {
        PyObject *found = PyObject_CallOneArg(pg->query_check, url);
        int strip = found == NULL ? -1 : PyObject_IsTrue(found);
        Py_XDECREF(found);
        if (strip < 0)
            goto error;
        if (strip)
            goto miss_url;
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

static PyObject *tails(PyObject *self, PyObject *args) {
    PyObject *hrefs, *urls, *sub, *origin;
    Py_ssize_t i, count, href_max, room, same_room, added = 0;
    Page pg;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!OUUO!nO!pOnnn", &PyList_Type, &hrefs, &PyList_Type, &urls,
                          &pg.miss, &origin, &pg.directory, &PyDict_Type, &pg.same,
                          &pg.max_length, &PyDict_Type, &sub, &pg.strip_path, &pg.query_check,
                          &href_max, &room, &same_room))
        return NULL;
    count = PyList_GET_SIZE(urls);
    if (PyList_GET_SIZE(hrefs) != count || !PyUnicode_IS_ASCII(origin)
            || !PyUnicode_IS_ASCII(pg.directory)) {
        PyErr_SetString(PyExc_ValueError, "hrefs and urls differ in length, or a base is not "
                        "canonical (ASCII)");
        return NULL;
    }
    pg.origin = PyUnicode_1BYTE_DATA(origin);
    pg.origin_len = PyUnicode_GET_LENGTH(origin);
    pg.dir = PyUnicode_1BYTE_DATA(pg.directory);
    pg.dir_len = PyUnicode_GET_LENGTH(pg.directory);
    for (i = 0; i < count; i++) {
        PyObject *href = PyList_GET_ITEM(hrefs, i), *hit;
        if (PyList_GET_ITEM(urls, i) != pg.miss)
            continue;
        Py_INCREF(href);  /* a call of query_check may run any code */
        hit = tail(&pg, href);
        if (hit == NULL) {
            Py_DECREF(href);
            return NULL;
        }
        if (hit != pg.miss && hit != Py_None && PyUnicode_GET_LENGTH(href) <= href_max) {
            PyObject *one = PyDict_GetItemWithError(pg.same, hit);
            if ((one == NULL && PyErr_Occurred()) || room <= 0 || (one == NULL && same_room <= 0)) {
                Py_DECREF(href);
                Py_DECREF(hit);
                if (PyErr_Occurred())
                    return NULL;
                break;  /* a full cache or table: Python's to empty (urls.py) */
            }
            if (one == NULL) {
                if (PyDict_SetItem(pg.same, hit, hit) < 0)
                    goto failed;
                same_room--;
                one = hit;
            }
            Py_INCREF(one);
            Py_SETREF(hit, one);
            if (PyDict_SetItem(sub, href, hit) < 0)
                goto failed;
            room--;
            added++;
        }
        Py_DECREF(href);
        if (hit == pg.miss) {
            Py_DECREF(hit);
            continue;
        }
        if (i >= PyList_GET_SIZE(urls)) {  /* query_check shortened the list */
            Py_DECREF(hit);
            PyErr_SetString(PyExc_RuntimeError, "urls changed size during tails()");
            return NULL;
        }
        PyList_SetItem(urls, i, hit);  /* steals hit */
        continue;
failed:
        Py_DECREF(href);
        Py_DECREF(hit);
        return NULL;
    }
    return Py_BuildValue("(nn)", i, added);
}

static PyMethodDef methods[] = {
    {"tails", tails, METH_VARARGS,
     "Answer a page's cache misses that are tails of known URLs or plain links (urls.py)."},
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

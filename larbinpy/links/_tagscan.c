/* larbinpy.links._tagscan: the C twin of tagscan.scan_py (see tagscan.py's docstring).
 *
 * scan(doc: bytes) -> (base, a, area, iframe, link, img, needs_tree): one pass over a page's
 * UTF-8 bytes, as the HTML tokenizer reads them, stopping only at the tags that carry links.
 * Values are str (UTF-8, invalid bytes as U+FFFD), character references not yet decoded
 * (tagscan.py does that, for both twins); None for an attribute written without "=".
 * tests/test_tagscan.py holds the two to the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef const unsigned char *ptr;

enum { T_OTHER, T_A, T_AREA, T_BASE, T_IFRAME, T_LINK, T_IMG, T_SCRIPT, T_RAW, T_TEMPLATE,
       T_FRAMESET, T_PLAINTEXT };

/* Character classes, one table look instead of a comparison per class (init_classes). */
enum { C_WS = 1, C_SLASH = 2, C_GT = 4, C_EQ = 8 };
static unsigned char CLASS[256];

static void init_classes(void) {
    const char *p;
    for (p = " \t\n\f\r"; *p; p++)
        CLASS[(unsigned char)*p] |= C_WS;
    CLASS['/'] |= C_SLASH;
    CLASS['>'] |= C_GT;
    CLASS['='] |= C_EQ;
}

static int is_ws(unsigned char c) {
    return CLASS[c] & C_WS;
}

static int is_alpha(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static unsigned char lower(unsigned char c) {
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

/* whether [s, s+len) is `word` (lower case ASCII, `wlen` bytes) in any ASCII case */
static int same_n(ptr s, Py_ssize_t len, const char *word, Py_ssize_t wlen) {
    Py_ssize_t i;
    if (wlen != len)
        return 0;
    for (i = 0; i < len; i++)
        if (lower(s[i]) != (unsigned char)word[i])
            return 0;
    return 1;
}

static int same(ptr s, Py_ssize_t len, const char *word) {
    return same_n(s, len, word, (Py_ssize_t)strlen(word));
}

static const struct { const char *name; Py_ssize_t len; int kind; } TAGS[] = {
    {"a", 1, T_A}, {"area", 4, T_AREA}, {"base", 4, T_BASE}, {"iframe", 6, T_IFRAME},
    {"link", 4, T_LINK}, {"img", 3, T_IMG}, {"image", 5, T_IMG}, {"script", 6, T_SCRIPT},
    {"style", 5, T_RAW}, {"xmp", 3, T_RAW}, {"noembed", 7, T_RAW}, {"noframes", 8, T_RAW},
    {"textarea", 8, T_RAW}, {"title", 5, T_RAW}, {"template", 8, T_TEMPLATE},
    {"frameset", 8, T_FRAMESET}, {"plaintext", 9, T_PLAINTEXT},
};

/* For each name length, a bit per first letter (a-z) that some tag of TAGS has: most tags
 * (td, li, span, div, p...) are told apart from the few that matter by one look. */
static unsigned int FIRSTS[10];

static void init_firsts(void) {
    size_t i;
    for (i = 0; i < sizeof TAGS / sizeof TAGS[0]; i++)
        FIRSTS[TAGS[i].len] |= 1u << (TAGS[i].name[0] - 'a');
}

static int kind_of(ptr s, Py_ssize_t len) {
    size_t i;
    unsigned char first = lower(s[0]);
    if (len > 9 || first < 'a' || first > 'z' || !(FIRSTS[len] & (1u << (first - 'a'))))
        return T_OTHER;
    for (i = 0; i < sizeof TAGS / sizeof TAGS[0]; i++)
        if (TAGS[i].len == len && (unsigned char)TAGS[i].name[0] == first
                && same_n(s, len, TAGS[i].name, TAGS[i].len))
            return TAGS[i].kind;
    return T_OTHER;
}

/* The wanted attributes of one tag: the first occurrence of each name counts. */
typedef struct {
    const char *names[2];
    Py_ssize_t name_len[2];
    int seen[2];
    ptr value[2];  /* NULL: written without "=" */
    Py_ssize_t len[2];
} attrs_t;

/* Reads a tag's attributes from i; returns the index after its ">", or -1 at the end of the
 * page (a tag cut off there is no tag). */
static Py_ssize_t read_attrs(ptr b, Py_ssize_t n, Py_ssize_t i, attrs_t *want) {
    for (;;) {
        Py_ssize_t name, name_end, j;
        ptr value = NULL;
        Py_ssize_t vlen = 0;
        int k;
        while (i < n && (CLASS[b[i]] & (C_WS | C_SLASH)))
            i++;
        if (i >= n)
            return -1;
        if (b[i] == '>')
            return i + 1;
        name = i++;  /* the first character may be "=" */
        while (i < n && !(CLASS[b[i]] & (C_WS | C_SLASH | C_GT | C_EQ)))
            i++;
        name_end = i;
        j = i;
        while (j < n && is_ws(b[j]))
            j++;
        if (j < n && b[j] == '=') {
            j++;
            while (j < n && is_ws(b[j]))
                j++;
            if (j < n && (b[j] == '"' || b[j] == '\'')) {
                ptr close = memchr(b + j + 1, b[j], (size_t)(n - j - 1));
                value = b + j + 1;
                if (close == NULL)
                    return -1;
                vlen = close - value;
                i = close - b + 1;
            } else {
                Py_ssize_t s = j;
                while (j < n && !(CLASS[b[j]] & (C_WS | C_GT)))
                    j++;
                value = b + s;
                vlen = j - s;
                i = j;
            }
        }
        if (want == NULL)
            continue;
        for (k = 0; k < 2; k++) {
            if (want->names[k] && !want->seen[k]
                    && same_n(b + name, name_end - name, want->names[k], want->name_len[k])) {
                want->seen[k] = 1;
                want->value[k] = value;
                want->len[k] = vlen;
            }
        }
    }
}

/* Where the name of a tag starting at i ends (at whitespace, "/", ">" or the end). */
static Py_ssize_t name_end(ptr b, Py_ssize_t n, Py_ssize_t i) {
    while (i < n && !(CLASS[b[i]] & (C_WS | C_SLASH | C_GT)))
        i++;
    return i;
}

/* Whether b[i:] starts `prefix` + `word` in any case, then whitespace, "/", ">" or the end. */
static int at_tag(ptr b, Py_ssize_t n, Py_ssize_t i, const char *prefix, const char *word) {
    Py_ssize_t p = (Py_ssize_t)strlen(prefix), w = (Py_ssize_t)strlen(word), k;
    if (i + p + w > n || memcmp(b + i, prefix, (size_t)p) != 0)
        return 0;
    for (k = 0; k < w; k++)
        if (lower(b[i + p + k]) != (unsigned char)word[k])
            return 0;
    k = i + p + w;
    return k >= n || is_ws(b[k]) || b[k] == '/' || b[k] == '>';
}

/* The index of the "<" of the end tag closing raw text `word`, searched from i (n: none). */
static Py_ssize_t raw_end(ptr b, Py_ssize_t n, Py_ssize_t i, const char *word) {
    while (i < n) {
        ptr lt = memchr(b + i, '<', (size_t)(n - i));
        if (lt == NULL)
            return n;
        i = lt - b;
        if (at_tag(b, n, i, "</", word))
            return i;
        i++;
    }
    return n;
}

/* Where a script's text ends: the script data states with their escapes (tagscan.py). */
static Py_ssize_t script_end(ptr b, Py_ssize_t n, Py_ssize_t i) {
    int state = 0;  /* 0 script data, 1 escaped, 2 double escaped */
    while (i < n) {
        unsigned char c = b[i];
        if (c == '<') {
            if (at_tag(b, n, i, "</", "script")) {
                if (state != 2)
                    return i;
                state = 1;
                i += 8 + 1;
                continue;
            }
            if (state == 0 && i + 3 < n && b[i + 1] == '!' && b[i + 2] == '-' && b[i + 3] == '-') {
                state = 1;
                i += 2;  /* at its "--", which may end it at once: "<!-->" */
                continue;
            }
            if (state == 1 && at_tag(b, n, i, "<", "script")) {
                state = 2;
                i += 7 + 1;
                continue;
            }
            i++;
        } else if (c == '-' && state != 0 && i + 2 < n && b[i + 1] == '-' && b[i + 2] == '>') {
            state = 0;
            i += 3;
        } else {
            i++;
        }
    }
    return n;
}

/* The index of the next "<" from pos (-1: none). Markup-dense pages have one every few
 * bytes: the first bytes are looked at one by one before memchr is worth its set-up. */
static Py_ssize_t next_lt(ptr b, Py_ssize_t n, Py_ssize_t pos) {
    Py_ssize_t stop = n - pos > 16 ? pos + 16 : n;
    ptr lt;
    for (; pos < stop; pos++)
        if (b[pos] == '<')
            return pos;
    if (pos >= n)
        return -1;
    lt = memchr(b + pos, '<', (size_t)(n - pos));
    return lt == NULL ? -1 : lt - b;
}

static int append_str(PyObject *list, ptr s, Py_ssize_t len) {
    PyObject *v = PyUnicode_DecodeUTF8((const char *)s, len, "replace");
    int r;
    if (v == NULL)
        return -1;
    r = PyList_Append(list, v);
    Py_DECREF(v);
    return r;
}

static PyObject *value_or_none(ptr s, Py_ssize_t len, int seen) {
    if (!seen || s == NULL)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8((const char *)s, len, "replace");
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    Py_buffer view;
    ptr b;
    Py_ssize_t n, pos = 0;
    int template = 0, needs_tree = 0, failed = 0;
    PyObject *lists[5] = {NULL, NULL, NULL, NULL, NULL};  /* a, area, iframe, link, img */
    PyObject *base = NULL, *result = NULL;
    int k;
    (void)self;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    b = view.buf;
    n = view.len;
    for (k = 0; k < 5; k++)
        if ((lists[k] = PyList_New(0)) == NULL)
            goto done;
    while (pos < n && !failed) {
        Py_ssize_t p, end, q;
        int kind;
        attrs_t want;
        if ((p = next_lt(b, n, pos)) < 0)
            break;
        p++;
        if (p >= n)
            break;
        if (b[p] == '!' && p + 2 < n && b[p + 1] == '-' && b[p + 2] == '-') {
            q = p + 3;  /* a comment */
            if (q < n && b[q] == '>') { pos = q + 1; continue; }
            if (q + 1 < n && b[q] == '-' && b[q + 1] == '>') { pos = q + 2; continue; }
            for (pos = n; q + 2 < n; q++) {
                if (b[q] == '-' && b[q + 1] == '-') {
                    if (b[q + 2] == '>') { pos = q + 3; break; }
                    if (b[q + 2] == '!' && q + 3 < n && b[q + 3] == '>') { pos = q + 4; break; }
                }
            }
            continue;
        }
        if (b[p] == '!' || b[p] == '?' ||
            (b[p] == '/' && p + 1 < n && !is_alpha(b[p + 1]) && b[p + 1] != '>')) {
            ptr gt = memchr(b + p, '>', (size_t)(n - p));  /* a bogus comment or doctype */
            pos = gt == NULL ? n : gt - b + 1;
            continue;
        }
        if (b[p] == '/') {
            if (p + 1 >= n)
                break;
            if (b[p + 1] == '>') { pos = p + 2; continue; }
            end = name_end(b, n, p + 1);  /* an end tag */
            q = end < n && b[end] == '>' ? end + 1 : read_attrs(b, n, end, NULL);
            if (q < 0)
                break;
            if (template > 0 && same(b + p + 1, end - p - 1, "template"))
                template--;
            pos = q;
            continue;
        }
        if (!is_alpha(b[p])) { pos = p; continue; }  /* a "<" that opens nothing */
        end = name_end(b, n, p);
        kind = kind_of(b + p, end - p);
        if (kind == T_OTHER && end < n && b[end] == '>') {  /* <td>, <li>, <p>...: nothing to read */
            pos = end + 1;
            continue;
        }
        memset(&want, 0, sizeof want);
        if (kind == T_A || kind == T_AREA || kind == T_BASE) {
            want.names[0] = "href";
            want.name_len[0] = 4;
        } else if (kind == T_IFRAME || kind == T_IMG) {
            want.names[0] = "src";
            want.name_len[0] = 3;
        } else if (kind == T_LINK) {
            want.names[0] = "rel";
            want.name_len[0] = 3;
            want.names[1] = "href";
            want.name_len[1] = 4;
        }
        q = read_attrs(b, n, end, (kind == T_OTHER || template) ? NULL : &want);
        if (q < 0)
            break;  /* cut off by the end of the page: no tag */
        pos = q;
        if (kind == T_FRAMESET) {
            needs_tree = 1;
            break;
        }
        if (kind == T_PLAINTEXT)
            break;
        if (kind == T_TEMPLATE) {
            template++;
            continue;
        }
        if (kind == T_SCRIPT) {
            pos = script_end(b, n, pos);
            continue;
        }
        if (kind == T_IFRAME) {  /* its src, then its content: raw text */
            if (!template && want.seen[0] && want.value[0] != NULL && want.len[0] > 0)
                failed = append_str(lists[2], want.value[0], want.len[0]) < 0;
            pos = raw_end(b, n, pos, "iframe");
            continue;
        }
        if (kind == T_RAW) {
            char word[16];
            Py_ssize_t w;
            for (w = 0; w < end - p; w++)
                word[w] = (char)lower(b[p + w]);
            word[w] = 0;
            pos = raw_end(b, n, pos, word);
            continue;
        }
        if (template || kind == T_OTHER)
            continue;
        if (kind == T_LINK) {
            PyObject *rel = value_or_none(want.value[0], want.len[0], want.seen[0]);
            PyObject *href = rel ? value_or_none(want.value[1], want.len[1], want.seen[1]) : NULL;
            PyObject *pair = href ? PyTuple_Pack(2, rel, href) : NULL;
            failed = pair == NULL || PyList_Append(lists[3], pair) < 0;
            Py_XDECREF(rel);
            Py_XDECREF(href);
            Py_XDECREF(pair);
        } else if (kind == T_BASE) {
            if (base == NULL && want.seen[0] && want.value[0] != NULL) {
                base = PyUnicode_DecodeUTF8((const char *)want.value[0], want.len[0], "replace");
                failed = base == NULL;
            }
        } else if (want.seen[0] && want.value[0] != NULL && want.len[0] > 0) {
            int list = kind == T_A ? 0 : kind == T_AREA ? 1 : 4;
            failed = append_str(lists[list], want.value[0], want.len[0]) < 0;
        }
    }
    if (failed)
        goto done;
    if (needs_tree) {
        for (k = 0; k < 5; k++)
            PyList_SetSlice(lists[k], 0, PyList_GET_SIZE(lists[k]), NULL);
        Py_CLEAR(base);
    }
    result = Py_BuildValue("(OOOOOOO)", base ? base : Py_None, lists[0], lists[1], lists[2],
                           lists[3], lists[4], needs_tree ? Py_True : Py_False);
done:
    for (k = 0; k < 5; k++)
        Py_XDECREF(lists[k]);
    Py_XDECREF(base);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "The link-bearing attributes of a page's UTF-8 bytes (tagscan.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tagscan", "The C twin of larbinpy.links.tagscan.scan_py.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__tagscan(void) {
    init_classes();
    init_firsts();
    return PyModule_Create(&module);
}

/* larbinpy.links._tagscan: the C twin of tagscan.scan_py (see tagscan.py's docstring).
 *
 * scan(doc: bytes, requisites: bool = False) -> (base, a, area, iframe, link, img, needs_tree,
 * res, srcset, style, sheets): one pass over a page's UTF-8 bytes, as the HTML tokenizer reads
 * them, stopping only at the tags that carry links -- and, with `requisites`, at every tag
 * with attributes (any may have `style` or `background`). Values are str (UTF-8, invalid
 * bytes as U+FFFD), character references not yet decoded (tagscan.py does that, for both
 * twins); None for an attribute written without "=". Without `requisites` the result is
 * the first seven values only, and the scan does what it did before them.
 * tests/test_tagscan.py holds the two to the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef const unsigned char *ptr;

enum { T_OTHER, T_A, T_AREA, T_BASE, T_IFRAME, T_LINK, T_IMG, T_SCRIPT, T_RAW, T_TEMPLATE,
       T_FRAMESET, T_PLAINTEXT,
       /* only with requisites: the elements whose attributes name what a page needs */
       T_SOURCE, T_INPUT, T_MEDIA, T_EMBED, T_OBJECT };

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

/* A table of their own, looked at only with requisites: a crawl without them pays nothing
 * for <source>, <video>, <object>... (and <option> is not mistaken for a maybe-<object>). */
static const struct { const char *name; Py_ssize_t len; int kind; } REQ_TAGS[] = {
    {"source", 6, T_SOURCE}, {"input", 5, T_INPUT}, {"video", 5, T_MEDIA},
    {"audio", 5, T_MEDIA}, {"track", 5, T_MEDIA}, {"embed", 5, T_EMBED},
    {"object", 6, T_OBJECT},
};

/* For each name length, a bit per first letter (a-z) that some tag of TAGS has: most tags
 * (td, li, span, div, p...) are told apart from the few that matter by one look. */
static unsigned int FIRSTS[10], REQ_FIRSTS[10];

static void init_firsts(void) {
    size_t i;
    for (i = 0; i < sizeof TAGS / sizeof TAGS[0]; i++)
        FIRSTS[TAGS[i].len] |= 1u << (TAGS[i].name[0] - 'a');
    for (i = 0; i < sizeof REQ_TAGS / sizeof REQ_TAGS[0]; i++)
        REQ_FIRSTS[REQ_TAGS[i].len] |= 1u << (REQ_TAGS[i].name[0] - 'a');
}

static int kind_of(ptr s, Py_ssize_t len, int req) {
    size_t i;
    unsigned char first = lower(s[0]);
    if (len > 9 || first < 'a' || first > 'z')
        return T_OTHER;
    if (FIRSTS[len] & (1u << (first - 'a')))
        for (i = 0; i < sizeof TAGS / sizeof TAGS[0]; i++)
            if (TAGS[i].len == len && (unsigned char)TAGS[i].name[0] == first
                    && same_n(s, len, TAGS[i].name, TAGS[i].len))
                return TAGS[i].kind;
    if (req && (REQ_FIRSTS[len] & (1u << (first - 'a'))))
        for (i = 0; i < sizeof REQ_TAGS / sizeof REQ_TAGS[0]; i++)
            if (REQ_TAGS[i].len == len && (unsigned char)REQ_TAGS[i].name[0] == first
                    && same_n(s, len, REQ_TAGS[i].name, REQ_TAGS[i].len))
                return REQ_TAGS[i].kind;
    return T_OTHER;
}

/* The wanted attributes of one tag: the first occurrence of each name counts. */
#define MAX_WANTED 4
typedef struct {
    int count;
    const char *names[MAX_WANTED];
    Py_ssize_t name_len[MAX_WANTED];
    int seen[MAX_WANTED];
    ptr value[MAX_WANTED];  /* NULL: written without "=" */
    Py_ssize_t len[MAX_WANTED];
} attrs_t;

/* Wants attribute `name` (lower case, a literal); its index in `want`. */
#define WANTS(want, name) wants_n(&(want), name, (Py_ssize_t)sizeof(name) - 1)
static int wants_n(attrs_t *want, const char *name, Py_ssize_t len) {
    int k = want->count++;
    want->names[k] = name;
    want->name_len[k] = len;
    return k;
}

/* The value of wanted attribute k when it has a non-empty one. */
static int has_value(const attrs_t *want, int k) {
    return k >= 0 && want->seen[k] && want->value[k] != NULL && want->len[k] > 0;
}

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
        for (k = 0; k < want->count; k++) {
            if (!want->seen[k]
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

/* The lists scan() fills, in the order of its result. */
enum { L_A, L_AREA, L_IFRAME, L_LINK, L_IMG, L_RES, L_SRCSET, L_STYLE, L_SHEETS, N_LISTS };

/* Indexes in `want` of the attributes a requisite scan reads (-1: not wanted). */
typedef struct { int src, srcset, type, poster, style, background; } req_t;

/* With requisites: besides what the tag's kind wants, its URL-bearing attributes, and the
 * `style` and `background` any element may have. */
static void want_requisites(int kind, attrs_t *want, req_t *r) {
    r->src = r->srcset = r->type = r->poster = -1;
    if (kind == T_IMG) {
        r->srcset = WANTS(*want, "srcset");
    } else if (kind == T_SOURCE) {
        r->src = WANTS(*want, "src");
        r->srcset = WANTS(*want, "srcset");
    } else if (kind == T_SCRIPT || kind == T_EMBED) {
        r->src = WANTS(*want, "src");
    } else if (kind == T_INPUT) {
        r->type = WANTS(*want, "type");
        r->src = WANTS(*want, "src");
    } else if (kind == T_MEDIA) {
        r->src = WANTS(*want, "src");
        r->poster = WANTS(*want, "poster");
    } else if (kind == T_OBJECT) {
        r->src = WANTS(*want, "data");
    }
    r->style = WANTS(*want, "style");
    r->background = WANTS(*want, "background");
}

/* Attribute k's value onto `list` if the tag has one; -1 when the append failed. */
static int add_attr(const attrs_t *w, int k, PyObject *list) {
    return has_value(w, k) ? append_str(list, w->value[k], w->len[k]) : 0;
}

/* The requisites a tag's attributes name, onto their lists (tagscan.py's order: the URL
 * attributes, poster, background; srcset; style). -1 when an append failed. */
static int add_requisites(int kind, const attrs_t *w, const req_t *r, PyObject **lists) {
    int src = has_value(w, r->src);
    if (kind == T_INPUT)  /* <input type=image src>: only an image button's src */
        src = src && has_value(w, r->type) && same(w->value[r->type], w->len[r->type], "image");
    if (src && append_str(lists[L_RES], w->value[r->src], w->len[r->src]) < 0)
        return -1;
    if (add_attr(w, r->poster, lists[L_RES]) < 0 || add_attr(w, r->background, lists[L_RES]) < 0
            || add_attr(w, r->srcset, lists[L_SRCSET]) < 0
            || add_attr(w, r->style, lists[L_STYLE]) < 0)
        return -1;
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    ptr b;
    Py_ssize_t n, pos = 0;
    int template = 0, needs_tree = 0, failed = 0, req = 0;
    PyObject *lists[N_LISTS] = {NULL};
    PyObject *base = NULL, *result = NULL;
    int k;
    (void)self;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "scan(doc, requisites=False, /)");
        return NULL;
    }
    if (nargs == 2 && (req = PyObject_IsTrue(args[1])) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    b = view.buf;
    n = view.len;
    for (k = 0; k < (req ? N_LISTS : L_RES); k++)  /* without requisites, only the links' */
        if ((lists[k] = PyList_New(0)) == NULL)
            goto done;
    while (pos < n && !failed) {
        Py_ssize_t p, end, q;
        int kind;
        attrs_t want;
        req_t r;
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
        kind = kind_of(b + p, end - p, req);
        if (kind == T_OTHER && end < n && b[end] == '>') {  /* <td>, <li>, <p>...: nothing to read */
            pos = end + 1;
            continue;
        }
        want.count = 0;
        memset(want.seen, 0, sizeof want.seen);
        if (kind == T_A || kind == T_AREA || kind == T_BASE) {
            WANTS(want, "href");
        } else if (kind == T_IFRAME || kind == T_IMG) {
            WANTS(want, "src");
        } else if (kind == T_LINK) {
            WANTS(want, "rel");
            WANTS(want, "href");
        }
        if (req && !template)
            want_requisites(kind, &want, &r);
        q = read_attrs(b, n, end, ((kind == T_OTHER && !req) || template) ? NULL : &want);
        if (q < 0)
            break;  /* cut off by the end of the page: no tag */
        pos = q;
        if (kind == T_FRAMESET) {
            needs_tree = 1;
            break;
        }
        if (req && !template && add_requisites(kind, &want, &r, lists) < 0) {
            failed = 1;
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
                failed = append_str(lists[L_IFRAME], want.value[0], want.len[0]) < 0;
            pos = raw_end(b, n, pos, "iframe");
            continue;
        }
        if (kind == T_RAW) {
            char word[16];
            Py_ssize_t w;
            for (w = 0; w < end - p; w++)
                word[w] = (char)lower(b[p + w]);
            word[w] = 0;
            q = raw_end(b, n, pos, word);
            /* a <style> block's text: the stylesheet a page carries (an empty one: nothing) */
            if (req && !template && q > pos && strcmp(word, "style") == 0)
                failed = append_str(lists[L_SHEETS], b + pos, q - pos) < 0;
            pos = q;
            continue;
        }
        if (template || kind == T_OTHER || kind >= T_SOURCE)
            continue;
        if (kind == T_LINK) {
            PyObject *rel = value_or_none(want.value[0], want.len[0], want.seen[0]);
            PyObject *href = rel ? value_or_none(want.value[1], want.len[1], want.seen[1]) : NULL;
            PyObject *pair = href ? PyTuple_Pack(2, rel, href) : NULL;
            failed = pair == NULL || PyList_Append(lists[L_LINK], pair) < 0;
            Py_XDECREF(rel);
            Py_XDECREF(href);
            Py_XDECREF(pair);
        } else if (kind == T_BASE) {
            if (base == NULL && want.seen[0] && want.value[0] != NULL) {
                base = PyUnicode_DecodeUTF8((const char *)want.value[0], want.len[0], "replace");
                failed = base == NULL;
            }
        } else if (want.seen[0] && want.value[0] != NULL && want.len[0] > 0) {
            int list = kind == T_A ? L_A : kind == T_AREA ? L_AREA : L_IMG;
            failed = append_str(lists[list], want.value[0], want.len[0]) < 0;
        }
    }
    if (failed)
        goto done;
    if (needs_tree) {
        for (k = 0; k < N_LISTS; k++)
            if (lists[k] != NULL)
                PyList_SetSlice(lists[k], 0, PyList_GET_SIZE(lists[k]), NULL);
        Py_CLEAR(base);
    }
    if (req)
        result = Py_BuildValue("(OOOOOOOOOOO)", base ? base : Py_None, lists[L_A],
                               lists[L_AREA], lists[L_IFRAME], lists[L_LINK], lists[L_IMG],
                               needs_tree ? Py_True : Py_False, lists[L_RES], lists[L_SRCSET],
                               lists[L_STYLE], lists[L_SHEETS]);
    else  /* the scan as it was before requisites: seven values */
        result = Py_BuildValue("(OOOOOOO)", base ? base : Py_None, lists[L_A], lists[L_AREA],
                               lists[L_IFRAME], lists[L_LINK], lists[L_IMG],
                               needs_tree ? Py_True : Py_False);
done:
    for (k = 0; k < N_LISTS; k++)
        Py_XDECREF(lists[k]);
    Py_XDECREF(base);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "The link-bearing attributes of a page's UTF-8 bytes (tagscan.py)."},
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

/* discover_xmlparse: a small XML reader, enough for NCCL topology files.
 *
 * It keeps elements and their attributes and skips everything else: text, comments,
 * processing instructions, DOCTYPE, CDATA. Tolerant of what real files contain (any
 * quoting style, blank lines, a BOM, unknown entities kept verbatim); strict about
 * structure, because a half-read topology is worse than a refusal: every unclosed,
 * mismatched or truncated tag is an error naming the file and line.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discover_internal.h"

typedef struct parser {
    const char *s;
    size_t i, n;
    int line;
    const char *path;
    char *err;
    unsigned errlen;
    dxml_doc *doc;
    char *out;            /* next free byte of doc->strings */
    int stack[DXML_MAX_DEPTH];
    int depth;
    int ecap, acap;
} parser;

static int fail(parser *p, int line, const char *fmt, ...)
{
    int k = snprintf(p->err, p->errlen, "%s:%d: ", p->path, line);
    if (k >= 0 && (unsigned)k < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + k, p->errlen - (unsigned)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int at_end(const parser *p) { return p->i >= p->n; }
static char cur(const parser *p) { return p->i < p->n ? p->s[p->i] : '\0'; }

static void adv(parser *p)
{
    if (p->i < p->n && p->s[p->i++] == '\n') p->line++;
}

static int starts(const parser *p, const char *lit)
{
    size_t k = strlen(lit);
    return p->n - p->i >= k && !memcmp(p->s + p->i, lit, k);
}

static void skip_ws(parser *p)
{
    while (!at_end(p) && strchr(" \t\r\n", cur(p))) adv(p);
}

/* Skips past `close`; false at end of input. */
static int skip_past(parser *p, const char *close)
{
    while (!at_end(p) && !starts(p, close)) adv(p);
    if (at_end(p)) return 0;
    for (size_t k = strlen(close); k; k--) adv(p);
    return 1;
}

static int name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static int name_char(char c)
{
    return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

/* Copies a name into the string arena; NULL (and no error set) when none is here. */
static const char *read_name(parser *p)
{
    if (!name_start(cur(p))) return NULL;
    char *start = p->out;
    while (name_char(cur(p))) { *p->out++ = cur(p); adv(p); }
    *p->out++ = '\0';
    return start;
}

static const struct { const char *ref; char c; } ENTITIES[] = {
    { "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' }, { "&apos;", '\'' },
};

static const char *read_value(parser *p, int line, const char *attr)
{
    char q = cur(p);
    if (q != '"' && q != '\'') {
        fail(p, p->line, "value of attribute '%s' must be quoted", attr);
        return NULL;
    }
    adv(p);
    char *start = p->out;
    while (!at_end(p) && cur(p) != q) {
        size_t k = 0;
        while (k < sizeof ENTITIES / sizeof ENTITIES[0] && !starts(p, ENTITIES[k].ref)) k++;
        if (k < sizeof ENTITIES / sizeof ENTITIES[0]) {
            *p->out++ = ENTITIES[k].c;
            for (size_t j = strlen(ENTITIES[k].ref); j; j--) adv(p);
            continue;
        }
        if (cur(p) == '<') {
            fail(p, line, "'<' inside the value of attribute '%s' (missing closing quote?)", attr);
            return NULL;
        }
        *p->out++ = cur(p);
        adv(p);
    }
    if (at_end(p)) {
        fail(p, line, "value of attribute '%s' is never closed", attr);
        return NULL;
    }
    adv(p);
    *p->out++ = '\0';
    return start;
}

static int grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap) return 0;
    int ncap = *cap ? *cap * 2 : 64;
    while (ncap < need) ncap *= 2;
    void *a = realloc(*arr, (size_t)ncap * elem);
    if (!a) return -1;
    *arr = a;
    *cap = ncap;
    return 0;
}

static int add_attr(parser *p, int e, const char *name, const char *value, int line)
{
    dxml_doc *d = p->doc;
    for (int a = d->elems[e].attr0; a < d->nattrs; a++)
        if (!strcmp(d->attrs[a].name, name))
            return fail(p, line, "attribute '%s' repeated in <%s>", name, d->elems[e].name);
    if (grow((void **)&d->attrs, &p->acap, d->nattrs + 1, sizeof *d->attrs))
        return fail(p, line, "out of memory");
    d->attrs[d->nattrs++] = (dxml_attr){ name, value };
    d->elems[e].nattrs++;
    return 0;
}

static int open_tag(parser *p)
{
    int line = p->line;
    adv(p); /* '<' */
    const char *name = read_name(p);
    if (!name) return fail(p, line, "'<' not followed by an element name");
    dxml_doc *d = p->doc;
    if (p->depth == 0 && d->nelems > 0)
        return fail(p, line, "second top-level element <%s> (the first is <%s>)", name, d->elems[0].name);
    if (p->depth == DXML_MAX_DEPTH)
        return fail(p, line, "elements nested deeper than %d", DXML_MAX_DEPTH);
    if (grow((void **)&d->elems, &p->ecap, d->nelems + 1, sizeof *d->elems))
        return fail(p, line, "out of memory");
    int e = d->nelems++;
    d->elems[e] = (dxml_elem){ name, p->depth ? p->stack[p->depth - 1] : -1, p->depth, line,
                               d->nattrs, 0 };
    for (;;) {
        int had_space = strchr(" \t\r\n", cur(p)) != NULL;
        skip_ws(p);
        if (at_end(p)) return fail(p, line, "<%s> tag is never closed with '>'", name);
        if (starts(p, "/>")) { adv(p); adv(p); return 0; }
        if (cur(p) == '>') { adv(p); p->stack[p->depth++] = e; return 0; }
        int aline = p->line;
        const char *an = read_name(p);
        if (!an) return fail(p, aline, "unexpected '%c' in <%s> tag", cur(p), name);
        if (!had_space) return fail(p, aline, "attribute '%s' of <%s> not separated by a space", an, name);
        skip_ws(p);
        if (cur(p) != '=') return fail(p, p->line, "attribute '%s' of <%s> has no '=value'", an, name);
        adv(p);
        skip_ws(p);
        const char *av = read_value(p, aline, an);
        if (!av) return -1;
        if (add_attr(p, e, an, av, aline)) return -1;
    }
}

static int close_tag(parser *p)
{
    int line = p->line;
    adv(p); adv(p); /* "</" */
    const char *name = read_name(p);
    if (!name) return fail(p, line, "'</' not followed by an element name");
    skip_ws(p);
    if (cur(p) != '>') return fail(p, line, "</%s> tag is not closed with '>'", name);
    adv(p);
    if (p->depth == 0) return fail(p, line, "</%s> closes nothing (no element is open)", name);
    const dxml_elem *open = &p->doc->elems[p->stack[p->depth - 1]];
    if (strcmp(open->name, name))
        return fail(p, line, "</%s> does not match <%s> opened at line %d", name, open->name, open->line);
    p->depth--;
    return 0;
}

/* Comments, <?...?>, <!DOCTYPE ...>, CDATA: recognised and skipped. */
static int skip_markup(parser *p)
{
    int line = p->line;
    static const struct { const char *open, *close, *what; } KINDS[] = {
        { "<!--", "-->", "comment" },
        { "<![CDATA[", "]]>", "CDATA section" },
        { "<?", "?>", "processing instruction" },
        { "<!", ">", "declaration" },
    };
    for (size_t k = 0; k < sizeof KINDS / sizeof KINDS[0]; k++)
        if (starts(p, KINDS[k].open)) {
            if (!skip_past(p, KINDS[k].close)) return fail(p, line, "%s is never closed", KINDS[k].what);
            return 1;
        }
    return 0;
}

int dxml_parse(dxml_doc *doc, const char *text, size_t len, const char *path,
               char *err, unsigned errlen)
{
    memset(doc, 0, sizeof *doc);
    /* Every stored string comes from a disjoint stretch of the input at least one byte
     * longer than it (its '<', '=' or quote), so len + 1 bytes would suffice. */
    doc->strings = malloc(len + 16);
    if (!doc->strings) { snprintf(err, errlen, "%s: out of memory", path); return -1; }
    parser p = { .s = text, .n = len, .line = 1, .path = path, .err = err, .errlen = errlen,
                 .doc = doc, .out = doc->strings };
    if (starts(&p, "\xEF\xBB\xBF")) p.i = 3;
    int rc = 0;
    while (!rc && !at_end(&p)) {
        if (cur(&p) != '<') { adv(&p); continue; } /* text between tags carries nothing */
        int skipped = skip_markup(&p);
        if (skipped < 0) rc = -1;
        else if (skipped) continue;
        else if (starts(&p, "</")) rc = close_tag(&p);
        else rc = open_tag(&p);
    }
    if (!rc && p.depth > 0) {
        const dxml_elem *open = &doc->elems[p.stack[p.depth - 1]];
        rc = fail(&p, p.line, "file ends inside <%s> opened at line %d", open->name, open->line);
    }
    if (!rc && doc->nelems == 0) rc = fail(&p, p.line, "no XML elements in the file");
    if (rc) dxml_free(doc);
    return rc;
}

/* Whole file into a malloc'ed buffer; grows as it reads so pipes work too. */
static char *slurp(FILE *f, size_t *len, const char *path, char *err, unsigned errlen)
{
    size_t cap = 64 << 10, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || ferror(f)) break;
        if (cap > DXML_MAX_BYTES) break; /* already too large: refused below */
        char *b = realloc(buf, cap * 2);
        if (!b) { free(buf); buf = NULL; break; }
        buf = b;
        cap *= 2;
    }
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    if (ferror(f) || n > DXML_MAX_BYTES) {
        if (ferror(f)) snprintf(err, errlen, "%s: read error", path);
        else snprintf(err, errlen, "%s: larger than %u MiB; not a topology file?", path, DXML_MAX_BYTES >> 20);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int dxml_load(dxml_doc *doc, const char *path, char *err, unsigned errlen)
{
    memset(doc, 0, sizeof *doc);
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return -1; }
    size_t len = 0;
    char *buf = slurp(f, &len, path, err, errlen);
    fclose(f);
    if (!buf) return -1;
    int rc = dxml_parse(doc, buf, len, path, err, errlen);
    free(buf);
    return rc;
}

void dxml_free(dxml_doc *doc)
{
    free(doc->elems);
    free(doc->attrs);
    free(doc->strings);
    memset(doc, 0, sizeof *doc);
}

const char *dxml_attr_get(const dxml_doc *doc, int e, const char *name)
{
    const dxml_elem *el = &doc->elems[e];
    for (int a = el->attr0; a < el->attr0 + el->nattrs; a++)
        if (!strcmp(doc->attrs[a].name, name)) return doc->attrs[a].value;
    return NULL;
}

/* uc_nfc (unicode_nfc.h): decompose, order, compose, on a buffer of code points. */
#include "unicode_nfc.h"
#include "utf8.h"

#include <stdlib.h>
#include <string.h>

/* Hangul syllables: S = SBASE + (L - LBASE) * NCOUNT + (V - VBASE) * TCOUNT + (T - TBASE) */
enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21, TCOUNT = 28,
       NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

static int ccc_of(uint32_t cp)
{
    int lo = 0, hi = uc_nccc - 1;
    if (cp < 0x300) return 0;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < uc_ccc[mid].lo) hi = mid - 1;
        else if (cp > uc_ccc[mid].hi) lo = mid + 1;
        else return uc_ccc[mid].ccc;
    }
    return 0;
}

static const uc_pair *decomp_of(uint32_t cp)
{
    int lo = 0, hi = uc_ndecomp - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < uc_decomp[mid].a) hi = mid - 1;
        else if (cp > uc_decomp[mid].a) lo = mid + 1;
        else return &uc_decomp[mid];
    }
    return NULL;
}

/* the primary composite of (a, b), or 0 */
static uint32_t compose_of(uint32_t a, uint32_t b)
{
    if (a - LBASE < LCOUNT && b - VBASE < VCOUNT) return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a - SBASE < SCOUNT && (a - SBASE) % TCOUNT == 0 && b - TBASE - 1 < TCOUNT - 1) return a + (b - TBASE);
    int lo = 0, hi = uc_ncompose - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const uc_pair *p = &uc_compose[mid];
        if (a < p->a || (a == p->a && b < p->b)) hi = mid - 1;
        else if (a > p->a || b > p->b) lo = mid + 1;
        else return p->c;
    }
    return 0;
}

/* appends the full canonical decomposition of cp; a decomposition is at most 4 deep */
static size_t decompose(uint32_t cp, uint32_t *out)
{
    if (cp - SBASE < SCOUNT) {
        uint32_t s = cp - SBASE, t = s % TCOUNT;
        out[0] = LBASE + s / NCOUNT;
        out[1] = VBASE + (s % NCOUNT) / TCOUNT;
        if (t) out[2] = TBASE + t;
        return t ? 3 : 2;
    }
    const uc_pair *d = cp >= 0xC0 ? decomp_of(cp) : NULL;
    if (!d) {
        out[0] = cp;
        return 1;
    }
    size_t k = decompose(d->b, out);
    if (d->c) k += decompose(d->c, out + k);
    return k;
}

static int unstable(uint32_t cp)
{
    int lo = 0, hi = uc_nunstable - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < uc_unstable[mid].lo) hi = mid - 1;
        else if (cp > uc_unstable[mid].hi) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int uc_nfc(const char *str, size_t n, char **out, size_t *outn)
{
    const unsigned char *s = (const unsigned char *)str;
    *out = NULL;
    size_t i = 0;
    /* the quick check: bytes below 0xCC start code points below U+0300, none unstable */
    for (size_t l = 1; i < n; i += l) {
        l = 1;
        if (s[i] >= 0xCC && unstable(utf8_decode(s + i, n - i, &l))) break;
    }
    if (i == n) return 0;
    /* a code point's canonical decomposition is at most 4 long: 4 per byte is room for any text */
    uint32_t *cp = malloc((4 * n + 4) * sizeof *cp);
    uint8_t *cc = malloc(4 * n + 4);
    if (!cp || !cc) {
        free(cp);
        free(cc);
        return -1;
    }
    size_t m = 0;
    for (size_t l, j = 0; j < n; j += l) m += decompose(utf8_decode(s + j, n - j, &l), cp + m);
    for (size_t k = 0; k < m; k++) cc[k] = (uint8_t)ccc_of(cp[k]);
    /* canonical ordering: insertion sort of each run of non-zero classes, stable */
    for (size_t k = 1; k < m; k++)
        for (size_t j = k; j > 0 && cc[j] && cc[j - 1] > cc[j]; j--) {
            uint32_t t = cp[j]; cp[j] = cp[j - 1]; cp[j - 1] = t;
            uint8_t u = cc[j]; cc[j] = cc[j - 1]; cc[j - 1] = u;
        }
    /* canonical composition */
    size_t w = 0, starter = (size_t)-1;
    int last = -1; /* class of the last code point kept after the starter; -1: none */
    for (size_t k = 0; k < m; k++) {
        uint32_t c = cp[k], comp;
        if (starter != (size_t)-1 && (last == -1 || (last != 0 && last < cc[k])) && (comp = compose_of(cp[starter], c))) {
            cp[starter] = comp;
            continue;
        }
        if (!cc[k]) {
            starter = w;
            last = -1;
        } else {
            last = cc[k];
        }
        cp[w] = c;
        cc[w++] = cc[k];
    }
    char *o = malloc(4 * w + 1);
    if (!o) {
        free(cp);
        free(cc);
        return -1;
    }
    size_t b = 0;
    for (size_t k = 0; k < w; k++) b += utf8_encode(cp[k], o + b);
    o[b] = 0;
    free(cp);
    free(cc);
    if (b == n && !memcmp(o, str, n)) {
        free(o);
        return 0;
    }
    *out = o;
    *outn = b;
    return 1;
}

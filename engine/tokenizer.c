#include "tokenizer.h"
#include "errf.h"
#include "json_read.h"
#include "unicode_classes.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_RANK INT32_MAX
#define MAX_VOCAB_FILE (64u << 20)

/* pair (left id, right id) -> (rank, merged id), open addressing */
typedef struct pair_slot {
    uint64_t key; /* left << 32 | right, +1 so that 0 is empty */
    int32_t rank, merged;
} pair_slot;

/* a cached piece: its bytes and its tokens, in the two arenas */
typedef struct cache_slot {
    uint64_t hash; /* 0: empty */
    uint32_t key_off, key_len, tok_off, tok_len;
} cache_slot;

struct tokenizer {
    tok_type type;
    int nvocab;
    int32_t eod;
    char *bytes;          /* every token's bytes back to back */
    uint32_t *off;        /* [nvocab + 1] */
    int32_t byte_id[256]; /* the token of each single byte */
    pair_slot *pairs;
    uint32_t pair_mask;
    /* piece cache, cleared when full */
    cache_slot *cache;
    uint32_t cache_mask, cache_used;
    char *ckeys;
    int32_t *ctoks;
    size_t ckeys_n, ckeys_cap, ctoks_n, ctoks_cap;
    /* BPE scratch */
    int32_t *sym, *rank;
    size_t scratch_cap;
};

#define CACHE_SLOTS (1u << 16)
#define CACHE_KEY_BYTES (4u << 20)
#define CACHE_TOKS (1u << 20)

int tok_type_parse(const char *name, tok_type *t, char *err, size_t errlen)
{
    if (!strcmp(name, "GPT2BPETokenizer")) *t = TOK_GPT2BPE;
    else if (!strcmp(name, "ByteLevel")) *t = TOK_BYTE;
    else {
        atoll_errf(err, errlen, "--tokenizer-type '%s': expected GPT2BPETokenizer or ByteLevel", name);
        return -1;
    }
    return 0;
}

const char *tok_type_name(tok_type t) { return t == TOK_GPT2BPE ? "GPT2BPETokenizer" : "ByteLevel"; }
tok_type tok_kind(const tokenizer *t) { return t->type; }
int tok_vocab_size(const tokenizer *t) { return t->nvocab; }
int32_t tok_eod(const tokenizer *t) { return t->eod; }

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    h ^= h >> 29;
    return h | 1; /* never 0: 0 marks an empty slot */
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* ---- GPT-2's byte <-> unicode alphabet ----
 * Printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
 * themselves; the other 68 bytes, in increasing order, are U+0100 onwards. */
static void byte_alphabet(uint32_t cp_of[256])
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp_of[b] = printable ? (uint32_t)b : 256u + (uint32_t)n++;
    }
}

/* Decodes the code point at s (n > 0 bytes left); *len is its length. A
 * sequence cut short by the end is U+FFFD over what is left; a stray
 * continuation byte is itself (the callers give valid UTF-8 or reject it). */
static uint32_t utf8_at(const unsigned char *s, size_t n, size_t *len)
{
    unsigned char c = s[0];
    size_t k = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (k > n) { *len = n; return 0xFFFD; }
    *len = k;
    switch (k) {
    case 1: return c;
    case 2: return (uint32_t)(c & 0x1F) << 6 | (s[1] & 0x3Fu);
    case 3: return (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3Fu);
    default: return (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3Fu);
    }
}

/* ---- loading ---- */

typedef struct str_map { /* token bytes -> id, for building the merges */
    uint64_t *hash;
    int32_t *id;
    uint32_t mask;
} str_map;

static int32_t str_find(const str_map *m, const tokenizer *t, const char *s, size_t n)
{
    uint64_t h = hash_bytes(s, n);
    for (uint32_t i = (uint32_t)h & m->mask;; i = (i + 1) & m->mask) {
        if (!m->hash[i]) return -1;
        int32_t id = m->id[i];
        if (m->hash[i] == h && t->off[id + 1] - t->off[id] == n && !memcmp(t->bytes + t->off[id], s, n)) return id;
    }
}

static void pair_put(tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (uint32_t i = (uint32_t)mix64(key) & t->pair_mask;; i = (i + 1) & t->pair_mask)
        if (!t->pairs[i].key || t->pairs[i].key == key) {
            t->pairs[i] = (pair_slot){ key, rank, merged }; /* a repeated merge takes its last rank, as GPT-2's dict does */
            return;
        }
}

static const pair_slot *pair_get(const tokenizer *t, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (uint32_t i = (uint32_t)mix64(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        if (t->pairs[i].key == key) return &t->pairs[i];
        if (!t->pairs[i].key) return NULL;
    }
}

/* The vocab file: a JSON object of token string -> id, ids 0..n-1 each once. */
static int load_vocab(tokenizer *t, const char *path, str_map *map, char *err, size_t errlen)
{
    size_t len;
    char *text = atoll_read_file(path, MAX_VOCAB_FILE, &len);
    if (!text) {
        atoll_errf(err, errlen, "--vocab-file %s: %s", path, strerror(errno));
        return -1;
    }
    char jerr[160];
    jsonr *root = jsonr_parse(text, len, jerr, sizeof jerr);
    free(text);
    if (!root || root->type != JSONR_OBJ || root->count < 256) {
        atoll_errf(err, errlen, "--vocab-file %s: %s", path,
                   root ? "expected a JSON object of at least 256 token strings to ids (GPT-2's encoder.json)" : jerr);
        jsonr_free(root);
        return -1;
    }
    uint32_t cp_of[256], unicode_to_byte[324];
    byte_alphabet(cp_of);
    memset(unicode_to_byte, 0xff, sizeof unicode_to_byte);
    for (int b = 0; b < 256; b++) unicode_to_byte[cp_of[b]] = (uint32_t)b;
    int n = root->count, rc = -1;
    size_t total = 0;
    const jsonr *c;
    for (c = root->child; c; c = c->next) total += strlen(c->key);
    t->nvocab = n;
    t->off = calloc((size_t)n + 1, sizeof *t->off);
    t->bytes = malloc(total + 1);
    char **key_of = calloc((size_t)n, sizeof *key_of);
    if (!t->off || !t->bytes || !key_of) { atoll_errf(err, errlen, "out of memory"); goto out; }
    for (c = root->child; c; c = c->next) {
        if (c->type != JSONR_NUM || c->num < 0 || c->num >= n || c->num != (double)(int)c->num || key_of[(int)c->num]) {
            atoll_errf(err, errlen, "--vocab-file %s: token \"%.40s\" has id %g; ids must be 0..%d, each once", path,
                       c->key, c->num, n - 1);
            goto out;
        }
        key_of[(int)c->num] = c->key;
    }
    /* the ids' byte strings in id order: each code point of a token string is one byte */
    size_t at = 0;
    for (int id = 0; id < n; id++) {
        t->off[id] = (uint32_t)at;
        const unsigned char *s = (const unsigned char *)key_of[id];
        size_t sl = strlen(key_of[id]), i = 0, cl;
        while (i < sl) {
            uint32_t cp = utf8_at(s + i, sl - i, &cl);
            if (cp >= 324 || unicode_to_byte[cp] > 255) {
                atoll_errf(err, errlen, "--vocab-file %s: token %d \"%.40s\" has U+%04X, which is not in GPT-2's "
                           "byte-to-unicode alphabet", path, id, key_of[id], cp);
                goto out;
            }
            t->bytes[at++] = (char)unicode_to_byte[cp];
            i += cl;
        }
    }
    t->off[n] = (uint32_t)at;
    uint32_t cap = 1;
    while (cap < 2u * (uint32_t)n) cap <<= 1;
    map->mask = cap - 1;
    map->hash = calloc(cap, sizeof *map->hash);
    map->id = calloc(cap, sizeof *map->id);
    if (!map->hash || !map->id) { atoll_errf(err, errlen, "out of memory"); goto out; }
    for (int id = 0; id < n; id++) {
        size_t l = t->off[id + 1] - t->off[id];
        if (str_find(map, t, t->bytes + t->off[id], l) >= 0) continue; /* duplicate string: first id wins */
        uint64_t h = hash_bytes(t->bytes + t->off[id], l);
        uint32_t i = (uint32_t)h & map->mask;
        while (map->hash[i]) i = (i + 1) & map->mask;
        map->hash[i] = h;
        map->id[i] = id;
    }
    for (int b = 0; b < 256; b++) {
        char ch = (char)b;
        if ((t->byte_id[b] = str_find(map, t, &ch, 1)) < 0) {
            atoll_errf(err, errlen, "--vocab-file %s: no token for byte 0x%02X; a byte-level BPE vocab has all 256", path, b);
            goto out;
        }
    }
    t->eod = str_find(map, t, "<|endoftext|>", 13);
    if (t->eod < 0) {
        atoll_errf(err, errlen, "--vocab-file %s: no \"<|endoftext|>\" token (GPT-2's end of document)", path);
        goto out;
    }
    rc = 0;
out:
    free(key_of);
    jsonr_free(root);
    return rc;
}

/* Maps a merges-file symbol (GPT-2 alphabet) to bytes; returns its length or -1. */
static long symbol_bytes(const char *s, size_t n, char *out)
{
    uint32_t cp_of[256], to_byte[324];
    byte_alphabet(cp_of);
    memset(to_byte, 0xff, sizeof to_byte);
    for (int b = 0; b < 256; b++) to_byte[cp_of[b]] = (uint32_t)b;
    size_t i = 0, cl;
    long k = 0;
    while (i < n) {
        uint32_t cp = utf8_at((const unsigned char *)s + i, n - i, &cl);
        if (cp >= 324 || to_byte[cp] > 255) return -1;
        out[k++] = (char)to_byte[cp];
        i += cl;
    }
    return k;
}

static int load_merges(tokenizer *t, const char *path, const str_map *map, char *err, size_t errlen)
{
    size_t len;
    char *text = atoll_read_file(path, MAX_VOCAB_FILE, &len);
    if (!text) {
        atoll_errf(err, errlen, "--merge-file %s: %s", path, strerror(errno));
        return -1;
    }
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    uint32_t cap = 1;
    while (cap < 2 * lines + 16) cap <<= 1;
    t->pair_mask = cap - 1;
    t->pairs = calloc(cap, sizeof *t->pairs);
    char *buf = malloc(len + 1);
    int rc = -1;
    if (!t->pairs || !buf) { atoll_errf(err, errlen, "out of memory"); goto out; }
    int32_t rank = 0;
    size_t lineno = 0;
    for (char *line = text, *next; line && line < text + len; line = next) {
        next = strchr(line, '\n');
        size_t ll = next ? (size_t)(next - line) : strlen(line);
        if (next) next++;
        lineno++;
        if (ll && line[ll - 1] == '\r') ll--;
        if (!ll || (lineno == 1 && !strncmp(line, "#version", 8))) continue;
        char *sp = memchr(line, ' ', ll);
        long la = sp ? symbol_bytes(line, (size_t)(sp - line), buf) : -1;
        long lb = la > 0 ? symbol_bytes(sp + 1, ll - (size_t)(sp - line) - 1, buf + la) : -1;
        int32_t a = la > 0 ? str_find(map, t, buf, (size_t)la) : -1;
        int32_t b = lb > 0 ? str_find(map, t, buf + la, (size_t)lb) : -1;
        int32_t ab = a >= 0 && b >= 0 ? str_find(map, t, buf, (size_t)(la + lb)) : -1;
        if (ab < 0) {
            atoll_errf(err, errlen, "--merge-file %s: line %zu \"%.*s\" is not two vocab tokens whose join is a "
                       "vocab token (expected \"A B\" per line, as GPT-2's vocab.bpe)", path, lineno,
                       (int)(ll < 60 ? ll : 60), line);
            goto out;
        }
        pair_put(t, a, b, rank++, ab);
    }
    if (!rank) {
        atoll_errf(err, errlen, "--merge-file %s: no merges", path);
        goto out;
    }
    rc = 0;
out:
    free(buf);
    free(text);
    return rc;
}

tokenizer *tok_open(tok_type type, const char *vocab_file, const char *merge_file, char *err, size_t errlen)
{
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) { atoll_errf(err, errlen, "out of memory"); return NULL; }
    t->type = type;
    if (type == TOK_BYTE) {
        t->nvocab = 256;
        t->eod = 0;
        t->bytes = malloc(256);
        t->off = malloc(257 * sizeof *t->off);
        if (!t->bytes || !t->off) { tok_free(t); atoll_errf(err, errlen, "out of memory"); return NULL; }
        for (int b = 0; b < 256; b++) {
            t->bytes[b] = (char)b;
            t->off[b] = (uint32_t)b;
            t->byte_id[b] = b;
        }
        t->off[256] = 256;
        return t;
    }
    if (!vocab_file || !*vocab_file || !merge_file || !*merge_file) {
        atoll_errf(err, errlen, "--tokenizer-type GPT2BPETokenizer needs --vocab-file (encoder.json / vocab.json) "
                   "and --merge-file (vocab.bpe / merges.txt)");
        tok_free(t);
        return NULL;
    }
    str_map map = { 0 };
    int rc = load_vocab(t, vocab_file, &map, err, errlen);
    if (!rc) rc = load_merges(t, merge_file, &map, err, errlen);
    free(map.hash);
    free(map.id);
    t->cache_mask = CACHE_SLOTS - 1;
    if (!rc && (!(t->cache = calloc(CACHE_SLOTS, sizeof *t->cache)) || !(t->ckeys = malloc(CACHE_KEY_BYTES)) ||
                !(t->ctoks = malloc(CACHE_TOKS * sizeof *t->ctoks)))) {
        atoll_errf(err, errlen, "out of memory");
        rc = -1;
    }
    t->ckeys_cap = CACHE_KEY_BYTES;
    t->ctoks_cap = CACHE_TOKS;
    if (rc) {
        tok_free(t);
        return NULL;
    }
    return t;
}

void tok_free(tokenizer *t)
{
    if (!t) return;
    free(t->bytes);
    free(t->off);
    free(t->pairs);
    free(t->cache);
    free(t->ckeys);
    free(t->ctoks);
    free(t->sym);
    free(t->rank);
    free(t);
}

/* ---- UTF-8 ---- */

long tok_utf8_sanitize(const char *s, size_t n, char **out, size_t *outn)
{
    const unsigned char *u = (const unsigned char *)s;
    *out = NULL;
    char *o = NULL;
    size_t w = 0;
    long bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t need = 0, seen = 0, start = 0;
        unsigned lower = 0x80, upper = 0xBF;
        for (size_t i = 0; i <= n; i++) {
            if (i == n) {
                if (need) { /* truncated at the end: one replacement */
                    if (o) { memcpy(o + w, "\xEF\xBF\xBD", 3); w += 3; }
                    bad++;
                }
                break;
            }
            unsigned b = u[i];
            if (!need) {
                start = i;
                if (b < 0x80) { if (o) o[w++] = (char)b; continue; }
                if (b >= 0xC2 && b <= 0xDF) need = 1;
                else if (b >= 0xE0 && b <= 0xEF) {
                    need = 2;
                    if (b == 0xE0) lower = 0xA0;
                    if (b == 0xED) upper = 0x9F;
                } else if (b >= 0xF0 && b <= 0xF4) {
                    need = 3;
                    if (b == 0xF0) lower = 0x90;
                    if (b == 0xF4) upper = 0x8F;
                } else {
                    if (o) { memcpy(o + w, "\xEF\xBF\xBD", 3); w += 3; }
                    bad++;
                }
                seen = 0;
                continue;
            }
            if (b < lower || b > upper) { /* replace what was seen, read this byte again */
                need = 0;
                lower = 0x80;
                upper = 0xBF;
                if (o) { memcpy(o + w, "\xEF\xBF\xBD", 3); w += 3; }
                bad++;
                i--;
                continue;
            }
            lower = 0x80;
            upper = 0xBF;
            if (++seen == need) {
                if (o) { memcpy(o + w, s + start, need + 1); w += need + 1; }
                need = 0;
            }
        }
        if (pass == 0) {
            if (!bad) return 0;
            /* every replaced byte becomes at most 3 */
            if (!(o = malloc(3 * n + 1))) return -1;
            bad = 0;
        }
    }
    o[w] = 0;
    *out = o;
    *outn = w;
    return bad;
}

/* ---- GPT-2's pre-tokenizer ---- */

static int cls_of(uint32_t cp)
{
    if (cp < 128) { /* what the table says for ASCII, without the search */
        if ((cp | 32) - 'a' < 26) return UC_LETTER;
        if (cp - '0' < 10) return UC_NUMBER;
        return cp == ' ' || (cp >= 9 && cp <= 13) ? UC_SPACE : UC_OTHER;
    }
    int lo = 0, hi = uc_nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < uc_ranges[mid].lo) hi = mid - 1;
        else if (cp > uc_ranges[mid].hi) lo = mid + 1;
        else return uc_ranges[mid].cls;
    }
    return UC_OTHER;
}

static int cls_at(const unsigned char *s, size_t n, size_t i, size_t *len)
{
    return cls_of(utf8_at(s + i, n - i, len));
}

/* end of the run of class k starting at i (whatever the class of s[i]) */
static size_t run_end(const unsigned char *s, size_t n, size_t i, int k)
{
    size_t l;
    while (i < n && cls_at(s, n, i, &l) == k) i += l;
    return i;
}

static size_t other_end(const unsigned char *s, size_t n, size_t i)
{
    size_t l;
    while (i < n && cls_at(s, n, i, &l) == UC_OTHER) i += l;
    return i;
}

size_t tok_gpt2_split(const char *str, size_t n, size_t i)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t l0, l1;
    /* 's 't 're 've 'm 'll 'd */
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    int k0 = cls_at(s, n, i, &l0);
    /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' */
    if (s[i] == ' ' && i + 1 < n) {
        int k1 = cls_at(s, n, i + 1, &l1);
        if (k1 != UC_SPACE) return k1 == UC_OTHER ? other_end(s, n, i + 1) : run_end(s, n, i + 1, k1);
    }
    if (k0 != UC_SPACE) return k0 == UC_OTHER ? other_end(s, n, i) : run_end(s, n, i, k0);
    /* '\s+(?!\S)': the run but its last character when something follows; '\s+' */
    size_t end = run_end(s, n, i, UC_SPACE);
    if (end == n) return end;
    size_t last = i, l;
    for (size_t j = i; j < end; j += l) {
        cls_at(s, n, j, &l);
        if (j + l == end) last = j;
    }
    return last > i ? last : end;
}

/* ---- BPE ---- */

static int grow_scratch(tokenizer *t, size_t n)
{
    if (n <= t->scratch_cap) return 0;
    size_t cap = t->scratch_cap ? t->scratch_cap : 256;
    while (cap < n) cap *= 2;
    int32_t *a = realloc(t->sym, cap * sizeof *a);
    if (a) t->sym = a;
    int32_t *b = realloc(t->rank, cap * sizeof *b);
    if (b) t->rank = b;
    if (!a || !b) return -1;
    t->scratch_cap = cap;
    return 0;
}

static int32_t rank_of(const tokenizer *t, int32_t a, int32_t b)
{
    const pair_slot *p = pair_get(t, a, b);
    return p ? p->rank : NO_RANK;
}

/* The tokens of one piece into t->sym; returns their count or -1. */
static long bpe_piece(tokenizer *t, const unsigned char *s, size_t n)
{
    if (grow_scratch(t, n)) return -1;
    int32_t *sym = t->sym, *rank = t->rank;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[s[i]];
    size_t m = n;
    for (size_t i = 0; i + 1 < m; i++) rank[i] = rank_of(t, sym[i], sym[i + 1]);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == NO_RANK) break;
        int32_t a = sym[best], b = sym[best + 1], ab = pair_get(t, a, b)->merged;
        /* merge every occurrence, left to right */
        size_t w = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && sym[i] == a && sym[i + 1] == b) {
                sym[w++] = ab;
                i += 2;
            } else {
                sym[w++] = sym[i++];
            }
        }
        m = w;
        for (size_t i = 0; i + 1 < m; i++) rank[i] = rank_of(t, sym[i], sym[i + 1]);
    }
    return (long)m;
}

static int buf_reserve(tok_buf *b, size_t more)
{
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + more) cap *= 2;
    int32_t *ids = realloc(b->ids, cap * sizeof *ids);
    if (!ids) return -1;
    b->ids = ids;
    b->cap = cap;
    return 0;
}

static void cache_clear(tokenizer *t)
{
    memset(t->cache, 0, (size_t)(t->cache_mask + 1) * sizeof *t->cache);
    t->cache_used = 0;
    t->ckeys_n = t->ctoks_n = 0;
}

static int encode_piece(tokenizer *t, const unsigned char *s, size_t n, tok_buf *out)
{
    if (n == 1) {
        if (buf_reserve(out, 1)) return -1;
        out->ids[out->n++] = t->byte_id[s[0]];
        return 0;
    }
    uint64_t h = hash_bytes(s, n);
    uint32_t i = (uint32_t)h & t->cache_mask;
    for (; t->cache[i].hash; i = (i + 1) & t->cache_mask) {
        const cache_slot *c = &t->cache[i];
        if (c->hash == h && c->key_len == n && !memcmp(t->ckeys + c->key_off, s, n)) {
            if (buf_reserve(out, c->tok_len)) return -1;
            memcpy(out->ids + out->n, t->ctoks + c->tok_off, c->tok_len * sizeof(int32_t));
            out->n += c->tok_len;
            return 0;
        }
    }
    long m = bpe_piece(t, s, n);
    if (m < 0 || buf_reserve(out, (size_t)m)) return -1;
    memcpy(out->ids + out->n, t->sym, (size_t)m * sizeof(int32_t));
    out->n += (size_t)m;
    if (n > 256) return 0; /* long pieces are rare: not worth the cache room */
    if (t->cache_used * 2 > t->cache_mask || t->ckeys_n + n > t->ckeys_cap || t->ctoks_n + (size_t)m > t->ctoks_cap) {
        cache_clear(t);
        i = (uint32_t)h & t->cache_mask;
    }
    t->cache[i] = (cache_slot){ h, (uint32_t)t->ckeys_n, (uint32_t)n, (uint32_t)t->ctoks_n, (uint32_t)m };
    memcpy(t->ckeys + t->ckeys_n, s, n);
    memcpy(t->ctoks + t->ctoks_n, t->sym, (size_t)m * sizeof(int32_t));
    t->ckeys_n += n;
    t->ctoks_n += (size_t)m;
    t->cache_used++;
    return 0;
}

long tok_encode(tokenizer *t, const char *text, size_t n, tok_buf *out)
{
    if (t->type == TOK_BYTE) {
        if (buf_reserve(out, n)) return -1;
        for (size_t i = 0; i < n; i++) out->ids[out->n++] = (unsigned char)text[i];
        return 0;
    }
    char *clean = NULL;
    size_t cn = 0;
    long bad = tok_utf8_sanitize(text, n, &clean, &cn);
    if (bad < 0) return -1;
    const char *s = clean ? clean : text;
    if (clean) n = cn;
    for (size_t i = 0; i < n;) {
        size_t e = tok_gpt2_split(s, n, i);
        if (encode_piece(t, (const unsigned char *)s + i, e - i, out)) {
            free(clean);
            return -1;
        }
        i = e;
    }
    free(clean);
    return bad;
}

const char *tok_piece(const tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->nvocab) return NULL;
    *len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

char *tok_decode(const tokenizer *t, const int32_t *ids, size_t n, size_t *len, char *err, size_t errlen)
{
    size_t total = 0, l;
    for (size_t i = 0; i < n; i++) {
        if (!tok_piece(t, ids[i], &l)) {
            atoll_errf(err, errlen, "token %d is outside the tokenizer's vocab of %d", ids[i], t->nvocab);
            return NULL;
        }
        total += l;
    }
    char *out = malloc(total + 1);
    if (!out) { atoll_errf(err, errlen, "out of memory"); return NULL; }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = tok_piece(t, ids[i], &l);
        memcpy(out + at, p, l);
        at += l;
    }
    out[at] = 0;
    *len = at;
    return out;
}

/* The config's tokenizer, opened: 0 with *t NULL for byte-level (or none given),
 * -1 with err when the type or its files are refused. */
static int open_config_tok(const atoll_config *c, tokenizer **t, char *err, size_t errlen)
{
    tok_type type;
    *t = NULL;
    if (!c->tokenizer_type[0]) return 0;
    if (tok_type_parse(c->tokenizer_type, &type, err, errlen)) return -1;
    if (type == TOK_BYTE) return 0;
    return (*t = tok_open(type, c->vocab_file, c->merge_file, err, errlen)) ? 0 : -1;
}

int32_t tok_config_eod(const atoll_config *c, char *err, size_t errlen)
{
    tokenizer *t;
    if (open_config_tok(c, &t, err, errlen)) return -1;
    if (!t) return 0; /* byte-level: 0 ends a document */
    int32_t eod = tok_eod(t);
    tok_free(t);
    return eod;
}

int tok_config_vocab(atoll_config *c, char *err, size_t errlen)
{
    tokenizer *t;
    if (open_config_tok(c, &t, err, errlen)) return -1;
    if (!t) return 0;
    int n = tok_vocab_size(t), mult = cfg_vocab_multiple(c) * (c->tensor_model_parallel_size > 0 ? c->tensor_model_parallel_size : 1);
    tok_free(t);
    int padded = (n + mult - 1) / mult * mult;
    if (c->vocab_size != 256 && c->vocab_size != padded) {
        atoll_errf(err, errlen, "--vocab-size %d disagrees with --tokenizer-type %s: its %d entries padded to a "
                   "multiple of %d make %d (leave --vocab-size out)", c->vocab_size, c->tokenizer_type, n, mult, padded);
        return -1;
    }
    c->vocab_size = padded;
    return 0;
}

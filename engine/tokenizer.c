#include "tokenizer.h"
#include "errf.h"
#include "json_read.h"
#include "unicode_classes.h"
#include "unicode_nfc.h"
#include "utf8.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

typedef struct str_map { /* token bytes -> id */
    uint64_t *hash;
    int32_t *id;
    uint32_t mask;
} str_map;

/* an added token of a HuggingFaceTokenizer: its text is text[off, off + len) */
typedef struct added_tok {
    int32_t id;
    uint32_t off, len;
    int normalized; /* matched after the raw-text ones */
} added_tok;

/* ---- SentencePiece's BPE ----
 * As sentencepiece's BPE model encodes: the text (normalized: U+2581 for a
 * space, and one before the text when add_dummy_prefix) is split into
 * characters, a user-defined piece (longest first) staying whole; then, over
 * and over, the adjacent pair whose join is a piece of the highest score (the
 * leftmost of equals) is joined, until no join is a piece. A symbol that is
 * not a piece is its UTF-8 bytes' byte pieces (byte_fallback), or the unknown
 * piece, once for a run of them. Here U+2581 is a space throughout: in the
 * pieces (t->bytes) and in the text. */
typedef struct sp_sym {
    uint32_t at, len; /* text[at, at + len); len 0: joined into the symbol before */
    int32_t prev, next;
    int32_t id;       /* its piece, -1 when it is none */
    int frozen;       /* a user-defined piece */
} sp_sym;

typedef struct sp_pair {
    double key;   /* the join first of highest key: the piece's score, or minus the merge's rank */
    int32_t left, right, joined;
    uint32_t len; /* the join's length when it was queued */
} sp_pair;

typedef struct sp_agenda {
    sp_pair *a;
    size_t n, cap;
} sp_agenda;

#define MAX_TEMPLATE 8

struct tokenizer {
    tok_type type;
    int nvocab;
    int32_t eod;
    /* HuggingFaceTokenizer */
    str_map map;         /* vocab (not added) token bytes -> id: ignore_merges, SentencePiece's joins */
    int ignore_merges;
    int nfc;             /* the normalizer: NFC (Qwen's) or none (LLaMA-3's) */
    int digits;          /* the pattern's \p{N}{1,digits}: 3 (LLaMA-3's) or 1 (Qwen2's) */
    added_tok *added;    /* sorted by first byte, then longest first */
    int nadded;
    int added_first[257]; /* added[added_first[b], added_first[b + 1]) begin with byte b */
    char *added_text;
    int32_t pre[MAX_TEMPLATE], post[MAX_TEMPLATE]; /* the template's ids before and after the text */
    int npre, npost;
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
    /* BPE scratch (sp_syms too, for SentencePiece) */
    int32_t *sym, *rank;
    size_t scratch_cap;
    /* SentencePiece (user-defined pieces are in added, byte pieces in byte_id); sp is also set for
     * a HuggingFaceTokenizer of LLaMA-2's kind (meta), whose joins go by merge rank, not score */
    int sp, meta;
    float *score;          /* [nvocab]: a merge into the piece of highest score comes first */
    unsigned char *ptype;  /* [nvocab]: SP_* */
    int32_t unk;
    int byte_fallback, dummy_prefix, escape;
    int words;             /* no piece has a space after another character: a text's words (a run of
                              spaces and the characters up to the next space) encode apart */
    sp_sym *sp_syms;       /* sp_piece's scratch, [scratch_cap] */
    sp_agenda agenda;
};

#define CACHE_SLOTS (1u << 16)
#define CACHE_KEY_BYTES (4u << 20)
#define CACHE_TOKS (1u << 20)

int tok_type_parse(const char *name, tok_type *t, char *err, size_t errlen)
{
    if (!strcmp(name, "GPT2BPETokenizer")) *t = TOK_GPT2BPE;
    else if (!strcmp(name, "HuggingFaceTokenizer")) *t = TOK_HF;
    else if (!strcmp(name, "Llama2Tokenizer")) *t = TOK_LLAMA2;
    else if (!strcmp(name, "GPTSentencePieceTokenizer")) *t = TOK_GPTSPM;
    else if (!strcmp(name, "ByteLevel")) *t = TOK_BYTE;
    else if (!strcmp(name, "NullTokenizer")) *t = TOK_NULL;
    else {
        atoll_errf(err, errlen, "--tokenizer-type '%s': expected GPT2BPETokenizer, HuggingFaceTokenizer (a "
                   "tokenizer.json of LLaMA-3's, Qwen2's or LLaMA-2's kind, --tokenizer-model), Llama2Tokenizer or "
                   "GPTSentencePieceTokenizer (a SentencePiece tokenizer.model, --tokenizer-model), NullTokenizer "
                   "(the data's ids as they are, --vocab-size) or ByteLevel", name);
        return -1;
    }
    return 0;
}

const char *tok_type_name(tok_type t)
{
    static const char *const names[] = { "ByteLevel", "GPT2BPETokenizer", "HuggingFaceTokenizer", "Llama2Tokenizer",
                                         "GPTSentencePieceTokenizer", "NullTokenizer" };
    return t >= TOK_BYTE && t <= TOK_NULL ? names[t] : "ByteLevel";
}
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

/* ---- loading ---- */

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

/* map: the bytes of every token but those with skip[id] set (t->bytes,
 * t->off filled) -> id; of two tokens with the same bytes the first id wins. */
static int map_fill(tokenizer *t, str_map *map, const unsigned char *skip)
{
    uint32_t cap = 1;
    while (cap < 2u * (uint32_t)t->nvocab) cap <<= 1;
    map->mask = cap - 1;
    map->hash = calloc(cap, sizeof *map->hash);
    map->id = calloc(cap, sizeof *map->id);
    if (!map->hash || !map->id) return -1;
    for (int id = 0; id < t->nvocab; id++) {
        size_t l = t->off[id + 1] - t->off[id];
        if (skip[id] || str_find(map, t, t->bytes + t->off[id], l) >= 0) continue;
        uint64_t h = hash_bytes(t->bytes + t->off[id], l);
        uint32_t i = (uint32_t)h & map->mask;
        while (map->hash[i]) i = (i + 1) & map->mask;
        map->hash[i] = h;
        map->id[i] = id;
    }
    return 0;
}

/* SentencePiece's text s[0, n) with each U+2581 as a space, into out (room
 * for n bytes); its length. A space stands for U+2581 in the pieces and in
 * the normalized text alike. */
static size_t meta_to_space(const char *s, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int meta = n - i >= 3 && !memcmp(s + i, "\xE2\x96\x81", 3);
        out[k++] = meta ? ' ' : s[i];
        i += meta ? 2 : 0;
    }
    return k;
}

/* A byte piece's text "<0xNN>" -> NN, else -1. */
static int byte_piece(const unsigned char *s, size_t len)
{
    unsigned v;
    char tail, buf[8];
    if (len != 6) return -1;
    memcpy(buf, s, 6);
    buf[6] = 0;
    return sscanf(buf, "<0x%2X%c", &v, &tail) == 2 && tail == '>' && v < 256 ? (int)v : -1;
}

/* 1 when no piece but the skipped ones has a space after another character:
 * then no join crosses the start of a word (a run of spaces and what follows
 * up to the next space), and words encode apart. */
static int sp_words_apart(const tokenizer *t, const unsigned char *skip)
{
    for (int k = 0; k < t->nvocab; k++) {
        const char *pb = t->bytes + t->off[k];
        for (uint32_t i = 1; !skip[k] && i < t->off[k + 1] - t->off[k]; i++)
            if (pb[i] == ' ' && pb[i - 1] != ' ') return 0;
    }
    return 1;
}

/* The vocab: `vocab` a JSON object of token string (in GPT-2's byte-to-unicode
 * alphabet) -> id, and `added` (a HuggingFaceTokenizer's added_tokens, or
 * NULL) objects {id, content} whose content is the token's text itself (an
 * added token may name an id of the vocab: the vocab's bytes stay). Ids must be
 * 0..n-1, each once. Fills t->bytes, t->off, t->nvocab, t->byte_id and `map`
 * (the vocab's tokens). `what` names the file in messages. */
static int fill_vocab(tokenizer *t, const jsonr *vocab, const jsonr *added, str_map *map, const char *what,
                      char *err, size_t errlen)
{
    uint32_t cp_of[256], unicode_to_byte[324];
    byte_alphabet(cp_of);
    memset(unicode_to_byte, 0xff, sizeof unicode_to_byte);
    for (int b = 0; b < 256; b++) unicode_to_byte[cp_of[b]] = (uint32_t)b;
    const jsonr *c;
    int n = 0, rc = -1;
    for (int pass = 0; pass < 2; pass++)
        for (c = pass ? (added ? added->child : NULL) : vocab->child; c; c = c->next) {
            const jsonr *id = pass ? jsonr_get(c, "id") : c, *text = pass ? jsonr_get(c, "content") : NULL;
            if (!id || id->type != JSONR_NUM || id->num < 0 || id->num >= (1 << 24) || id->num != (double)(int)id->num ||
                (pass && (!text || text->type != JSONR_STR || !text->len))) {
                atoll_errf(err, errlen, "%s: %s \"%.40s\" has no valid id (expected a whole number from 0)", what,
                           pass ? "added token" : "token", pass ? (text && text->str ? text->str : "?") : c->key);
                return -1;
            }
            if ((int)id->num >= n) n = (int)id->num + 1;
        }
    const char **key_of = calloc((size_t)n, sizeof *key_of);
    unsigned char *raw = calloc((size_t)n, 1);
    size_t total = 0;
    t->nvocab = n;
    t->off = calloc((size_t)n + 1, sizeof *t->off);
    if (!key_of || !raw || !t->off) { atoll_errf(err, errlen, "out of memory"); goto out; }
    for (c = vocab->child; c; c = c->next) {
        if (key_of[(int)c->num]) {
            atoll_errf(err, errlen, "%s: token \"%.40s\" has id %g, which \"%.40s\" has too; ids must be 0..%d, each "
                       "once", what, c->key, c->num, key_of[(int)c->num], n - 1);
            goto out;
        }
        key_of[(int)c->num] = c->key;
    }
    for (c = added ? added->child : NULL; c; c = c->next) {
        int id = (int)jsonr_get(c, "id")->num;
        if (key_of[id] && raw[id]) {
            atoll_errf(err, errlen, "%s: added tokens \"%.40s\" and \"%.40s\" both have id %d", what, key_of[id],
                       jsonr_get(c, "content")->str, id);
            goto out;
        }
        if (!key_of[id]) {
            key_of[id] = jsonr_get(c, "content")->str;
            raw[id] = 1;
        }
    }
    for (int id = 0; id < n; id++) {
        if (!key_of[id]) {
            atoll_errf(err, errlen, "%s: no token has id %d; ids must be 0..%d, each once", what, id, n - 1);
            goto out;
        }
        total += strlen(key_of[id]);
    }
    if (!(t->bytes = malloc(total + 1))) { atoll_errf(err, errlen, "out of memory"); goto out; }
    /* the ids' byte strings in id order: each code point of a vocab token string is one byte (LLaMA-2's:
     * the text itself, U+2581 a space, and a byte token <0xNN> its byte, kept out of the map as added
     * tokens are) */
    size_t at = 0;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (int id = 0; id < n; id++) {
        t->off[id] = (uint32_t)at;
        const unsigned char *s = (const unsigned char *)key_of[id];
        size_t sl = strlen(key_of[id]), i = 0, cl;
        int b = t->meta && !raw[id] ? byte_piece(s, sl) : -1;
        if (b >= 0) {
            t->bytes[at++] = (char)b;
            if (t->byte_id[b] < 0) t->byte_id[b] = id;
            raw[id] = 1;
            continue;
        }
        if (raw[id]) {
            memcpy(t->bytes + at, s, sl);
            at += sl;
            continue;
        }
        if (t->meta) {
            at += meta_to_space((const char *)s, sl, t->bytes + at);
            continue;
        }
        while (i < sl) {
            uint32_t cp = utf8_decode(s + i, sl - i, &cl);
            if (cp >= 324 || unicode_to_byte[cp] > 255) {
                atoll_errf(err, errlen, "%s: token %d \"%.40s\" has U+%04X, which is not in GPT-2's byte-to-unicode "
                           "alphabet (a byte-level BPE vocab)", what, id, key_of[id], cp);
                goto out;
            }
            t->bytes[at++] = (char)unicode_to_byte[cp];
            i += cl;
        }
    }
    t->off[n] = (uint32_t)at;
    if (map_fill(t, map, raw)) { atoll_errf(err, errlen, "out of memory"); goto out; }
    for (int b = 0; b < 256; b++) {
        char ch = (char)b;
        if (t->meta ? t->byte_id[b] < 0 : (t->byte_id[b] = str_find(map, t, &ch, 1)) < 0) {
            atoll_errf(err, errlen, t->meta ? "%s: no token <0x%02X>; byte_fallback needs all 256 byte tokens"
                                            : "%s: no token for byte 0x%02X; a byte-level BPE vocab has all 256", what, b);
            goto out;
        }
    }
    if (t->meta) t->words = sp_words_apart(t, raw);
    rc = 0;
out:
    free(key_of);
    free(raw);
    return rc;
}

/* The vocab file: a JSON object of token string -> id, ids 0..n-1 each once. */
static int load_vocab(tokenizer *t, const char *path, str_map *map, char *err, size_t errlen)
{
    char jerr[160], what[CFG_STR + 16];
    jsonr *root = jsonr_read_file(path, MAX_VOCAB_FILE, jerr, sizeof jerr);
    if (!root || root->type != JSONR_OBJ || root->count < 256) {
        atoll_errf(err, errlen, "--vocab-file %s: %s", path,
                   root ? "expected a JSON object of at least 256 token strings to ids (GPT-2's encoder.json)" : jerr);
        jsonr_free(root);
        return -1;
    }
    snprintf(what, sizeof what, "--vocab-file %s", path);
    int rc = fill_vocab(t, root, NULL, map, what, err, errlen);
    if (!rc && (t->eod = str_find(map, t, "<|endoftext|>", 13)) < 0) {
        atoll_errf(err, errlen, "--vocab-file %s: no \"<|endoftext|>\" token (GPT-2's end of document)", path);
        rc = -1;
    }
    jsonr_free(root);
    return rc;
}

/* Maps a merges-file symbol (GPT-2 alphabet) to bytes; returns its length or -1. */
static long symbol_bytes(const tokenizer *t, const char *s, size_t n, char *out)
{
    if (t->meta) return (long)meta_to_space(s, n, out); /* LLaMA-2's: the text, U+2581 a space */
    uint32_t cp_of[256], to_byte[324];
    byte_alphabet(cp_of);
    memset(to_byte, 0xff, sizeof to_byte);
    for (int b = 0; b < 256; b++) to_byte[cp_of[b]] = (uint32_t)b;
    size_t i = 0, cl;
    long k = 0;
    while (i < n) {
        uint32_t cp = utf8_decode((const unsigned char *)s + i, n - i, &cl);
        if (cp >= 324 || to_byte[cp] > 255) return -1;
        out[k++] = (char)to_byte[cp];
        i += cl;
    }
    return k;
}

/* One merge "A B" (symbols in GPT-2's alphabet) of the given rank; -1 when A,
 * B or their join is not a vocab token. buf holds la + lb bytes. */
static int add_merge(tokenizer *t, const str_map *map, const char *a, size_t la, const char *b, size_t lb,
                     int32_t rank, char *buf)
{
    long na = la ? symbol_bytes(t, a, la, buf) : -1;
    long nb = na > 0 && lb ? symbol_bytes(t, b, lb, buf + na) : -1;
    int32_t ia = na > 0 ? str_find(map, t, buf, (size_t)na) : -1;
    int32_t ib = nb > 0 ? str_find(map, t, buf + na, (size_t)nb) : -1;
    int32_t iab = ia >= 0 && ib >= 0 ? str_find(map, t, buf, (size_t)(na + nb)) : -1;
    if (iab < 0) return -1;
    pair_put(t, ia, ib, rank, iab);
    return 0;
}

static int alloc_pairs(tokenizer *t, size_t n)
{
    uint32_t cap = 1;
    while (cap < 2 * n + 16) cap <<= 1;
    t->pair_mask = cap - 1;
    return (t->pairs = calloc(cap, sizeof *t->pairs)) ? 0 : -1;
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
    char *buf = malloc(len + 1);
    int rc = -1;
    if (alloc_pairs(t, lines) || !buf) { atoll_errf(err, errlen, "out of memory"); goto out; }
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
        if (!sp || add_merge(t, map, line, (size_t)(sp - line), sp + 1, ll - (size_t)(sp - line) - 1, rank, buf)) {
            atoll_errf(err, errlen, "--merge-file %s: line %zu \"%.*s\" is not two vocab tokens whose join is a "
                       "vocab token (expected \"A B\" per line, as GPT-2's vocab.bpe)", path, lineno,
                       (int)(ll < 60 ? ll : 60), line);
            goto out;
        }
        rank++;
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

/* ---- HuggingFaceTokenizer: tokenizer.json ---- */

/* LLaMA-3's pre-tokenizer pattern, as its tokenizer.json spells it, and
 * Qwen2's (Qwen2.5's, Qwen3's): the same but one digit a piece */
static const char LLAMA3_PATTERN[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_PATTERN[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char *jstr(const jsonr *o, const char *key)
{
    const jsonr *v = jsonr_get(o, key);
    return v && v->type == JSONR_STR ? v->str : NULL;
}

static int jtrue(const jsonr *o, const char *key)
{
    const jsonr *v = jsonr_get(o, key);
    return v && v->type == JSONR_BOOL && v->num != 0;
}

/* {"type": TYPE} with the string fields named in `kv` (name, value, ...,
 * NULL) equal; `sub` (or NULL) the object under the key "pattern" holding
 * {"String": sub}. */
static int jis(const jsonr *o, const char *type, const char *sub, const char *const *kv)
{
    const char *t = o ? jstr(o, "type") : NULL;
    const jsonr *pat = o ? jsonr_get(o, "pattern") : NULL;
    if (!t || strcmp(t, type) || (sub && (!pat || !jstr(pat, "String") || strcmp(jstr(pat, "String"), sub))))
        return 0;
    for (; kv && kv[0]; kv += 2)
        if (!jstr(o, kv[0]) || strcmp(jstr(o, kv[0]), kv[1])) return 0;
    return 1;
}

/* A BPE with byte_fallback, read as LLaMA-2's tokenizer.json (Mistral's is
 * the same kind): the normalizer Prepend U+2581 then Replace " " with U+2581,
 * no pre-tokenizer, the decoder Replace U+2581 with " ", ByteFallback, Fuse,
 * Strip one leading space; no ignore_merges. t->meta set; -1 and what
 * differs in why otherwise. */
static int hf_check_meta(tokenizer *t, const jsonr *root, char *why, size_t whylen)
{
    static const char *const prepend[] = { "prepend", "\xE2\x96\x81", NULL }, *to_meta[] = { "content", "\xE2\x96\x81", NULL };
    static const char *const to_space[] = { "content", " ", NULL }, *strip[] = { "content", " ", NULL };
    const jsonr *norm = jsonr_get(root, "normalizer"), *pre = jsonr_get(root, "pre_tokenizer");
    const jsonr *dec = jsonr_get(root, "decoder"), *ns = norm ? jsonr_get(norm, "normalizers") : NULL;
    const jsonr *ds = dec ? jsonr_get(dec, "decoders") : NULL, *st = jsonr_at(ds, 3);
    const jsonr *start = st ? jsonr_get(st, "start") : NULL, *stop = st ? jsonr_get(st, "stop") : NULL;
    const char *part = NULL;
    if (!jis(norm, "Sequence", NULL, NULL) || !ns || ns->count != 2 || !jis(jsonr_at(ns, 0), "Prepend", NULL, prepend) ||
        !jis(jsonr_at(ns, 1), "Replace", " ", to_meta))
        part = "normalizer";
    else if (pre && pre->type != JSONR_NULL)
        part = "pre_tokenizer";
    else if (!jis(dec, "Sequence", NULL, NULL) || !ds || ds->count != 4 ||
             !jis(jsonr_at(ds, 0), "Replace", "\xE2\x96\x81", to_space) || !jis(jsonr_at(ds, 1), "ByteFallback", NULL, NULL) ||
             !jis(jsonr_at(ds, 2), "Fuse", NULL, NULL) || !jis(st, "Strip", NULL, strip) || !start ||
             start->num != 1 || !stop || stop->num != 0)
        part = "decoder";
    else if (jtrue(jsonr_get(root, "model"), "ignore_merges"))
        part = "model.ignore_merges";
    if (part) {
        atoll_errf(why, whylen, "model.byte_fallback: a BPE with byte fallback is read in LLaMA-2's form (normalizer "
                   "Prepend \"\xE2\x96\x81\" then Replace \" \" with \"\xE2\x96\x81\", no pre_tokenizer, decoder Replace, "
                   "ByteFallback, Fuse, Strip); this file's %s differs", part);
        return -1;
    }
    t->meta = t->sp = t->escape = t->byte_fallback = 1;
    return 0;
}

/* The parts of tokenizer.json atoll runs: 0 when the file is of LLaMA-3's
 * or Qwen2's kind (t->nfc, t->digits set), or LLaMA-2's (hf_check_meta), else
 * -1 and what differs in why. */
static int hf_check_kind(tokenizer *t, const jsonr *root, char *why, size_t whylen)
{
    const jsonr *model = jsonr_get(root, "model"), *pre = jsonr_get(root, "pre_tokenizer");
    const jsonr *dec = jsonr_get(root, "decoder"), *norm = jsonr_get(root, "normalizer");
    const char *mtype = model ? jstr(model, "type") : NULL;
    if (!model || model->type != JSONR_OBJ || (mtype && strcmp(mtype, "BPE")) || !jsonr_get(model, "vocab") ||
        !jsonr_get(model, "merges")) {
        atoll_errf(why, whylen, "model: expected a byte-level BPE (\"type\": \"BPE\" with vocab and merges), found %s",
                   mtype ? mtype : "none");
        return -1;
    }
    const char *cont = jstr(model, "continuing_subword_prefix"), *eow = jstr(model, "end_of_word_suffix");
    const jsonr *drop = jsonr_get(model, "dropout");
    if ((cont && *cont) || (eow && *eow) || (drop && drop->type == JSONR_NUM && drop->num != 0)) {
        atoll_errf(why, whylen, "model: continuing_subword_prefix, end_of_word_suffix and dropout are not implemented "
                   "(byte-level BPE of LLaMA-3's kind is, and LLaMA-2's BPE with byte_fallback)");
        return -1;
    }
    if (jtrue(model, "byte_fallback")) return hf_check_meta(t, root, why, whylen);
    t->nfc = norm && norm->type != JSONR_NULL;
    if (t->nfc && (!jstr(norm, "type") || strcmp(jstr(norm, "type"), "NFC"))) {
        atoll_errf(why, whylen, "normalizer %s is not implemented: NFC is (Qwen2's and Qwen3's), or none (LLaMA-3's)",
                   jstr(norm, "type") ? jstr(norm, "type") : "?");
        return -1;
    }
    const jsonr *seq = pre ? jsonr_get(pre, "pretokenizers") : NULL;
    const jsonr *split = jsonr_at(seq, 0), *bl = jsonr_at(seq, 1), *pat = split ? jsonr_get(split, "pattern") : NULL;
    const char *re = pat ? jstr(pat, "Regex") : NULL, *ptype = pre ? jstr(pre, "type") : NULL;
    if (!ptype || strcmp(ptype, "Sequence") || !seq || seq->type != JSONR_ARR || seq->count != 2 ||
        !jstr(split, "type") || strcmp(jstr(split, "type"), "Split") || !re ||
        (strcmp(re, LLAMA3_PATTERN) && strcmp(re, QWEN2_PATTERN)) ||
        !jstr(split, "behavior") || strcmp(jstr(split, "behavior"), "Isolated") || jtrue(split, "invert") ||
        !jstr(bl, "type") || strcmp(jstr(bl, "type"), "ByteLevel") || jtrue(bl, "use_regex") ||
        jtrue(bl, "add_prefix_space")) {
        atoll_errf(why, whylen, "pre_tokenizer: expected LLaMA-3's, a Sequence of a Split on the pattern %s (behavior "
                   "Isolated) and a ByteLevel without use_regex or add_prefix_space, or Qwen2's (\\p{N} for "
                   "\\p{N}{1,3}); this one is %s%s%.120s", LLAMA3_PATTERN, ptype ? ptype : "none",
                   re ? " with the pattern " : "", re ? re : "");
        return -1;
    }
    t->digits = strcmp(re, LLAMA3_PATTERN) ? 1 : 3;
    if (dec && dec->type != JSONR_NULL && (!jstr(dec, "type") || strcmp(jstr(dec, "type"), "ByteLevel"))) {
        atoll_errf(why, whylen, "decoder %s: expected ByteLevel", jstr(dec, "type") ? jstr(dec, "type") : "?");
        return -1;
    }
    return 0;
}

/* The ids a TemplateProcessing adds before and after a single text. */
static int hf_template(tokenizer *t, const jsonr *pp, char *why, size_t whylen)
{
    const char *type = pp ? jstr(pp, "type") : NULL;
    if (!pp || pp->type == JSONR_NULL || (type && !strcmp(type, "ByteLevel"))) return 0; /* ids as they are */
    if (type && !strcmp(type, "Sequence")) {
        const jsonr *list = jsonr_get(pp, "processors");
        for (const jsonr *c = list ? list->child : NULL; c; c = c->next)
            if (hf_template(t, c, why, whylen)) return -1;
        return 0;
    }
    const jsonr *single = jsonr_get(pp, "single"), *special = jsonr_get(pp, "special_tokens");
    if (!type || strcmp(type, "TemplateProcessing") || !single || single->type != JSONR_ARR) {
        atoll_errf(why, whylen, "post_processor %s: expected ByteLevel, TemplateProcessing or a Sequence of them",
                   type ? type : "?");
        return -1;
    }
    int after = 0;
    for (const jsonr *it = single->child; it; it = it->next) {
        const jsonr *seq = jsonr_get(it, "Sequence"), *sp = jsonr_get(it, "SpecialToken");
        if (seq) {
            if (after || !jstr(seq, "id") || strcmp(jstr(seq, "id"), "A")) break;
            after = 1;
            continue;
        }
        const char *name = sp ? jstr(sp, "id") : NULL;
        const jsonr *tok = name ? jsonr_get(special, name) : NULL, *ids = tok ? jsonr_get(tok, "ids") : NULL;
        if (!ids || ids->type != JSONR_ARR) {
            atoll_errf(why, whylen, "post_processor TemplateProcessing: special token %s is not in its special_tokens",
                       name ? name : "?");
            return -1;
        }
        for (const jsonr *v = ids->child; v; v = v->next) {
            int *n = after ? &t->npost : &t->npre;
            if (v->type != JSONR_NUM || v->num < 0 || v->num >= t->nvocab || *n == MAX_TEMPLATE) {
                atoll_errf(why, whylen, "post_processor TemplateProcessing: special token %s: ids must be in the "
                           "vocab, at most %d around the text", name, MAX_TEMPLATE);
                return -1;
            }
            (after ? t->post : t->pre)[(*n)++] = (int32_t)v->num;
        }
    }
    if (!after) {
        atoll_errf(why, whylen, "post_processor TemplateProcessing: its single template must hold the text ($A) once");
        return -1;
    }
    return 0;
}

static int added_cmp(const void *pa, const void *pb, void *text)
{
    const added_tok *a = pa, *b = pb;
    unsigned char fa = (unsigned char)((char *)text)[a->off], fb = (unsigned char)((char *)text)[b->off];
    if (fa != fb) return fa < fb ? -1 : 1;
    return a->len != b->len ? (a->len > b->len ? -1 : 1) : (a->id > b->id) - (a->id < b->id);
}

/* Sorts t->added for added_at: by first byte, the longest first. */
static void added_index(tokenizer *t)
{
    qsort_r(t->added, (size_t)t->nadded, sizeof *t->added, added_cmp, t->added_text);
    for (int b = 0, k = 0; b <= 256; b++) {
        while (k < t->nadded && (unsigned char)t->added_text[t->added[k].off] < b) k++;
        t->added_first[b] = k;
    }
}

static int hf_added(tokenizer *t, const jsonr *added, char *why, size_t whylen)
{
    size_t total = 0;
    int n = 0;
    for (const jsonr *c = added ? added->child : NULL; c; c = c->next, n++) {
        if (jtrue(c, "lstrip") || jtrue(c, "rstrip") || jtrue(c, "single_word")) {
            atoll_errf(why, whylen, "added token \"%.40s\": lstrip, rstrip and single_word are not implemented",
                       jstr(c, "content") ? jstr(c, "content") : "?");
            return -1;
        }
        total += strlen(jstr(c, "content"));
    }
    t->added = calloc((size_t)n + 1, sizeof *t->added);
    t->added_text = malloc(total + 1);
    if (!t->added || !t->added_text) { atoll_errf(why, whylen, "out of memory"); return -1; }
    size_t at = 0;
    for (const jsonr *c = added ? added->child : NULL; c; c = c->next) {
        const char *text = jstr(c, "content");
        size_t l = strlen(text);
        memcpy(t->added_text + at, text, l);
        t->added[t->nadded++] = (added_tok){ (int32_t)jsonr_get(c, "id")->num, (uint32_t)at, (uint32_t)l,
                                             !jsonr_get(c, "normalized") || jtrue(c, "normalized") };
        at += l;
    }
    added_index(t);
    return 0;
}

/* tokenizer_config.json's eos_token ("<|end_of_text|>" or {"content": ...}) -> its id */
static int hf_eos(tokenizer *t, const char *config, char *why, size_t whylen)
{
    char jerr[160];
    jsonr *root = jsonr_read_file(config, MAX_VOCAB_FILE, jerr, sizeof jerr);
    if (!root) {
        atoll_errf(why, whylen, "%s: %s; the end-of-document token is its eos_token (Megatron's eod for "
                   "HuggingFaceTokenizer)", config, jerr);
        return -1;
    }
    const jsonr *eos = root ? jsonr_get(root, "eos_token") : NULL;
    const char *name = eos && eos->type == JSONR_OBJ ? jstr(eos, "content") : eos && eos->type == JSONR_STR ? eos->str : NULL;
    t->eod = -1;
    for (int k = 0; name && k < t->nadded && t->eod < 0; k++)
        if (t->added[k].len == strlen(name) && !memcmp(t->added_text + t->added[k].off, name, strlen(name)))
            t->eod = t->added[k].id;
    if (name && t->eod < 0) t->eod = str_find(&t->map, t, name, strlen(name));
    if (t->eod < 0)
        atoll_errf(why, whylen, "%s: %s%s%s", config, name ? "eos_token \"" : "no eos_token", name ? name : "",
                   name ? "\" is not a token of tokenizer.json" : " (the end-of-document token)");
    jsonr_free(root);
    return t->eod < 0 ? -1 : 0;
}

static int load_hf(tokenizer *t, const char *model, char *err, size_t errlen)
{
    char file[PATH_MAX], config[PATH_MAX], why[1024] = "";
    struct stat st;
    if (!model || !*model) {
        atoll_errf(err, errlen, "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model: a tokenizer.json, or "
                   "the directory holding it and tokenizer_config.json");
        return -1;
    }
    if (stat(model, &st)) {
        atoll_errf(err, errlen, "--tokenizer-model %s: %s (expected a tokenizer.json, or the directory holding it and "
                   "tokenizer_config.json; atoll reads local files and downloads nothing)", model, strerror(errno));
        return -1;
    }
    int isdir = S_ISDIR(st.st_mode);
    const char *slash = strrchr(model, '/');
    int dl = isdir ? (int)strlen(model) : slash ? (int)(slash - model) : 1;
    const char *dir = isdir || slash ? model : ".";
    if (snprintf(file, sizeof file, isdir ? "%s/tokenizer.json" : "%s", model) >= (int)sizeof file ||
        snprintf(config, sizeof config, "%.*s/tokenizer_config.json", dl, dir) >= (int)sizeof config) {
        atoll_errf(err, errlen, "--tokenizer-model %s: path too long", model);
        return -1;
    }
    char jerr[160];
    jsonr *root = jsonr_read_file(file, MAX_VOCAB_FILE, jerr, sizeof jerr);
    const jsonr *jm = root ? jsonr_get(root, "model") : NULL, *vocab = jm ? jsonr_get(jm, "vocab") : NULL;
    const jsonr *merges = jm ? jsonr_get(jm, "merges") : NULL, *added = root ? jsonr_get(root, "added_tokens") : NULL;
    int rc = -1;
    char *buf = NULL;
    if (!root) atoll_errf(why, sizeof why, "%s", jerr);
    else if (root->type != JSONR_OBJ) atoll_errf(why, sizeof why, "expected a JSON object");
    else if (hf_check_kind(t, root, why, sizeof why)) {}
    else if (!vocab || vocab->type != JSONR_OBJ || !merges || merges->type != JSONR_ARR)
        atoll_errf(why, sizeof why, "model: vocab must be an object and merges an array");
    else if (added && added->type != JSONR_ARR) atoll_errf(why, sizeof why, "added_tokens must be an array");
    if (why[0]) goto out;
    char what[PATH_MAX + 32];
    snprintf(what, sizeof what, "--tokenizer-model %s", file);
    if (fill_vocab(t, vocab, added, &t->map, what, err, errlen)) goto out;
    if (hf_added(t, added, why, sizeof why) || hf_template(t, jsonr_get(root, "post_processor"), why, sizeof why))
        goto out;
    t->ignore_merges = jtrue(jm, "ignore_merges");
    size_t longest = 0;
    for (const jsonr *m = merges->child; m; m = m->next) {
        size_t l = m->type == JSONR_STR ? m->len : 0;
        for (const jsonr *p = m->type == JSONR_ARR ? m->child : NULL; p; p = p->next) l += p->len;
        if (l > longest) longest = l;
    }
    if (alloc_pairs(t, (size_t)merges->count) || !(buf = malloc(longest + 2))) {
        atoll_errf(err, errlen, "out of memory");
        goto out;
    }
    int32_t rank = 0;
    for (const jsonr *m = merges->child; m; m = m->next, rank++) {
        /* "A B" (the older files) or ["A", "B"] */
        const jsonr *a = m->type == JSONR_ARR && m->count == 2 ? m->child : NULL, *b = a ? a->next : NULL;
        const char *sp = m->type == JSONR_STR ? memchr(m->str, ' ', m->len) : NULL;
        int bad = a ? a->type != JSONR_STR || b->type != JSONR_STR ||
                          add_merge(t, &t->map, a->str, a->len, b->str, b->len, rank, buf)
                    : !sp || add_merge(t, &t->map, m->str, (size_t)(sp - m->str), sp + 1,
                                       m->len - (size_t)(sp - m->str) - 1, rank, buf);
        if (bad) {
            atoll_errf(why, sizeof why, "model.merges[%d] is not two vocab tokens whose join is a vocab token "
                       "(expected \"A B\" or [\"A\", \"B\"])", rank);
            goto out;
        }
    }
    if (!rank) {
        atoll_errf(why, sizeof why, "model.merges is empty");
        goto out;
    }
    if (hf_eos(t, config, why, sizeof why)) goto out;
    rc = 0;
out:
    if (why[0]) atoll_errf(err, errlen, "--tokenizer-model %s: %s", file, why);
    free(buf);
    jsonr_free(root);
    return rc;
}

/* ---- SentencePiece: tokenizer.model (Llama2Tokenizer, GPTSentencePieceTokenizer) ----
 * The file is a sentencepiece.ModelProto in protocol buffers' wire format
 * (proto2). The fields read, by number, with their defaults:
 *   ModelProto      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
 *   SentencePiece   1 piece, 2 score (float), 3 type (SP_*; 1)
 *   TrainerSpec     3 model_type (1 unigram, 2 BPE, 3 word, 4 char; 1),
 *                   24 treat_whitespace_as_suffix (false), 35 byte_fallback (false),
 *                   40 unk_id (0), 41 bos_id (1), 42 eos_id (2), 44 unk_surface (" \u2047 ")
 *   NormalizerSpec  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix (true),
 *                   4 remove_extra_whitespaces (true), 5 escape_whitespaces (true)
 * A piece's bytes (t->bytes) are its text in decoded output: U+2581 as a space
 * (escape_whitespaces), a byte piece <0xNN> the byte, a control piece nothing,
 * the unknown piece unk_surface. */
enum { SP_NORMAL = 1, SP_UNKNOWN = 2, SP_CONTROL = 3, SP_USER = 4, SP_UNUSED = 5, SP_BYTE = 6 };

typedef struct pb_field {
    uint32_t num;
    int wire;               /* 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
    uint64_t v;             /* the varint or fixed value; wire 2: the length */
    const unsigned char *s; /* wire 2: the bytes */
} pb_field;

static int pb_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

/* The next field of the message at *p (up to end): 1, 0 at its end, -1 when
 * the bytes are not protocol buffers. */
static int pb_next(const unsigned char **p, const unsigned char *end, pb_field *f)
{
    uint64_t key;
    if (*p >= end) return 0;
    if (pb_varint(p, end, &key)) return -1;
    *f = (pb_field){ (uint32_t)(key >> 3), (int)(key & 7), 0, NULL };
    if (f->wire == 0) return pb_varint(p, end, &f->v) ? -1 : 1;
    if (f->wire == 1 || f->wire == 5) {
        size_t k = f->wire == 1 ? 8 : 4;
        if ((size_t)(end - *p) < k) return -1;
        for (size_t i = 0; i < k; i++) f->v |= (uint64_t)(*p)[i] << (8 * i);
        *p += k;
        return 1;
    }
    if (f->wire != 2 || pb_varint(p, end, &f->v) || f->v > (uint64_t)(end - *p)) return -1;
    f->s = *p;
    *p += f->v;
    return 1;
}

typedef struct sp_entry {
    const unsigned char *s;
    size_t len;
    float score;
    int type;
} sp_entry;

/* One SentencePiece message -> *pc; -1 when malformed. */
static int sp_entry_read(const pb_field *f, sp_entry *pc)
{
    const unsigned char *q = f->s, *end = f->s + f->v;
    pb_field g;
    int r;
    *pc = (sp_entry){ (const unsigned char *)"", 0, 0.0f, SP_NORMAL };
    while ((r = pb_next(&q, end, &g)) > 0) {
        if (g.num == 1 && g.wire == 2) {
            pc->s = g.s;
            pc->len = (size_t)g.v;
        } else if (g.num == 2 && g.wire == 5) {
            uint32_t bits = (uint32_t)g.v;
            memcpy(&pc->score, &bits, sizeof bits);
        } else if (g.num == 3 && g.wire == 0) {
            pc->type = (int)g.v;
        }
    }
    return r;
}

static int load_spm(tokenizer *t, const char *path, char *err, size_t errlen)
{
    const char *name = tok_type_name(t->type);
    if (!path || !*path) {
        atoll_errf(err, errlen, "--tokenizer-type %s needs --tokenizer-model: a SentencePiece tokenizer.model "
                   "(LLaMA-2's or Mistral's kind)", name);
        return -1;
    }
    size_t len;
    char *data = atoll_read_file(path, MAX_VOCAB_FILE, &len), why[512] = "";
    if (!data) {
        atoll_errf(err, errlen, "--tokenizer-model %s: %s (expected a SentencePiece tokenizer.model; atoll reads local "
                   "files and downloads nothing)", path, strerror(errno));
        return -1;
    }
    const unsigned char *end = (const unsigned char *)data + len, *p;
    int64_t model_type = 1, suffix = 0, unk = 0, bos = 1, eos = 2, dummy = 1, extra = 1, escape = 1;
    int64_t fallback = 0;
    const unsigned char *unk_s = (const unsigned char *)" \xE2\x81\x87 ", *norm = NULL;
    size_t unk_len = 5, norm_len = 0, charsmap = 0, total = 0;
    unsigned char *skip = NULL;
    pb_field f, g;
    sp_entry pc;
    int r = 0, n = 0, nunk = 0, nuser = 0, rc = -1;
    for (p = (const unsigned char *)data; r >= 0 && (r = pb_next(&p, end, &f)) > 0;) {
        if (f.wire != 2) continue;
        const unsigned char *q = f.s, *qe = f.s + f.v;
        if (f.num == 1) {
            if ((r = sp_entry_read(&f, &pc)) < 0) break;
            n++;
            total += pc.len;
            nunk += pc.type == SP_UNKNOWN;
            nuser += pc.type == SP_USER;
            continue;
        }
        while ((f.num == 2 || f.num == 3) && (r = pb_next(&q, qe, &g)) > 0) {
            int64_t v = (int64_t)g.v; /* int32 fields: a negative one is ten bytes of two's complement */
            if (f.num == 2 && g.wire == 0) {
                if (g.num == 3) model_type = v;
                else if (g.num == 24) suffix = v;
                else if (g.num == 35) fallback = v;
                else if (g.num == 40) unk = v;
                else if (g.num == 41) bos = v;
                else if (g.num == 42) eos = v;
            } else if (f.num == 2 && g.num == 44 && g.wire == 2) {
                unk_s = g.s;
                unk_len = (size_t)g.v;
            } else if (f.num == 3 && g.wire == 2 && g.num <= 2) {
                if (g.num == 1) norm = g.s, norm_len = (size_t)g.v;
                else charsmap = (size_t)g.v;
            } else if (f.num == 3 && g.wire == 0) {
                if (g.num == 3) dummy = v;
                else if (g.num == 4) extra = v;
                else if (g.num == 5) escape = v;
            }
        }
    }
    static const char *const kinds[] = { "?", "Unigram (T5's, ALBERT's kind)", "BPE", "word", "character" };
    if (r < 0 || !n)
        atoll_errf(why, sizeof why, "not a SentencePiece model (expected a serialized sentencepiece ModelProto with "
                   "its pieces, as sentencepiece's trainer writes tokenizer.model)");
    else if (model_type != 2)
        atoll_errf(why, sizeof why, "a SentencePiece %s model; atoll reads SentencePiece's BPE models (LLaMA-2's, "
                   "Mistral's kind)", model_type >= 1 && model_type <= 4 ? kinds[model_type] : "unknown");
    else if (charsmap || (norm_len && (norm_len != 8 || memcmp(norm, "identity", 8))))
        atoll_errf(why, sizeof why, "its normalizer %.*s is not implemented: atoll reads models without one "
                   "(identity, as LLaMA-2's)", norm_len ? (int)(norm_len < 40 ? norm_len : 40) : 17,
                   norm_len ? (const char *)norm : "(a character map)");
    else if (extra)
        atoll_errf(why, sizeof why, "remove_extra_whitespaces is not implemented: atoll reads models that keep every "
                   "space (LLaMA-2's)");
    else if (suffix)
        atoll_errf(why, sizeof why, "treat_whitespace_as_suffix is not implemented");
    else if (nunk != 1)
        atoll_errf(why, sizeof why, "%d unknown pieces (type 2); a SentencePiece model has one", nunk);
    if (why[0]) goto out;
    t->nvocab = n;
    t->off = calloc((size_t)n + 1, sizeof *t->off);
    t->bytes = malloc(total + (size_t)nunk * unk_len + 1);
    t->score = malloc((size_t)n * sizeof *t->score);
    t->ptype = malloc((size_t)n);
    t->added = calloc((size_t)nuser + 1, sizeof *t->added);
    t->added_text = malloc(total + 1);
    skip = malloc((size_t)n);
    if (!t->off || !t->bytes || !t->score || !t->ptype || !t->added || !t->added_text || !skip) {
        atoll_errf(err, errlen, "out of memory");
        goto out;
    }
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    size_t at = 0, uat = 0;
    int id = 0;
    for (p = (const unsigned char *)data; pb_next(&p, end, &f) > 0;) {
        if (f.num != 1 || f.wire != 2) continue;
        sp_entry_read(&f, &pc);
        t->off[id] = (uint32_t)at;
        t->score[id] = pc.score;
        t->ptype[id] = (unsigned char)pc.type;
        skip[id] = pc.type != SP_NORMAL && pc.type != SP_USER;
        int b = pc.type == SP_BYTE ? byte_piece(pc.s, pc.len) : -1;
        if (pc.type < SP_NORMAL || pc.type > SP_BYTE || pc.type == SP_UNUSED || (pc.type == SP_BYTE && b < 0) ||
            ((pc.type == SP_NORMAL || pc.type == SP_USER) && !pc.len)) {
            atoll_errf(why, sizeof why, "piece %d \"%.*s\" has type %d, which is not implemented (normal, "
                       "user-defined, control, unknown and byte pieces are)", id, (int)(pc.len < 40 ? pc.len : 40),
                       (const char *)pc.s, pc.type);
            goto out;
        }
        if (pc.type == SP_BYTE && !fallback) {
            atoll_errf(why, sizeof why, "byte piece <0x%02X> without byte_fallback (sentencepiece refuses such a model "
                       "too)", b);
            goto out;
        }
        if (pc.type == SP_BYTE) {
            if (t->byte_id[b] < 0) t->byte_id[b] = id;
            t->bytes[at++] = (char)b;
        } else if (pc.type == SP_UNKNOWN) {
            memcpy(t->bytes + at, unk_s, unk_len);
            at += unk_len;
        } else if (pc.type != SP_CONTROL) {
            size_t from = at;
            if (escape) {
                at += meta_to_space((const char *)pc.s, pc.len, t->bytes + at);
            } else {
                memcpy(t->bytes + at, pc.s, pc.len);
                at += pc.len;
            }
            if (pc.type == SP_USER) { /* matched in the text before it is split into characters */
                memcpy(t->added_text + uat, t->bytes + from, at - from);
                t->added[t->nadded++] = (added_tok){ id, (uint32_t)uat, (uint32_t)(at - from), 0 };
                uat += at - from;
            }
        }
        id++;
    }
    t->off[n] = (uint32_t)at;
    if (map_fill(t, &t->map, skip)) {
        atoll_errf(err, errlen, "out of memory");
        goto out;
    }
    for (int k = 0; k < n; k++) {
        int32_t first = skip[k] ? k : str_find(&t->map, t, t->bytes + t->off[k], t->off[k + 1] - t->off[k]);
        if (first != k) {
            atoll_errf(why, sizeof why, "piece %d \"%.*s\" is piece %d too; each piece is there once (sentencepiece "
                       "refuses such a model too)", k, (int)(t->off[k + 1] - t->off[k] < 40 ? t->off[k + 1] - t->off[k] : 40),
                       t->bytes + t->off[k], first);
            goto out;
        }
    }
    added_index(t);
    t->words = sp_words_apart(t, skip);
    t->sp = 1;
    t->unk = (int32_t)unk;
    t->byte_fallback = fallback != 0;
    t->dummy_prefix = dummy != 0;
    t->escape = escape != 0;
    t->eod = (int32_t)eos;
    if (unk < 0 || unk >= n || t->ptype[unk] != SP_UNKNOWN)
        atoll_errf(why, sizeof why, "unk_id %lld is not its unknown piece", (long long)unk);
    else if (eos < 0 || eos >= n)
        atoll_errf(why, sizeof why, "eos_id %lld is not a piece; %s ends each document with it (Megatron's eod)",
                   (long long)eos, name);
    else if (t->type == TOK_LLAMA2 && (bos < 0 || bos >= n))
        atoll_errf(why, sizeof why, "bos_id %lld is not a piece; Llama2Tokenizer starts each document with it",
                   (long long)bos);
    for (int b = 0; fallback && !why[0] && b < 256; b++)
        if (t->byte_id[b] < 0)
            atoll_errf(why, sizeof why, "byte_fallback is set but there is no byte piece <0x%02X>", b);
    if (why[0]) goto out;
    if (t->type == TOK_LLAMA2) t->pre[t->npre++] = (int32_t)bos;
    rc = 0;
out:
    if (why[0]) atoll_errf(err, errlen, "--tokenizer-model %s: %s", path, why);
    free(skip);
    free(data);
    return rc;
}

tokenizer *tok_open(tok_type type, const char *vocab_file, const char *merge_file, const char *model, char *err,
                    size_t errlen)
{
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) { atoll_errf(err, errlen, "out of memory"); return NULL; }
    t->type = type;
    if (type == TOK_NULL) {
        free(t);
        atoll_errf(err, errlen, "--tokenizer-type NullTokenizer has no text form: its ids are the data's, made by "
                   "another tokenizer; that one reads and writes text");
        return NULL;
    }
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
    int rc;
    if (type == TOK_HF) {
        rc = load_hf(t, model, err, errlen);
    } else if (type == TOK_LLAMA2 || type == TOK_GPTSPM) {
        rc = load_spm(t, model, err, errlen);
    } else if (!vocab_file || !*vocab_file || !merge_file || !*merge_file) {
        atoll_errf(err, errlen, "--tokenizer-type GPT2BPETokenizer needs --vocab-file (encoder.json / vocab.json) "
                   "and --merge-file (vocab.bpe / merges.txt)");
        rc = -1;
    } else {
        rc = load_vocab(t, vocab_file, &t->map, err, errlen);
        if (!rc) rc = load_merges(t, merge_file, &t->map, err, errlen);
    }
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
    free(t->map.hash);
    free(t->map.id);
    free(t->added);
    free(t->added_text);
    free(t->score);
    free(t->ptype);
    free(t->sp_syms);
    free(t->agenda.a);
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
    return cls_of(utf8_decode(s + i, n - i, len));
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

/* ---- LLaMA-3's pre-tokenizer (HuggingFaceTokenizer) ----
 * The classes of its regex engine: \s is Unicode's White_Space, which has
 * U+0085 and not U+FEFF (JavaScript's \s, the table's, is the other way). */
static int hf_cls(uint32_t cp)
{
    return cp == 0x85 ? UC_SPACE : cp == 0xFEFF ? UC_OTHER : cls_of(cp);
}

static int hf_cls_at(const unsigned char *s, size_t n, size_t i, size_t *len)
{
    return hf_cls(utf8_decode(s + i, n - i, len));
}

static size_t hf_run_end(const unsigned char *s, size_t n, size_t i, int k, size_t most)
{
    size_t l;
    for (size_t c = 0; c < most && i < n && hf_cls_at(s, n, i, &l) == k; c++) i += l;
    return i;
}

/* (?i:) folds: the code points that match s, t, r, e, v, m, l, d case-insensitively */
static uint32_t fold_lower(uint32_t cp)
{
    return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp == 0x17F ? 's' : cp;
}

/* The first alternative of LLaMA-3's pattern (tokenizer.h) that matches at i;
 * digits 1 for Qwen2's (\p{N} for \p{N}{1,3}). */
static size_t llama3_split(const char *str, size_t n, size_t i, size_t digits)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t l0, l1 = 0, l2;
    uint32_t c0 = utf8_decode(s + i, n - i, &l0);
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (c0 == '\'' && i + 1 < n) {
        uint32_t a = fold_lower(utf8_decode(s + i + 1, n - i - 1, &l1));
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 1 + l1;
        if (i + 1 + l1 < n) {
            uint32_t b = fold_lower(utf8_decode(s + i + 1 + l1, n - i - 1 - l1, &l2));
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 1 + l1 + l2;
        }
    }
    int k0 = hf_cls(c0), k1 = i + l0 < n ? hf_cls_at(s, n, i + l0, &l1) : -1;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (k0 == UC_LETTER) return hf_run_end(s, n, i, UC_LETTER, SIZE_MAX);
    if (k0 != UC_NUMBER && c0 != '\r' && c0 != '\n' && k1 == UC_LETTER)
        return hf_run_end(s, n, i + l0, UC_LETTER, SIZE_MAX);
    /* \p{N}{1,3} (\p{N}) */
    if (k0 == UC_NUMBER) return hf_run_end(s, n, i, UC_NUMBER, digits);
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t j = c0 == ' ' && k1 == UC_OTHER ? i + 1 : i;
    if (j > i || k0 == UC_OTHER) {
        j = hf_run_end(s, n, j, UC_OTHER, SIZE_MAX);
        while (j < n && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    /* white space from here: \s*[\r\n]+ ends after the run's last CR or LF */
    size_t end = hf_run_end(s, n, i, UC_SPACE, SIZE_MAX), last = i, l;
    for (size_t p = end; p > i; p--)
        if (s[p - 1] == '\r' || s[p - 1] == '\n') return p;
    /* \s+(?!\S): the run but its last character when something follows; \s+ */
    if (end == n) return end;
    for (size_t p = i; p < end; p += l) {
        hf_cls_at(s, n, p, &l);
        if (p + l == end) last = p;
    }
    return last > i ? last : end;
}

size_t tok_split(const tokenizer *t, const char *s, size_t n, size_t i)
{
    if (t->type == TOK_HF && !t->meta) return llama3_split(s, n, i, (size_t)t->digits);
    return t->type == TOK_GPT2BPE ? tok_gpt2_split(s, n, i) : n; /* SentencePiece: the whole text */
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
    sp_sym *c = t->sp ? realloc(t->sp_syms, cap * sizeof *c) : NULL; /* SentencePiece's symbols */
    if (c) t->sp_syms = c;
    if (!a || !b || (t->sp && !c)) return -1;
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

static int sp_first(const sp_pair *x, const sp_pair *y)
{
    return x->key > y->key || (x->key == y->key && x->left < y->left);
}

/* Queues the join of symbols l and r when it is a piece. */
static int sp_queue(const tokenizer *t, const char *x, const sp_sym *sym, int32_t l, int32_t r, sp_agenda *q)
{
    if (l < 0 || r < 0 || sym[l].frozen || sym[r].frozen) return 0;
    uint32_t len = sym[l].len + sym[r].len;
    int32_t id;
    double key;
    if (!t->meta) { /* SentencePiece's: the join is a piece; its score */
        if ((id = str_find(&t->map, t, x + sym[l].at, len)) < 0) return 0;
        key = t->score[id];
    } else { /* Hugging Face's: the pair is a merge; its rank */
        const pair_slot *m = sym[l].id >= 0 && sym[r].id >= 0 ? pair_get(t, sym[l].id, sym[r].id) : NULL;
        if (!m) return 0;
        id = m->merged;
        key = -(double)m->rank;
    }
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 256;
        sp_pair *a = realloc(q->a, cap * sizeof *a);
        if (!a) return -1;
        q->a = a;
        q->cap = cap;
    }
    size_t i = q->n++;
    sp_pair p = { key, l, r, id, len };
    for (; i && sp_first(&p, &q->a[(i - 1) / 2]); i = (i - 1) / 2) q->a[i] = q->a[(i - 1) / 2];
    q->a[i] = p;
    return 0;
}

static sp_pair sp_take(sp_agenda *q)
{
    sp_pair top = q->a[0], last = q->a[--q->n];
    size_t i = 0;
    for (size_t c; (c = 2 * i + 1) < q->n; i = c) {
        if (c + 1 < q->n && sp_first(&q->a[c + 1], &q->a[c])) c++;
        if (!sp_first(&q->a[c], &last)) break;
        q->a[i] = q->a[c];
    }
    if (q->n) q->a[i] = last;
    return top;
}

/* The added token (of the raw-text ones, or the normalized ones) at s[i],
 * the longest when several: its index, or -1. Inline: it runs for every byte
 * of a HuggingFaceTokenizer's text (a call each costs a fifth of its speed). */
static inline int added_at(const tokenizer *t, const char *s, size_t n, size_t i, int normalized)
{
    unsigned char b = (unsigned char)s[i];
    for (int k = t->added_first[b]; k < t->added_first[b + 1]; k++) {
        const added_tok *a = &t->added[k];
        if (a->normalized == normalized && a->len <= n - i && !memcmp(s + i, t->added_text + a->off, a->len)) return k;
    }
    return -1;
}

/* The tokens of the normalized text x[0, m) into t->sym; their count, or -1. */
static long sp_piece(tokenizer *t, const char *x, size_t m)
{
    if (grow_scratch(t, m)) return -1;
    sp_sym *sym = t->sp_syms;
    sp_agenda *q = &t->agenda;
    q->n = 0;
    size_t ns = 0;
    for (size_t i = 0, l; i < m; i += l, ns++) {
        int k = t->nadded ? added_at(t, x, m, i, 0) : -1;
        if (k >= 0) l = t->added[k].len;
        else utf8_decode((const unsigned char *)x + i, m - i, &l);
        sym[ns] = (sp_sym){ (uint32_t)i, (uint32_t)l, (int32_t)ns - 1, i + l < m ? (int32_t)ns + 1 : -1,
                            str_find(&t->map, t, x + i, l), k >= 0 };
    }
    for (size_t i = 1; i < ns; i++)
        if (sp_queue(t, x, sym, (int32_t)i - 1, (int32_t)i, q)) return -1;
    while (q->n) {
        sp_pair p = sp_take(q);
        sp_sym *l = &sym[p.left], *r = &sym[p.right];
        if (!l->len || !r->len || l->len + r->len != p.len) continue; /* a symbol it joined has changed */
        l->len += r->len;
        l->id = p.joined;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        if (sp_queue(t, x, sym, l->prev, p.left, q) || sp_queue(t, x, sym, p.left, l->next, q)) return -1;
    }
    long n = 0;
    for (int32_t i = 0; i >= 0; i = sym[i].next) { /* at most a token per byte */
        int32_t id = sym[i].id;
        if (id >= 0) t->sym[n++] = id;
        else if (t->byte_fallback)
            for (uint32_t k = 0; k < sym[i].len; k++) t->sym[n++] = t->byte_id[(unsigned char)x[sym[i].at + k]];
        else t->sym[n++] = t->unk; /* a run of them becomes one in sp_words */
    }
    return n;
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
    int32_t whole = t->sp ? -1 : n == 1 ? t->byte_id[s[0]] : t->ignore_merges ? str_find(&t->map, t, (const char *)s, n) : -1;
    if (whole >= 0) { /* a piece that is a token is that token (ignore_merges) */
        if (buf_reserve(out, 1)) return -1;
        out->ids[out->n++] = whole;
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
    long m = t->sp ? sp_piece(t, (const char *)s, n) : bpe_piece(t, s, n);
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

static int append_ids(tok_buf *out, const int32_t *ids, int n)
{
    if (!n) return 0;
    if (buf_reserve(out, (size_t)n)) return -1;
    memcpy(out->ids + out->n, ids, (size_t)n * sizeof *ids);
    out->n += (size_t)n;
    return 0;
}

/* SentencePiece's normalization, into a new buffer (caller frees; NULL when
 * out of memory) of *m bytes: U+2581 as a space (escape_whitespaces), and a
 * space before the text when `prefix` (add_dummy_prefix; Hugging Face's
 * Prepend). Spaces stand for U+2581 from here on, as in the pieces. */
static char *sp_normalize(const tokenizer *t, const char *s, size_t n, int prefix, size_t *m)
{
    char *x = malloc(n + 2);
    if (!x) return NULL;
    *m = prefix ? 1 : 0;
    x[0] = ' ';
    if (t->escape) {
        *m += meta_to_space(s, n, x + *m);
    } else {
        memcpy(x + *m, s, n);
        *m += n;
    }
    return x;
}

/* The normalized text x[0, m), word by word when the pieces allow (t->words),
 * through the cache of encoded pieces; a run of unknown pieces, within a word
 * or across words, is one. */
static int sp_words(tokenizer *t, const char *x, size_t m, tok_buf *out)
{
    size_t doc = out->n;
    for (size_t i = 0, e; i < m; i = e) {
        e = i;
        if (t->words) {
            while (e < m && x[e] == ' ') e++;
            while (e < m && x[e] != ' ') e++;
        } else {
            e = m;
        }
        size_t w = out->n;
        if (encode_piece(t, (const unsigned char *)x + i, e - i, out)) return -1;
        for (size_t k = w; !t->byte_fallback && k < out->n; k++) /* a run of unknown pieces is one */
            if (out->ids[k] != t->unk || w == doc || out->ids[w - 1] != t->unk) out->ids[w++] = out->ids[k];
        if (!t->byte_fallback) out->n = w;
    }
    return 0;
}

static int sp_text(tokenizer *t, const char *s, size_t n, tok_buf *out)
{
    size_t m;
    if (!n) return 0;
    char *x = sp_normalize(t, s, n, t->dummy_prefix, &m);
    int rc = x ? sp_words(t, x, m, out) : -1;
    free(x);
    return rc;
}

/* HuggingFaceTokenizer: text without added tokens, piece by piece */
static int hf_text(tokenizer *t, const char *s, size_t n, tok_buf *out)
{
    if (t->meta) return sp_words(t, s, n, out); /* no pre-tokenizer: the text is one word to BPE */
    for (size_t i = 0, e; i < n; i = e) {
        e = llama3_split(s, n, i, (size_t)t->digits);
        if (encode_piece(t, (const unsigned char *)s + i, e - i, out)) return -1;
    }
    return 0;
}

static int hf_segment(tokenizer *t, const char *s, size_t n, int pass, tok_buf *out);

/* The text between raw-text added tokens: normalized (NFC; or LLaMA-2's
 * Prepend and Replace, when it is not empty), then split at the normalized
 * added tokens. */
static int hf_normalized(tokenizer *t, const char *s, size_t n, tok_buf *out)
{
    char *norm = NULL;
    size_t nn = 0;
    if (t->nfc && uc_nfc(s, n, &norm, &nn) < 0) return -1;
    if (t->meta && n && !(norm = sp_normalize(t, s, n, 1, &nn))) return -1;
    int rc = hf_segment(t, norm ? norm : s, norm ? nn : n, 1, out);
    free(norm);
    return rc;
}

/* Splits out the added tokens, leftmost-longest: the raw-text ones first
 * (pass 0), then the normalized ones in the normalized text between them
 * (pass 1). */
static int hf_segment(tokenizer *t, const char *s, size_t n, int pass, tok_buf *out)
{
    size_t start = 0;
    for (size_t i = 0; i < n;) {
        int k = t->nadded ? added_at(t, s, n, i, pass) : -1;
        if (k < 0) {
            i++;
            continue;
        }
        if ((pass ? hf_text(t, s + start, i - start, out) : hf_normalized(t, s + start, i - start, out)) ||
            buf_reserve(out, 1))
            return -1;
        out->ids[out->n++] = t->added[k].id;
        start = i += t->added[k].len;
    }
    return pass ? hf_text(t, s + start, n - start, out) : hf_normalized(t, s + start, n - start, out);
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
    if (t->type != TOK_GPT2BPE) {
        int rc = append_ids(out, t->pre, t->npre) ||
                 (t->type == TOK_HF ? hf_segment(t, s, n, 0, out) : sp_text(t, s, n, out)) ||
                 append_ids(out, t->post, t->npost);
        free(clean);
        return rc ? -1 : bad;
    }
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
    /* SentencePiece: the first piece but control pieces loses the space the
     * dummy prefix put there, when it is a normal or user-defined piece */
    int strip = t->ptype && t->dummy_prefix && t->escape;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = tok_piece(t, ids[i], &l);
        int type = strip ? t->ptype[ids[i]] : 0;
        if (strip && type != SP_CONTROL) {
            strip = 0;
            if (l && *p == ' ' && (type == SP_NORMAL || type == SP_USER)) p++, l--;
        }
        memcpy(out + at, p, l);
        at += l;
    }
    if (t->meta && at && out[0] == ' ') memmove(out, out + 1, at--); /* LLaMA-2's decoder strips one leading space */
    out[at] = 0;
    *len = at;
    return out;
}

int tok_check_files(tok_type type, const char *vocab_file, const char *merge_file, const char *model, char *err,
                    size_t errlen)
{
    int reads_model = type == TOK_HF || type == TOK_LLAMA2 || type == TOK_GPTSPM;
    if (model && *model && !reads_model) {
        atoll_errf(err, errlen, "--tokenizer-model is read by --tokenizer-type HuggingFaceTokenizer (a tokenizer.json "
                   "of LLaMA-3's, Qwen2's or LLaMA-2's kind), Llama2Tokenizer and GPTSentencePieceTokenizer (a SentencePiece "
                   "tokenizer.model), not %s", tok_type_name(type));
        return -1;
    }
    if (((vocab_file && *vocab_file) || (merge_file && *merge_file)) && type != TOK_GPT2BPE) {
        atoll_errf(err, errlen, "--vocab-file and --merge-file are read by --tokenizer-type GPT2BPETokenizer, not %s%s",
                   tok_type_name(type), reads_model ? " (it reads --tokenizer-model)" : "");
        return -1;
    }
    return 0;
}

/* The config's tokenizer, opened, and its type: 0 with *t NULL for byte-level
 * (or none given) and NullTokenizer, -1 with err when the type or its files
 * are refused. */
static int open_config_tok(const atoll_config *c, tokenizer **t, tok_type *type, char *err, size_t errlen)
{
    *type = TOK_BYTE;
    *t = NULL;
    if ((c->tokenizer_type[0] && tok_type_parse(c->tokenizer_type, type, err, errlen)) ||
        tok_check_files(*type, c->vocab_file, c->merge_file, c->tokenizer_model, err, errlen))
        return -1;
    if (*type == TOK_BYTE || *type == TOK_NULL) return 0;
    return (*t = tok_open(*type, c->vocab_file, c->merge_file, c->tokenizer_model, err, errlen)) ? 0 : -1;
}

int32_t tok_config_eod(const atoll_config *c, char *err, size_t errlen)
{
    tokenizer *t;
    tok_type type;
    if (open_config_tok(c, &t, &type, err, errlen)) return -1;
    if (type == TOK_NULL) return c->vocab_size - 1; /* Megatron's NullTokenizer's (tok_config_vocab kept it) */
    if (!t) return 0; /* byte-level: 0 ends a document */
    int32_t eod = tok_eod(t);
    tok_free(t);
    return eod;
}

int tok_config_vocab(atoll_config *c, char *err, size_t errlen)
{
    tokenizer *t;
    tok_type type;
    if (open_config_tok(c, &t, &type, err, errlen)) return -1;
    int n = t ? tok_vocab_size(t) : type == TOK_NULL ? c->vocab_size : 256,
        mult = cfg_vocab_multiple(c) * (c->tensor_model_parallel_size > 0 ? c->tensor_model_parallel_size : 1);
    tok_free(t);
    if (c->padded_vocab_size && c->padded_vocab_size < n) {
        atoll_errf(err, errlen, "--padded-vocab-size %d is smaller than the %d ids of --tokenizer-type %s; give at "
                   "least %d, or leave it out (the ids padded to a multiple of %d)", c->padded_vocab_size, n,
                   c->tokenizer_type[0] ? c->tokenizer_type : "ByteLevel", n, mult);
        return -1;
    }
    if (!t && type != TOK_NULL) { /* byte-level: --vocab-size as given, or --padded-vocab-size */
        if (c->padded_vocab_size) c->vocab_size = c->padded_vocab_size;
        return 0;
    }
    int padded = c->padded_vocab_size ? c->padded_vocab_size : (n + mult - 1) / mult * mult;
    if (type == TOK_NULL) {
        if (padded != n && (c->eod_mask_loss || c->reset_attention_mask || c->reset_position_ids)) {
            atoll_errf(err, errlen, "--tokenizer-type NullTokenizer ends a document at --vocab-size - 1 = %d, and "
                       "--vocab-size %d pads to %d (a multiple of %d): the ranks would see %d; give --vocab-size %d, "
                       "or --make-vocab-size-divisible-by so that %d needs no padding", n - 1, n, padded, mult,
                       padded - 1, padded, n);
            return -1;
        }
        c->vocab_size = padded;
        return 0;
    }
    if (c->vocab_size != 256 && c->vocab_size != padded) {
        atoll_errf(err, errlen, "--vocab-size %d disagrees with --tokenizer-type %s: its %d entries padded to a "
                   "multiple of %d make %d (leave --vocab-size out)", c->vocab_size, c->tokenizer_type, n, mult, padded);
        return -1;
    }
    c->vocab_size = padded;
    return 0;
}

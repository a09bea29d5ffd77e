/* tokenizer: text <-> token ids, byte-level, byte-level BPE or SentencePiece BPE.
 *
 * Five tokenizers, with Megatron's names for --tokenizer-type:
 * - "ByteLevel" (atoll's default): each byte is its token (vocab 256), the
 *   end-of-document token is 0.
 * - "GPT2BPETokenizer": GPT-2's byte-level BPE from the standard files
 *   (`encoder.json`/`vocab.json`: token string -> id; `vocab.bpe`/`merges.txt`:
 *   the merges in rank order after a "#version" line). Encoding is GPT-2's:
 *   1. the text is split into pieces by GPT-2's pattern
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      on code points, with Unicode's letter and number categories and
 *      JavaScript's white space (unicode_classes.h);
 *   2. each piece's UTF-8 bytes start as one symbol per byte, and the adjacent
 *      pair of lowest merge rank is merged everywhere (left to right) until no
 *      adjacent pair has a rank; each final symbol is a token.
 *   Token strings in the vocab file are in GPT-2's byte-to-unicode alphabet;
 *   they are mapped back to bytes on loading, so the work is on raw bytes and
 *   decoding is concatenation. The end-of-document token is "<|endoftext|>"
 *   (50256 in GPT-2's file); inside text that string is ordinary text, as in
 *   GPT-2's own encoder and Megatron's.
 *
 * - "HuggingFaceTokenizer": a Hugging Face `tokenizer.json` of LLaMA-3's or
 *   Qwen2's kind (--tokenizer-model: the file, or a directory holding it and
 *   `tokenizer_config.json`), read as Hugging Face's `tokenizers` runs it:
 *   1. the added tokens (`added_tokens`: <|begin_of_text|>, ...) are split out
 *      of the text first, leftmost-longest, those matched on the raw text
 *      (normalized: false) before the others, which are matched on the
 *      normalized text between them; each is its own id;
 *   2. the normalizer, when the file has one: NFC (Qwen2's, Qwen3's;
 *      unicode_nfc.h);
 *   3. the rest is split by LLaMA-3's pattern (its `Split` pre-tokenizer)
 *        (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *         ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *      (Qwen2's has \p{N}, one digit a piece, for \p{N}{1,3}) with the regex
 *      engine's white space (Unicode's White_Space property);
 *   4. each piece that is itself a vocab token is that token (`ignore_merges`,
 *      LLaMA-3's), else BPE as above, over the `model.merges` in order;
 *   5. the post-processor's template adds its special tokens around the text
 *      (LLaMA-3's current file: <|begin_of_text|> first), as Megatron's
 *      HuggingFaceTokenizer.tokenize does through transformers.
 *   The vocab is every id of `model.vocab` and `added_tokens` (128256 for
 *   LLaMA-3, 151669 for Qwen3); the end-of-document token is
 *   `tokenizer_config.json`'s `eos_token` (Megatron's eod for this type).
 *   A tokenizer.json of LLaMA-2's kind (Mistral's too: a BPE with
 *   byte_fallback, the normalizer Prepend U+2581 and Replace " " with U+2581,
 *   no pre-tokenizer) is read as SentencePiece's BPE below, but with the
 *   added tokens split out first, each part between them normalized apart
 *   (U+2581 before it when it is not empty), joins in the order of the merges'
 *   ranks, and decoding that drops one leading space of the whole text. Files
 *   of another kind (another normalizer, another pre-tokenizer pattern,
 *   WordPiece or Unigram models) are refused naming the part that differs.
 *
 * - "Llama2Tokenizer" and "GPTSentencePieceTokenizer": a SentencePiece BPE
 *   model (--tokenizer-model: tokenizer.model, the protobuf file; LLaMA-2's,
 *   Mistral's), encoded as sentencepiece's BPE model does:
 *   1. a space is U+2581 (escape_whitespaces), and one goes before the text
 *      (add_dummy_prefix);
 *   2. the text is split into characters, a user-defined piece staying whole
 *      (the longest at each place);
 *   3. the adjacent pair whose join is the piece of highest score is joined,
 *      the leftmost of equals first, until no join is a piece;
 *   4. a symbol that is not a piece is its UTF-8 bytes' byte pieces <0xNN>
 *      (byte_fallback), or else the unknown piece, once for a run of them.
 *   When no piece has a space after another character (LLaMA-2's), no join
 *   crosses the start of a word, so words are encoded apart through the cache
 *   of encoded pieces, with the same ids.
 *   Llama2Tokenizer puts <s> (bos_id) before each document, as Megatron's
 *   Llama2Tokenizer.tokenize(bos=True); GPTSentencePieceTokenizer adds
 *   nothing. The vocab is every piece (32000 for LLaMA-2); the
 *   end-of-document token is eos_id (</s>), Megatron's eod for both. Decoding
 *   drops the space the dummy prefix put before the first word. Models of
 *   another kind (Unigram, a normalizer other than identity,
 *   remove_extra_whitespaces, whitespace as suffix, unused pieces) are refused
 *   naming what differs.
 *
 * Invalid UTF-8 (all but ByteLevel): each maximal invalid subsequence is replaced by
 * U+FFFD before splitting, exactly as the WHATWG decoder does (the one node's
 * TextDecoder and Buffer use), and tok_encode returns how many were replaced,
 * so a caller can say so. Decoding gives back the text for valid UTF-8 (for
 * SentencePiece, text without U+2581, which it reads as a space; a
 * tokenizer's template tokens, <s> and <|begin_of_text|>, come back as text).
 *
 * Ownership: a tokenizer owns its tables and a cache of encoded pieces (so an
 * encode call is not thread-safe; use one tokenizer per thread). tok_buf memory
 * belongs to the caller (free(buf.ids)). */
#ifndef ATOLL_ENGINE_TOKENIZER_H
#define ATOLL_ENGINE_TOKENIZER_H

#include "config.h"

#include <stddef.h>
#include <stdint.h>

/* TOK_NULL is Megatron's NullTokenizer: the data's ids are the tokens (made
 * elsewhere), the vocab is --vocab-size and --vocab-size - 1 ends a document;
 * it has no text form, so tok_open refuses it. */
typedef enum { TOK_BYTE = 0, TOK_GPT2BPE = 1, TOK_HF = 2, TOK_LLAMA2 = 3, TOK_GPTSPM = 4, TOK_NULL = 5 } tok_type;

typedef struct tokenizer tokenizer;

/* "ByteLevel", "GPT2BPETokenizer", "HuggingFaceTokenizer", "Llama2Tokenizer",
 * "GPTSentencePieceTokenizer" or "NullTokenizer" -> type; -1 with err naming
 * them otherwise. */
int tok_type_parse(const char *name, tok_type *t, char *err, size_t errlen);
const char *tok_type_name(tok_type t);

/* GPT2BPETokenizer needs vocab_file and merge_file, HuggingFaceTokenizer,
 * Llama2Tokenizer and GPTSentencePieceTokenizer model (its --tokenizer-model);
 * ByteLevel takes none (NULLs). Returns NULL with err naming the file and what
 * was wrong. */
tokenizer *tok_open(tok_type type, const char *vocab_file, const char *merge_file, const char *model, char *err,
                    size_t errlen);
/* -1 with err when files are given that `type` does not read (--tokenizer-model
 * but for the types above that read it, --vocab-file/--merge-file but for
 * GPT2BPETokenizer); NULL or "" is not given. */
int tok_check_files(tok_type type, const char *vocab_file, const char *merge_file, const char *model, char *err,
                    size_t errlen);
void tok_free(tokenizer *t);

tok_type tok_kind(const tokenizer *t);
int tok_vocab_size(const tokenizer *t);   /* 256, or the vocab's entries (50257; 128256 for LLaMA-3; 32000 for LLaMA-2) */
int32_t tok_eod(const tokenizer *t);      /* end-of-document id */

typedef struct tok_buf {
    int32_t *ids;
    size_t n, cap;
} tok_buf;

/* Appends the tokens of the document text[0, n) to out (with the special
 * tokens a HuggingFaceTokenizer's template adds, Llama2Tokenizer's <s>). Returns the number of invalid
 * UTF-8 sequences that were replaced (0 for valid text), or -1 when out of
 * memory. */
long tok_encode(tokenizer *t, const char *text, size_t n, tok_buf *out);

/* The bytes of token `id` (NULL when id is outside the vocab); an added
 * token's are its text (<|end_of_text|>); a SentencePiece piece's its text
 * with U+2581 as a space, a byte piece's its byte, a control piece's none. */
const char *tok_piece(const tokenizer *t, int32_t id, size_t *len);

/* Decodes ids into a new NUL-terminated buffer (caller frees), its length in
 * *len: the pieces' bytes back to back (for SentencePiece without the dummy
 * prefix's space before the first word); NULL when an id is outside the vocab
 * (err names it) or out of memory. */
char *tok_decode(const tokenizer *t, const int32_t *ids, size_t n, size_t *len, char *err, size_t errlen);

/* GPT-2's pre-tokenizer: the end of the piece that starts at byte i of the
 * valid UTF-8 text s[0, n) (i < n). */
size_t tok_gpt2_split(const char *s, size_t n, size_t i);

/* The tokenizer's pre-tokenizer (GPT-2's, or its tokenizer.json's pattern; none
 * for ByteLevel): the end of the piece that starts at byte i of the valid
 * UTF-8 text s[0, n) (i < n), before any normalization. */
size_t tok_split(const tokenizer *t, const char *s, size_t n, size_t i);

/* The training vocab of a config's tokenizer (--tokenizer-type, --vocab-file,
 * --merge-file, --tokenizer-model), as Megatron sizes it: the BPE's entries
 * padded up to a multiple of --make-vocab-size-divisible-by * tp (50257 ->
 * 50304; LLaMA-3's 128256 stays), set
 * in c->vocab_size. ByteLevel (or none) leaves --vocab-size as given;
 * NullTokenizer pads --vocab-size as Megatron does (and refuses a padding that
 * would move its end-of-document id, --vocab-size - 1, when documents matter).
 * --padded-vocab-size N (Megatron's) makes the vocab N, unpadded, for any of
 * them (N below the tokenizer's ids is an error). An explicit --vocab-size
 * other than 256 that disagrees is an error. Opens the
 * files, so a wrong path fails here, before any rank starts work. */
int tok_config_vocab(atoll_config *c, char *err, size_t errlen);

/* The end-of-document token of the config's tokenizer (ByteLevel or none: 0,
 * as `atoll data prepare` writes it; NullTokenizer: --vocab-size - 1); -1 with
 * err when its files cannot be read. */
int32_t tok_config_eod(const atoll_config *c, char *err, size_t errlen);

/* WHATWG UTF-8 decoding's replacement: when s[0, n) is valid UTF-8 returns 0
 * and leaves *out NULL; otherwise *out is a new buffer (caller frees) with each
 * maximal invalid subsequence replaced by U+FFFD, *outn its length, and the
 * number of replacements is returned (-1: out of memory). */
long tok_utf8_sanitize(const char *s, size_t n, char **out, size_t *outn);

#endif

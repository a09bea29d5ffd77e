"""The corpus the tokenizer tests share (engine_tokenizer.py for GPT-2's BPE,
engine_tokenizer_hf.py for Hugging Face's LLaMA-3 tokenizer), the Megatron
indexed-dataset bytes both expect from `atoll data prepare`, and their checks
(check/finish, prepare, dataset_files, check_refusals).

- HAND: hand-written documents (several languages and scripts, emoji and ZWJ
  sequences, combining marks, long whitespace runs of every kind, digits of
  several scripts, contractions with straight and curly quotes, JSON and CSV
  punctuation);
- valid_docs(): HAND, 400 random documents drawn from POOLS with a fixed seed,
  and HAND joined by newlines, as UTF-8, always the same and in the same order;
- INVALID: invalid UTF-8, which atoll replaces as node's decoder does;
- HF_EXTRA: documents aimed at LLaMA-3's pre-tokenizer pattern
    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|
     ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+
  and at its added (special) tokens, which are split out of the text first.

Code points are from blocks assigned long before Unicode 14, so any node
(Debian's 18 or later) classifies them the same way.
"""
import os
import random
import struct
import subprocess
import sys

HAND = [
    "Hello world! It's a test, isn't it? They're here; we've won, I'm sure you'll see, he'd go.",
    "CAPS: IT'S THEY'RE WE'VE I'M YOU'LL HE'D — uppercase contractions do not split the same way",
    "Curly: it’s they’re we’ve I’m you’ll he’d ‘quoted’ “double” — and 's 't 're 've 'm 'll 'd alone",
    "Apostrophes: ''s '''t 're're x'sy 'S o'clock rock'n'roll",
    "Digits 0 12 345 6789 3.14159 1,000,000 2024-01-31 ١٢٣ ४५६ ０１２ ²³ ½ Ⅻ ⑳",
    "Whitespace:  two   three    four\tTAB\t\ttwo tabs\nLF\n\nblank\r\nCRLF \x0b VT \x0c FF",
    "Unicode spaces:\u00a0nbsp\u2002en\u2003em\u2009thin\u3000ideographic\u202fnarrow\u205fmath\ufeffbom\u1680ogham",
    "Not \\s in JS: \u0085NEL \u180eMVS \u200bZWSP \u2060WJ",
    "Trailing spaces   ",
    "   leading spaces",
    "\n\n\n\n",
    " ",
    "a",
    "Français: naïve café, déjà vu, œuvre, garçon; Deutsch: Größe, Straße, Äpfel",
    "Ελληνικά: Καλημέρα κόσμε· Русский: Съешь же ещё этих мягких французских булок",
    "עברית: שלום עולם; العربية: مرحبا بالعالم، كيف حالك؟",
    "हिन्दी: नमस्ते दुनिया; தமிழ்: வணக்கம்; ไทย: สวัสดีชาวโลก",
    "中文：你好，世界！日本語：こんにちは世界、カタカナ。한국어: 안녕하세요 세계",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✨ 🧑‍💻 #️⃣",
    "Combining: e\u0301 a\u0300\u0323 n\u0303 \u0301alone Z\u0351\u0352\u0353 q\u0307\u0323",
    'JSON: {"a": 1, "b": [1, 2, "x"], "c": {"d": "e"}} ["x","y","z"] {"k":"v","l":"w"}',
    'CSV: "a","b","c"\n"1","2","3"\n"",""\n\'x\',\'y\'',
    '"","",""',
    '\ufeffa leading byte-order mark',
    "Code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; } // done\n\tif (a && b) return -1;",
    "Punctuation!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} ||| ~~~",
    "<|endoftext|> is text here, not a special token",
    "x" * 300 + " " + "ab" * 200,
    " " * 1000 + "end",
    "\t" * 50 + "\n" * 50 + " \t \n " * 30,
    "word" + "\u0301" * 40,
    "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ，　ｄｉｇｉｔｓ　１２３",
    "Mixed1a2b3c α1β2 x²y³ 4th 21st 100km/h",
]

POOLS = [
    [chr(c) for c in range(0x20, 0x7F)] * 6,                    # ASCII, most frequent
    [" "] * 40 + ["\t", "\n", "\r", "\u00a0", "\u2003", "\u3000", "\ufeff", "\u0085", "\u180e"],
    ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "’s", "’t", "‘", "’", "“", "”", "'", '"', ",", '",', ',"'],
    [chr(c) for c in range(0x00C0, 0x0250)],                    # Latin-1 supplement, Latin extended
    [chr(c) for c in range(0x0391, 0x03CA)] + [chr(c) for c in range(0x0410, 0x0450)],  # Greek, Cyrillic
    [chr(c) for c in range(0x05D0, 0x05EB)] + [chr(c) for c in range(0x0621, 0x064B)],  # Hebrew, Arabic
    [chr(c) for c in range(0x0905, 0x0940)] + [chr(c) for c in range(0x0E01, 0x0E2F)],  # Devanagari, Thai
    [chr(c) for c in range(0x4E00, 0x4F00)] + [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0xAC00, 0xAD00)],
    [chr(c) for c in range(0x0300, 0x0370)],                    # combining marks
    [chr(c) for c in range(0x0660, 0x066A)] + [chr(c) for c in range(0x0966, 0x0970)] + [chr(c) for c in range(0xFF10, 0xFF1A)]
    + ["²", "³", "¹", "¼", "½", "Ⅰ", "Ⅻ", "①", "⑳"],            # digits and other numbers
    [chr(c) for c in range(0x1F600, 0x1F650)] + ["\u200d", "\ufe0f", "\U0001F3FD", "\U0001F1EB", "\U0001F1F7", "❤", "✨"],
    [chr(c) for c in range(0x2010, 0x2030)] + [chr(c) for c in range(0x00A1, 0x00C0)] + ["\ue000", "\U000F0000", "\u0378"],
]


def random_doc(rng):
    n = rng.randint(1, 160)
    weights = [40, 12, 6, 6, 4, 3, 3, 4, 3, 3, 3, 3]
    out = []
    for _ in range(n):
        pool = rng.choices(POOLS, weights)[0]
        out.append(rng.choice(pool) * (rng.randint(2, 6) if rng.random() < 0.05 else 1))
    return "".join(out)


def valid_docs():
    """HAND, 400 random documents (seed 20240613), HAND joined by newlines: UTF-8 bytes."""
    rng = random.Random(20240613)
    valid = [s.encode("utf-8") for s in HAND] + [random_doc(rng).encode("utf-8") for _ in range(400)]
    valid.append("\n".join(HAND).encode("utf-8"))
    return valid


INVALID = [
    b"abc\x80def",                    # lone continuation byte
    b"\xc0\x80 overlong NUL",         # overlong
    b"\xed\xa0\x80 surrogate",        # UTF-16 surrogate in UTF-8
    b"cut \xf0\x9f\x98",              # truncated at the end
    b"\xf0\x9f\x98 cut in the middle",
    b"\xf5\xff\xfe bytes never valid",
    b"mixed \xe2\x82 ok \xe2\x82\xac \xc3 end \xc3\xa9",
    b"\xe0\x80\x80 \xf4\x90\x80\x80 beyond U+10FFFF",
    b"caf\xe9 latin-1 text",
    b"\x80\x80\x80\x80",
]

HF_EXTRA = [
    # ignore_merges: pieces that are vocab tokens, though BPE's merges would split them (LLaMA-3's vocab has
    # such Vietnamese words whole: "việc", "hợp", "nhiều")
    "việc hợp nhiều\nviệc,hợp.nhiều người được (việc) \"hợp\"",
    # NFC (Qwen's normalizer): decomposed letters, singletons (Angstrom, Ohm), Hangul jamo, marks to reorder,
    # a composition exclusion, compatibility characters NFC keeps, a mark before any starter
    "e\u0301 A\u030a \u212b \u2126 \u1100\u1161\u11a8 \u1100\u1161 \uac00\u11a8 a\u0323\u0301 a\u0301\u0323 "
    "\u0958 \ufb01 \u2460 \u0344 \u1e9b\u0323 \u0301x o\u0308\u0304 U\u0308\u0301 \u00e9\u0301 e\u0301\u0301 "
    "a\u0310\u0301 e\u0310\u0300",  # a mark of the same class blocks: these stay as they are
    # after a letter, a contraction followed by letters ends at the contraction, uppercase too (the group is
    # case-insensitive): 'S + ee in x'See, where [^\r\n\p{L}\p{N}]?\p{L}+ alone would take 'See (other ids)
    "x'See it'Some O'May I'Day e'LLine x'REd a'VEry 'Sun x'sun y'ſtar O'Neil rock'n'roll I'Ma",
    # \p{N}{1,3}: digit runs cut in threes from the left, whatever the script
    "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789", "1234567890",
    "a1b22c333d4444e55555 x 7 88 999 0000 3.14159 1,234,567 2024-01-31 10:30pm v1.2.3 0x1F 1e-10",
    "x 12345 y", "abc123def 4567ghi", "١٢٣٤٥ ४५६७ ０１２３４ ²³¹ ½¼ ⅫⅣ ①②③④",
    # ?[^\s\p{L}\p{N}]+[\r\n]*: punctuation takes the line breaks after it
    "end.\r\n\r\nnext", "wow!!!\n\n\nok", "a,\rb;\n\rc:\r\r\n\nd", "x ...\n", "(\n)\r\n", "}}\r\n\r\n  {{",
    "- \n-\n -\r\n", "\"quoted\"\n\n'single'\r\n",
    # [^\r\n\p{L}\p{N}]?\p{L}+: one character that is not a line break, letter or digit before letters
    "(word [word {word \"word 'word -word _word", "\tword \t\tword", "\u00a0word \u3000word \u2009word",
    "1word ,word", "\rword \nword", "\x0bword \x0cword",
    # whitespace runs: \s*[\r\n]+, \s+(?!\S), \s+
    "  \n  x", " \r\n\r\n ", "\n \n", "\n\n \n\n  \n", "a  \t \n\t\r\n b", "\t\t\tx", "x\t\t\t", "x \t",
    "trailing   ", "trailing \n ", "tab\t", " 7", "a  7", "x\t7", "\r", "\r\r\n\n\r", "  ", " \u00a0 \u3000x",
    " \n\r \t\n\t \r\r  \n", "\t \t \t\nz", "a\n\n\n   b   \n   c", "a \r\n \r\n b",
    # contractions, case-insensitive, and U+017F (long s), which case-folds to s
    "IT'S THEY'RE WE'VE I'M YOU'LL HE'D DON'T", "'S 'T 'RE 'VE 'M 'LL 'D", "it'S we'Re You'lL they'Ve",
    "'\u017f", "it'\u017f", "'\u017ft '\u017f", "''s '''re 'x 'sss 'lld 'dd", "l'été 'ſ",
    # U+0085 is white space (Unicode's White_Space), U+FEFF is not, U+2028/U+2029 are
    "a\u0085b c\u0085\u0085d", "a\ufeffb \ufeff x", "a\u2028b\u2029c \u2028 d", "\u0085\n x", "x \ufeff",
    "a \u0085b", "a\u0085 b", "x\u2028\u2028", "\u2028\n\u0085",
    # special tokens inside the text: split out first, whatever is around them
    "<|begin_of_text|>Hello", "Hello<|end_of_text|>", "<|begin_of_text|><|end_of_text|>",
    "a <|reserved_special_token_5|> b", "<|end_of_ not finished", "<|begin_of_text|>", " <|end_of_text|> ",
    "x<|eot_id|>\n\n<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|begin_of_text|<|end_of_text|>>", "<<|end_of_text|>|>", "text <|end_of_", "<|reserved_special_token_50|>5",
    # long repeated strings
    "a" * 1000, "ab " * 400, "1" * 301, "!" * 500, " " * 777 + "x", "\n" * 300, "hello world " * 200,
    "😀" * 100, "é" * 500, "\r\n" * 200, "<|end_of_text|>" * 30,
    "",
]


def megatron_bytes(docs, dtype_code=8):
    """Megatron's indexed dataset for the id lists docs, from its specification.
    .idx: b'MMIDIDX\\x00\\x00', u64 version 1, u8 dtype, u64 sequence count S,
    u64 document count D, i32 sizes[S], i64 byte pointers[S], i64 doc_idx[D];
    .bin: the tokens back to back (little-endian). dtype codes: 8 uint16 (a
    vocab below 65500, GPT-2's), 4 int32 (larger ones, LLaMA-3's)."""
    fmt = {8: "<H", 4: "<i"}[dtype_code]
    size = struct.calcsize(fmt)
    binb = b"".join(struct.pack(fmt, t) for d in docs for t in d)
    idx = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", dtype_code)
    idx += struct.pack("<Q", len(docs)) + struct.pack("<Q", len(docs) + 1)
    idx += b"".join(struct.pack("<i", len(d)) for d in docs)
    ptr, ptrs = 0, []
    for d in docs:
        ptrs.append(ptr)
        ptr += len(d) * size
    idx += b"".join(struct.pack("<q", p) for p in ptrs)
    idx += b"".join(struct.pack("<q", i) for i in range(len(docs) + 1))
    return binb, idx


def write_docs(work, tag, docs):
    """Each document (bytes) into its own file work/TAGnnnn.txt; their paths."""
    paths = []
    for i, d in enumerate(docs):
        p = os.path.join(work, f"{tag}{i:04d}.txt")
        with open(p, "wb") as f:
            f.write(d)
        paths.append(p)
    return paths


FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def finish(what):
    """Exit 1 after any failed check, else say that all passed."""
    if FAILS:
        print(f"{len(FAILS)} failures")
        sys.exit(1)
    print(f"{what}: all checks passed")


def prepare(tool, *args):
    return subprocess.run([tool] + list(args), capture_output=True, text=True)


def dataset_files(prefix):
    """(PREFIX.bin, PREFIX.idx) bytes, None when absent."""
    try:
        with open(prefix + ".bin", "rb") as f:
            b = f.read()
        with open(prefix + ".idx", "rb") as f:
            i = f.read()
    except FileNotFoundError:
        return None
    return b, i


def check_refusals(tool, work, kept, cases):
    """Each case (args, exit code or None for any failure, needles): the prepare
    tool exits so, saying one of the needles in at most 20 lines, and the dataset
    at prefix `kept` is as it was; no temporary file is left in work."""
    before = dataset_files(kept)
    for args, code, needles in cases:
        r = prepare(tool, *args)
        check((r.returncode == code if code is not None else r.returncode > 0) and
              any(n in r.stderr for n in needles) and r.stderr.count("\n") <= 20,
              f"{' '.join(a if len(a) < 40 else '...' + a[-30:] for a in args)}: exit {r.returncode} (want "
              f"{code if code is not None else 'a failure'} naming {' or '.join(needles)}), stderr {r.stderr!r}")
        check(dataset_files(kept) == before, "a failed prepare leaves the earlier dataset as it was")
    check(not [f for f in os.listdir(work) if f.endswith(".tmp")], "no temporary files are left behind")

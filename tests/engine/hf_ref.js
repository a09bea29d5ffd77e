// The reference for the HuggingFaceTokenizer test: Hugging Face's tokenizers
// library itself (the Rust code transformers runs), through its official node
// binding, the npm package `tokenizers`, run on files.
//   node hf_ref.js PKG_DIR TOKENIZER_DIR OUT.json FILE...
//   node hf_ref.js PKG_DIR TOKENIZER_DIR OUT.json --decode IDS.json   (a list of id lists -> their texts,
//                                                                      special tokens kept, as transformers does)
// TOKENIZER_DIR holds tokenizer.json. Each FILE is read as bytes and decoded as
// node decodes UTF-8 (WHATWG: invalid sequences become U+FFFD, as atoll
// replaces them; a leading byte-order mark is kept, as atoll keeps it), then
// encoded with the special tokens the post-processor adds (addSpecialTokens,
// what transformers does by default). OUT.json gets a list of id lists, one
// per FILE.
const fs = require('fs');
const path = require('path');

const [pkg, dir, out, ...files] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(pkg, 'index.js'));
const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
// ignoreBOM: a leading U+FEFF is text (without it the decoder drops it)
const dec = new TextDecoder('utf-8', { ignoreBOM: true });
(async () => {
  if (files[0] === '--decode') {
    const texts = [];
    for (const ids of JSON.parse(fs.readFileSync(files[1]))) texts.push(await tok.decode(ids, false));
    fs.writeFileSync(out, JSON.stringify(texts));
    return;
  }
  const ids = [];
  for (const f of files) {
    const e = await tok.encode(dec.decode(fs.readFileSync(f)), null, { addSpecialTokens: true });
    ids.push(Array.from(e.getIds()));
  }
  fs.writeFileSync(out, JSON.stringify(ids));
})().catch((e) => { console.error(e); process.exit(1); });

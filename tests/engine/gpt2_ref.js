// The reference for the tokenizer tests: the npm package gpt-3-encoder's own
// encoder, run on files.
//   node gpt2_ref.js PKG_DIR OUT.json FILE...
// Each FILE is read as bytes and decoded as node decodes UTF-8 (WHATWG:
// invalid sequences become U+FFFD; a leading byte-order mark is kept).
// OUT.json gets {"ids": [[...], ...], "text": [the decoded text's UTF-8 as hex, ...]}.
'use strict';
const fs = require('fs'), path = require('path');
const [pkg, out, ...files] = process.argv.slice(2);
const enc = require(path.resolve(pkg, 'Encoder.js'));
// ignoreBOM: a leading U+FEFF is text (atoll keeps it, as Python's utf-8 codec does)
const dec = new TextDecoder('utf-8', { ignoreBOM: true });
const ids = [], text = [];
for (const f of files) {
  const s = dec.decode(fs.readFileSync(f));
  ids.push(enc.encode(s));
  text.push(Buffer.from(s, 'utf8').toString('hex'));
}
fs.writeFileSync(out, JSON.stringify({ ids, text }));

// The reference for the SentencePiece tokenizer test: Google's sentencepiece
// library itself (its C++ compiled to WebAssembly), through the npm package
// @sctg/sentencepiece-js, run on files.
//   node spm_ref.js PKG_DIR MODEL OUT.json encode FILE...   OUT.json: a list of id lists, one per FILE
//   node spm_ref.js PKG_DIR MODEL OUT.json decode IDS.json  IDS.json: a list of id lists; OUT.json: their texts
// Each FILE is read as bytes and decoded as node decodes UTF-8 (WHATWG: invalid
// sequences become U+FFFD, as atoll replaces them; a leading byte-order mark
// is kept, as atoll keeps it), then encoded as sentencepiece's EncodeAsIds does.
const fs = require('fs');
const path = require('path');

const [pkg, model, out, cmd, ...args] = process.argv.slice(2);
const { SentencePieceProcessor } = require(path.resolve(pkg, 'dist/index.cjs'));
const dec = new TextDecoder('utf-8', { ignoreBOM: true });
(async () => {
  const sp = new SentencePieceProcessor();
  await sp.load(path.resolve(model));
  let res;
  if (cmd === 'encode') res = args.map((f) => Array.from(sp.encodeIds(dec.decode(fs.readFileSync(f)))));
  else if (cmd === 'decode') res = JSON.parse(fs.readFileSync(args[0])).map((ids) => sp.decodeIds(ids));
  else throw new Error(`unknown command ${cmd}`);
  fs.writeFileSync(out, JSON.stringify(res));
})().catch((e) => { console.error(e); process.exit(1); });

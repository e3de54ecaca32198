// What the node peer encoders (hf_tokenizers_peer.mjs, tiktoken_peer.mjs)
// share: where the npm packages are, the record file they encode, and the
// cutting of a text into documents.
import fs from 'fs';
import path from 'path';
import { fileURLToPath } from 'url';

const here = path.dirname(fileURLToPath(import.meta.url));
// third_party/npm (scripts/deps.sh), or $OJAS_NPM_DIR.
export const npmDir = process.env.OJAS_NPM_DIR || path.join(here, '..', '..', 'third_party', 'npm');

// Encode the records of IN ([u8 mode][u32le length][UTF-8 bytes], each
// decoded with a fatal TextDecoder) with encode(mode, string) -> ids, and
// write OUT: one line of space-separated ids per record.
export function encodeRecords(inPath, outPath, encode) {
  const buf = fs.readFileSync(inPath);
  const dec = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  const out = [];
  let o = 0;
  while (o < buf.length) {
    const mode = buf[o];
    const len = buf.readUInt32LE(o + 1);
    const s = dec.decode(buf.subarray(o + 5, o + 5 + len));
    o += 5 + len;
    out.push(Array.from(encode(mode, s)).join(' '));
  }
  fs.writeFileSync(outPath, out.join('\n') + '\n');
}

// The documents of buf: cut after the first '\n' at or past every `size`
// bytes (the C benchmarks cut the same bytes), as strings.
export function documents(buf, size) {
  const out = [];
  let start = 0;
  while (start < buf.length) {
    let cut = buf.length;
    if (buf.length - start > size) {
      const nl = buf.indexOf(10, start + size);
      if (nl >= 0 && nl + 1 < buf.length) cut = nl + 1;
    }
    out.push(buf.subarray(start, cut).toString('utf8'));
    start = cut;
  }
  return out;
}

// Peer encoder for ojas's tokenizer.json tests and benchmark: ids from npm
// @huggingface/tokenizers (tokenizers.js, pure JS) for a directory holding
// tokenizer.json (and, if present, tokenizer_config.json).
//
//   node hf_tokenizers_peer.mjs encode DIR IN OUT
//     IN: records [u8 mode][u32le length][UTF-8 bytes]; mode 0 = encode
//     without the post-processor's special tokens (add_special_tokens:
//     false), 1 = with them. Records are decoded with a fatal TextDecoder.
//     OUT: one line of space-separated ids per record.
//   node hf_tokenizers_peer.mjs bench DIR FILE REPEATS DOC_BYTES
//     encode FILE, cut into documents after the first '\n' at or past every
//     DOC_BYTES bytes (bench/tokenizer/bench_tokenizer_json.c cuts the same
//     bytes), REPEATS times single-threaded; prints JSON with the best wall
//     time and the best process CPU time.
import fs from 'fs';
import path from 'path';

import { pathToFileURL } from 'url';

import { documents, encodeRecords, npmDir } from './peer_util.mjs';

const pkgDir = path.join(npmDir, 'node_modules', '@huggingface', 'tokenizers');
const version = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).version;
const { Tokenizer } = await import(pathToFileURL(path.join(pkgDir, 'dist', 'tokenizers.mjs')).href);

function load(dir) {
  const json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const cfgPath = path.join(dir, 'tokenizer_config.json');
  const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, 'utf8')) : {};
  return new Tokenizer(json, cfg);
}

function encodeFile(dir, inPath, outPath) {
  const tok = load(dir);
  encodeRecords(inPath, outPath, (mode, s) => tok.encode(s, { add_special_tokens: mode === 1 }).ids);
}

function bench(dir, file, repeats, docBytes) {
  const tok = load(dir);
  const buf = fs.readFileSync(file);
  const docs = documents(buf, docBytes);
  const mb = buf.length / 1e6;
  tok.encode(docs[0], { add_special_tokens: false }); // warm up the JIT
  let best = Infinity, bestCpu = Infinity, n = 0;
  for (let r = 0; r < repeats; r++) {
    const c0 = process.cpuUsage(), t0 = performance.now();
    n = 0;
    for (const d of docs) n += tok.encode(d, { add_special_tokens: false }).ids.length;
    const c = process.cpuUsage(c0);
    best = Math.min(best, (performance.now() - t0) / 1000);
    bestCpu = Math.min(bestCpu, (c.user + c.system) / 1e6);
  }
  return { bytes: buf.length, documents: docs.length, node: process.version,
           peer: { name: '@huggingface/tokenizers ' + version, threads: 1, tokens: n,
                   seconds: best, mbps: mb / best, cpu_seconds: bestCpu } };
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === 'encode') {
  encodeFile(args[0], args[1], args[2]);
} else if (cmd === 'bench') {
  process.stdout.write(JSON.stringify(bench(args[0], args[1], Number(args[2] ?? 3),
                                            Number(args[3] ?? 4096))) + '\n');
} else {
  process.stderr.write('usage: hf_tokenizers_peer.mjs encode DIR IN OUT | bench DIR FILE REPEATS DOC_BYTES\n');
  process.exit(2);
}

// Peer encoder for ojas's tokenizer tests and benchmark: ids of tiktoken's
// gpt2, cl100k_base or o200k_base encodings from npm js-tiktoken (pure JS)
// or tiktoken (Rust compiled to WASM).
//
//   node tiktoken_peer.mjs encode js|wasm IN OUT [ENCODING]
//     ENCODING: gpt2 (default), cl100k_base or o200k_base.
//     IN: records [u8 mode][u32le length][UTF-8 bytes]; mode 0 = special
//     tokens encoded as text, 1 = "<|endoftext|>" allowed. Each record is
//     decoded with a fatal TextDecoder (IN must be valid UTF-8: the test feeds
//     invalid byte strings only after lossy U+FFFD replacement).
//     OUT: one line of space-separated ids per record.
//   node tiktoken_peer.mjs ranks ENCODING OUT
//     write js-tiktoken's ranks of ENCODING as a .tiktoken rank file (lines
//     "<base64 bytes> <rank>" in rank order, as tiktoken's published files).
//   node tiktoken_peer.mjs tokenizer-json ENCODING DIR
//     write DIR/tokenizer.json holding the same encoding for
//     @huggingface/tokenizers (the benchmark's third peer): byte-level BPE
//     whose vocabulary is the ranks (GPT-2 byte-to-unicode strings), whose
//     merges are recovered from the ranks (each token's bytes merged with
//     the lower ranks only end in two parts), a Split pre-tokenizer with
//     the encoding's pattern and its special tokens.
//   node tiktoken_peer.mjs bench FILE REPEATS WORKERS [ENCODING]
//     encode FILE REPEATS times with each library, single-threaded and as a
//     batch of ~64 KiB documents over WORKERS worker threads; prints JSON
//     with the best wall time of each (and, single-threaded, the best process
//     CPU time, which other load on the machine does not inflate).
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';
import { fileURLToPath } from 'url';
import { Worker, isMainThread, parentPort, workerData } from 'worker_threads';

import { documents, encodeRecords, npmDir } from './peer_util.mjs';

const require = createRequire(path.join(npmDir, 'package.json'));
const version = (pkg) =>
  JSON.parse(fs.readFileSync(path.join(npmDir, 'node_modules', pkg, 'package.json'), 'utf8')).version;

function jsRanks(encoding) {
  const ranks = require('js-tiktoken/ranks/' + encoding);
  return ranks.default ?? ranks;
}

function load(lib, encoding = 'gpt2') {
  if (lib === 'js') {
    const { Tiktoken } = require('js-tiktoken/lite');
    const enc = new Tiktoken(jsRanks(encoding));
    return {
      name: 'js-tiktoken ' + version('js-tiktoken'),
      text: (s) => enc.encode(s, [], []),
      allow: (s) => enc.encode(s, 'all'),
    };
  }
  const tk = require('tiktoken');
  const enc = tk.get_encoding(encoding);
  return {
    name: 'tiktoken ' + version('tiktoken') + ' (WASM)',
    text: (s) => enc.encode_ordinary(s),
    allow: (s) => enc.encode(s, 'all'),
  };
}

// The .tiktoken rank file of an encoding (the "bpe_ranks" of js-tiktoken
// are lines "<first token> <first rank> <base64> <base64> ...").
function writeRanks(encoding, outPath) {
  const lines = [];
  for (const line of jsRanks(encoding).bpe_ranks.split('\n').filter(Boolean)) {
    const [, offset, ...tokens] = line.split(' ');
    tokens.forEach((t, i) => lines.push(t + ' ' + (Number(offset) + i)));
  }
  fs.writeFileSync(outPath, lines.join('\n') + '\n');
}

// GPT-2's bytes_to_unicode: byte -> printable character.
function byteToUnicode() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++)
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  const map = new Array(256);
  bs.forEach((b, i) => (map[b] = String.fromCodePoint(cs[i])));
  return map;
}

function writeTokenizerJson(encoding, dir) {
  const r = jsRanks(encoding);
  const tokens = []; // rank -> bytes
  for (const line of r.bpe_ranks.split('\n').filter(Boolean)) {
    const [, offset, ...toks] = line.split(' ');
    toks.forEach((t, i) => (tokens[Number(offset) + i] = Buffer.from(t, 'base64')));
  }
  const rank = new Map(tokens.map((b, i) => [b.toString('latin1'), i]));
  const b2u = byteToUnicode();
  const str = (b) => Array.from(b, (x) => b2u[x]).join('');
  const vocab = {}, merges = [];
  tokens.forEach((b, id) => (vocab[str(b)] = id));
  tokens.forEach((b, id) => {
    if (b.length < 2) return;
    // merge b's bytes, lowest rank first, with ranks below id only
    let parts = Array.from(b, (x) => Buffer.from([x]));
    for (;;) {
      let best = -1, at = -1;
      for (let i = 0; i + 1 < parts.length; i++) {
        const k = rank.get(Buffer.concat([parts[i], parts[i + 1]]).toString('latin1'));
        if (k !== undefined && k < id && (best < 0 || k < best)) { best = k; at = i; }
      }
      if (at < 0) break;
      parts.splice(at, 2, Buffer.concat([parts[at], parts[at + 1]]));
    }
    if (parts.length !== 2) throw new Error(`${encoding}: token ${id} has no two-part merge`);
    merges.push([id, str(parts[0]) + ' ' + str(parts[1])]);
  });
  merges.sort((a, b) => a[0] - b[0]);
  const json = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: Object.entries(r.special_tokens).map(([content, id]) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
      special: true })),
    normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: r.pat_str }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
             ignore_merges: false, vocab, merges: merges.map((m) => m[1]) },
  };
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(json));
}

function encodeFile(lib, inPath, outPath, encoding) {
  const enc = load(lib, encoding);
  encodeRecords(inPath, outPath, (mode, s) => (mode === 1 ? enc.allow(s) : enc.text(s)));
}

function bench(file, repeats, workers, encoding) {
  const text = fs.readFileSync(file, 'utf8');
  const mb = Buffer.byteLength(text) / 1e6;
  const result = { bytes: Buffer.byteLength(text), node: process.version, peers: [] };
  for (const lib of ['wasm', 'js']) {
    const enc = load(lib, encoding);
    enc.text(text.slice(0, 100000)); // warm up (JIT, WASM)
    let best = Infinity, bestCpu = Infinity, n = 0;
    for (let r = 0; r < repeats; r++) {
      const c0 = process.cpuUsage(), t0 = performance.now();
      n = enc.text(text).length;
      const c = process.cpuUsage(c0);
      best = Math.min(best, (performance.now() - t0) / 1000);
      bestCpu = Math.min(bestCpu, (c.user + c.system) / 1e6);
    }
    result.peers.push({ name: enc.name, lib, threads: 1, tokens: n, seconds: best, mbps: mb / best,
                        cpu_seconds: bestCpu });
  }
  return result;
}

// Documents for the batch benchmark: cut the file after the first '\n' at or
// past every 64 KiB (bench_tokenizer.c cuts the same bytes).
export function chunks(buf) {
  return documents(buf, 65536);
}

// Batch over worker threads: each worker encodes every WORKERS-th document.
async function benchBatch(file, repeats, workers, result, encoding) {
  const buf = fs.readFileSync(file);
  const mb = buf.length / 1e6;
  const docs = chunks(buf);
  result.documents = docs.length;
  for (const lib of ['wasm', 'js']) {
    const pool = [];
    for (let w = 0; w < workers; w++) {
      const share = docs.filter((_, i) => i % workers === w);
      pool.push(new Worker(fileURLToPath(import.meta.url), { workerData: { lib, share, encoding } }));
    }
    const call = (wk) => new Promise((res) => { wk.once('message', res); wk.postMessage('go'); });
    await Promise.all(pool.map(call)); // warm up
    let best = Infinity, n = 0;
    for (let r = 0; r < repeats; r++) {
      const t0 = performance.now();
      const counts = await Promise.all(pool.map(call));
      best = Math.min(best, (performance.now() - t0) / 1000);
      n = counts.reduce((a, b) => a + b, 0);
    }
    for (const wk of pool) await wk.terminate();
    result.peers.push({ name: load(lib, encoding).name, lib, threads: workers, tokens: n, seconds: best,
                        mbps: mb / best });
  }
}

if (!isMainThread) {
  const enc = load(workerData.lib, workerData.encoding);
  parentPort.on('message', () => {
    let n = 0;
    for (const s of workerData.share) n += enc.text(s).length;
    parentPort.postMessage(n);
  });
} else {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === 'encode') {
    encodeFile(args[0], args[1], args[2], args[3] ?? 'gpt2');
  } else if (cmd === 'ranks') {
    writeRanks(args[0], args[1]);
  } else if (cmd === 'tokenizer-json') {
    writeTokenizerJson(args[0], args[1]);
  } else if (cmd === 'bench') {
    const repeats = Number(args[1] ?? 3), workers = Number(args[2] ?? 2);
    const result = bench(args[0], repeats, workers, args[3] ?? 'gpt2');
    if (workers > 1) await benchBatch(args[0], repeats, workers, result, args[3] ?? 'gpt2');
    process.stdout.write(JSON.stringify(result) + '\n');
  } else {
    process.stderr.write('usage: tiktoken_peer.mjs encode js|wasm IN OUT [ENCODING] | ranks ENCODING OUT | ' +
                         'bench FILE REPEATS WORKERS [ENCODING]\n');
    process.exit(2);
  }
}

// The llama.cpp peer of bench_quant_decode: node-llama-cpp (pinned 3.21.1,
// its prebuilt CPU binaries, no GPU) loads a GGUF file, evaluates the prompt
// ids and decodes greedily; prints one JSON line: tok_s (new tokens after
// the first / their wall time, as bench_quant_decode counts), the tokens.
//   node llama_peer.mjs FILE.gguf PROMPT_IDS(comma-separated) NEW THREADS
import path from 'path';
import { pathToFileURL } from 'url';

const here = path.dirname(new URL(import.meta.url).pathname);
const npm = process.env.OJAS_NPM_DIR || path.join(here, '..', '..', 'third_party', 'npm');
const { getLlama } = await import(pathToFileURL(path.join(npm, 'node_modules', 'node-llama-cpp',
  'dist', 'index.js')).href);
const [file, promptArg, newArg, threadsArg] = process.argv.slice(2);
const prompt = promptArg.split(',').map(Number);
const nnew = Number(newArg), threads = Number(threadsArg);
const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
const ctx = await model.createContext({ contextSize: prompt.length + nnew + 8, threads,
  batchSize: prompt.length });
const seq = ctx.getSequence();
const toks = [];
let t1 = 0;
for await (const t of seq.evaluate(prompt, { temperature: 0 })) {
  toks.push(t);
  if (toks.length === 2) t1 = performance.now(); // after the first token and one step, as ojas
  if (toks.length >= nnew) break;
}
const dt = (performance.now() - t1) / 1000;
process.stdout.write(JSON.stringify({ peer: 'llama.cpp (node-llama-cpp 3.21.1)', file: path.basename(file),
  threads, tok_s: (toks.length - 2) / dt, tokens: toks }) + '\n');
await ctx.dispose();
await model.dispose();

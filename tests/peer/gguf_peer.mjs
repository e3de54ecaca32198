// The GGUF peer: npm @huggingface/gguf (scripts/deps.sh pins it) parses a
// file and prints what it read as JSON on stdout:
//   {"version", "tensorDataOffset", "metadata": {key: {"type", "subType",
//    "value"}}, "tensors": [{"name", "n_dims", "shape", "dtype", "offset"}]}
// 64-bit integers (bigint) are printed as decimal strings.
//   node tests/peer/gguf_peer.mjs FILE.gguf
import path from 'path';
import { pathToFileURL } from 'url';
import { npmDir } from './peer_util.mjs';

const mod = await import(pathToFileURL(path.join(npmDir, 'node_modules', '@huggingface', 'gguf',
  'dist', 'index.mjs')).href);
const file = path.resolve(process.argv[2]);
const r = await mod.gguf(file, { allowLocalFile: true, typedMetadata: true });
const big = (k, v) => (typeof v === 'bigint' ? v.toString() : v);
const md = {};
for (const [k, v] of Object.entries(r.typedMetadata)) {
  if (k === 'version' || k === 'tensor_count' || k === 'kv_count') continue;
  md[k] = { type: v.type, subType: v.subType ?? null, value: v.value };
}
const out = {
  version: r.metadata.version,
  tensorCount: r.metadata.tensor_count,
  kvCount: r.metadata.kv_count,
  tensorDataOffset: r.tensorDataOffset,
  metadata: md,
  tensors: r.tensorInfos.map((t) => ({ name: t.name, n_dims: t.n_dims, shape: t.shape,
    dtype: t.dtype, offset: t.offset })),
};
process.stdout.write(JSON.stringify(out, big) + '\n');

// A Node service that grows, drops most of what it built, and rests (memgap's V8 reader is
// tested on it). Run: node --expose-gc heap.js [--keep] [--objects MIB] [--buffers MIB]
// Prints "ready pid=N" once at rest; then each stdin line gets one line of key=value: its own
// v8.getHeapStatistics(), v8.getHeapSpaceStatistics() per space and process.memoryUsage(),
// all read at the same moment, and the ticker's worst lateness since the previous line; with
// --worker, a worker thread's own getHeapStatistics() too (worker.heap.*).
'use strict';
const v8 = require('v8');
const readline = require('readline');
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');

if (!isMainThread) {
  // --worker MIB: a worker thread (an isolate of its own) holding MIB of objects, telling its heap's figures
  const held = [];
  const base = v8.getHeapStatistics().used_heap_size;
  for (let i = 0; ; i++) {
    held.push({ id: i, name: 'worker-' + i + '-' + 'y'.repeat(30 + (i % 16)) });
    if (i % 8192 === 0 && v8.getHeapStatistics().used_heap_size - base >= workerData * 1024 * 1024) break;
  }
  globalThis.held = held;  // kept: nothing below refers to it
  global.gc();
  parentPort.on('message', () => parentPort.postMessage(v8.getHeapStatistics()));
  parentPort.postMessage('ready');
  return;
}

const args = process.argv.slice(2);
const keep = args.includes('--keep');           // stay at the live size: nothing dropped
const arg = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const objectsMiB = arg('--objects', 128);
const buffersMiB = arg('--buffers', 100);
const workerMiB = arg('--worker', 0);

// An object graph: records holding a string and a small array, chained; grown until V8 says the
// heap holds --objects MiB more than at the start (its own count, not an estimate per record).
const MiB = 1024 * 1024;
const records = [];
const base = v8.getHeapStatistics().used_heap_size;
for (let i = 0; ; i++) {
  const name = 'record-' + i + '-' + 'x'.repeat(40 + (i % 24));
  records.push({ id: i, name, tags: [i, i * 2, i * 3], next: records.length ? records[records.length - 1] : null });
  if (i % 8192 === 0 && v8.getHeapStatistics().used_heap_size - base >= objectsMiB * MiB) break;
}
const buffers = [];
for (let i = 0; i < buffersMiB; i++) buffers.push(Buffer.alloc(MiB, i & 0xff));

if (!keep) {
  // drop 90%: keep every tenth record (unchained) and every tenth Buffer
  const kept = [];
  for (let i = 0; i < records.length; i += 10) { records[i].next = null; kept.push(records[i]); }
  records.length = 0;
  records.push(...kept);
  const keptBuffers = buffers.filter((_, i) => i % 10 === 0);
  buffers.length = 0;
  buffers.push(...keptBuffers);
}
global.gc();
global.gc();

// A ticker: how late a 10 ms timer fires, the worst since the last line (a stop of the process shows here).
let worst = 0;
let last = Date.now();
setInterval(() => {
  const now = Date.now();
  worst = Math.max(worst, now - last - 10);
  last = now;
}, 10);

let worker = null;

function workerFigures() {
  if (worker === null) return Promise.resolve([]);
  return new Promise((resolve) => {
    worker.once('message', (h) => resolve(Object.entries(h).map(([k, v]) => `worker.heap.${k}=${v}`)));
    worker.postMessage('figures');
  });
}

async function figures() {
  const theirs = await workerFigures();
  const out = [];
  const h = v8.getHeapStatistics();
  for (const [k, v] of Object.entries(h)) out.push(`heap.${k}=${v}`);
  for (const s of v8.getHeapSpaceStatistics()) {
    for (const k of ['space_size', 'space_used_size', 'space_available_size', 'physical_space_size']) {
      out.push(`space.${s.space_name}.${k}=${s[k]}`);
    }
  }
  for (const [k, v] of Object.entries(process.memoryUsage())) out.push(`mem.${k}=${v}`);
  out.push(`records=${records.length}`, `buffers=${buffers.length}`, `ticker_worst_ms=${worst}`);
  worst = 0;
  return out.concat(theirs).join(' ');
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', async () => process.stdout.write(await figures() + '\n'));
rl.on('close', () => process.exit(0));
if (workerMiB > 0) {
  worker = new Worker(__filename, { workerData: workerMiB });
  worker.once('message', () => process.stdout.write(`ready pid=${process.pid}\n`));
} else {
  process.stdout.write(`ready pid=${process.pid}\n`);
}

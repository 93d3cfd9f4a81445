// The original's classifier and this package side by side, in one process,
// on the same inputs: calls/s of each and how often their reasons agree.
//
// usage: node [--import HOOKS.mjs] compare.mjs REF FILE.jsonl [--passes 5]
//   node: 24.16 or newer (the original's package wants it)
//   REF: a scratch folder where `npm install openclaw@2026.9.6 --ignore-scripts` ran
//   FILE.jsonl: one {"provider","status","message"} per line
//   HOOKS.mjs: optionally, a module hook that answers the original's
//        provider-plugin hook with "no plugin loaded" (the verdicts are the
//        same; it saves a second of imports)
// Not run in CI: it needs the published package from npm.
import { readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [ref, file] = process.argv.slice(2);
const passesAt = process.argv.indexOf('--passes');
const passes = passesAt > 0 ? Number(process.argv[passesAt + 1]) : 5;
if (!ref || !file) {
  console.error('usage: compare.mjs REF FILE.jsonl [--passes N]');
  process.exit(2);
}

// The original's two functions, as the reference harness finds them.
const dist = join(ref, 'node_modules', 'openclaw', 'dist');
const files = readdirSync(dist);
const pick = (re) => {
  const f = files.filter((x) => re.test(x));
  if (f.length !== 1) throw new Error(`${re}: ${f}`);
  return pathToFileURL(join(dist, f[0])).href;
};
const fe = await import(pick(/^failover-error-iaVdq91s\.mjs$/));
const cl = await import(pick(/^classify-Ds2AuCvN\.mjs$/));
const original = { resolveFailoverReasonFromError: fe.f, classifyFailoverReason: cl.t };
if (fe.f.name !== 'resolveFailoverReasonFromError' || cl.t.name !== 'classifyFailoverReason')
  throw new Error('the original\'s exports moved');

const ours = createRequire(import.meta.url)('..');

const inputs = readFileSync(file, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));

// The reference harness's call (bench.mjs): with a status, the error
// object; without, the message.
const callWith = (impl) => (x) =>
  x.status !== undefined && x.status !== null
    ? impl.resolveFailoverReasonFromError({ status: x.status, message: x.message, provider: x.provider })
    : impl.classifyFailoverReason(x.message, { provider: x.provider });
const impls = { original: callWith(original), failover: callWith(ours) };

let same = 0;
for (const x of inputs) if ((impls.original(x) ?? null) === (impls.failover(x) ?? null)) same++;

function pass(one) {
  let acc = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < inputs.length; i++) {
    const r = one(inputs[i]);
    if (r) acc += r.length;
  }
  return [Number(process.hrtime.bigint() - t0) / 1e9, acc];
}
for (const one of Object.values(impls)) pass(one); // warm-up
const secs = { original: [], failover: [] };
for (let p = 0; p < passes; p++) {
  for (const [name, one] of Object.entries(impls)) secs[name].push(pass(one)[0]);
}
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const rate = (name) => inputs.length / median(secs[name]);
console.log(
  `node ${process.version}, ${inputs.length} calls per pass, ${passes} passes alternating, median:\n` +
    `  original (openclaw@2026.9.6): ${rate('original').toFixed(0)} calls/s\n` +
    `  failover (this package):      ${rate('failover').toFixed(0)} calls/s (${(rate('failover') / rate('original')).toFixed(1)}x)\n` +
    `  same reason on ${same} of ${inputs.length} inputs (${((100 * same) / inputs.length).toFixed(1)}%)`,
);

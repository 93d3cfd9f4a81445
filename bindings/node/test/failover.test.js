'use strict';
// The addon against the command line and the original's test vectors.
// Needs `node build.mjs` first, and the `failover` binary: $FAILOVER_BIN,
// else the workspace's release or debug build.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const failover = require('..');

const root = path.resolve(__dirname, '..', '..', '..');

function cliPath() {
  if (process.env.FAILOVER_BIN) return process.env.FAILOVER_BIN;
  const target = process.env.CARGO_TARGET_DIR ?? path.join(root, 'target');
  for (const profile of ['release', 'debug']) {
    const p = path.join(target, profile, 'failover');
    if (fs.existsSync(p)) return p;
  }
  throw new Error('no `failover` binary: build it (cargo build --release -p failover-cli) or set FAILOVER_BIN');
}

/** `failover classify FILE` on JSONL lines (objects): one parsed verdict per line. */
function runCli(lines, ...args) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'failover-node-'));
  const file = path.join(dir, 'in.jsonl');
  fs.writeFileSync(file, lines.map((l) => JSON.stringify(l) + '\n').join(''));
  try {
    const out = execFileSync(cliPath(), ['classify', '--quiet', ...args, file], {
      encoding: 'utf8',
      maxBuffer: 256 << 20,
    });
    return out.split('\n').filter(Boolean).map((l) => JSON.parse(l));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const vectorsPath = path.join(root, 'tests', 'vectors', 'openclaw.yaml');

/** The field corpus (tests/field/*.yaml) as `failover classify` input lines. */
function fieldCorpusLines() {
  const dir = path.join(root, 'tests', 'field');
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .flatMap((f) => failover.readCorpus(path.join(dir, f)))
    .map((i) =>
      Object.fromEntries(
        ['message', 'status', 'provider', 'model', 'code', 'type', 'body'].filter((k) => i[k] != null).map((k) => [k, i[k]]),
      ),
    );
}

/**
 * One vector in the original's call shape, as its tests and the reference
 * harness (bench.mjs) call it: with a status (or a code), the error object
 * to resolveFailoverReasonFromError; without, the message to
 * classifyFailoverReason. The message is the vector's text.
 */
function originalCall(v, impl = failover) {
  const message = v.message ?? v.body ?? '';
  if (v.status != null || v.code != null) {
    return impl.resolveFailoverReasonFromError({ status: v.status, message, provider: v.provider, code: v.code });
  }
  return impl.classifyFailoverReason(message, { provider: v.provider });
}

/** The same call as a `failover classify` input line. */
function cliLine(v) {
  const line = { message: v.message ?? v.body ?? '' };
  if (v.status != null) line.status = v.status;
  if (v.provider != null) line.provider = v.provider;
  if (v.code != null) line.code = v.code;
  return line;
}

test('the original call shapes', () => {
  assert.equal(failover.classifyFailoverReason('Rate limit reached'), 'rate_limit');
  assert.equal(failover.classifyFailoverReason('Key limit exceeded', { provider: 'openrouter' }), 'billing');
  assert.equal(failover.classifyFailoverReason('nothing here says anything'), null);
  assert.equal(failover.resolveFailoverReasonFromError({ status: 429, message: 'Too Many Requests' }), 'rate_limit');
  assert.equal(failover.resolveFailoverReasonFromError({ statusCode: '402', message: 'Payment required' }), 'billing');
  assert.equal(failover.resolveFailoverReasonFromError({ status: 403, message: 'Key limit exceeded' }, 'openrouter'), 'billing');
  assert.equal(failover.resolveFailoverReasonFromError({ code: 'ETIMEDOUT', message: 'connect ETIMEDOUT' }), 'timeout');
  assert.equal(failover.resolveFailoverReasonFromError(null), null);
  const err = Object.assign(new Error('Overloaded'), { status: 529, errorType: 'overloaded_error' });
  assert.equal(failover.resolveFailoverReasonFromError(err), 'overloaded');
  assert.equal(failover.resolveFailoverReasonFromError('HTTP 429: rate limited'), 'rate_limit');
});

test('bad input throws a clear error, never crashes', () => {
  assert.throws(() => failover.classifyFailoverReason(42), /`message` must be a string, not Number/);
  assert.throws(() => failover.classifyFailoverReason('x', { provider: 7 }), /`provider` must be a string/);
  for (const status of [700, 99, -1, 429.5, 'abc']) {
    assert.throws(
      () => failover.resolveFailoverReasonFromError({ status, message: 'x' }),
      /`status` must be an HTTP status code \(an integer 100–599\)/,
      String(status),
    );
  }
  assert.throws(() => failover.resolveFailoverReasonFromError({ status: {}, message: 'x' }), /`status` must be a number or a string of digits/);
  assert.throws(() => failover.resolveFailoverReasonFromError(12), /`err` must be an error object or a string/);
  assert.throws(() => failover.classify({ message: ['x'] }), /`message` must be a string/);
  assert.throws(() => new failover.Engine({ minConfidence: 2 }), /`minConfidence` must be a probability/);
  assert.throws(() => new failover.Engine({ model: '/no/such.model' }), /no\/such\.model/);
});

test('classify and explain give what the command line prints', () => {
  const cases = [
    { message: 'Key limit exceeded', status: 403, provider: 'openrouter' },
    { message: 'HTTP 402: Your weekly usage limit resets tomorrow' },
    { body: '{"error": {"message": "Overloaded", "type": "overloaded_error"}}', status: 529 },
    { message: 'something went sideways', status: 500 },
    { message: 'nothing here says anything' },
  ];
  const want = runCli(cases);
  cases.forEach((c, i) => {
    const v = failover.classify(c);
    for (const [k, value] of Object.entries(want[i])) assert.deepEqual(v[k], value, `${k} of ${JSON.stringify(c)}`);
    assert.equal(v.rule, want[i].rule ?? null);
  });
  const ex = failover.explain({ message: 'Rate limit reached', status: 429 });
  assert.deepEqual(ex.verdict, failover.classify({ message: 'Rate limit reached', status: 429 }));
  assert.ok(ex.atoms.includes('rate limit'), ex.atoms);
  const printed = execFileSync(cliPath(), ['classify', '--explain', '--message', 'Rate limit reached', '--status', '429'], { encoding: 'utf8' });
  assert.ok(printed.startsWith(ex.text), ex.text);
});

test('an Engine of operator rules, and rules with errors', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'failover-rules-'));
  try {
    fs.writeFileSync(path.join(dir, 'mine.rules'), 'rule billing.mine when message has "rate limit" => billing\n');
    const e = new failover.Engine({ rules: [dir] });
    assert.deepEqual([e.classify({ message: 'Rate limit reached', status: 429 }).rule], ['billing.mine']);
    assert.equal(e.resolveFailoverReasonFromError({ status: 429, message: 'Rate limit reached' }), 'billing');
    assert.equal(failover.classifyFailoverReason('Rate limit reached'), 'rate_limit');
    assert.ok(e.reasons.includes('billing'));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  // Where no text rule decides, the embedded model may (at the costs'
  // thresholds, as the CLI); never with `model: null`.
  const errors = fieldCorpusLines();
  const byModel = errors.map((e) => failover.classify(e)).map((v, i) => [v, i]).filter(([v]) => v.decided_by === 'model');
  assert.ok(byModel.length >= 10, byModel.length);
  const rulesOnly = new failover.Engine({ model: null });
  for (const [v, i] of byModel) {
    assert.equal(v.rule, null);
    assert.ok(v.probability > 0 && v.probability <= 1, v.probability);
    const r = rulesOnly.classify(errors[i]);
    assert.ok(['weak rule', 'status rule', 'none'].includes(r.decided_by), r.decided_by);
    assert.equal(r.probability, null);
  }
  assert.throws(
    () => new failover.Engine({ sources: [['bad.rules', 'rule x when message has "a" => rate_limt\n']] }),
    (e) => /bad\.rules:1:/.test(e.message) && /E002/.test(e.message) && /did you mean `rate_limit`/.test(e.message),
  );
  assert.throws(() => new failover.Engine({ rules: ['/nonexistent/failover-rules'] }), /\/nonexistent\/failover-rules/);
});

test("the original's vectors: the same reasons as the command line, and its agreement", () => {
  const vectors = failover.readCorpus(vectorsPath);
  assert.ok(vectors.length >= 500, vectors.length);
  const want = runCli(vectors.map(cliLine));
  assert.equal(want.length, vectors.length);
  let exact = 0;
  vectors.forEach((v, i) => {
    const got = originalCall(v);
    // The vectors' one mapping ("null -> unclassified", their header).
    assert.equal(got ?? 'unclassified', want[i].reason, `line ${v.line}: ${JSON.stringify(cliLine(v))}`);
    assert.notEqual(got, 'unclassified');
    if (v.expected.includes(got ?? 'unclassified')) exact++;
  });
  // tests/it/field_corpus.rs holds the engine to 95% exact on them.
  const pct = (100 * exact) / vectors.length;
  console.log(`vectors: ${exact}/${vectors.length} exact (${pct.toFixed(1)}%) through the original's call shapes`);
  assert.ok(pct >= 95, `${pct}%`);
});

test('the field corpus through classify equals the command line', () => {
  const lines = fieldCorpusLines();
  assert.ok(lines.length >= 1000, lines.length);
  const want = runCli(lines);
  lines.forEach((l, i) => {
    const v = failover.classify(l);
    for (const [k, value] of Object.entries(want[i])) assert.deepEqual(v[k], value, `${k} of ${JSON.stringify(l)}`);
  });
});

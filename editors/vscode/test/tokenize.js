// Tokenizes every shipped rules file (../../../rules/**/*.rules) with the
// real vscode-textmate + vscode-oniguruma, as VS Code does, and checks:
// - concrete tokens get their scopes (keywords, names, strings, regexes,
//   escapes, comments, operators, numbers);
// - an independent scan of each line finds every comment, string, regex,
//   keyword and number, and the grammar gives each character of it the
//   matching scope;
// - no non-space character of the shipped files is left with only the
//   root scope.
// Exit 1 on any failure. Run: npm ci && node tokenize.js
'use strict';
const fs = require('fs');
const path = require('path');
const vsctm = require('vscode-textmate');
const oniguruma = require('vscode-oniguruma');

const root = path.resolve(__dirname, '../../..');
const grammarPath = path.resolve(__dirname, '../syntaxes/failover-rules.tmLanguage.json');
const SCOPE = 'source.failover-rules';

const wasm = fs.readFileSync(path.join(path.dirname(require.resolve('vscode-oniguruma')), 'onig.wasm')).buffer;
const onigLib = oniguruma.loadWASM(wasm).then(() => ({
  createOnigScanner: (p) => new oniguruma.OnigScanner(p),
  createOnigString: (s) => new oniguruma.OnigString(s),
}));
const registry = new vsctm.Registry({
  onigLib,
  loadGrammar: async (scopeName) =>
    scopeName === SCOPE ? vsctm.parseRawGrammar(fs.readFileSync(grammarPath, 'utf8'), grammarPath) : null,
});

let failures = 0;
function fail(msg) {
  failures++;
  if (failures <= 40) console.error('FAIL ' + msg);
}

function files(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? files(p) : e.name.endsWith('.rules') ? [p] : [];
  }).sort();
}

// Scopes of every character of every line.
function scopes(grammar, text) {
  let stack = vsctm.INITIAL;
  return text.split('\n').map((line) => {
    const r = grammar.tokenizeLine(line, stack);
    stack = r.ruleStack;
    const perChar = new Array(line.length);
    for (const t of r.tokens) for (let i = t.startIndex; i < Math.min(t.endIndex, line.length); i++) perChar[i] = t.scopes;
    return { line, perChar, tokens: r.tokens };
  });
}

const KEYWORDS = new Set(['weak', 'reason', 'rule', 'when', 'provider', 'selection', 'fallbacks', 'strict', 'else', 'and', 'or', 'not',
  'has', 'any', 'all', 'starts', 'ends', 'with', 'matches', 'in', 'is', 'empty']);

// An independent scan of one line: [start, end, kind] spans.
function scan(line) {
  const out = [];
  let i = 0;
  let inReason = false;
  while (i < line.length) {
    const c = line[i];
    if (c === '#') { out.push([i, line.length, 'comment']); break; }
    if (c === '"' || c === '/') {
      let j = i + 1;
      while (j < line.length && line[j] !== c) j += line[j] === '\\' ? 2 : 1;
      j++;
      if (c === '/') while (j < line.length && /[A-Za-z]/.test(line[j])) j++;
      out.push([i, Math.min(j, line.length), c === '"' ? 'string' : 'regex']);
      i = j;
      continue;
    }
    const m = /^[A-Za-z_][A-Za-z0-9_.-]*/.exec(line.slice(i));
    if (m) {
      const w = m[0];
      const prev = line.slice(0, i).trimEnd();
      if (w === 'reason') inReason = true;
      const isField = w === 'provider' && !/^\s*(\[|"|[A-Za-z_][\w-]*\s*\{)/.test(line.slice(i + w.length));
      // Inside `reason NAME { … }`, words are behaviours, not keywords.
      const behaviour = inReason && prev.includes('{') && !prev.includes('}');
      if (KEYWORDS.has(w) && !isField && !behaviour && !/(rule|reason|selection|=>|fallbacks)$/.test(prev)) {
        out.push([i, i + w.length, 'keyword']);
      }
      i += w.length;
      continue;
    }
    const n = /^\d+(\.\.\d+)?/.exec(line.slice(i));
    if (n && !/[A-Za-z_.]$/.test(line.slice(0, i))) { out.push([i, i + n[0].length, 'number']); i += n[0].length; continue; }
    i++;
  }
  return out;
}

const EXPECT = {
  comment: 'comment.line.number-sign.failover-rules',
  string: 'string.quoted.double.failover-rules',
  regex: 'string.regexp.failover-rules',
  keyword: 'keyword.',
  number: 'constant.numeric',
};

function tokenAt(rows, lineNo, text, nth = 0) {
  const row = rows[lineNo];
  const i = row.line.split(text, nth + 1).slice(0, nth + 1).join(text).length;
  if (row.line.indexOf(text) < 0) return null;
  return row.perChar[i] || [];
}

function expectScope(rows, file, needle, text, scope) {
  const lineNo = rows.findIndex((r) => r.line.includes(needle));
  if (lineNo < 0) return fail(`${file}: no line with ${JSON.stringify(needle)}`);
  const row = rows[lineNo];
  const at = row.line.indexOf(text, row.line.indexOf(needle));
  const got = at < 0 ? [] : row.perChar[at] || [];
  if (!got.some((s) => s.startsWith(scope))) fail(`${file}:${lineNo + 1}: ${JSON.stringify(text)} has [${got.join(', ')}], expected ${scope}`);
  else checked.concrete++;
}

const checked = { files: 0, lines: 0, spans: {}, chars: 0, concrete: 0 };

registry.loadGrammar(SCOPE).then((grammar) => {
  const all = files(path.join(root, 'rules'));
  for (const file of all) {
    const rel = path.relative(root, file);
    const rows = scopes(grammar, fs.readFileSync(file, 'utf8'));
    checked.files++;
    rows.forEach((row, n) => {
      checked.lines++;
      for (const [s, e, kind] of scan(row.line)) {
        for (let i = s; i < e; i++) {
          const sc = row.perChar[i] || [];
          if (!sc.some((x) => x.startsWith(EXPECT[kind]))) {
            fail(`${rel}:${n + 1}:${i + 1}: ${kind} ${JSON.stringify(row.line.slice(s, e).slice(0, 40))} char has [${sc.join(', ')}]`);
            break;
          }
        }
        checked.spans[kind] = (checked.spans[kind] || 0) + 1;
      }
      for (let i = 0; i < row.line.length; i++) {
        if (/\s/.test(row.line[i])) continue;
        checked.chars++;
        const sc = row.perChar[i] || [];
        if (sc.length < 2) {
          fail(`${rel}:${n + 1}:${i + 1}: ${JSON.stringify(row.line.slice(i, i + 20))} is unscoped`);
          break;
        }
      }
    });
    // Concrete tokens of the shipped files.
    if (rel === 'rules/00-reasons.rules') {
      expectScope(rows, rel, 'reason rate_limit {', 'reason', 'keyword.other.reason');
      expectScope(rows, rel, 'reason rate_limit {', 'rate_limit', 'entity.name.type.reason');
      expectScope(rows, rel, 'reason rate_limit {', 'cooldown', 'support.function.behaviour');
      expectScope(rows, rel, 'reason billing {', 'billing }', 'variable.parameter.behaviour');
      expectScope(rows, rel, '# The failover reasons', 'The', 'comment.line.number-sign');
    }
    if (rel === 'rules/05-selection.rules') {
      expectScope(rows, rel, 'selection agent_primary', 'selection', 'keyword.other.selection');
      expectScope(rows, rel, 'selection agent_primary', 'fallbacks', 'keyword.other.fallbacks');
      expectScope(rows, rel, 'selection agent_primary', 'agent else', 'variable.other.fallback-list');
      expectScope(rows, rel, 'selection agent_primary', 'else', 'keyword.control.else');
      expectScope(rows, rel, 'selection agent_primary', 'strict', 'keyword.other.strict');
    }
    if (rel === 'rules/60-messages.rules') {
      expectScope(rows, rel, 'weak rule timeout.text', 'weak', 'keyword.other.weak');
      expectScope(rows, rel, 'weak rule timeout.text', 'rule', 'keyword.other.rule');
      expectScope(rows, rel, 'weak rule timeout.text', 'timeout.text', 'entity.name.function.rule');
    }
    if (rel === 'rules/80-status.rules') {
      expectScope(rows, rel, 'rule rate_limit.status_429', 'rate_limit.status_429', 'entity.name.function.rule');
      expectScope(rows, rel, 'when status == 429', 'when', 'keyword.control.when');
      expectScope(rows, rel, 'when status == 429', 'status', 'variable.language.field');
      expectScope(rows, rel, 'when status == 429', '==', 'keyword.operator.comparison');
      expectScope(rows, rel, 'when status == 429', '429', 'constant.numeric.integer');
      expectScope(rows, rel, '=> rate_limit', '=>', 'keyword.operator.arrow');
      expectScope(rows, rel, '=> rate_limit', 'rate_limit', 'entity.name.type.reason');
      expectScope(rows, rel, 'and not message has any [', 'not', 'keyword.operator.logical');
      expectScope(rows, rel, 'and not message has any [', 'has any', 'keyword.operator.word');
      expectScope(rows, rel, '"too many requests"', '"too many requests"', 'string.quoted.double');
      expectScope(rows, rel, 'or provider has "moonshot"', 'provider', 'variable.language.field');
      expectScope(rows, rel, 'message matches /\\b(http', '\\b', 'constant.character.escape');
      expectScope(rows, rel, 'message matches /\\b(http', '(http', 'string.regexp');
    }
    if (rel === 'rules/20-providers/openrouter.rules') {
      expectScope(rows, rel, 'provider openrouter {', 'provider', 'keyword.other.provider');
      expectScope(rows, rel, 'provider openrouter {', 'openrouter', 'entity.name.namespace.provider');
    }
  }
  // A sample with what the shipped files lack: flags, escapes, a bad escape, ranges.
  const sample = scopes(grammar, 'rule a when message matches /a\\/b/i and status in [500..599] and code == "q\\"\\u{20AC}\\x" => r');
  const s = 'sample';
  expectScope(sample, s, 'rule a', '/i', 'punctuation.definition.string.end');
  expectScope(sample, s, 'rule a', 'i and', 'keyword.other.regex-flags');
  expectScope(sample, s, 'rule a', '\\/', 'constant.character.escape');
  expectScope(sample, s, 'rule a', '500..599', 'constant.numeric.range');
  expectScope(sample, s, 'rule a', '\\"', 'constant.character.escape');
  expectScope(sample, s, 'rule a', '\\u{20AC}', 'constant.character.escape');
  expectScope(sample, s, 'rule a', '\\x', 'invalid.illegal.escape');

  console.log(`tokenized ${checked.files} files, ${checked.lines} lines, ${checked.chars} non-space characters; ` +
    `spans checked: ${JSON.stringify(checked.spans)}; concrete tokens: ${checked.concrete}`);
  if (checked.files < 10 || !checked.spans.regex || !checked.spans.comment) fail('too little was checked');
  if (failures) {
    console.error(`${failures} failure(s)`);
    process.exit(1);
  }
  console.log('ok');
}).catch((e) => { console.error(e); process.exit(1); });

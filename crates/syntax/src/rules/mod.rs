//! Stage 1, syntax: rules text → typed, spanned AST (plus diagnostics).
//!
//! Pest does the parsing (`grammar/rules.pest`); this module lowers pest's
//! pair tree into [`ast`] nodes, decodes strings, and turns pest's errors
//! into operator words ("expected `=>`, found `billing`", never a grammar
//! rule name). Each file is parsed independently, so a syntax error in one
//! file does not hide the problems of the others; within a file pest stops
//! at the first syntax error, and every later check runs after parsing.
//!
//! Worked example: `rule a.b when status in [500..504] => timeout` becomes
//! `RuleDecl { id: "a.b", condition: Predicate { field: Status, op: In,
//! operand: List([Range(500, 504)]) }, reason: "timeout" }`, each piece with
//! its file, line and column.

pub mod ast;
pub mod fmt;

use pest::error::{ErrorVariant, InputLocation};
use pest::iterators::Pair;
use pest::Parser as _;

pub use crate::source::{
    display_name, FileId, SourceFile, SourceMap, Span, MAX_FILE_BYTES, UTF8_BOM,
};

use crate::diag::{did_you_mean, Code, Diagnostic};
use ast::*;

/// The parser pest derives from the grammar; its `Rule` names never reach
/// an operator (every message is in operator words).
mod grammar {
    #![allow(missing_docs, unreachable_pub)]
    #[derive(pest_derive::Parser)]
    #[grammar = "../../../grammar/rules.pest"]
    pub(crate) struct RulesParser;
}
pub(crate) use grammar::{Rule, RulesParser};

/// Parentheses and brackets nested deeper than this are refused before
/// parsing: the parser recurses per level, and no real rule needs more
/// than a handful.
pub const MAX_NESTING: usize = 64;

/// The fields a predicate may name (besides `body.PATH`).
const FIELDS: &[&str] = &[
    "message", "status", "provider", "model", "code", "type", "body",
];

/// Parses one file of a [`SourceMap`]. Returns the AST (without the
/// declarations that had errors) and the diagnostics found.
pub fn parse_file(sources: &SourceMap, file: FileId) -> (RuleFile, Vec<Diagnostic>) {
    let text = sources.get(file).text();
    let mut lower = Lower {
        sources,
        file,
        diags: Vec::new(),
    };
    let mut out = RuleFile {
        file,
        decls: Vec::new(),
    };
    if let Some(offset) = too_deep(text) {
        let span = sources.span(file, offset, offset + 1);
        lower.diags.push(
            Diagnostic::new(
                Code::E015,
                span,
                format!("parentheses or brackets nested more than {MAX_NESTING} deep"),
            )
            .label("nesting limit reached here")
            .help("split the condition into several rules; first match wins, so order them"),
        );
        return (out, lower.diags);
    }
    match RulesParser::parse(Rule::file, text) {
        Ok(mut pairs) => {
            let root = pairs.next().expect("the file rule always yields one pair");
            for pair in root.into_inner() {
                if let Some(decl) = lower.declaration(pair) {
                    out.decls.push(decl);
                }
            }
        }
        Err(err) => lower.diags.push(syntax_error(sources, file, &err)),
    }
    (out, lower.diags)
}

/// Convenience for tests and tools: parse text under a file name.
pub fn parse_str(name: &str, text: &str) -> (SourceMap, RuleFile, Vec<Diagnostic>) {
    let mut sources = SourceMap::new();
    let id = sources.add(name, text);
    let (ast, diags) = parse_file(&sources, id);
    (sources, ast, diags)
}

/// Finds the first offset where `(` / `[` nesting exceeds [`MAX_NESTING`],
/// skipping strings, regexes and comments.
fn too_deep(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            q @ (b'"' | b'/') => {
                i += 1;
                while i < bytes.len() && bytes[i] != q && bytes[i] != b'\n' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'(' | b'[' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(i);
                }
            }
            b')' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Plain words for what the parser expected at the error position.
fn expected_words(rule: Rule) -> &'static str {
    match rule {
        Rule::EOI => "end of file",
        Rule::ident => "a name",
        Rule::rule_id => "a rule id such as `billing.insufficient_credits`",
        Rule::string | Rule::string_body => "a string",
        Rule::regex | Rule::regex_body => "a regex `/…/`",
        Rule::regex_flags => "regex flags",
        Rule::int => "a number",
        Rule::range => "a range such as `500..599`",
        Rule::list => "a list `[…]`",
        Rule::arrow => "`=>`",
        Rule::open_brace => "`{`",
        Rule::close_brace => "`}`",
        Rule::open_paren => "`(`",
        Rule::close_paren => "`)`",
        Rule::open_bracket => "`[`",
        Rule::close_bracket => "`]`",
        Rule::comma => "`,`",
        Rule::semicolon => "`;`",
        Rule::kw_reason => "`reason`",
        Rule::kw_rule => "`rule`",
        Rule::kw_when => "`when`",
        Rule::kw_provider => "`provider`",
        Rule::kw_selection => "`selection`",
        Rule::kw_fallbacks => "`fallbacks`",
        Rule::kw_strict => "`strict`",
        Rule::kw_else => "`else`",
        Rule::kw_and => "`and`",
        Rule::kw_or => "`or`",
        Rule::kw_not => "`not`",
        // `weak` only ever starts a rule: "expected `rule`" says it all.
        Rule::kw_weak => "`rule`",
        Rule::file | Rule::declaration | Rule::reason_decl | Rule::rule_decl | Rule::provider_block | Rule::selection_decl => {
            "a declaration (`reason`, `rule`, `provider` or `selection`)"
        }
        Rule::behaviour => "a behaviour such as `failover`",
        Rule::provider_names => "a provider name or list",
        Rule::selection_target => "`strict` or `fallbacks LIST`",
        Rule::condition | Rule::conjunction | Rule::negation | Rule::group | Rule::predicate => {
            "a condition such as `message has \"…\"`"
        }
        Rule::field | Rule::body_field | Rule::path_segment => "a field (`message`, `status`, `body.PATH`, …)",
        Rule::operator
        | Rule::op_eq
        | Rule::op_ne
        | Rule::op_has_any
        | Rule::op_has_all
        | Rule::op_has
        | Rule::op_starts
        | Rule::op_ends
        | Rule::op_matches
        | Rule::op_in
        | Rule::op_is_empty => "an operator (`==`, `!=`, `in`, `has`, `has any`, `has all`, `starts with`, `ends with`, `matches`, `is empty`)",
        Rule::operand | Rule::list_item => "a value (string, number, range, list or regex)",
        Rule::WHITESPACE | Rule::COMMENT | Rule::word_char => "a space",
    }
}

fn help_for(expected: &[Rule]) -> Option<&'static str> {
    let has = |r: Rule| expected.contains(&r);
    if has(Rule::arrow) || has(Rule::kw_when) {
        Some("a rule reads `rule ID when CONDITION => REASON`")
    } else if has(Rule::semicolon) || has(Rule::behaviour) {
        Some("clauses of a reason are separated by `;`, e.g. `reason billing { failover; disable billing }`")
    } else if has(Rule::operator) || has(Rule::op_eq) {
        Some("a predicate reads `FIELD OPERATOR VALUE`, e.g. `status == 429` or `message has \"quota\"`")
    } else if has(Rule::operand) {
        Some("strings are double-quoted, regexes are written `/…/`, lists `[…]`")
    } else if has(Rule::kw_reason) || has(Rule::kw_rule) || has(Rule::rule_decl) {
        Some("a rules file holds `reason`, `rule`, `provider { … }` and `selection` declarations")
    } else if has(Rule::selection_target) {
        Some("a selection reads `selection SOURCE => strict` or `selection SOURCE => fallbacks LIST [else …]`")
    } else {
        None
    }
}

/// Describes the text at `offset` for "found …".
fn found_words(text: &str, offset: usize) -> String {
    let rest = &text[offset.min(text.len())..];
    let Some(first) = rest.chars().next() else {
        return "end of file".into();
    };
    if first == '\n' || first == '\r' {
        return "end of line".into();
    }
    if first == '"' {
        let end = rest[1..]
            .find(['"', '\n'])
            .map(|i| i + 2)
            .unwrap_or(rest.len());
        return format!("`{}`", truncate(&rest[..end], 30));
    }
    let word: String = if first.is_alphanumeric() || first == '_' {
        rest.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-' || *c == '.')
            .collect()
    } else {
        let two: String = rest.chars().take(2).collect();
        if ["=>", "==", "!=", ".."].contains(&two.as_str()) {
            two
        } else {
            first.to_string()
        }
    };
    format!("`{}`", truncate(&word, 30))
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

fn join_words(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    }
}

fn syntax_error(sources: &SourceMap, file: FileId, err: &pest::error::Error<Rule>) -> Diagnostic {
    let text = sources.get(file).text();
    let offset = match err.location {
        InputLocation::Pos(p) => p,
        InputLocation::Span((s, _)) => s,
    };
    // An unterminated string swallows the rest of the line: say so
    // instead of listing what could follow.
    let line_rest = text[offset..].split('\n').next().unwrap_or("");
    if line_rest.starts_with('"')
        && !line_rest[1..]
            .replace("\\\\", "")
            .replace("\\\"", "")
            .contains('"')
    {
        let span = sources.span(file, offset, offset + 1);
        return Diagnostic::new(Code::E001, span, "unterminated string")
            .label("this string has no closing `\"` on its line")
            .help("close the string with `\"`; a `\"` inside a string is written `\\\"`");
    }
    // So does an unterminated regex literal.
    if line_rest.starts_with('/') && !line_rest[1..].replace("\\/", "").contains('/') {
        let span = sources.span(file, offset, offset + 1);
        return Diagnostic::new(Code::E001, span, "unterminated regex")
            .label("this regex has no closing `/` on its line")
            .help("close the regex with `/` (flags after it, as in `/…/i`); a `/` inside a regex is written `\\/`");
    }
    let found = found_words(text, offset);
    // A block still open at the end of the file: name it and point back
    // to where it opened.
    if found == "end of file" {
        if let Some((open, construct)) = unclosed_block(&text[..offset]) {
            let at = sources.span(file, offset, offset);
            let opened = sources.span(file, open, open + 1);
            return Diagnostic::new(Code::E001, at, format!("unterminated `{construct}` block"))
                .label("the file ends here")
                .note(
                    opened,
                    format!("the `{construct}` block opened here is never closed"),
                )
                .help("close the block with `}`");
        }
    }
    // Underline the whole token found (as far as it was quoted).
    let token_len = found
        .strip_prefix('`')
        .and_then(|f| f.strip_suffix('`'))
        .filter(|f| !f.ends_with('…'))
        .map_or(1, str::len);
    let end = if found == "end of file" || found == "end of line" {
        offset
    } else {
        let mut e = (offset + token_len).min(text.len());
        while !text.is_char_boundary(e) {
            e -= 1;
        }
        e.max(offset + text[offset..].chars().next().map_or(0, char::len_utf8))
    };
    let span = sources.span(file, offset, end);
    match &err.variant {
        ErrorVariant::ParsingError { positives, .. } => {
            let mut words: Vec<&str> = Vec::new();
            // Skip the punctuation of trivia, which is never what is missing.
            for r in positives
                .iter()
                .filter(|r| !matches!(r, Rule::WHITESPACE | Rule::COMMENT))
            {
                // A rule may start with `weak` (optional), which pest
                // reports as the whole rule: it still reads `rule`.
                let w = match r {
                    Rule::rule_decl => "`rule`",
                    _ => expected_words(*r),
                };
                if !words.contains(&w) {
                    words.push(w);
                }
            }
            let title = if words.is_empty() {
                format!("unexpected {found}")
            } else {
                format!("expected {}, found {found}", join_words(&words))
            };
            let mut d =
                Diagnostic::new(Code::E001, span, title).label(format!("unexpected {found}"));
            if let Some(h) = help_for(positives) {
                d = d.help(h);
            }
            d
        }
        ErrorVariant::CustomError { message } => Diagnostic::new(Code::E001, span, message.clone()),
    }
}

/// The last block of `text` still open: the offset of its `{` and the
/// construct that opened it (`provider`, `reason`, …). Read by lines, as
/// the formatter lays blocks out: a line ending in `{` opens one (outside
/// a `#` comment), a line starting with `}` closes the innermost.
fn unclosed_block(text: &str) -> Option<(usize, String)> {
    let mut open: Vec<(usize, String)> = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let code = line.split('#').next().unwrap_or("").trim_end();
        let trimmed = code.trim_start();
        if trimmed.starts_with('}') {
            open.pop();
        }
        if code.ends_with('{') && !trimmed.starts_with('}') {
            let word = trimmed.split_whitespace().next().unwrap_or("{");
            open.push((at + code.len() - 1, word.trim_end_matches('{').to_string()));
        }
        at += line.len();
    }
    open.pop().filter(|(_, w)| !w.is_empty())
}

/// Lowers pest pairs of one file into AST nodes, collecting diagnostics.
struct Lower<'a> {
    sources: &'a SourceMap,
    file: FileId,
    diags: Vec<Diagnostic>,
}

type P<'i> = Pair<'i, Rule>;

impl Lower<'_> {
    fn span(&self, pair: &P) -> Span {
        let s = pair.as_span();
        self.sources.span(self.file, s.start(), s.end())
    }

    fn spanned_str(&self, pair: &P) -> Spanned<String> {
        Spanned::new(pair.as_str().to_string(), self.span(pair))
    }

    /// Children that carry meaning (punctuation and keywords dropped).
    fn children<'i>(&self, pair: P<'i>) -> impl Iterator<Item = P<'i>> {
        pair.into_inner().filter(|p| {
            !matches!(
                p.as_rule(),
                Rule::arrow
                    | Rule::open_brace
                    | Rule::close_brace
                    | Rule::open_paren
                    | Rule::close_paren
                    | Rule::open_bracket
                    | Rule::close_bracket
                    | Rule::comma
                    | Rule::semicolon
                    | Rule::kw_reason
                    | Rule::kw_rule
                    | Rule::kw_weak
                    | Rule::kw_when
                    | Rule::kw_provider
                    | Rule::kw_selection
                    | Rule::kw_and
                    | Rule::kw_or
                    | Rule::kw_else
                    | Rule::EOI
            )
        })
    }

    fn declaration(&mut self, pair: P) -> Option<Decl> {
        match pair.as_rule() {
            Rule::reason_decl => Some(Decl::Reason(self.reason(pair))),
            Rule::rule_decl => self.rule(pair).map(Decl::Rule),
            Rule::provider_block => self.provider_block(pair).map(Decl::Provider),
            Rule::selection_decl => Some(Decl::Selection(self.selection(pair))),
            _ => None,
        }
    }

    fn reason(&mut self, pair: P) -> ReasonDecl {
        let span = self.span(&pair);
        let mut it = self.children(pair);
        let name = self.spanned_str(&it.next().expect("reason name"));
        let behaviours = it
            .map(|b| {
                let span = self.span(&b);
                let mut parts = b.into_inner();
                let word = self.spanned_str(&parts.next().expect("behaviour word"));
                let arg = parts.next().map(|a| self.spanned_str(&a));
                Behaviour { word, arg, span }
            })
            .collect();
        ReasonDecl {
            name,
            behaviours,
            span,
        }
    }

    fn rule(&mut self, pair: P) -> Option<RuleDecl> {
        let span = self.span(&pair);
        let weak = pair
            .clone()
            .into_inner()
            .next()
            .is_some_and(|p| p.as_rule() == Rule::kw_weak);
        let mut it = self.children(pair);
        let id = self.spanned_str(&it.next().expect("rule id"));
        let condition = self.condition(it.next().expect("rule condition"));
        let reason = self.spanned_str(&it.next().expect("rule reason"));
        Some(RuleDecl {
            id,
            weak,
            condition: condition?,
            reason,
            span,
        })
    }

    fn provider_block(&mut self, pair: P) -> Option<ProviderBlock> {
        let span = self.span(&pair);
        let mut it = self.children(pair);
        let names = it.next().expect("provider names");
        let mut providers = Vec::new();
        let inner = names.into_inner().next().expect("provider name");
        match inner.as_rule() {
            Rule::ident => providers.push(self.spanned_str(&inner)),
            Rule::string => providers.extend(self.string(inner)),
            Rule::list => {
                for item in self.children(inner) {
                    match item.as_rule() {
                        Rule::string => providers.extend(self.string(item)),
                        _ => {
                            let sp = self.span(&item);
                            self.diags.push(
                                Diagnostic::new(Code::E009, sp, "a provider name must be a string")
                                    .label("not a string")
                                    .help("write provider names as `provider [\"bedrock\", \"amazon-bedrock\"] { … }`"),
                            );
                        }
                    }
                }
            }
            _ => unreachable!("grammar: provider_names"),
        }
        let rules: Vec<RuleDecl> = it.filter_map(|r| self.rule(r)).collect();
        Some(ProviderBlock {
            providers,
            rules,
            span,
        })
    }

    fn selection(&mut self, pair: P) -> SelectionDecl {
        let span = self.span(&pair);
        let mut it = self.children(pair);
        let source = self.spanned_str(&it.next().expect("selection source"));
        let target = self.selection_target(it.next().expect("selection target"));
        let otherwise = it.next().map(|t| self.selection_target(t));
        SelectionDecl {
            source,
            target,
            otherwise,
            span,
        }
    }

    fn selection_target(&mut self, pair: P) -> Spanned<SelectionTarget> {
        let span = self.span(&pair);
        let mut inner = pair.into_inner();
        let first = inner.next().expect("selection target keyword");
        let target = match first.as_rule() {
            Rule::kw_strict => SelectionTarget::Strict,
            Rule::kw_fallbacks => {
                SelectionTarget::Fallbacks(self.spanned_str(&inner.next().expect("fallback list")))
            }
            _ => unreachable!("grammar: selection_target"),
        };
        Spanned::new(target, span)
    }

    fn condition(&mut self, pair: P) -> Option<Condition> {
        let span = self.span(&pair);
        match pair.as_rule() {
            Rule::condition | Rule::conjunction => {
                let is_or = pair.as_rule() == Rule::condition;
                let parts: Vec<P> = self.children(pair).collect();
                let mut lowered = Vec::with_capacity(parts.len());
                let mut ok = true;
                for p in parts {
                    match self.condition(p) {
                        Some(c) => lowered.push(c),
                        None => ok = false,
                    }
                }
                if !ok {
                    return None;
                }
                if lowered.len() == 1 {
                    return lowered.pop();
                }
                let kind = if is_or {
                    CondKind::Or(lowered)
                } else {
                    CondKind::And(lowered)
                };
                Some(Condition { kind, span })
            }
            Rule::negation => {
                let mut nots = 0;
                let mut inner = None;
                for p in pair.into_inner() {
                    match p.as_rule() {
                        Rule::kw_not => nots += 1,
                        _ => inner = Some(p),
                    }
                }
                let mut cond = self.condition(inner.expect("negated condition"))?;
                // `not not x` is `x`: keep the parity only, so a long run of
                // `not`s cannot build a tree deep enough to exhaust the stack.
                for _ in 0..nots % 2 {
                    cond = Condition {
                        kind: CondKind::Not(Box::new(cond)),
                        span,
                    };
                }
                Some(cond)
            }
            Rule::group => {
                let inner = self.children(pair).next().expect("group condition");
                self.condition(inner)
            }
            Rule::predicate => self.predicate(pair).map(|p| Condition {
                kind: CondKind::Predicate(p),
                span,
            }),
            r => unreachable!("grammar: unexpected {r:?} in condition"),
        }
    }

    fn predicate(&mut self, pair: P) -> Option<Predicate> {
        let mut it = pair.into_inner();
        let field_pair = it.next().expect("predicate field");
        let op_pair = it.next().expect("predicate operator");
        let operand_pair = it.next();
        let field = self.field(field_pair);
        let op_span = self.span(&op_pair);
        let op = match op_pair.into_inner().next().expect("operator").as_rule() {
            Rule::op_eq => Op::Eq,
            Rule::op_ne => Op::Ne,
            Rule::op_in => Op::In,
            Rule::op_has => Op::Has,
            Rule::op_has_any => Op::HasAny,
            Rule::op_has_all => Op::HasAll,
            Rule::op_starts => Op::StartsWith,
            Rule::op_ends => Op::EndsWith,
            Rule::op_matches => Op::Matches,
            Rule::op_is_empty => Op::IsEmpty,
            r => unreachable!("grammar: operator {r:?}"),
        };
        let operand = match operand_pair {
            Some(p) => Some(self.operand(p)?),
            None => None,
        };
        Some(Predicate {
            field: field?,
            op: Spanned::new(op, op_span),
            operand,
        })
    }

    fn field(&mut self, pair: P) -> Option<Spanned<Field>> {
        let span = self.span(&pair);
        let inner = pair.into_inner().next().expect("field");
        let field = match inner.as_rule() {
            Rule::body_field => {
                Field::Body(inner.into_inner().map(|s| s.as_str().to_string()).collect())
            }
            Rule::ident => match inner.as_str() {
                "message" => Field::Message,
                "status" => Field::Status,
                "provider" => Field::Provider,
                "model" => Field::Model,
                "code" => Field::Code,
                "type" => Field::Type,
                "body" => Field::Body(Vec::new()),
                other => {
                    let mut d =
                        Diagnostic::new(Code::E009, span, format!("unknown field `{other}`"))
                            .label("not a field");
                    d = match did_you_mean(other, FIELDS.iter().copied()) {
                        Some(s) => d.help(format!("did you mean `{s}`?")),
                        None => d.help(
                            "fields are `message`, `status`, `provider`, `model`, `code`, `type` and `body.PATH`",
                        ),
                    };
                    self.diags.push(d);
                    return None;
                }
            },
            r => unreachable!("grammar: field {r:?}"),
        };
        Some(Spanned::new(field, span))
    }

    fn operand(&mut self, pair: P) -> Option<Spanned<Operand>> {
        let span = self.span(&pair);
        let inner = pair.into_inner().next().expect("operand");
        let value = match inner.as_rule() {
            Rule::string => Operand::Str(self.string(inner)?.node),
            Rule::int => Operand::Int(parse_int(inner.as_str())),
            Rule::range => {
                let (lo, hi) = self.range(inner);
                Operand::Range(lo, hi)
            }
            Rule::regex => {
                let mut parts = inner.into_inner();
                let body = parts.next().expect("regex body");
                let flags = parts.next().expect("regex flags");
                Operand::Regex {
                    pattern: unescape_slashes(body.as_str()),
                    flags: self.spanned_str(&flags),
                }
            }
            Rule::list => {
                let mut items = Vec::new();
                let mut ok = true;
                for item in self.children(inner) {
                    let sp = self.span(&item);
                    let v = match item.as_rule() {
                        Rule::string => match self.string(item) {
                            Some(s) => ListItem::Str(s.node),
                            None => {
                                ok = false;
                                continue;
                            }
                        },
                        Rule::int => ListItem::Int(parse_int(item.as_str())),
                        Rule::range => {
                            let (lo, hi) = self.range(item);
                            ListItem::Range(lo, hi)
                        }
                        r => unreachable!("grammar: list item {r:?}"),
                    };
                    items.push(Spanned::new(v, sp));
                }
                if !ok {
                    return None;
                }
                Operand::List(items)
            }
            r => unreachable!("grammar: operand {r:?}"),
        };
        Some(Spanned::new(value, span))
    }

    fn range(&self, pair: P) -> (u64, u64) {
        let mut parts = pair.into_inner();
        let lo = parse_int(parts.next().expect("range start").as_str());
        let hi = parse_int(parts.next().expect("range end").as_str());
        (lo, hi)
    }

    /// Decodes a string literal; a bad escape is reported (E008) and the
    /// string dropped.
    fn string(&mut self, pair: P) -> Option<Spanned<String>> {
        let span = self.span(&pair);
        let body = pair.into_inner().next().expect("string body");
        let base = body.as_span().start();
        let raw = body.as_str();
        let mut out = String::with_capacity(raw.len());
        let mut chars = raw.char_indices();
        let mut ok = true;
        while let Some((i, c)) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some((_, e)) = chars.next() else { break };
            match e {
                '"' => out.push('"'),
                '\\' => out.push('\\'),
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'u' => {
                    let rest = &raw[i + 2..];
                    let decoded = rest
                        .strip_prefix('{')
                        .and_then(|r| r.find('}').map(|end| &r[..end]))
                        .filter(|hex| (1..=6).contains(&hex.len()))
                        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                        .and_then(char::from_u32);
                    match decoded {
                        Some(ch) => {
                            out.push(ch);
                            let skip = rest.find('}').unwrap_or(0);
                            for _ in 0..=skip {
                                chars.next();
                            }
                        }
                        None => {
                            self.bad_escape(
                                base + i,
                                "\\u",
                                "write a code point as `\\u{1F600}` (1 to 6 hex digits)",
                            );
                            ok = false;
                        }
                    }
                }
                other => {
                    let esc = format!("\\{other}");
                    self.bad_escape(
                        base + i,
                        &esc,
                        "escapes are `\\\"`, `\\\\`, `\\n`, `\\t`, `\\r` and `\\u{…}`; for a backslash write `\\\\`",
                    );
                    ok = false;
                }
            }
        }
        ok.then(|| Spanned::new(out, span))
    }

    fn bad_escape(&mut self, offset: usize, esc: &str, help: &str) {
        let span = self.sources.span(self.file, offset, offset + esc.len());
        self.diags.push(
            Diagnostic::new(
                Code::E008,
                span,
                format!("unknown escape `{esc}` in a string"),
            )
            .label("not a valid escape")
            .help(help),
        );
    }
}

fn parse_int(s: &str) -> u64 {
    s.parse().unwrap_or(u64::MAX)
}

/// `\/` in a regex literal stands for `/`; every other escape is the regex
/// engine's business.
fn unescape_slashes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('/') => out.push('/'),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(text: &str) -> RuleFile {
        let (sources, ast, diags) = parse_str("t.rules", text);
        assert!(
            diags.is_empty(),
            "unexpected diagnostics:\n{}",
            crate::diag::render_all(&diags, &sources)
        );
        ast
    }

    fn first_error(text: &str) -> (SourceMap, Diagnostic) {
        let (sources, _, diags) = parse_str("t.rules", text);
        let d = diags.into_iter().next().expect("a diagnostic");
        (sources, d)
    }

    // Issue 46: `weak rule …` marks a default the model may overrule;
    // inside a provider block too; `weak` alone is not a declaration.
    #[test]
    fn weak_marks_a_rule_and_nothing_else() {
        let ast = parse_ok(
            "weak rule a.b when message has \"x\" => r\nrule a.c when status == 1 => r\n\
             provider p { weak rule d when message has \"y\" => r }\n",
        );
        let weak: Vec<(String, bool)> = ast
            .decls
            .iter()
            .flat_map(|d| match d {
                Decl::Rule(r) => vec![(r.id.node.clone(), r.weak)],
                Decl::Provider(b) => b
                    .rules
                    .iter()
                    .map(|r| (r.id.node.clone(), r.weak))
                    .collect(),
                _ => vec![],
            })
            .collect();
        assert_eq!(
            weak,
            [
                ("a.b".into(), true),
                ("a.c".into(), false),
                ("d".into(), true)
            ]
        );
        let (sources, d) = first_error("weak reason r { stop }\n");
        let text = crate::diag::render_all(std::slice::from_ref(&d), &sources);
        assert!(text.contains("`rule`"), "{text}");
    }

    // Issue 35: an unterminated regex is named as such, at its `/`.
    #[test]
    fn an_unterminated_regex_is_named_where_it_opens() {
        let (sources, d) = first_error("rule a.b\n  when message matches /abc\n  => billing\n");
        let text = crate::diag::render_all(std::slice::from_ref(&d), &sources);
        assert!(text.contains("unterminated regex"), "{text}");
        assert!(text.contains("t.rules:2:24"), "{text}");
        // A closed regex with an escaped `/` is fine.
        parse_ok(
            "reason billing { failover; }\nrule a.b when message matches /a\\/b/i => billing\n",
        );
    }

    // Issue 35: a block still open at the end of the file names its
    // construct and points back to its `{`.
    #[test]
    fn an_unclosed_block_points_back_to_where_it_opened() {
        let (sources, d) = first_error(
            "# a comment {\nprovider acme {\n  rule a.b when status == 402 => billing\n",
        );
        let text = crate::diag::render_all(std::slice::from_ref(&d), &sources);
        assert!(text.contains("unterminated `provider` block"), "{text}");
        assert!(text.contains("t.rules:2:15"), "{text}");
        assert!(text.contains("opened here is never closed"), "{text}");
        assert_eq!(
            unclosed_block("provider a {\n}\nprovider b {\n"),
            Some((26, "provider".into()))
        );
        assert_eq!(unclosed_block("provider a {\n  rule x\n}\n"), None);
    }

    #[test]
    fn parses_every_declaration_kind() {
        let ast = parse_ok(
            r#"
            # comment
            reason billing { failover; disable billing; }
            rule billing.credits when message has any ["insufficient credits",
                                                     "credit balance"] => billing
            provider openrouter {
              rule openrouter.key_limit when status == 403 and message matches /key\s+limit/i => billing
            }
            selection cron_payload => fallbacks payload else fallbacks configured
            selection user_override => strict
            "#,
        );
        assert_eq!(ast.decls.len(), 5);
        let Decl::Reason(r) = &ast.decls[0] else {
            panic!()
        };
        assert_eq!(r.name.node, "billing");
        assert_eq!(r.behaviours.len(), 2);
        assert_eq!(r.behaviours[1].arg.as_ref().unwrap().node, "billing");
        let Decl::Rule(rule) = &ast.decls[1] else {
            panic!()
        };
        assert_eq!(rule.id.node, "billing.credits");
        assert_eq!((rule.id.span.line, rule.id.span.col), (4, 18));
        let CondKind::Predicate(p) = &rule.condition.kind else {
            panic!()
        };
        assert_eq!(p.op.node, Op::HasAny);
        let Some(Spanned {
            node: Operand::List(items),
            ..
        }) = &p.operand
        else {
            panic!()
        };
        assert_eq!(items.len(), 2);
        let Decl::Provider(b) = &ast.decls[2] else {
            panic!()
        };
        assert_eq!(b.providers[0].node, "openrouter");
        assert_eq!(b.rules.len(), 1);
        let Decl::Selection(s) = &ast.decls[3] else {
            panic!()
        };
        assert!(matches!(&s.target.node, SelectionTarget::Fallbacks(l) if l.node == "payload"));
        assert!(s.otherwise.is_some());
    }

    #[test]
    fn precedence_not_and_or() {
        let ast =
            parse_ok(r#"rule a when not status == 1 and code == "x" or (type is empty) => r"#);
        let Decl::Rule(rule) = &ast.decls[0] else {
            panic!()
        };
        let CondKind::Or(alts) = &rule.condition.kind else {
            panic!("or at the top")
        };
        assert_eq!(alts.len(), 2);
        let CondKind::And(conj) = &alts[0].kind else {
            panic!("and below or")
        };
        assert!(matches!(conj[0].kind, CondKind::Not(_)));
        assert!(matches!(alts[1].kind, CondKind::Predicate(_)));
    }

    #[test]
    fn string_escapes_are_decoded() {
        let ast = parse_ok(r#"rule a when message == "q\"\\\n\u{20AC}" => r"#);
        let Decl::Rule(rule) = &ast.decls[0] else {
            panic!()
        };
        let CondKind::Predicate(p) = &rule.condition.kind else {
            panic!()
        };
        assert_eq!(
            p.operand.as_ref().unwrap().node,
            Operand::Str("q\"\\\n€".into())
        );
    }

    #[test]
    fn regex_slash_escape_and_flags() {
        let ast = parse_ok(r#"rule a when message matches /a\/b\d/ix => r"#);
        let Decl::Rule(rule) = &ast.decls[0] else {
            panic!()
        };
        let CondKind::Predicate(p) = &rule.condition.kind else {
            panic!()
        };
        let Operand::Regex { pattern, flags } = &p.operand.as_ref().unwrap().node else {
            panic!()
        };
        assert_eq!(pattern, r"a/b\d");
        assert_eq!(flags.node, "ix");
    }

    #[test]
    fn syntax_errors_speak_operator_words() {
        let (sources, _, diags) = parse_str("t.rules", "rule a.b when status == 429 rate_limit");
        assert_eq!(diags.len(), 1);
        let text = diags[0].render(&sources);
        assert!(text.contains("`=>`"), "{text}");
        assert!(!text.contains("EOI") && !text.contains("kw_"), "{text}");
    }

    #[test]
    fn long_runs_of_not_keep_only_their_parity() {
        let text = format!("rule a when {}status == 1 => r", "not ".repeat(100_001));
        let (_, ast, diags) = parse_str("t.rules", &text);
        assert!(diags.is_empty());
        let Decl::Rule(rule) = &ast.decls[0] else {
            panic!()
        };
        let CondKind::Not(inner) = &rule.condition.kind else {
            panic!("odd count: one `not`")
        };
        assert!(matches!(inner.kind, CondKind::Predicate(_)));
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let text = format!(
            "rule a when {}status == 1{} => r",
            "(".repeat(10_000),
            ")".repeat(10_000)
        );
        let (_, _, diags) = parse_str("t.rules", &text);
        assert_eq!(diags.len(), 1);
        assert_eq!(diags[0].code, Code::E015);
    }
}

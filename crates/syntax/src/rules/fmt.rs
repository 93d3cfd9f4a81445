//! `failover fmt`: one canonical layout for `.rules` files.
//!
//! The layout is the one the shipped rules were written in:
//!
//! ```text
//! reason billing { failover; disable billing }
//!
//! rule billing.credit_429_providers
//!   when status == 429
//!    and (provider has "xai" or provider has "moonshot")
//!    and not message has any [
//!          "too many requests", "rate limit"]
//!   => billing
//!
//! provider openrouter {
//!   rule billing.openrouter.key_limit
//!     when message matches /key\s+limit/
//!     => billing
//! }
//! ```
//!
//! - A rule is `rule ID`, then `when CONDITION` indented by two, then
//!   `=> REASON` indented by two; inside a `provider { … }` block every
//!   line is indented by two more.
//! - A condition stays on one line when it fits in [`MAX_WIDTH`] columns
//!   and holds no comment; otherwise its `or`s and then its `and`s start
//!   lines, right-aligned so every operand starts in the same column
//!   (parenthesised groups break the same way inside their parentheses).
//!   A `has any [...]` list that does not fit is filled, item by item,
//!   on lines under the predicate. Strings and regexes are never broken.
//! - A reason is one line `reason NAME { a; b }` unless it is too long or
//!   holds a comment: then one clause per line, each ending in `;`.
//! - One space between tokens, none inside `(…)` and `[…]` or before `,`
//!   and `;`; `has  any` is `has any`; trailing commas go; LF line ends,
//!   no trailing spaces, one newline at the end.
//! - Blank lines between declarations are kept, at most one; blank lines
//!   inside a declaration go.
//! - Every comment stays, with its text, before the same token (on its own
//!   line) or after the same token (at the end of that line).
//!
//! How: pest parses the file (comments are trivia to the grammar); the
//! leaves of its tree are the tokens, and the text between two tokens holds
//! only spaces and comments, which attach to the tokens around them. The
//! printer walks the tree, emitting every token in order. After formatting,
//! the result is parsed again and must give the same AST (spans aside) and
//! the same comments, or the formatter reports an internal error and the
//! file is left as it was.

use pest::iterators::Pair;
use pest::Parser as _;

use super::ast::*;
use super::{parse_str, syntax_error, too_deep, Rule, RulesParser, SourceMap, Span, MAX_NESTING};
use crate::diag::{Code, Diagnostic};

/// Lines are kept within this many columns where tokens allow (a long
/// regex or string is never broken).
pub const MAX_WIDTH: usize = 100;

/// Why a file could not be formatted.
#[derive(Debug)]
pub enum FmtError {
    /// The file does not parse: its diagnostics (E001, E015), with the
    /// source map to render them.
    Syntax(SourceMap, Vec<Diagnostic>),
    /// The formatter's output would not mean the same as its input: a bug
    /// in the formatter, reported instead of writing the file.
    Internal(String),
}

/// Formats one rules file. `name` is used in diagnostics only.
pub fn format_str(name: &str, text: &str) -> Result<String, FmtError> {
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let out = layout(name, text)?;
    verify(name, text, &out)?;
    Ok(out)
}

/// The file with every span set to the default: what "the same AST" means
/// for the formatter (and its tests).
pub fn without_spans(mut file: RuleFile) -> RuleFile {
    fn cond(c: &mut Condition) {
        c.span = Span::default();
        match &mut c.kind {
            CondKind::Or(cs) | CondKind::And(cs) => cs.iter_mut().for_each(cond),
            CondKind::Not(inner) => cond(inner),
            CondKind::Predicate(p) => {
                p.field.span = Span::default();
                p.op.span = Span::default();
                if let Some(o) = &mut p.operand {
                    o.span = Span::default();
                    match &mut o.node {
                        Operand::List(items) => {
                            items.iter_mut().for_each(|i| i.span = Span::default())
                        }
                        Operand::Regex { flags, .. } => flags.span = Span::default(),
                        _ => {}
                    }
                }
            }
        }
    }
    fn rule(r: &mut RuleDecl) {
        r.span = Span::default();
        r.id.span = Span::default();
        r.reason.span = Span::default();
        cond(&mut r.condition);
    }
    let target = |t: &mut Spanned<SelectionTarget>| {
        t.span = Span::default();
        if let SelectionTarget::Fallbacks(l) = &mut t.node {
            l.span = Span::default();
        }
    };
    for d in &mut file.decls {
        match d {
            Decl::Reason(r) => {
                r.span = Span::default();
                r.name.span = Span::default();
                for b in &mut r.behaviours {
                    b.span = Span::default();
                    b.word.span = Span::default();
                    if let Some(a) = &mut b.arg {
                        a.span = Span::default();
                    }
                }
            }
            Decl::Rule(r) => rule(r),
            Decl::Provider(p) => {
                p.span = Span::default();
                p.providers
                    .iter_mut()
                    .for_each(|n| n.span = Span::default());
                p.rules.iter_mut().for_each(rule);
            }
            Decl::Selection(s) => {
                s.span = Span::default();
                s.source.span = Span::default();
                target(&mut s.target);
                if let Some(o) = &mut s.otherwise {
                    target(o);
                }
            }
        }
    }
    file
}

/// The comments of a rules file, in order, without trailing spaces (what
/// the formatter promises to keep). `None` when the file does not parse.
pub fn comments(text: &str) -> Option<Vec<String>> {
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let toks = tokens(text).ok()?;
    let mut out = Vec::new();
    for t in &toks {
        out.extend(t.leading.iter().map(|c| c.text.to_string()));
        out.extend(t.trailing.map(str::to_string));
    }
    Some(out)
}

fn verify(name: &str, before: &str, after: &str) -> Result<(), FmtError> {
    let (_, a, da) = parse_str(name, before);
    let (sources, b, db) = parse_str(name, after);
    if db.iter().any(|d| matches!(d.code, Code::E001 | Code::E015)) {
        return Err(FmtError::Internal(format!(
            "the formatted text of `{name}` does not parse:\n{}",
            crate::diag::render_all(&db, &sources)
        )));
    }
    if da.len() != db.len() || without_spans(a) != without_spans(b) {
        return Err(FmtError::Internal(format!(
            "formatting `{name}` would change its meaning; the file is left as it was"
        )));
    }
    if comments(before) != comments(after) {
        return Err(FmtError::Internal(format!(
            "formatting `{name}` would lose or move a comment; the file is left as it was"
        )));
    }
    Ok(())
}

// ───────────────────────────── tokens ─────────────────────────────

#[derive(Clone, Copy, Debug)]
struct Comment<'i> {
    text: &'i str,
    /// A blank line separates it from what came before.
    blank_before: bool,
}

#[derive(Debug)]
struct Tok<'i> {
    rule: Rule,
    text: String,
    start: usize,
    /// Comments on their own lines before the token.
    leading: Vec<Comment<'i>>,
    /// A comment after the token on the same line.
    trailing: Option<&'i str>,
    /// A blank line separates it from the comment or token before it.
    blank_before: bool,
    /// A trailing `,` before `]` or `;` before `}`: not printed.
    drop: bool,
}

/// The leaves of pest's tree with the comments between them; the last
/// token is `EOI` (empty text), which holds the comments at the end.
fn tokens(text: &str) -> Result<Vec<Tok<'_>>, Box<pest::error::Error<Rule>>> {
    let root = RulesParser::parse(Rule::file, text)
        .map_err(Box::new)?
        .next()
        .expect("the file rule always yields one pair");
    let mut leaves = Vec::new();
    collect(root, &mut leaves);
    let mut toks: Vec<Tok> = Vec::with_capacity(leaves.len());
    let mut prev_end = 0;
    for (rule, start, end, shown) in leaves {
        let gap = &text[prev_end..start];
        let mut leading = Vec::new();
        let mut newlines = 0usize;
        let mut i = 0;
        let bytes = gap.as_bytes();
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => {
                    newlines += 1;
                    i += 1;
                }
                b'#' => {
                    let end = gap[i..].find('\n').map_or(gap.len(), |e| i + e);
                    let c = gap[i..end].trim_end();
                    match toks.last_mut() {
                        Some(prev) if newlines == 0 && leading.is_empty() => {
                            prev.trailing = Some(c)
                        }
                        _ => leading.push(Comment {
                            text: c,
                            blank_before: newlines >= 2,
                        }),
                    }
                    newlines = 0;
                    i = end;
                }
                _ => i += 1,
            }
        }
        toks.push(Tok {
            rule,
            text: shown,
            start,
            leading,
            trailing: None,
            blank_before: newlines >= 2,
            drop: false,
        });
        prev_end = end;
    }
    for i in 1..toks.len() {
        let (a, b) = (toks[i - 1].rule, toks[i].rule);
        if (a == Rule::comma && b == Rule::close_bracket)
            || (a == Rule::semicolon && b == Rule::close_brace)
        {
            toks[i - 1].drop = true;
        }
    }
    Ok(toks)
}

fn collect(pair: Pair<'_, Rule>, out: &mut Vec<(Rule, usize, usize, String)>) {
    let rule = pair.as_rule();
    let span = pair.as_span();
    let leaf = |out: &mut Vec<_>, shown: String| out.push((rule, span.start(), span.end(), shown));
    match rule {
        Rule::string | Rule::regex | Rule::range | Rule::field | Rule::rule_id | Rule::ident => {
            leaf(out, pair.as_str().to_string())
        }
        // `has  any`, `starts\twith`: one space.
        Rule::operator => leaf(
            out,
            pair.as_str()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => {
            let mut inner = pair.clone().into_inner().peekable();
            if inner.peek().is_none() {
                leaf(out, pair.as_str().to_string());
            } else {
                for p in inner {
                    collect(p, out);
                }
            }
        }
    }
}

/// Display columns: East Asian wide characters (CJK, Hangul, full-width
/// forms, emoji) take two.
fn width(s: &str) -> usize {
    s.chars()
        .map(|c| match c as u32 {
            0x1100..=0x115F
            | 0x2E80..=0xA4CF
            | 0xAC00..=0xD7A3
            | 0xF900..=0xFAFF
            | 0xFE30..=0xFE4F
            | 0xFF00..=0xFF60
            | 0xFFE0..=0xFFE6
            | 0x1F300..=0x1F64F
            | 0x1F900..=0x1F9FF
            | 0x20000..=0x3FFFD => 2,
            _ => 1,
        })
        .sum()
}

fn needs_space(prev: Option<Rule>, cur: Rule) -> bool {
    match prev {
        None => false,
        Some(Rule::open_paren | Rule::open_bracket) => false,
        Some(Rule::open_brace) if cur == Rule::close_brace => false,
        Some(_) => !matches!(
            cur,
            Rule::close_paren | Rule::close_bracket | Rule::comma | Rule::semicolon
        ),
    }
}

// ───────────────────────────── printer ─────────────────────────────

struct Printer<'t, 'i> {
    toks: &'t [Tok<'i>],
    next: usize,
    out: String,
    /// Characters on the current line (0: nothing written on it yet).
    col: usize,
    /// Where the next line starts when one is begun.
    indent: usize,
    /// The next token starts a new line.
    pending: bool,
    prev: Option<Rule>,
    /// Comments of dropped tokens, printed before the next token.
    carried: Vec<Comment<'i>>,
    /// The next token starts a declaration: blank lines before it (and
    /// before its comments) are kept.
    blank_comments: bool,
    blank_token: bool,
    comment_indent: Option<usize>,
}

type P<'i> = Pair<'i, Rule>;

impl<'i> Printer<'_, 'i> {
    fn line(&mut self, indent: usize) {
        self.pending = true;
        self.indent = indent;
    }

    fn break_line(&mut self) {
        if self.col > 0 {
            self.out.push('\n');
            self.col = 0;
        }
        self.pending = false;
    }

    /// A blank line, unless at the start of the file or of a block.
    fn blank_line(&mut self) {
        if !self.out.is_empty() && !self.out.ends_with("\n\n") && !self.out.ends_with("{\n") {
            self.out.push('\n');
        }
    }

    fn start_line(&mut self) {
        for _ in 0..self.indent {
            self.out.push(' ');
        }
        self.col = self.indent;
        self.prev = None;
    }

    /// Emits the next token (`force`: even a dropped one).
    fn emit(&mut self, force: bool) {
        let tok = &self.toks[self.next];
        self.next += 1;
        if tok.drop && !force {
            let mut carried = std::mem::take(&mut self.carried);
            carried.extend(tok.leading.iter().copied());
            if let Some(t) = tok.trailing {
                if self.pending || self.col == 0 || !carried.is_empty() {
                    carried.push(Comment {
                        text: t,
                        blank_before: false,
                    });
                } else {
                    self.out.push(' ');
                    self.out.push_str(t);
                    self.col += 1 + width(t);
                    self.pending = true;
                }
            }
            self.carried = carried;
            return;
        }
        let (blank_c, blank_t) = (self.blank_comments, self.blank_token);
        self.blank_comments = false;
        self.blank_token = false;
        let cind = self.comment_indent.take().unwrap_or(self.indent);
        let carried = std::mem::take(&mut self.carried);
        for c in carried.iter().chain(tok.leading.iter()) {
            self.break_line();
            if blank_c && c.blank_before {
                self.blank_line();
            }
            for _ in 0..cind {
                self.out.push(' ');
            }
            self.out.push_str(c.text);
            self.col = cind + width(c.text);
            self.pending = true;
        }
        if self.pending || self.col == 0 {
            self.break_line();
            if blank_t && tok.blank_before {
                self.blank_line();
            }
            if tok.text.is_empty() {
                return;
            }
            self.start_line();
        } else if needs_space(self.prev, tok.rule) {
            self.out.push(' ');
            self.col += 1;
        }
        self.out.push_str(&tok.text);
        self.col += width(&tok.text);
        self.prev = Some(tok.rule);
        if let Some(t) = tok.trailing {
            self.out.push(' ');
            self.out.push_str(t);
            self.col += 1 + width(t);
            self.pending = true;
        }
    }

    /// Emits the first token of a declaration at the line's indent, then
    /// sets the continuation indent for what follows.
    fn first(&mut self, indent: usize) {
        self.indent = indent;
        self.comment_indent = Some(indent);
        self.emit(false);
        self.indent = indent + 2;
    }

    /// A token the layout adds (the `;` after the last clause of a
    /// multi-line reason).
    fn synthetic(&mut self, text: &str, rule: Rule) {
        if self.pending || self.col == 0 {
            self.break_line();
            self.start_line();
        } else if needs_space(self.prev, rule) {
            self.out.push(' ');
            self.col += 1;
        }
        self.out.push_str(text);
        self.col += width(text);
        self.prev = Some(rule);
    }

    /// The tokens of a pair: `[first, end)` indices.
    fn range(&self, pair: &P) -> (usize, usize) {
        let (s, e) = (pair.as_span().start(), pair.as_span().end());
        let first = self.next + self.toks[self.next..].partition_point(|t| t.start < s);
        let end = first + self.toks[first..].partition_point(|t| t.start < e);
        (first, end)
    }

    /// Emits every token of a pair, laid out on one line (comments still
    /// break it where they stand).
    fn flat(&mut self, pair: &P) {
        let (_, end) = self.range(pair);
        while self.next < end {
            self.emit(false);
        }
    }

    fn flat_width(&self, pair: &P) -> usize {
        let (first, end) = self.range(pair);
        let mut w = 0;
        let mut prev = None;
        for t in self.toks[first..end].iter().filter(|t| !t.drop) {
            if needs_space(prev, t.rule) {
                w += 1;
            }
            w += width(&t.text);
            prev = Some(t.rule);
        }
        w
    }

    /// A comment between the first and the last token of a pair.
    fn has_inner_comment(&self, pair: &P) -> bool {
        let (first, end) = self.range(pair);
        (first..end).any(|i| {
            (i > first && !self.toks[i].leading.is_empty())
                || (i + 1 < end && self.toks[i].trailing.is_some())
        })
    }

    fn fits(&self, pair: &P, col: usize, suffix: usize) -> bool {
        !self.has_inner_comment(pair) && col + self.flat_width(pair) + suffix <= MAX_WIDTH
    }

    fn file(&mut self, root: P<'i>) {
        for pair in root.into_inner() {
            if pair.as_rule() == Rule::EOI {
                self.line(0);
                self.blank_comments = true;
                self.emit(false);
                continue;
            }
            self.declaration(pair, 0, true);
        }
        // Anything not reached by the walk (none expected) is printed flat
        // rather than lost; `verify` would then catch a wrong layout.
        while self.next < self.toks.len() {
            self.emit(false);
        }
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
    }

    fn declaration(&mut self, pair: P<'i>, indent: usize, blank: bool) {
        self.line(indent);
        self.blank_comments = true;
        self.blank_token = blank;
        match pair.as_rule() {
            Rule::reason_decl => self.reason(pair, indent),
            Rule::rule_decl => self.rule(pair, indent),
            Rule::provider_block => self.provider(pair, indent),
            _ => {
                self.first(indent);
                self.flat(&pair);
            }
        }
    }

    fn reason(&mut self, pair: P<'i>, indent: usize) {
        if self.fits(&pair, indent, 0) {
            self.first(indent);
            self.flat(&pair);
            return;
        }
        let kids: Vec<P> = pair.into_inner().collect();
        let n = kids.len();
        // kw_reason ident open_brace (behaviour (semicolon behaviour)* semicolon?)? close_brace
        self.first(indent);
        self.emit(false);
        self.emit(false);
        let mut i = 3;
        while i < n - 1 {
            let k = &kids[i];
            if k.as_rule() == Rule::behaviour {
                self.line(indent + 2);
                self.first(indent + 2);
                self.flat(k);
                if kids[i + 1].as_rule() == Rule::semicolon {
                    self.emit(true);
                    i += 1;
                } else {
                    self.synthetic(";", Rule::semicolon);
                }
            }
            i += 1;
        }
        self.line(indent);
        self.comment_indent = Some(indent + 2);
        self.emit(false);
    }

    fn rule(&mut self, pair: P<'i>, indent: usize) {
        let kids: Vec<P> = pair.into_inner().collect();
        // [kw_weak] kw_rule rule_id kw_when condition arrow ident
        let weak = usize::from(kids[0].as_rule() == Rule::kw_weak);
        self.first(indent);
        if weak == 1 {
            self.emit(false);
        }
        self.emit(false);
        self.line(indent + 2);
        self.emit(false);
        let c = indent + 7;
        self.indent = c;
        self.condition(kids[3 + weak].clone(), c, 0);
        self.line(indent + 2);
        self.emit(false);
        self.emit(false);
    }

    fn provider(&mut self, pair: P<'i>, indent: usize) {
        self.first(indent);
        let mut first = true;
        for k in pair.into_inner() {
            match k.as_rule() {
                Rule::rule_decl => {
                    self.declaration(k, indent + 2, !first);
                    first = false;
                }
                Rule::close_brace => {
                    self.line(indent);
                    self.blank_comments = true;
                    self.comment_indent = Some(indent + 2);
                    self.emit(false);
                }
                _ => self.flat(&k),
            }
        }
    }

    /// Lays out a condition whose first token goes in column `c`, with
    /// `suffix` columns (closing parentheses) to follow on its last line.
    fn condition(&mut self, pair: P<'i>, c: usize, suffix: usize) {
        if self.fits(&pair, c, suffix) {
            self.flat(&pair);
            return;
        }
        match pair.as_rule() {
            Rule::condition | Rule::conjunction => {
                let kids: Vec<P> = pair.into_inner().collect();
                let last = kids.len() - 1;
                for (i, k) in kids.into_iter().enumerate() {
                    match k.as_rule() {
                        Rule::kw_or | Rule::kw_and => {
                            self.line(c - width(k.as_str()) - 1);
                            self.emit(false);
                            self.indent = c;
                        }
                        _ => self.condition(k, c, if i == last { suffix } else { 0 }),
                    }
                }
            }
            Rule::negation => {
                let mut col = c;
                for k in pair.into_inner() {
                    if k.as_rule() == Rule::kw_not {
                        self.emit(false);
                        col += 4;
                    } else {
                        self.condition(k, col, suffix);
                    }
                }
            }
            Rule::group => {
                let kids: Vec<P> = pair.into_inner().collect();
                self.emit(false);
                self.indent = c + 1;
                self.condition(kids[1].clone(), c + 1, suffix + 1);
                self.indent = c;
                self.emit(false);
            }
            Rule::predicate => {
                let kids: Vec<P> = pair.clone().into_inner().collect();
                let list = kids.get(2).and_then(|o| {
                    let inner = o.clone().into_inner().next()?;
                    (inner.as_rule() == Rule::list).then_some(inner)
                });
                match list {
                    Some(list) if list.clone().into_inner().count() > 2 => {
                        self.flat(&kids[0]);
                        self.flat(&kids[1]);
                        self.list(list, c + 2, suffix);
                    }
                    _ => self.flat(&pair),
                }
            }
            _ => self.flat(&pair),
        }
    }

    /// A list too long for its line: `[`, then the items filled on lines
    /// starting in column `c`, `]` after the last.
    fn list(&mut self, pair: P<'i>, c: usize, suffix: usize) {
        let kids: Vec<P> = pair.into_inner().collect();
        let last = kids.len() - 1;
        self.emit(false);
        self.line(c);
        let mut first = true;
        for (i, k) in kids.iter().enumerate().skip(1) {
            match k.as_rule() {
                Rule::comma => self.emit(false),
                Rule::close_bracket => {
                    self.indent = c - 2;
                    self.emit(false)
                }
                _ => {
                    // The item, its comma (or the `]` and what follows).
                    let tail = if i + 2 >= last { 1 + suffix } else { 1 };
                    let w = self.flat_width(k) + tail;
                    if !first && !self.pending && self.col + 1 + w > MAX_WIDTH {
                        self.line(c);
                    }
                    first = false;
                    self.indent = c;
                    self.emit(false);
                }
            }
        }
    }
}

fn layout(name: &str, text: &str) -> Result<String, FmtError> {
    let syntax = |diag: Diagnostic, sources: SourceMap| FmtError::Syntax(sources, vec![diag]);
    if let Some(offset) = too_deep(text) {
        let mut sources = SourceMap::new();
        let id = sources.add(name, text);
        let span = sources.span(id, offset, offset + 1);
        let d = Diagnostic::new(
            Code::E015,
            span,
            format!("parentheses or brackets nested more than {MAX_NESTING} deep"),
        )
        .label("nesting limit reached here");
        return Err(syntax(d, sources));
    }
    let toks = match tokens(text) {
        Ok(t) => t,
        Err(e) => {
            let mut sources = SourceMap::new();
            let id = sources.add(name, text);
            let d = syntax_error(&sources, id, &e);
            return Err(syntax(d, sources));
        }
    };
    let root = RulesParser::parse(Rule::file, text)
        .map_err(|e| FmtError::Internal(e.to_string()))?
        .next()
        .expect("the file rule always yields one pair");
    let mut p = Printer {
        toks: &toks,
        next: 0,
        out: String::with_capacity(text.len() + text.len() / 8),
        col: 0,
        indent: 0,
        pending: false,
        prev: None,
        carried: Vec::new(),
        blank_comments: false,
        blank_token: false,
        comment_indent: None,
    };
    p.file(root);
    Ok(p.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(text: &str) -> String {
        match format_str("t.rules", text) {
            Ok(s) => s,
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn one_line_rule_gets_the_canonical_layout() {
        assert_eq!(
            fmt("rule a.b   when status==429=>rate_limit"),
            "rule a.b\n  when status == 429\n  => rate_limit\n"
        );
    }

    // docs/rules.md "Weak rules": the modifier leads the rule's first line.
    #[test]
    fn a_weak_rule_keeps_its_modifier_on_the_first_line() {
        let out = fmt("weak   rule a.b when message has \"x\"\n and status == 400 => r");
        assert_eq!(
            out,
            "weak rule a.b\n  when message has \"x\" and status == 400\n  => r\n"
        );
        assert_eq!(fmt(&out), out);
    }

    #[test]
    fn comments_stay_before_and_after_their_tokens() {
        let text = "# head\n\n\n# about a\nrule a when status == 1 # one\n  and code == \"x\" => r # end\n# tail\n";
        let out = fmt(text);
        assert_eq!(
            out,
            "# head\n\n# about a\nrule a\n  when status == 1 # one\n   and code == \"x\"\n  => r # end\n# tail\n"
        );
        assert_eq!(fmt(&out), out);
    }

    #[test]
    fn trailing_separators_go_and_their_comments_stay() {
        let out =
            fmt("reason r { failover; stop; # why\n}\nrule a when status in [1, 2, # two\n] => r");
        assert_eq!(
            out,
            "reason r {\n  failover;\n  stop; # why\n}\nrule a\n  when status in [\n         1, 2 # two\n       ]\n  => r\n"
        );
        assert_eq!(fmt(&out), out);
    }

    #[test]
    fn syntax_errors_are_reported_not_formatted() {
        let Err(FmtError::Syntax(_, diags)) = format_str("t.rules", "rule a when => r") else {
            panic!("a syntax error")
        };
        assert_eq!(diags[0].code, Code::E001);
    }
}

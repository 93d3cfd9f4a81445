//! `failover fmt` (issue 15 item 3): the canonical layout keeps every
//! comment, is idempotent, and parse(fmt(x)) is parse(x) up to spans, over
//! the shipped rules, re-spaced and commented variants of them, and
//! generated files. Bounded by default (32 cases per property);
//! `FAILOVER_DEEP=1` (CI sets it) runs 5,000, `FMT_CASES=N` runs N.

use std::path::Path;
use std::process::Command;

use failover::rules::DEFAULT_RULES;
use failover_syntax::rules::fmt::{comments, format_str, without_spans};
use failover_syntax::rules::parse_str;
use proptest::prelude::*;

/// `FMT_CASES`, else 5,000 in a deep run (`FAILOVER_DEEP=1`, as CI runs
/// the tests), else 32.
fn cases() -> u32 {
    let deep = std::env::var_os("FAILOVER_DEEP").is_some_and(|v| !v.is_empty() && v != "0");
    std::env::var("FMT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if deep { 5000 } else { 32 })
}

fn fmt(text: &str) -> String {
    match format_str("t.rules", text) {
        Ok(s) => s,
        Err(e) => panic!("fmt failed: {e:?}\n--- input\n{text}"),
    }
}

/// The three promises, for one input.
fn check_promises(text: &str) -> String {
    let out = fmt(text);
    let (_, before, d1) = parse_str("t.rules", text);
    let (_, after, d2) = parse_str("t.rules", &out);
    assert_eq!(d1.len(), d2.len(), "diagnostics changed\n{out}");
    assert_eq!(
        without_spans(before),
        without_spans(after),
        "AST changed\n{out}"
    );
    assert_eq!(comments(text), comments(&out), "comments changed\n{out}");
    assert_eq!(fmt(&out), out, "not idempotent");
    for line in out.lines() {
        assert_eq!(line, line.trim_end(), "trailing space in {line:?}");
    }
    out
}

#[test]
fn shipped_rules_keep_their_meaning_and_comments() {
    let mut n_comments = 0;
    for (name, text) in DEFAULT_RULES {
        check_promises(text);
        n_comments += comments(text).unwrap().len();
        let _ = name;
    }
    // The shipped files are commented throughout: the check above is
    // about real comments, not an empty list.
    assert!(n_comments > 300, "{n_comments} comments");
}

/// CI runs `failover fmt --check rules`; this is the same check in the
/// test suite, so a rules edit that is not formatted fails here too.
#[test]
fn shipped_rules_are_formatted() {
    let root = crate::repo_root();
    for (name, text) in DEFAULT_RULES {
        let on_disk = std::fs::read_to_string(root.join(name)).unwrap();
        assert_eq!(&on_disk, text);
        assert!(
            fmt(text) == *text,
            "{name} is not formatted: run `cargo run -- fmt rules`"
        );
    }
}

// ─────────────── re-spacing and commenting the shipped rules ───────────────

#[derive(Clone, Debug, PartialEq)]
enum Seg {
    Tok(String),
    Ws(String),
    Comment(String),
}

/// A rough lexer, enough to find the whitespace between tokens: strings,
/// regexes and comments are kept whole.
fn lex(text: &str) -> Vec<Seg> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let take = |i: &mut usize, f: &dyn Fn(char) -> bool| {
        let s = *i;
        while *i < chars.len() && f(chars[*i]) {
            *i += 1;
        }
        chars[s..*i].iter().collect::<String>()
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            out.push(Seg::Ws(take(&mut i, &|c| c.is_whitespace())));
        } else if c == '#' {
            out.push(Seg::Comment(take(&mut i, &|c| c != '\n')));
        } else if c == '"' || c == '/' {
            let s = i;
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            if c == '/' {
                while i < chars.len() && chars[i].is_ascii_alphabetic() {
                    i += 1;
                }
            }
            out.push(Seg::Tok(chars[s..i.min(chars.len())].iter().collect()));
        } else if "[](){},;".contains(c) {
            out.push(Seg::Tok(c.to_string()));
            i += 1;
        } else {
            out.push(Seg::Tok(take(&mut i, &|c| {
                !c.is_whitespace() && !"[](){},;#\"".contains(c)
            })));
        }
    }
    out
}

/// Whitespace inside an operator (`has any`): no comment may go there.
fn inside_operator(a: &Seg, b: &Seg) -> bool {
    matches!((a, b), (Seg::Tok(a), Seg::Tok(b))
        if matches!((a.as_str(), b.as_str()),
            ("has", "any" | "all") | ("starts" | "ends", "with") | ("is", "empty")))
}

fn shipped(i: usize) -> &'static str {
    DEFAULT_RULES[i % DEFAULT_RULES.len()].1
}

fn respaced(file: usize, choices: &[u8]) -> String {
    const WS: [&str; 6] = [" ", "  ", "\n", "\n      ", "\t", " \r\n  "];
    let segs = lex(shipped(file));
    let mut out = String::new();
    let mut k = 0;
    for (i, s) in segs.iter().enumerate() {
        match s {
            Seg::Ws(w)
                if i > 0
                    && matches!(segs[i - 1], Seg::Tok(_))
                    && matches!(segs.get(i + 1), Some(Seg::Tok(_)))
                    && w.matches('\n').count() < 2 =>
            {
                k += 1;
                out.push_str(WS[choices[k % choices.len()] as usize % WS.len()]);
            }
            Seg::Tok(t) | Seg::Ws(t) | Seg::Comment(t) => out.push_str(t),
        }
    }
    out
}

fn commented(file: usize, sites: &[usize]) -> (String, usize) {
    let segs = lex(shipped(file));
    let mut out = String::new();
    let mut added = 0;
    for (i, s) in segs.iter().enumerate() {
        match s {
            Seg::Ws(w)
                if i > 0
                    && matches!(segs[i - 1], Seg::Tok(_))
                    && matches!(segs.get(i + 1), Some(Seg::Tok(_)))
                    && !inside_operator(&segs[i - 1], &segs[i + 1])
                    && sites.contains(&(i % 97)) =>
            {
                added += 1;
                let own_line = i % 2 == 0;
                out.push_str(if own_line { "\n" } else { " " });
                out.push_str(&format!("# inserted {added}\n"));
                out.push_str(w);
            }
            Seg::Tok(t) | Seg::Ws(t) | Seg::Comment(t) => out.push_str(t),
        }
    }
    (out, added)
}

// ─────────────────────────── generated files ───────────────────────────

struct Gen {
    seed: u64,
    toks: Vec<(String, bool)>,
}

impl Gen {
    fn next(&mut self) -> u64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn t(&mut self, s: &str) {
        self.toks.push((s.to_string(), true));
    }
    fn string(&mut self) -> String {
        let s = self.pick(&[
            "quota",
            "rate limit",
            "a\\\"b",
            "back\\\\slash",
            "\\u{20AC} €",
            "余额不足",
            "an error message long enough to need a line of its own when the list is filled",
            "",
            "tab\\tnew\\nline",
        ]);
        format!("\"{s}\"")
    }
    fn predicate(&mut self) {
        let field = self.pick(&[
            "message",
            "status",
            "provider",
            "model",
            "code",
            "type",
            "body",
            "body.error.code",
            "body.errors.0.reason",
        ]);
        self.t(field);
        let op = self.pick(&[
            "==",
            "!=",
            "in",
            "has",
            "has any",
            "has all",
            "starts with",
            "ends with",
            "matches",
            "is empty",
        ]);
        if let Some((a, b)) = op.split_once(' ') {
            let ws = self.pick(&[" ", "  ", "\n  ", "\t"]);
            // One token: no comment may go inside an operator.
            self.t(&format!("{a}{ws}{b}"));
        } else {
            self.t(op);
        }
        match op {
            "is empty" => {}
            "matches" => {
                let r = self.pick(&["/x+/", "/a\\/b\\d+/i", "/[\"#]/", "/ spaced  out /s"]);
                self.t(r);
            }
            _ => match self.below(5) {
                0 => {
                    let n = self.below(1000);
                    self.t(&n.to_string())
                }
                1 => {
                    let (a, b) = (self.below(600), self.below(600));
                    self.t(&format!("{a}..{b}"))
                }
                2 | 3 => {
                    self.t("[");
                    let long = self.below(3) == 0;
                    let n = self.below(if long { 30 } else { 4 });
                    for i in 0..n {
                        match self.below(3) {
                            0 => {
                                let n = self.below(600);
                                self.t(&n.to_string())
                            }
                            _ => {
                                let s = self.string();
                                self.t(&s)
                            }
                        }
                        if i + 1 < n || self.below(3) == 0 {
                            self.t(",");
                        }
                    }
                    self.t("]");
                }
                _ => {
                    let s = self.string();
                    self.t(&s)
                }
            },
        }
    }
    fn negation(&mut self, depth: u32) {
        for _ in 0..self.below(3).saturating_sub(1) {
            self.t("not");
        }
        if depth > 0 && self.below(3) == 0 {
            self.t("(");
            self.condition(depth - 1);
            self.t(")");
        } else {
            self.predicate();
        }
    }
    fn condition(&mut self, depth: u32) {
        let ors = 1 + self.below(3);
        for i in 0..ors {
            if i > 0 {
                self.t("or");
            }
            let ands = 1 + self.below(3);
            for j in 0..ands {
                if j > 0 {
                    self.t("and");
                }
                self.negation(depth);
            }
        }
    }
    fn rule(&mut self, k: usize) {
        self.t("rule");
        let id = format!(
            "{}.r{k}",
            self.pick(&["billing", "timeout", "a.b-c", "x.402_window"])
        );
        self.t(&id);
        self.t("when");
        self.condition(3);
        self.t("=>");
        let r = self.pick(&["billing", "rate_limit", "format"]);
        self.t(r);
    }
    fn file(&mut self) -> String {
        let n = self.below(7);
        for k in 0..n as usize {
            match self.below(6) {
                0 => {
                    self.t("reason");
                    let name = format!("r{k}");
                    self.t(&name);
                    self.t("{");
                    let n = self.below(5);
                    for i in 0..n {
                        let w =
                            self.pick(&["failover", "cooldown", "disable", "scope", "rotations"]);
                        self.t(w);
                        if self.below(2) == 0 {
                            let a = self.pick(&["billing", "model", "rate_limited"]);
                            self.t(a);
                        }
                        if i + 1 < n || self.below(2) == 0 {
                            self.t(";");
                        }
                    }
                    self.t("}");
                }
                1 => {
                    self.t("provider");
                    match self.below(3) {
                        0 => self.t("openrouter"),
                        1 => self.t("\"z.ai\""),
                        _ => {
                            self.t("[");
                            self.t("\"a\"");
                            self.t(",");
                            self.t("\"b\"");
                            self.t("]");
                        }
                    }
                    self.t("{");
                    let n = self.below(3);
                    for j in 0..n {
                        self.rule(k * 10 + j as usize);
                    }
                    self.t("}");
                }
                2 => {
                    self.t("selection");
                    let s = format!("s{k}");
                    self.t(&s);
                    self.t("=>");
                    self.t("fallbacks");
                    self.t("configured");
                    if self.below(2) == 0 {
                        self.t("else");
                        self.t("strict");
                    }
                }
                _ => self.rule(k),
            }
        }
        let mut out = String::new();
        for (i, (tok, _)) in std::mem::take(&mut self.toks).into_iter().enumerate() {
            let trivia = self.pick(&[
                " ",
                " ",
                " ",
                "\n  ",
                "\n\n",
                "\n\n\n",
                " # trailing\n",
                "\n# own line\n\n   ",
                "\t",
            ]);
            if i > 0 || self.below(2) == 0 {
                out.push_str(trivia);
            }
            out.push_str(&tok);
        }
        if self.below(2) == 0 {
            out.push_str("\n# the end");
        }
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), .. ProptestConfig::default() })]

    /// Whitespace is not layout: the shipped rules re-spaced at random
    /// (blank lines and comments left alone) format to the same text.
    #[test]
    fn respaced_shipped_rules_format_the_same(
        file in 0..DEFAULT_RULES.len(),
        choices in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let canonical = fmt(shipped(file));
        let messy = respaced(file, &choices);
        let out = check_promises(&messy);
        prop_assert_eq!(out, canonical);
    }

    /// Comments inserted anywhere between tokens all survive, in order.
    #[test]
    fn inserted_comments_survive(
        file in 0..DEFAULT_RULES.len(),
        sites in prop::collection::vec(0usize..97, 1..20),
    ) {
        let (text, added) = commented(file, &sites);
        let out = check_promises(&text);
        prop_assert_eq!(
            comments(&out).unwrap().len(),
            comments(shipped(file)).unwrap().len() + added
        );
    }

    /// Generated files: every declaration kind, nested groups, long lists,
    /// escapes, multi-line operators, comments and blank lines everywhere.
    #[test]
    fn generated_files_keep_their_meaning(seed in 1u64..u64::MAX) {
        let text = Gen { seed, toks: Vec::new() }.file();
        let (_, _, diags) = parse_str("g.rules", &text);
        prop_assert!(diags.is_empty(), "generator wrote invalid text:\n{}", text);
        check_promises(&text);
    }
}

const MESSY: &str = r#"# A messy operator file.
reason   acme_quota{failover;cooldown ;scope   model;}


# Two rules on one line, odd spacing, a trailing comma.
rule acme.quota when message has   any ["quota exceeded","out of quota", "quota limit reached for this month","please upgrade",] and status in [429,402] => acme_quota rule acme.key
  when (provider=="acme" or provider  has "acme-eu") and not message matches /rate|\bburst\b/i # not a burst
  => auth
provider [ "acme", "acme-eu" ] {


  # Scoped.
  rule acme.busy when message starts
     with "busy" => overloaded   }
selection   acme_cron=>fallbacks payload else   strict
# end
"#;

#[test]
fn messy_sample_snapshot() {
    let out = check_promises(MESSY);
    insta::assert_snapshot!(out);
}

// ─────────────────────────────── the CLI ───────────────────────────────

fn failover(args: &[&str], dir: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_check_then_write_then_check_clean() {
    let dir = std::env::temp_dir().join(format!("failover-fmt-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::create_dir_all(dir.join(".hidden")).unwrap();
    let messy = "rule a.b when status==429=>rate_limit # keep\n";
    std::fs::write(dir.join("sub/a.rules"), messy).unwrap();
    std::fs::write(dir.join(".hidden/skip.rules"), messy).unwrap();
    std::fs::write(dir.join("bad.rules"), "rule a when => r\n").unwrap();
    std::fs::write(dir.join("ok.rules"), "selection s => strict\n").unwrap();

    // --check: the diff, the syntax error with file:line:col, exit 1, nothing written.
    let (code, out, err) = failover(&["fmt", "--check"], &dir);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("would reformat ./sub/a.rules"), "{out}");
    assert!(
        out.contains("-rule a.b when status==429=>rate_limit # keep"),
        "{out}"
    );
    assert!(out.contains("+  when status == 429"), "{out}");
    assert!(
        !out.contains("ok.rules") && !out.contains("skip.rules"),
        "{out}"
    );
    assert!(
        err.contains("E001") && err.contains("bad.rules:1:13"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("sub/a.rules")).unwrap(),
        messy
    );

    // Write: the file is rewritten; the bad one untouched; exit 1 for it.
    let (code, out, _) = failover(&["fmt", "sub", "ok.rules"], &dir);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, "formatted sub/a.rules\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("sub/a.rules")).unwrap(),
        "rule a.b\n  when status == 429\n  => rate_limit # keep\n"
    );
    let (code, _, _) = failover(&["fmt", "--check", "sub"], &dir);
    assert_eq!(code, 0);
    assert_eq!(
        std::fs::read_to_string(dir.join("bad.rules")).unwrap(),
        "rule a when => r\n"
    );
    // A missing path is a usage error.
    let (code, _, err) = failover(&["fmt", "nope"], &dir);
    assert_eq!(code, 2, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cli_formats_stdin_to_stdout() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["fmt", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"reason r {failover}")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "reason r { failover }\n"
    );
}

// Issue 48: at the repository root `fmt --check` passes — every shipped
// `.rules` file is canonical, and the diagnostics fixtures (broken on
// purpose) are left out by the root's `.failoverignore` — while a fixture
// named on the command line is still read (and refused).
#[test]
fn i48_fmt_check_passes_at_the_repository_root() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_failover"))
            .current_dir(crate::repo_root())
            .args(["fmt", "--check"])
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(&["tests/diagnostics/e013_empty_range.rules"]);
    assert_ne!(o.status.code(), Some(0), "a named file is never skipped");
}

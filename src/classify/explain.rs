//! A readable account of one classification: `failover classify
//! --explain` and the failing golden cases print it.

use super::{Classification, Engine, Explanation};

/// The comment block written just above a rule (its meaning, SPEC ids and
/// sources), without the `#`s; blank lines end it.
fn rule_comment(file: &crate::syntax::SourceFile, rule_line: u32) -> Vec<String> {
    let mut lines = Vec::new();
    let mut n = rule_line;
    while n > 1 {
        n -= 1;
        let text = file.line_text(n).trim();
        match text.strip_prefix('#') {
            // A comment line that may hold a pasted key is not echoed
            // (issue 16: one redaction for every quoted source line).
            Some(_) if crate::redact::may_hold_secret(text) => {
                lines.push("# (line not shown: it may hold a secret)".into())
            }
            Some(c) if !text.starts_with("# ──") => lines.push(format!("# {}", c.trim())),
            _ => break,
        }
    }
    lines.reverse();
    lines
}

/// A readable account of one classification.
pub fn render_explanation(engine: &Engine, c: &Classification, ex: &Explanation) -> String {
    use std::fmt::Write as _;
    let rs = engine.ruleset();
    let sources = engine.sources();
    let mut out = String::new();
    let _ = writeln!(out, "reason:   {} (failover: {})", c.reason, c.failover);
    let _ = writeln!(out, "decided by: {}", c.decided_by.as_str());
    if let Some(over) = c.overruled {
        let _ = writeln!(out, "overruled: the status rule {over}");
    }
    match c.rule_index {
        Some(i) => {
            let r = &rs.rules[i as usize];
            let _ = writeln!(out, "rule:     {} at {}", r.id, sources.location(r.span));
            for line in rule_comment(sources.get(r.span.file), r.span.line) {
                let _ = writeln!(out, "          {line}");
            }
        }
        None if c.decided_by == super::Decider::Model => {
            let _ = writeln!(out, "rule:     no text rule (the model decided)");
        }
        None => {
            let _ = writeln!(
                out,
                "rule:     none matched (the engine's `{}` label)",
                c.reason
            );
        }
    }
    let _ = writeln!(out, "behaviour: {}", c.behaviour);
    let _ = writeln!(
        out,
        "inputs:   status={} code={} type={}",
        ex.status.map_or("-".into(), |s| s.to_string()),
        ex.code.as_deref().unwrap_or("-"),
        ex.error_type.as_deref().unwrap_or("-")
    );
    let _ = writeln!(
        out,
        "message:  {:?}",
        crate::diag::preview(&ex.message, 200)
    );
    let atoms: Vec<String> = ex.atoms_hit.iter().map(|a| format!("{a:?}")).collect();
    let _ = writeln!(
        out,
        "atoms hit: {}",
        if atoms.is_empty() {
            "none".into()
        } else {
            atoms.join(", ")
        }
    );
    let _ = writeln!(out, "rules verified ({}):", ex.verified.len());
    for (idx, holds) in &ex.verified {
        let r = &rs.rules[*idx as usize];
        let _ = writeln!(
            out,
            "  {} {:<44} {}",
            if *holds { "✓" } else { "✗" },
            r.id,
            sources.location(r.span)
        );
    }
    if let Some(m) = &ex.model {
        let top = m.top.first().map_or("", |t| t.0.as_str());
        let verdict = match c.decided_by {
            super::Decider::Model => match c.overruled {
                Some(rule) => format!("it overruled `{rule}`"),
                None => "it decided where no rule matched".to_string(),
            },
            _ if top == c.reason => "it agrees: the rule stands".to_string(),
            _ => "below its threshold: the rules' verdict stands".to_string(),
        };
        let why = match c.decided_by {
            super::Decider::WeakRule => "a weak rule decided",
            super::Decider::Model
                if c.overruled.is_some_and(|r| {
                    rs.rules.iter().find(|x| x.id == r).is_some_and(|x| x.weak)
                }) =>
            {
                "a weak rule matched"
            }
            _ => "no text rule decided",
        };
        let _ = writeln!(
            out,
            "model ({why}; `{top}` needs {:.2} here, {}; {verdict}):",
            m.threshold, m.confidence
        );
        for (reason, p) in &m.top {
            let _ = writeln!(out, "  {p:>6.3}  {reason}");
        }
        let _ = writeln!(out, "  features that weighed most for `{top}`:");
        for f in &m.features {
            let _ = writeln!(out, "    {:>+7.3}  {}", f.weight, f.feature);
        }
    } else if c.decided_by == super::Decider::Rule && engine.model().is_some() {
        let _ = writeln!(out, "model:    not consulted (a text rule decided)");
    }
    out
}

//! A realistic classification corpus: every golden case of the default
//! ruleset, rewritten into variants of 100–500 bytes with the prefixes,
//! request ids and advice that real gateways and providers wrap around the
//! core text (JSON error bodies keep their own length and only get a
//! prefix). Deterministic (a fixed-seed xorshift), so runs compare.

#![allow(dead_code)]

use failover::golden::parse_cases;
use failover::ProviderError;

/// One error with owned fields.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    pub(crate) provider: Option<String>,
    pub(crate) status: Option<u16>,
    pub(crate) code: Option<String>,
    pub(crate) error_type: Option<String>,
    pub(crate) message: String,
}

impl Sample {
    pub(crate) fn as_error(&self) -> ProviderError<'_> {
        ProviderError {
            provider: self.provider.as_deref(),
            status: self.status,
            code: self.code.as_deref(),
            error_type: self.error_type.as_deref(),
            message: Some(&self.message),
            ..Default::default()
        }
    }

    /// One JSONL input line of the `classify` contract.
    pub(crate) fn to_jsonl(&self) -> String {
        let mut obj = serde_json::Map::new();
        if let Some(p) = &self.provider {
            obj.insert("provider".into(), p.clone().into());
        }
        if let Some(s) = self.status {
            obj.insert("status".into(), s.into());
        }
        if let Some(c) = &self.code {
            obj.insert("code".into(), c.clone().into());
        }
        if let Some(t) = &self.error_type {
            obj.insert("type".into(), t.clone().into());
        }
        obj.insert("message".into(), self.message.clone().into());
        serde_json::Value::Object(obj).to_string()
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PREFIXES: &[&str] = &[
    "",
    "",
    "Error: ",
    "API error: ",
    "request failed: ",
    "upstream provider error: ",
    "LLM call failed - ",
];
const SUFFIXES: &[&str] = &[
    " Please try again later.",
    " If the problem persists, contact support.",
    " See https://docs.example.com/errors for more information.",
    " (request id: req_",
    " [trace_id=",
    " at attempt 2 of 3.",
    " Model: gpt-4o-2024-08-06.",
];

/// The golden cases of the default ruleset (`rules/**/*.cases.yaml` at
/// the repository's root), as (path, text) in path order.
fn default_cases() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    failover::rules::files_with_suffix(&root.join("rules"), ".cases.yaml")
        .expect("the default rules' directory")
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The golden-case messages of the default ruleset (bodies as JSON text).
pub(crate) fn golden_samples() -> Vec<Sample> {
    let mut out = Vec::new();
    for (name, text) in default_cases() {
        for case in parse_cases(&name, &text)
            .expect("default cases parse")
            .cases
        {
            let message = match (&case.message, &case.body) {
                (Some(m), _) => m.clone(),
                (None, Some(serde_json::Value::String(s))) => s.clone(),
                (None, Some(b)) => b.to_string(),
                (None, None) => String::new(),
            };
            out.push(Sample {
                provider: case.provider.clone(),
                status: case.status,
                code: case.code.clone(),
                error_type: case.error_type.clone(),
                message,
            });
        }
    }
    out
}

/// `n` variants of the golden samples, each message 100–500 bytes.
pub(crate) fn corpus(n: usize, seed: u64) -> Vec<Sample> {
    let base = golden_samples();
    let mut rng = Rng(seed | 1);
    (0..n)
        .map(|i| {
            let mut s = base[i % base.len()].clone();
            let target = 100 + rng.below(401);
            let mut msg = String::from(PREFIXES[rng.below(PREFIXES.len())]);
            msg.push_str(&s.message);
            // A provider's JSON error body arrives as it was sent (at most
            // behind a prefix); padding it would turn it into plain text.
            let json =
                s.message.trim_start().starts_with('{') && s.message.trim_end().ends_with('}');
            while !json && msg.len() < target {
                let suffix = SUFFIXES[rng.below(SUFFIXES.len())];
                msg.push_str(suffix);
                if suffix.ends_with('_') || suffix.ends_with('=') {
                    msg.push_str(&format!("{:016x}]", rng.next()));
                }
            }
            if msg.len() > 500 && s.message.len() < 500 {
                let mut end = 500;
                while !msg.is_char_boundary(end) {
                    end -= 1;
                }
                msg.truncate(end);
            }
            s.message = msg;
            s
        })
        .collect()
}

/// `n` generated operator rules, the kinds operators add: provider texts,
/// provider+status pairs, regexes around a fixed word, vendor codes.
pub(crate) fn operator_rules(n: usize) -> String {
    let mut out = String::with_capacity(n * 90);
    for i in 0..n {
        let rule = match i % 4 {
            0 => format!("rule ops.gen.r{i} when message has \"vendor{i} quota exhausted\" => rate_limit\n"),
            1 => format!("rule ops.gen.r{i} when provider == \"vendor{i}\" and status == 503 => overloaded\n"),
            2 => format!("rule ops.gen.r{i} when message matches /acme{i}[- ]backend (busy|down)/ => timeout\n"),
            _ => format!("rule ops.gen.r{i} when code == \"VENDOR_{i}_LIMIT\" => rate_limit\n"),
        };
        out.push_str(&rule);
    }
    out
}

use crate::diag::Severity;
use std::time::Duration;

use super::read::quotable;
use super::*;
use crate::auth::{CooldownPolicy, CredentialKind};
use crate::compile::reasons::RotationBudget;
use crate::model_ref::ModelRef;
use crate::redact::{may_hold_secret, scrub_quoted};

/// Nesting past the limit is refused before the YAML parser sees it
/// (that parser takes quadratic time on deep input), with line:col.
#[test]
fn deep_nesting_is_refused_up_front() {
    let text = format!("note: don't\nagents: {}", "[".repeat(300_000));
    let err = GatewayConfig::parse(&text, Format::Yaml, "deep.yaml").unwrap_err();
    assert!(
        err.to_string().contains("nested more than 64 deep"),
        "{err}"
    );
    assert!(err.to_string().contains("deep.yaml:2:"), "{err}");
}

fn read(text: &str) -> LoadedConfig {
    GatewayConfig::parse(text, Format::Yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn problems(text: &str, format: Format) -> Vec<ConfigProblem> {
    match GatewayConfig::parse(text, format, "t") {
        Ok(c) => c.warnings,
        Err(e) => e.problems,
    }
}

/// (severity, path, line, column, message) for compact assertions.
fn brief(p: &ConfigProblem) -> (Severity, &str, Option<usize>, Option<usize>, &str) {
    (
        p.severity(),
        p.path.as_str(),
        p.line,
        p.column,
        p.message.as_str(),
    )
}

const FULL: &str = r#"
agents:
  defaults:
    model:
      primary: anthropic/claude-opus-4-6
      fallbacks:
        - openai/gpt-5.2
        - openrouter/meta-llama/llama-3-70b
        - ollama/qwen3.5:27b
    imageModel: { primary: openai/gpt-image-1, fallbacks: [google/imagen-4] }
  list:
    - id: coder
      model: anthropic/claude-sonnet-4-5
    - id: researcher
      model: { primary: google/gemini-3-pro, fallbacks: [openai/gpt-5.2] }
auth:
  profiles:
    "anthropic:me@example.com": { provider: anthropic, mode: oauth, email: me@example.com }
    "openai:default": { provider: openai, type: api_key }
    "amazon-bedrock:prod": { provider: amazon-bedrock, mode: aws }
  order:
    OpenAI: ["openai:default"]
    anthropic: []
  cooldowns:
    billingBackoffHours: 2.5
    billingBackoffHoursByProvider: { openrouter: 1 }
    overloadedProfileRotations: 3
    overloadedBackoffMs: 250
"#;

// R15: every key is read into its typed place.
#[test]
fn r15_reads_every_key() {
    let c = read(FULL);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let c = c.config;
    let a = &c.agents;
    assert_eq!(
        a.model.primary.as_ref().map(ModelRef::as_str),
        Some("anthropic/claude-opus-4-6")
    );
    let fallbacks: Vec<&str> = a
        .model
        .fallbacks
        .iter()
        .flatten()
        .map(ModelRef::as_str)
        .collect();
    assert_eq!(
        fallbacks,
        [
            "openai/gpt-5.2",
            "openrouter/meta-llama/llama-3-70b",
            "ollama/qwen3.5:27b"
        ]
    );
    assert_eq!(a.image_model.fallbacks.as_ref().map(Vec::len), Some(1));
    assert_eq!(a.list.len(), 2);
    let coder = a.agent("coder").unwrap().model.as_ref().unwrap();
    assert_eq!(coder.fallbacks, None, "a string model has no fallbacks key");
    let researcher = a.agent("researcher").unwrap().model.as_ref().unwrap();
    assert_eq!(researcher.fallbacks.as_ref().map(Vec::len), Some(1));
    let me = c.auth.profile("anthropic:me@example.com").unwrap();
    assert_eq!(me.mode, Some(CredentialKind::OAuth));
    assert_eq!(me.email.as_deref(), Some("me@example.com"));
    assert_eq!(
        c.auth.profile("openai:default").unwrap().mode,
        Some(CredentialKind::ApiKey)
    );
    assert_eq!(
        c.auth.profile("amazon-bedrock:prod").unwrap().mode,
        Some(CredentialKind::Aws)
    );
    assert_eq!(c.auth.order["openai"], ["openai:default"]);
    assert_eq!(c.auth.order["anthropic"], Vec::<String>::new());
    let cd = &c.auth.cooldowns;
    let hours = |h: u64| Duration::from_secs(h * 3600);
    assert_eq!(cd.billing_backoff(), Duration::from_secs(9000));
    assert_eq!(cd.billing_backoff_for("openrouter"), hours(1));
    assert_eq!(cd.rotations(RotationBudget::Overloaded), 3);
    assert_eq!(
        cd.rotation_backoff(RotationBudget::Overloaded),
        Duration::from_millis(250)
    );
    // Unset keys keep their defaults.
    assert_eq!(cd.billing_max(), hours(24));
    assert_eq!(cd.rotations(RotationBudget::RateLimited), 1);
}

// R8.4, R8.5, R16.4: the documented cooldown defaults.
#[test]
fn r8_4_cooldown_defaults() {
    let c = CooldownPolicy::default();
    let (hours, minutes) = (
        |h: u64| Duration::from_secs(h * 3600),
        |m: u64| Duration::from_secs(m * 60),
    );
    assert_eq!(c.billing_backoff(), hours(5));
    assert_eq!(c.billing_backoff_by_provider().count(), 0);
    assert_eq!(c.billing_max(), hours(24));
    assert_eq!(c.failure_window(), hours(24));
    assert_eq!(c.rotations(RotationBudget::Overloaded), 1);
    assert_eq!(
        c.rotation_backoff(RotationBudget::Overloaded),
        Duration::ZERO
    );
    assert_eq!(c.rotations(RotationBudget::RateLimited), 1);
    assert_eq!(c.auth_permanent_backoff(), minutes(10));
    assert_eq!(c.auth_permanent_max(), minutes(60));
    assert_eq!(read("auth: {}").config.auth.cooldowns, c);
    // Written out, the defaults read back as the same policy.
    let written = "auth:\n  cooldowns:\n    billingBackoffHours: 5\n    billingMaxHours: 24\n    failureWindowHours: 24\n    authPermanentBackoffMinutes: 10\n    authPermanentMaxMinutes: 60\n    overloadedProfileRotations: 1\n    overloadedBackoffMs: 0\n    rateLimitedProfileRotations: 1\n";
    assert_eq!(read(written).config.auth.cooldowns, c);
}

#[test]
fn type_errors_carry_path_line_and_column() {
    let text = "\
agents:
  list:
    - id: a
    - id: b
    - id: c
      model:
        primary: openai/gpt
        fallbacks: openai/gpt-mini
";
    let p = problems(text, Format::Yaml);
    assert_eq!(
        p.iter().map(brief).collect::<Vec<_>>(),
        [(
            Severity::Error,
            "agents.list[2].model.fallbacks",
            Some(8),
            Some(20),
            "expected a list of \"provider/model\" strings, found a string"
        )]
    );
    assert_eq!(
        p[0].help.as_deref(),
        Some("write `[openai/gpt-mini]`, or one `- provider/model` line per fallback")
    );
}

// The example of the module essay.
#[test]
fn essay_example_is_placed_where_it_says() {
    let text = "\
agents:
  list:
    - id: coder
      model: { primary: anthropic/claude-opus-4-6, fallbacks: openai/gpt-5.2 }
";
    let p = problems(text, Format::Yaml);
    assert_eq!(
        brief(&p[0]),
        (
            Severity::Error,
            "agents.list[0].model.fallbacks",
            Some(4),
            Some(63),
            "expected a list of \"provider/model\" strings, found a string"
        )
    );
}

#[test]
fn all_problems_are_reported_in_one_run() {
    let text = "\
agents:
  defaults:
    model:
      primary: claude-opus
      fallbacks: [openai/b, 42, openai/b]
  list: { id: x }
auth:
  cooldowns:
    billingBackoffHours: -1
    overloadedProfileRotations: 1.5
    retries: 3
";
    let p = problems(text, Format::Yaml);
    let got: Vec<_> = p.iter().map(brief).collect();
    assert_eq!(
        got,
        [
            (
                Severity::Error,
                "agents.defaults.model.primary",
                Some(4),
                Some(16),
                "`claude-opus` has no provider: write it as `provider/model`"
            ),
            (
                Severity::Error,
                "agents.defaults.model.fallbacks[1]",
                Some(5),
                Some(29),
                "expected a \"provider/model\" string, found a number"
            ),
            (
                Severity::Error,
                "agents.list",
                Some(6),
                Some(9),
                "expected a list of agents (`- id: …`), found a mapping"
            ),
            (
                Severity::Error,
                "auth.cooldowns.billingBackoffHours",
                Some(9),
                Some(26),
                "expected a positive number"
            ),
            (
                Severity::Error,
                "auth.cooldowns.overloadedProfileRotations",
                Some(10),
                Some(33),
                "expected a whole number, 0 or more"
            ),
            (
                Severity::Warning,
                "agents.defaults.model.fallbacks[2]",
                Some(5),
                Some(33),
                "`openai/b` is listed twice (first at index 0); the repeat is ignored"
            ),
            (
                Severity::Warning,
                "auth.cooldowns.retries",
                Some(11),
                Some(5),
                "unknown key, ignored"
            ),
        ]
    );
}

#[test]
fn unknown_keys_are_warnings_with_a_suggestion() {
    let text = "agents:\n  defaults:\n    modle: anthropic/a\nagnets: {}\ngateway: { port: 1 }\n";
    let c = read(text);
    let got: Vec<_> = c.warnings.iter().map(brief).collect();
    assert_eq!(
        got,
        [
            (
                Severity::Warning,
                "agents.defaults.modle",
                Some(3),
                Some(5),
                "unknown key, ignored"
            ),
            (
                Severity::Warning,
                "agnets",
                Some(4),
                Some(1),
                "unknown key, ignored"
            ),
        ],
        "top-level sections this tool does not read (gateway) are not warned about"
    );
    assert_eq!(c.warnings[0].help.as_deref(), Some("did you mean `model`?"));
    assert_eq!(
        c.warnings[1].help.as_deref(),
        Some("did you mean `agents`?")
    );
}

#[test]
fn yaml_syntax_errors_give_line_and_column() {
    let text = "agents:\n  defaults:\n    model: [anthropic/a\n  list: []\n";
    let p = problems(text, Format::Yaml);
    assert_eq!(p.len(), 1);
    assert!(
        p[0].message.starts_with("invalid YAML: "),
        "{}",
        p[0].message
    );
    assert!(p[0].line.is_some() && p[0].column.is_some(), "{p:?}");
    assert!(!p[0].message.ends_with('.'));
}

#[test]
fn json_configs_get_json_syntax_errors() {
    let good = r#"{"agents": {"defaults": {"model": {"primary": "a/b", "fallbacks": ["c/d"]}}}}"#;
    let c = GatewayConfig::parse(good, Format::Json, "c.json").unwrap();
    assert_eq!(
        c.config.agents.model.fallbacks.as_ref().map(Vec::len),
        Some(1)
    );
    let bad = "{\n  \"agents\": {\n    \"defaults\": {,}\n  }\n}\n";
    let p = problems(bad, Format::Json);
    assert_eq!(
        p.iter().map(brief).collect::<Vec<_>>(),
        [(
            Severity::Error,
            "",
            Some(3),
            Some(18),
            "invalid JSON: key must be a string"
        )]
    );
    // Type errors in JSON are placed too.
    let typed =
        "{\n  \"agents\": {\n    \"defaults\": {\"model\": {\"fallbacks\": \"c/d\"}}\n  }\n}\n";
    let p = problems(typed, Format::Json);
    assert_eq!(
        (p[0].path.as_str(), p[0].line, p[0].column),
        ("agents.defaults.model.fallbacks", Some(3), Some(41))
    );
}

// R5.3: the config holds metadata only; a secret is dropped and never
// shown.
#[test]
fn r5_3_secrets_are_dropped_and_never_echoed() {
    let text = "auth:\n  profiles:\n    openai:default:\n      provider: openai\n      apiKey: sk-SECRET-123\n";
    let c = read(text);
    assert_eq!(c.warnings.len(), 1);
    let w = &c.warnings[0];
    assert_eq!(
        brief(w),
        (
            Severity::Warning,
            "auth.profiles[\"openai:default\"].apiKey",
            Some(5),
            Some(7),
            "secrets do not belong in the config file; this value is ignored"
        )
    );
    let shown = format!("{:?}{}", c.config, w.render(&c.name, &c.text));
    assert!(!shown.contains("SECRET"), "{shown}");
    assert!(
        shown.contains("(line not shown: it may hold a secret)"),
        "{shown}"
    );
    // A type error next to a secret in a flow mapping hides the line too.
    let flow = "auth:\n  profiles:\n    x:default: { provider: 5, token: tok-SECRET }\n";
    let e = GatewayConfig::parse(flow, Format::Yaml, "f.yaml").unwrap_err();
    assert!(!e.to_string().contains("SECRET"), "{e}");
    assert!(may_hold_secret(r#"  "apiKey" : "x""#));
    assert!(!may_hold_secret("  primary: ollama/monkey:7b"));
}

// R16.11: an unknown credential mode is never echoed, whatever it is;
// a near miss names the known mode instead.
#[test]
fn r16_11_unknown_mode_is_not_echoed() {
    let text = "auth:\n  profiles:\n    a:default: { provider: a, mode: OAuth }\n    b:default: { provider: b, type: magic }\n    c:default: { provider: c, mode: sk-live-FAKE-0001 }\n";
    let e = GatewayConfig::parse(text, Format::Yaml, "m.yaml").unwrap_err();
    let helps: Vec<_> = e.problems.iter().map(|p| p.help.as_deref()).collect();
    assert_eq!(
        helps,
        [
            Some("did you mean `oauth`?"),
            Some("the value is not shown, in case it is a secret"),
            Some("the value is not shown, in case it is a secret"),
        ]
    );
    let shown = e.to_string();
    for value in ["OAuth", "magic", "FAKE"] {
        assert!(!shown.contains(value), "{value}: {shown}");
    }
    assert_eq!(e.problems[2].line, Some(5), "still placed");
    assert_eq!(
        shown
            .matches("(line not shown: it may hold a secret)")
            .count(),
        3,
        "{shown}"
    );
}

// R16.11: a value shaped like a credential is never quoted in a
// message (which lines are hidden: failover-syntax's redact tests).
#[test]
fn r16_11_credential_values_are_not_quoted() {
    assert_eq!(quotable("sk-live-FAKE-0001"), None);
    assert_eq!(
        quotable("openai/gpt-5.2").as_deref(),
        Some("openai/gpt-5.2")
    );
}

// What the config really holds is still quoted: keys it reads, model
// ids, profile ids, e-mails, modes.
#[test]
fn harmless_lines_are_still_shown() {
    let texts = [
        FULL,
        include_str!("../../examples/configs/gateway.yaml"),
        include_str!("../../examples/configs/gateway.json"),
        include_str!("../../examples/configs/minimal.yaml"),
    ];
    for line in texts.iter().flat_map(|t| t.lines()) {
        assert!(!may_hold_secret(line), "{line}");
    }
    // Lines of other shapes: failover-syntax's redact tests.
}

// The YAML parser quotes a value it cannot read as its tag says; the
// message keeps what went wrong, not the value.
#[test]
fn parser_messages_do_not_quote_values() {
    let text = "auth:\n  cooldowns:\n    billingMaxHours: !!int sk-live-FAKE-0001\n";
    let p = problems(text, Format::Yaml);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
            p[0].message,
            "invalid YAML: auth.cooldowns.billingMaxHours: invalid value: string \"…\", expected an integer"
        );
    assert_eq!((p[0].line, p[0].column), (Some(3), Some(22)));
    assert_eq!(
        scrub_quoted(r#"duplicate entry with key "order""#),
        r#"duplicate entry with key "order""#
    );
    assert_eq!(
        scrub_quoted(r#"duplicate entry with key "sk-live-FAKE-01""#),
        r#"duplicate entry with key "…""#
    );
    assert_eq!(
        scrub_quoted(r#"invalid value: string "a \"b\" c", expected x"#),
        r#"invalid value: string "…", expected x"#
    );
}

#[test]
fn profile_and_order_problems() {
    let text = "\
auth:
  profiles:
    openai:default: { mode: magic }
    anthropic:x: { provider: openai }
  order:
    openai: openai:default
    google: [google:a, google:a]
";
    let p = problems(text, Format::Yaml);
    let got: Vec<_> = p
        .iter()
        .map(|p| (p.severity(), p.path.as_str(), p.message.as_str()))
        .collect();
    assert_eq!(
            got,
            [
                (
                    Severity::Error,
                    "auth.profiles[\"openai:default\"]",
                    "profile has no `provider`"
                ),
                (
                    Severity::Error,
                    "auth.profiles[\"openai:default\"].mode",
                    "unknown credential mode: expected `api_key`, `oauth`, `token` or `aws`"
                ),
                (
                    Severity::Error,
                    "auth.order.openai",
                    "expected a list of profile ids, found a string"
                ),
                (
                    Severity::Warning,
                    "auth.profiles[\"anthropic:x\"]",
                    "profile id `anthropic:x` does not start with `openai:` (ids are `provider:default` or `provider:<email>`)"
                ),
                (
                    Severity::Warning,
                    "auth.order.google[1]",
                    "profile `google:a` is listed twice; the repeat is ignored"
                ),
            ]
        );
}

#[test]
fn agent_list_problems() {
    let text = "\
agents:
  list:
    - model: a/b
    - id: x
      model: 7
    - id: X
    -
";
    let p = problems(text, Format::Yaml);
    let got: Vec<_> = p
        .iter()
        .map(|p| (p.path.as_str(), p.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("agents.list[0]", "agent has no `id`"),
            (
                "agents.list[1].model",
                "expected a \"provider/model\" string or `{primary, fallbacks}`, found a number"
            ),
            (
                "agents.list[2].id",
                "agent id `X` is used twice (first at `agents.list[1]`)"
            ),
            (
                "agents.list[3]",
                "expected an agent (`id: …`), found nothing"
            ),
        ]
    );
}

#[test]
fn oversized_and_odd_inputs_are_refused_cleanly() {
    let big = format!("agents: {{}}\n#{}\n", "x".repeat(MAX_CONFIG_BYTES as usize));
    let p = problems(&big, Format::Yaml);
    assert!(p[0].message.contains("is larger than 1024 KiB"), "{p:?}");
    let p = problems("- a\n- b\n", Format::Yaml);
    assert_eq!(
        p[0].message,
        "the config must be a mapping of keys, found a list"
    );
    assert_eq!(read("").warnings[0].message, "the config is empty");
    // Merge keys share a fallback list.
    let merged = "\
common: &common { fallbacks: [openai/b] }
agents:
  defaults:
    model: { <<: *common, primary: anthropic/a }
";
    let c = read(merged).config;
    assert_eq!(c.agents.model.fallbacks.as_ref().map(Vec::len), Some(1));
}

#[test]
fn rendering_shows_the_source_line() {
    let text = "agents:\n  defaults:\n    model: { primary: gpt }\n";
    let e = GatewayConfig::parse(text, Format::Yaml, "g.yaml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "\
error[E023]: agents.defaults.model.primary: `gpt` has no provider: write it as `provider/model`
 --> g.yaml:3:23
  |
3 |     model: { primary: gpt }
  |                       ^

1 error, 0 warnings in `g.yaml`
"
    );
}

/// Every problem is placed, however many there are: positions come from
/// one read of the text, so there is no cap (there was one of 32, as each
/// problem cost a parse).
#[test]
fn every_one_of_many_problems_gets_its_line() {
    let mut text = String::from("agents:\n  list:\n");
    for i in 0..200 {
        text.push_str(&format!(
            "    - id: a{i}\n      model: {{ primary: nope{i} }}\n"
        ));
    }
    let p = problems(&text, Format::Yaml);
    assert_eq!(p.len(), 200, "{p:?}");
    for (i, p) in p.iter().enumerate() {
        assert_eq!(p.path, format!("agents.list[{i}].model.primary"));
        assert_eq!((p.line, p.column), (Some(4 + 2 * i), Some(25)), "{p:?}");
    }
}

/// A value reached through an alias is placed where its anchor wrote it;
/// an unknown key at its key.
#[test]
fn problems_under_an_alias_are_placed_at_the_anchor() {
    let text = "\
shared: &fb [openai/a, 42]
agents:
  defaults:
    model: { primary: openai/x, fallbacks: *fb }
    modle: 1
";
    let got: Vec<_> = problems(text, Format::Yaml)
        .iter()
        .map(|p| (p.path.clone(), p.line, p.column))
        .collect();
    assert_eq!(
        got,
        [
            (
                "agents.defaults.model.fallbacks[1]".to_string(),
                Some(1),
                Some(24)
            ),
            ("agents.defaults.modle".to_string(), Some(5), Some(5)),
        ]
    );
}

/// Config problems join rules problems in one report: the same
/// diagnostics, codes and renderer.
#[test]
fn config_errors_are_diagnostics() {
    let text = "agents:\n  defaults:\n    model: { primary: gpt }\n    modle: 1\n";
    let e = GatewayConfig::parse(text, Format::Yaml, "g.yaml").unwrap_err();
    let mut sources = SourceMap::new();
    let diags = e.to_diagnostics(&mut sources);
    let codes: Vec<_> = diags.iter().map(|d| d.code).collect();
    assert_eq!(codes, [Code::E023, Code::W003]);
    assert_eq!((diags[0].span.line, diags[0].span.col), (3, 23));
    let shown = crate::diag::render_all(&diags, &sources);
    assert!(
        shown.starts_with("error[E023]: agents.defaults.model.primary: `gpt` has no provider"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "warning[W003]: agents.defaults.modle: unknown key, ignored\n --> g.yaml:4:5\n"
        ),
        "{shown}"
    );
    assert!(shown.ends_with("1 error, 1 warning\n"), "{shown}");
}

//! Table-driven tests: one per row of the SPEC R3 table and per bullet of
//! R4.1–R4.6, against the default ruleset's selection policies.

use super::*;
use crate::config::{Format, GatewayConfig};
use crate::Engine;

/// Primary `anthropic/a`, fallbacks `[openai/b, google/c]`, image chain,
/// and one agent of each shape.
const CONFIG: &str = "
agents:
  defaults:
    model:
      primary: anthropic/a
      fallbacks: [openai/b, google/c]
    imageModel:
      primary: openai/img
      fallbacks: [google/img]
  list:
    - id: plain
      model: mistral/p
    - id: object-no-fallbacks
      model: { primary: mistral/p }
    - id: explicit-strict
      model: { primary: mistral/p, fallbacks: [] }
    - id: own-fallbacks
      model: { primary: mistral/p, fallbacks: [groq/f1, openai/b] }
    - id: no-model
    - id: fallbacks-only
      model: { fallbacks: [groq/f1] }
";

fn config(text: &str) -> GatewayConfig {
    match GatewayConfig::parse(text, Format::Yaml, "test.yaml") {
        Ok(c) => c.config,
        Err(e) => panic!("{e}"),
    }
}

fn policies() -> SelectionPolicies {
    Engine::builtin().ruleset().selections.clone()
}

fn m(s: &str) -> ModelRef {
    ModelRef::parse(s).unwrap()
}

fn models(list: &[&str]) -> Vec<ModelRef> {
    list.iter().map(|s| m(s)).collect()
}

fn names(chain: &CandidateChain) -> Vec<&str> {
    chain.models().map(ModelRef::as_str).collect()
}

fn agent(id: &str) -> ChainRequest {
    ChainRequest {
        agent: Some(id.into()),
        ..ChainRequest::default()
    }
}

fn session(model: &str, source: OverrideKind) -> ChainRequest {
    ChainRequest {
        session_override: Some(SessionOverride {
            model: m(model),
            source,
        }),
        ..ChainRequest::default()
    }
}

fn cron(model: &str, fallbacks: Option<&[&str]>) -> ChainRequest {
    ChainRequest {
        cron: Some(CronPayload {
            model: m(model),
            fallbacks: fallbacks.map(models),
        }),
        ..ChainRequest::default()
    }
}

fn one_shot(model: &str) -> ChainRequest {
    ChainRequest {
        one_shot: Some(m(model)),
        ..ChainRequest::default()
    }
}

struct Row {
    name: &'static str,
    request: ChainRequest,
    source: SelectionSource,
    strict: bool,
    chain: &'static [&'static str],
}

fn check(config_text: &str, rows: Vec<Row>) {
    let cfg = config(config_text);
    let pol = policies();
    for row in rows {
        let chain =
            build_chain(&cfg, &pol, &row.request).unwrap_or_else(|e| panic!("{}: {e}", row.name));
        assert_eq!(chain.source, row.source, "{}: source", row.name);
        assert_eq!(chain.strict, row.strict, "{}: strict", row.name);
        assert_eq!(names(&chain), row.chain, "{}: chain", row.name);
        assert_eq!(chain.candidates[0].why, Why::Requested, "{}", row.name);
    }
}

// R3 row "configured default": `agents.defaults.model.primary` uses
// `agents.defaults.model.fallbacks`.
#[test]
fn r3_configured_default_uses_configured_fallbacks() {
    check(
        CONFIG,
        vec![
            Row {
                name: "no agent",
                request: ChainRequest::default(),
                source: SelectionSource::ConfiguredDefault,
                strict: false,
                chain: &["anthropic/a", "openai/b", "google/c"],
            },
            Row {
                name: "agent without a model uses the defaults",
                request: agent("no-model"),
                source: SelectionSource::ConfiguredDefault,
                strict: false,
                chain: &["anthropic/a", "openai/b", "google/c"],
            },
        ],
    );
}

// R3 row "agent primary": strict unless the agent's model object has its own
// `fallbacks`; `fallbacks: []` makes strict explicit; a non-empty list
// enables it.
#[test]
fn r3_agent_primary_is_strict_unless_it_has_fallbacks() {
    check(
        CONFIG,
        vec![
            Row {
                name: "model as a string",
                request: agent("plain"),
                source: SelectionSource::AgentPrimary,
                strict: true,
                chain: &["mistral/p"],
            },
            Row {
                name: "object without fallbacks",
                request: agent("object-no-fallbacks"),
                source: SelectionSource::AgentPrimary,
                strict: true,
                chain: &["mistral/p"],
            },
            Row {
                name: "fallbacks: []",
                request: agent("explicit-strict"),
                source: SelectionSource::AgentPrimary,
                strict: true,
                chain: &["mistral/p"],
            },
            Row {
                name: "own fallbacks: exactly primary + list, no configured primary",
                request: agent("own-fallbacks"),
                source: SelectionSource::AgentPrimary,
                strict: false,
                chain: &["mistral/p", "groq/f1", "openai/b"],
            },
            Row {
                name: "object with fallbacks but no primary keeps the configured primary",
                request: agent("fallbacks-only"),
                source: SelectionSource::AgentPrimary,
                strict: false,
                chain: &["anthropic/a", "groq/f1"],
            },
        ],
    );
}

// R3 row "auto fallback override": may keep walking the configured chain.
#[test]
fn r3_auto_override_keeps_walking_the_configured_chain() {
    check(
        CONFIG,
        vec![
            Row {
                name: "auto override on a configured fallback",
                request: session("openai/b", OverrideKind::Auto),
                source: SelectionSource::AutoOverride,
                strict: false,
                chain: &["openai/b", "google/c", "anthropic/a"],
            },
            Row {
                name: "auto override inside a strict agent still uses the configured chain",
                request: ChainRequest {
                    agent: Some("plain".into()),
                    ..session("google/c", OverrideKind::Auto)
                },
                source: SelectionSource::AutoOverride,
                strict: false,
                chain: &["google/c", "openai/b", "anthropic/a"],
            },
        ],
    );
}

// R3 rows "user session override" and "legacy session override": strict,
// the exact selection (R3.1).
#[test]
fn r3_user_and_legacy_overrides_are_strict() {
    check(
        CONFIG,
        vec![
            Row {
                name: "user override",
                request: session("openai/b", OverrideKind::User),
                source: SelectionSource::UserOverride,
                strict: true,
                chain: &["openai/b"],
            },
            Row {
                name: "legacy override (no modelOverrideSource)",
                request: session("google/z", OverrideKind::Legacy),
                source: SelectionSource::LegacyOverride,
                strict: true,
                chain: &["google/z"],
            },
        ],
    );
}

// R3 row "cron payload model": uses configured fallbacks unless the job gives
// `payload.fallbacks`; `payload.fallbacks: []` makes the run strict.
#[test]
fn r3_cron_payload_uses_payload_or_configured_fallbacks() {
    check(
        CONFIG,
        vec![
            Row {
                name: "no payload.fallbacks: configured chain",
                request: cron("google/z", None),
                source: SelectionSource::CronPayload,
                strict: false,
                chain: &["google/z", "openai/b", "google/c", "anthropic/a"],
            },
            Row {
                name: "payload.fallbacks given: exactly model + list",
                request: cron("google/z", Some(&["groq/f1"])),
                source: SelectionSource::CronPayload,
                strict: false,
                chain: &["google/z", "groq/f1"],
            },
            Row {
                name: "payload.fallbacks: [] is strict",
                request: cron("google/z", Some(&[])),
                source: SelectionSource::CronPayload,
                strict: true,
                chain: &["google/z"],
            },
        ],
    );
}

// R3 row "one-shot CLI override": strict.
#[test]
fn r3_one_shot_cli_override_is_strict() {
    check(
        CONFIG,
        vec![
            Row {
                name: "model outside the config",
                request: one_shot("google/z"),
                source: SelectionSource::CliOverride,
                strict: true,
                chain: &["google/z"],
            },
            Row {
                name: "the configured primary itself",
                request: one_shot("anthropic/a"),
                source: SelectionSource::CliOverride,
                strict: true,
                chain: &["anthropic/a"],
            },
        ],
    );
}

// R3.1: a strict selection yields just the requested model, whatever the
// fallback config holds.
#[test]
fn r3_1_strict_selections_yield_only_the_requested_model() {
    let cfg = config(CONFIG);
    let pol = policies();
    for request in [
        one_shot("x/y"),
        session("x/y", OverrideKind::User),
        session("x/y", OverrideKind::Legacy),
        cron("x/y", Some(&[])),
    ] {
        let chain = build_chain(&cfg, &pol, &request).unwrap();
        assert!(chain.strict, "{request:?}");
        assert_eq!(names(&chain), ["x/y"], "{request:?}");
        assert_eq!(chain.list, None);
    }
}

// Precedence of selections: one-shot > session override > cron > agent >
// configured default.
#[test]
fn selection_precedence() {
    let cfg = config(CONFIG);
    let all = ChainRequest {
        agent: Some("own-fallbacks".into()),
        one_shot: Some(m("cli/m")),
        session_override: Some(SessionOverride {
            model: m("session/m"),
            source: OverrideKind::User,
        }),
        cron: Some(CronPayload {
            model: m("cron/m"),
            fallbacks: None,
        }),
        kind: ModelKind::Text,
    };
    let mut r = all.clone();
    let mut expect = vec![
        (SelectionSource::CliOverride, "cli/m"),
        (SelectionSource::UserOverride, "session/m"),
        (SelectionSource::CronPayload, "cron/m"),
        (SelectionSource::AgentPrimary, "mistral/p"),
        (SelectionSource::ConfiguredDefault, "anthropic/a"),
    ]
    .into_iter();
    let pol = policies();
    for step in 0..5 {
        let (source, model) = expect.next().unwrap();
        let chain = build_chain(&cfg, &pol, &r).unwrap();
        assert_eq!((chain.source, chain.requested().as_str()), (source, model));
        assert_eq!(select_source(&cfg, &r).unwrap(), source);
        match step {
            0 => r.one_shot = None,
            1 => r.session_override = None,
            2 => r.cron = None,
            3 => r.agent = None,
            _ => {}
        }
    }
}

// R4.1: the requested model is always first, even when it also appears in
// the fallback list or is the primary.
#[test]
fn r4_1_requested_model_is_always_first() {
    check(
        CONFIG,
        vec![
            Row {
                name: "requested is the last configured fallback",
                request: session("google/c", OverrideKind::Auto),
                source: SelectionSource::AutoOverride,
                strict: false,
                chain: &["google/c", "openai/b", "anthropic/a"],
            },
            Row {
                name: "requested is the primary",
                request: cron("anthropic/a", None),
                source: SelectionSource::CronPayload,
                strict: false,
                chain: &["anthropic/a", "openai/b", "google/c"],
            },
            Row {
                name: "requested is in the override list",
                request: cron("groq/f1", Some(&["openai/b", "groq/f1"])),
                source: SelectionSource::CronPayload,
                strict: false,
                chain: &["groq/f1", "openai/b"],
            },
        ],
    );
}

// R4.2: explicit fallbacks are de-duplicated but never filtered (there is no
// allow-list step; providers never mentioned elsewhere stay).
#[test]
fn r4_2_fallbacks_are_deduplicated_not_filtered() {
    let text = "
agents:
  defaults:
    model:
      primary: anthropic/a
      fallbacks: [openai/b, OpenAI/b, anthropic/a, someprovider/never-seen, openai/b]
";
    check(
        text,
        vec![Row {
            name: "repeats dropped, first occurrence kept, primary not re-appended",
            request: session("google/z", OverrideKind::Auto),
            source: SelectionSource::AutoOverride,
            strict: false,
            chain: &[
                "google/z",
                "openai/b",
                "anthropic/a",
                "someprovider/never-seen",
            ],
        }],
    );
    let cfg = config(text);
    let chain = build_chain(&cfg, &policies(), &session("google/z", OverrideKind::Auto)).unwrap();
    // The two `openai/b` repeats and the appended primary were dropped.
    let dropped: Vec<(&str, Why)> = chain
        .duplicates
        .iter()
        .map(|c| (c.model.as_str(), c.why))
        .collect();
    assert_eq!(
        dropped,
        [
            ("openai/b", Why::ConfiguredFallback),
            ("openai/b", Why::ConfiguredFallback),
            ("anthropic/a", Why::ConfiguredPrimaryAppended),
        ]
    );
    // The anthropic/a in the list kept its place as a configured fallback.
    assert_eq!(chain.candidates[2].why, Why::ConfiguredFallback);
}

// R4.3: a run that already sits on a configured fallback (or a sibling of the
// same provider family) keeps the full configured chain: earlier fallbacks
// are not cut off.
#[test]
fn r4_3_run_on_a_same_family_fallback_keeps_the_full_chain() {
    let text = "
agents:
  defaults:
    model:
      primary: anthropic/a
      fallbacks: [openai/b, openai/b-mini, google/c]
";
    check(
        text,
        vec![
            Row {
                name: "sits on the second configured fallback",
                request: session("openai/b-mini", OverrideKind::Auto),
                source: SelectionSource::AutoOverride,
                strict: false,
                chain: &["openai/b-mini", "openai/b", "google/c", "anthropic/a"],
            },
            Row {
                name: "sits on a same-provider sibling that is not listed",
                request: session("openai/b-nano", OverrideKind::Auto),
                source: SelectionSource::AutoOverride,
                strict: false,
                chain: &[
                    "openai/b-nano",
                    "openai/b",
                    "openai/b-mini",
                    "google/c",
                    "anthropic/a",
                ],
            },
            Row {
                name: "same family as the primary",
                request: cron("anthropic/a-small", None),
                source: SelectionSource::CronPayload,
                strict: false,
                chain: &[
                    "anthropic/a-small",
                    "openai/b",
                    "openai/b-mini",
                    "google/c",
                    "anthropic/a",
                ],
            },
        ],
    );
}

// R4.4: without an override, configured fallbacks come before the configured
// primary even when the requested model uses another provider.
#[test]
fn r4_4_configured_fallbacks_precede_the_primary_for_any_provider() {
    let text = "
agents:
  defaults:
    model: { primary: anthropic/a, fallbacks: [openai/b] }
";
    check(
        text,
        vec![
            Row {
                name: "SPEC example: requested google/z, auto override",
                request: session("google/z", OverrideKind::Auto),
                source: SelectionSource::AutoOverride,
                strict: false,
                chain: &["google/z", "openai/b", "anthropic/a"],
            },
            Row {
                name: "SPEC example as a cron model without payload.fallbacks",
                request: cron("google/z", None),
                source: SelectionSource::CronPayload,
                strict: false,
                chain: &["google/z", "openai/b", "anthropic/a"],
            },
        ],
    );
}

// R4.5: without an override the configured primary is appended last; with
// an override it is not.
#[test]
fn r4_5_primary_is_appended_last_only_without_override() {
    let text = "
agents:
  defaults:
    model: { primary: anthropic/a, fallbacks: [openai/b, google/c] }
";
    check(
        text,
        vec![
            Row {
                name: "configured chain: primary last",
                request: session("mistral/m", OverrideKind::Auto),
                source: SelectionSource::AutoOverride,
                strict: false,
                chain: &["mistral/m", "openai/b", "google/c", "anthropic/a"],
            },
            Row {
                name: "cron model without payload.fallbacks: primary last",
                request: cron("mistral/m", None),
                source: SelectionSource::CronPayload,
                strict: false,
                chain: &["mistral/m", "openai/b", "google/c", "anthropic/a"],
            },
            Row {
                name: "override given: no primary",
                request: cron("mistral/m", Some(&["google/c"])),
                source: SelectionSource::CronPayload,
                strict: false,
                chain: &["mistral/m", "google/c"],
            },
        ],
    );
    let chain = build_chain(
        &config(text),
        &policies(),
        &session("mistral/m", OverrideKind::Auto),
    )
    .unwrap();
    assert_eq!(
        chain.candidates.last().unwrap().why,
        Why::ConfiguredPrimaryAppended
    );
    // No `fallbacks` key at all: the primary is still the hidden last target.
    let bare = "agents: { defaults: { model: { primary: anthropic/a } } }";
    check(
        bare,
        vec![Row {
            name: "no fallbacks key",
            request: session("mistral/m", OverrideKind::Auto),
            source: SelectionSource::AutoOverride,
            strict: false,
            chain: &["mistral/m", "anthropic/a"],
        }],
    );
}

// R4.6: with a fallbacks override the chain is exactly requested + list; an
// empty list disables fallback and the hidden primary.
#[test]
fn r4_6_override_is_exact_and_empty_override_is_strict() {
    check(
        CONFIG,
        vec![
            Row {
                name: "payload override: exactly requested + list, order kept",
                request: cron("google/z", Some(&["openai/b", "groq/f1", "openai/b"])),
                source: SelectionSource::CronPayload,
                strict: false,
                chain: &["google/z", "openai/b", "groq/f1"],
            },
            Row {
                name: "agent override: exactly requested + list",
                request: agent("own-fallbacks"),
                source: SelectionSource::AgentPrimary,
                strict: false,
                chain: &["mistral/p", "groq/f1", "openai/b"],
            },
            Row {
                name: "empty payload override: no fallback, no hidden primary",
                request: cron("google/z", Some(&[])),
                source: SelectionSource::CronPayload,
                strict: true,
                chain: &["google/z"],
            },
            Row {
                name: "empty agent override: no fallback, no hidden primary",
                request: agent("explicit-strict"),
                source: SelectionSource::AgentPrimary,
                strict: true,
                chain: &["mistral/p"],
            },
        ],
    );
}

// R15: image routing uses `agents.defaults.imageModel` with its own chain.
#[test]
fn r15_image_runs_use_the_image_model_chain() {
    let cfg = config(CONFIG);
    let pol = policies();
    let image = |r: ChainRequest| ChainRequest {
        kind: ModelKind::Image,
        ..r
    };
    let chain = build_chain(&cfg, &pol, &image(ChainRequest::default())).unwrap();
    assert_eq!(names(&chain), ["openai/img", "google/img"]);
    let chain = build_chain(&cfg, &pol, &image(session("x/y", OverrideKind::Auto))).unwrap();
    assert_eq!(names(&chain), ["x/y", "google/img", "openai/img"]);
    // Agents' `model` keys are text models: the image chain ignores them.
    let chain = build_chain(&cfg, &pol, &image(agent("plain"))).unwrap();
    assert_eq!(chain.source, SelectionSource::ConfiguredDefault);
    assert_eq!(names(&chain), ["openai/img", "google/img"]);
    // No image model configured.
    let err =
        build_chain(&config("agents: {}"), &pol, &image(ChainRequest::default())).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no model is selected: the config has no `agents.defaults.imageModel.primary` and the run gives no model"
    );
}

// The fallback list a source may use comes from the rules, not from code:
// changing a policy changes the chain.
#[test]
fn policies_come_from_the_rules() {
    let cfg = config(CONFIG);
    let mut pol = policies();
    let user = session("google/z", OverrideKind::User);
    assert!(build_chain(&cfg, &pol, &user).unwrap().strict);
    pol.set(
        SelectionSource::UserOverride,
        SelectionPolicy {
            target: SelectionTarget::Fallbacks(FallbackList::Configured),
            otherwise: SelectionTarget::Strict,
        },
    );
    let chain = build_chain(&cfg, &pol, &user).unwrap();
    assert!(!chain.strict);
    assert_eq!(
        names(&chain),
        ["google/z", "openai/b", "google/c", "anthropic/a"]
    );
    // `else` applies when the named list is absent.
    pol.set(
        SelectionSource::CliOverride,
        SelectionPolicy {
            target: SelectionTarget::Fallbacks(FallbackList::Payload),
            otherwise: SelectionTarget::Fallbacks(FallbackList::Configured),
        },
    );
    let chain = build_chain(&cfg, &pol, &one_shot("google/z")).unwrap();
    assert_eq!(chain.list, Some(FallbackList::Configured));
    // With no declarations at all every source is strict.
    let none = SelectionPolicies::default();
    let chain = build_chain(&cfg, &none, &ChainRequest::default()).unwrap();
    assert!(chain.strict);
    assert_eq!(names(&chain), ["anthropic/a"]);
}

#[test]
fn unknown_agents_and_missing_models_are_errors() {
    let cfg = config(CONFIG);
    let pol = policies();
    let err = build_chain(&cfg, &pol, &agent("plainn")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no agent `plainn` in `agents.list`; did you mean `plain`?"
    );
    let err = build_chain(&cfg, &pol, &agent("zzzzzzzz")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("no agent `zzzzzzzz` in `agents.list`; agents: plain, "),
        "{err}"
    );
    let err = build_chain(&config(""), &pol, &agent("x")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no agent `x` in `agents.list`; the config lists no agents"
    );
    let err = build_chain(&config(""), &pol, &ChainRequest::default()).unwrap_err();
    assert_eq!(
        err,
        ChainError::NoModel {
            kind: ModelKind::Text
        }
    );
    // A model given by the run needs no configured primary.
    let chain = build_chain(&config(""), &pol, &session("x/y", OverrideKind::Auto)).unwrap();
    assert_eq!(names(&chain), ["x/y"]);
}

#[test]
fn why_labels_follow_the_list_used() {
    let cfg = config(CONFIG);
    let pol = policies();
    let whys = |r: &ChainRequest| -> Vec<Why> {
        build_chain(&cfg, &pol, r)
            .unwrap()
            .candidates
            .iter()
            .map(|c| c.why)
            .collect()
    };
    assert_eq!(
        whys(&session("x/y", OverrideKind::Auto)),
        [
            Why::Requested,
            Why::ConfiguredFallback,
            Why::ConfiguredFallback,
            Why::ConfiguredPrimaryAppended
        ]
    );
    assert_eq!(
        whys(&agent("own-fallbacks")),
        [Why::Requested, Why::AgentFallback, Why::AgentFallback]
    );
    assert_eq!(
        whys(&cron("x/y", Some(&["a/b"]))),
        [Why::Requested, Why::PayloadFallback]
    );
}

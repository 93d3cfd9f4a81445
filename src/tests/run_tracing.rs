//! The runner's `tracing` schema (docs/tracing.md): span and event names,
//! target, levels and field lists, captured from a real run and checked
//! against the document, so neither can change without the other. The
//! subscriber is scoped to this thread, with [`idle_dispatcher`] beside
//! it for the reason given in `run_events.rs` (`tracing`'s call-site
//! cache).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::idle_dispatcher;
use super::run_common::*;
use crate::run::{session_hash, TRACING_TARGET};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span opened or an event emitted, as a subscriber sees it.
#[derive(Clone, Debug)]
struct Seen {
    span: bool,
    name: String,
    target: String,
    level: Level,
    fields: BTreeMap<String, String>,
    /// Names of the enclosing spans, innermost first.
    scope: Vec<String>,
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, f: &Field, v: &str) {
        self.0.insert(f.name().into(), v.into());
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name().into(), format!("{v:?}"));
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        let scope = ctx
            .span(id)
            .map(|s| s.scope().skip(1).map(|p| p.name().to_string()).collect())
            .unwrap_or_default();
        let m = attrs.metadata();
        // Declared fields recorded later (`Empty` at creation) count too:
        // the document lists every field a span declares.
        for field in m.fields() {
            f.0.entry(field.name().to_string()).or_default();
        }
        self.0.lock().unwrap().push(Seen {
            span: true,
            name: m.name().into(),
            target: m.target().into(),
            level: *m.level(),
            fields: f.0,
            scope,
        });
    }

    fn on_event(&self, ev: &Event<'_>, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        ev.record(&mut f);
        let scope = ctx
            .event_scope(ev)
            .map(|s| s.map(|p| p.name().to_string()).collect())
            .unwrap_or_default();
        let m = ev.metadata();
        self.0.lock().unwrap().push(Seen {
            span: false,
            // An event's name is its message, as the document names it.
            name: f.0.get("message").cloned().unwrap_or_default(),
            target: m.target().into(),
            level: *m.level(),
            fields: f.0,
            scope,
        });
    }
}

/// One `## Span `name` (level …)` / `## Event …` section of the document:
/// its heading and the field names of its table.
fn documented() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let doc = include_str!("../../docs/tracing.md");
    let mut out = BTreeMap::new();
    for section in doc.split("\n## ").skip(1) {
        let heading = section.lines().next().unwrap();
        let name = heading.split('`').nth(1).unwrap().to_string();
        let fields = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .map(|l| l.split('`').next().unwrap().to_string())
            .collect();
        out.insert(name, (heading.to_string(), fields));
    }
    out
}

// R14.2 and docs/tracing.md: a run that fails over once opens one run
// span, one attempt span per model call (inside the run span), and emits
// one decision event per candidate; names, target, levels and fields are
// exactly the documented ones, and the session key itself appears nowhere.
#[tokio::test(start_paused = true)]
async fn run_and_attempt_spans_and_decision_events_match_the_document() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let _idle = idle_dispatcher();

    let h = setup(&format!("{BASIC}  list:\n    - id: main\n"), KEYS);
    let s = Script::default()
        .on("anthropic/claude", vec![http(429, "rate limit exceeded")])
        .on("openai/gpt", vec![ok()]);
    let mut request = crate::run::RunRequest::session("agent:main:telegram:4242");
    request.agent = Some("main".into());
    h.runner.run(&request, s.f()).await.unwrap();

    let seen: Vec<Seen> = capture
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.target == TRACING_TARGET)
        .cloned()
        .collect();
    let names: Vec<(bool, &str)> = seen.iter().map(|s| (s.span, s.name.as_str())).collect();
    assert_eq!(
        names,
        [
            (true, "failover_run"),
            (true, "failover_attempt"),
            (false, "model_fallback_decision"),
            (true, "failover_attempt"),
            (false, "model_fallback_decision"),
        ],
        "{seen:#?}"
    );

    let doc = documented();
    assert_eq!(
        doc.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "failover_attempt",
            "failover_run",
            "model_fallback_decision"
        ],
        "the document's sections"
    );
    for s in &seen {
        let (heading, fields) = &doc[&s.name];
        let mut got: BTreeSet<String> = s.fields.keys().cloned().collect();
        got.remove("message");
        assert_eq!(
            &got, fields,
            "fields of `{}` against docs/tracing.md",
            s.name
        );
        assert!(
            heading.contains(&format!("level {}", s.level)),
            "`{}` is {} but documented as: {heading}",
            s.name,
            s.level
        );
    }

    let run = &seen[0];
    assert_eq!(run.fields["agent"], "main");
    assert_eq!(
        run.fields["session"],
        session_hash("agent:main:telegram:4242")
    );
    assert!(run.scope.is_empty());
    let first = &seen[1];
    assert_eq!(first.scope, ["failover_run"]);
    assert_eq!(first.fields["provider"], "anthropic");
    assert_eq!(first.fields["model"], "claude");
    assert_eq!(first.fields["profile_id"], "anthropic:default");
    assert_eq!(first.fields["attempt"], "1");
    assert_eq!(first.fields["probe"], "false");
    assert_eq!(seen[3].fields["attempt"], "2");
    assert_eq!(seen[3].fields["provider"], "openai");
    // Decisions are reported in the run's span, after their attempt.
    assert_eq!(seen[2].scope, ["failover_run"]);
    assert_eq!(seen[2].fields["decision"], "candidate_failed");
    assert_eq!(
        seen[2].fields["fallbackStepFromFailureReason"],
        "rate_limit"
    );
    assert_eq!(seen[4].fields["fallbackStepFinalOutcome"], "succeeded");

    let all = format!("{seen:?}");
    assert!(
        !all.contains("telegram:4242"),
        "the session key leaked: {all}"
    );
    assert!(!all.contains("SECRET"), "a credential leaked: {all}");
}

//! `GET /metrics`: Prometheus text, through `prometheus-client`.
//!
//! Every label value comes from the config or from a closed list (a
//! client protocol, an outcome, a reason the rules declare), never from a
//! client's text: a model a client names that the config does not is
//! counted as `other`, so a client cannot grow the label set. No label or
//! value is a secret (profile ids are not labels at all).
//!
//! Every metric the gateway exports is registered here, its name in
//! [`names`] and its labels in the label structs below (the field names are
//! the label names): `/metrics` renders this registry and nothing else.

use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The metric names, without the registry's `failover_` prefix (and, for
/// counters, without the `_total` suffix the exposition adds).
pub(crate) mod names {
    pub(crate) const PREFIX: &str = "failover";
    pub(crate) const REQUESTS: &str = "requests";
    pub(crate) const ATTEMPTS: &str = "attempts";
    pub(crate) const CLASSIFICATIONS: &str = "classifications";
    pub(crate) const FALLBACKS: &str = "fallbacks";
    pub(crate) const WINDOWS_STARTED: &str = "windows_started";
    pub(crate) const PROFILES_COOLING: &str = "profiles_cooling";
    pub(crate) const MODELS_COOLING: &str = "models_cooling";
    pub(crate) const RELOAD_REFUSED: &str = "reload_refused";
    pub(crate) const FAILURE_CAUSES: &str = "failure_causes";
    pub(crate) const PROBES: &str = "probes";
    pub(crate) const UPSTREAM_LATENCY: &str = "upstream_latency_seconds";
    pub(crate) const UPSTREAM_FIRST_BYTE: &str = "upstream_first_byte_seconds";
    pub(crate) const RELOADS: &str = "reloads";
    pub(crate) const STATE_WRITE_ERRORS: &str = "state_write_errors";
    pub(crate) const STATE_DEGRADED: &str = "state_degraded";
    pub(crate) const STATE_BACKEND_UP: &str = "state_backend_up";
    pub(crate) const STATE_BACKEND_OUTAGES: &str = "state_backend_outages";
    pub(crate) const CONTINUATIONS: &str = "continuations";
    pub(crate) const CLIENT_REQUESTS: &str = "client_requests";
    pub(crate) const CLIENT_TOKENS: &str = "client_tokens";
}

/// A client key's requests by outcome (SPEC R18.8). `key` is the key's
/// name (from the key table, never the key) or `none` for a request that
/// presented no key or an unknown one: the label set grows only with the
/// operator's keys.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientLabels {
    key: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientTokenLabels {
    key: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    protocol: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    provider: String,
    model: String,
    outcome: &'static str,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecidedByLabels {
    decided_by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    provider: String,
    reason: String,
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    provider: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ContinuationLabels {
    mode: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    agent: String,
}

/// What `/metrics` reads from the state at scrape time.
#[derive(Debug, Default)]
pub(crate) struct StateView {
    /// Profiles blocked now, by provider.
    pub(crate) cooling: Vec<(String, i64)>,
    /// Model windows running now (R7.3): profiles on which the model is
    /// cooling, by provider and model.
    pub(crate) models_cooling: Vec<((String, String), i64)>,
    /// State writes that failed since start.
    pub(crate) write_failures: u64,
    /// Whether the last state write failed.
    pub(crate) degraded: bool,
    /// Whether the last reload was refused (the last good set serves).
    pub(crate) reload_refused: bool,
    /// A shared backend's health per agent: up now, outages since start.
    pub(crate) backends: Vec<(String, bool, u64)>,
}

fn latency_histogram() -> Histogram {
    // 100 µs … ~100 s in doublings.
    Histogram::new(exponential_buckets(0.0001, 2.0, 21))
}

/// The gateway's metrics. Cheap to update from any task.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    attempts: Family<AttemptLabels, Counter>,
    classifications: Family<DecidedByLabels, Counter>,
    fallbacks: Counter,
    windows: Family<KindLabels, Counter>,
    cooling: Family<ProviderLabels, Gauge>,
    models_cooling: Family<ModelLabels, Gauge>,
    failure_causes: Family<CauseLabels, Counter>,
    probes: Family<OutcomeLabels, Counter>,
    latency: Family<ProviderLabels, Histogram, fn() -> Histogram>,
    ttfb: Family<ProviderLabels, Histogram, fn() -> Histogram>,
    reloads: Family<OutcomeLabels, Counter>,
    state_write_errors: Counter,
    state_degraded: Gauge,
    reload_refused: Gauge,
    backend_up: Family<AgentLabels, Gauge>,
    backend_outages: Family<AgentLabels, Counter>,
    continuations: Family<ContinuationLabels, Counter>,
    client_requests: Family<ClientLabels, Counter>,
    client_tokens: Family<ClientTokenLabels, Counter>,
    /// Serialises scrapes (the cooling gauge is rebuilt per scrape).
    scrape: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub(crate) fn new() -> Self {
        use names::*;
        let mut registry = Registry::with_prefix(PREFIX);
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            REQUESTS,
            "Client requests by protocol and outcome",
            requests.clone(),
        );
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            ATTEMPTS,
            "Upstream attempts (and skipped candidates) by provider, model, outcome and reason",
            attempts.clone(),
        );
        let classifications = Family::<DecidedByLabels, Counter>::default();
        registry.register(
            CLASSIFICATIONS,
            "Classified upstream failures by the step of the precedence that gave the reason: rule, model, status_rule, none (docs/model.md)",
            classifications.clone(),
        );
        let fallbacks = Counter::default();
        registry.register(
            FALLBACKS,
            "Requests answered by a candidate after an earlier one failed or was skipped",
            fallbacks.clone(),
        );
        let windows = Family::<KindLabels, Counter>::default();
        registry.register(
            WINDOWS_STARTED,
            "Cooldown and disable windows started on auth profiles",
            windows.clone(),
        );
        let cooling = Family::<ProviderLabels, Gauge>::default();
        registry.register(
            PROFILES_COOLING,
            "Auth profiles in cooldown or disabled now, by provider",
            cooling.clone(),
        );
        let models_cooling = Family::<ModelLabels, Gauge>::default();
        registry.register(
            MODELS_COOLING,
            "Model-scoped cooldowns running now (R7.3): auth profiles on which the model is cooling, by provider and model",
            models_cooling.clone(),
        );
        let failure_causes = Family::<CauseLabels, Counter>::default();
        registry.register(
            FAILURE_CAUSES,
            "Failed upstream attempts by provider, reason and what happened on the wire (connect, tls, deadline, connection_reset, stream_cut, html_page, http_4xx, http_5xx, bad_answer)",
            failure_causes.clone(),
        );
        let probes = Family::<OutcomeLabels, Counter>::default();
        registry.register(PROBES, "Cooldown probes by outcome", probes.clone());
        let latency: Family<ProviderLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            UPSTREAM_LATENCY,
            "Upstream call duration, by provider",
            latency.clone(),
        );
        let ttfb: Family<ProviderLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            UPSTREAM_FIRST_BYTE,
            "Upstream time to first byte (response head, or first stream event), by provider",
            ttfb.clone(),
        );
        let reloads = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            RELOADS,
            "Rule-set and config reloads by result (ok, refused)",
            reloads.clone(),
        );
        let state_write_errors = Counter::default();
        registry.register(
            STATE_WRITE_ERRORS,
            "State writes that failed (the answers went out without them)",
            state_write_errors.clone(),
        );
        let state_degraded = Gauge::default();
        let reload_refused = Gauge::default();
        registry.register(
            RELOAD_REFUSED,
            "1 while the last reload was refused: the config or rules on disk are not what runs (the last good set serves; /readyz says why)",
            reload_refused.clone(),
        );
        registry.register(
            STATE_DEGRADED,
            "Whether the last state write failed",
            state_degraded.clone(),
        );
        let backend_up = Family::<AgentLabels, Gauge>::default();
        registry.register(
            STATE_BACKEND_UP,
            "Whether the shared state backend answers (0: serving from the local view)",
            backend_up.clone(),
        );
        let backend_outages = Family::<AgentLabels, Counter>::default();
        registry.register(
            STATE_BACKEND_OUTAGES,
            "Outages of the shared state backend since start",
            backend_outages.clone(),
        );
        let continuations = Family::<ContinuationLabels, Counter>::default();
        registry.register(
            CONTINUATIONS,
            "Streams broken after their first byte, by how the next candidate continued them (mode: prefill, restart, none) and outcome (completed, mismatch, failed, not_continuable, prefill_rejected)",
            continuations.clone(),
        );
        let client_requests = Family::<ClientLabels, Counter>::default();
        registry.register(
            CLIENT_REQUESTS,
            "Client requests by client key name and outcome (admitted, unauthenticated, forbidden, rate_limited)",
            client_requests.clone(),
        );
        let client_tokens = Family::<ClientTokenLabels, Counter>::default();
        registry.register(
            CLIENT_TOKENS,
            "Upstream tokens of whole answers by client key name and kind (prompt, completion)",
            client_tokens.clone(),
        );
        Metrics {
            registry,
            continuations,
            client_requests,
            client_tokens,
            requests,
            attempts,
            classifications,
            fallbacks,
            windows,
            cooling,
            models_cooling,
            failure_causes,
            probes,
            latency,
            ttfb,
            reloads,
            state_write_errors,
            state_degraded,
            reload_refused,
            backend_up,
            backend_outages,
            scrape: Mutex::new(()),
        }
    }

    /// A request of a client key (`none`: no key or an unknown one).
    pub(crate) fn client_request(&self, key: &str, outcome: &'static str) {
        self.client_requests
            .get_or_create(&ClientLabels {
                key: key.to_string(),
                outcome,
            })
            .inc();
    }

    /// Tokens a client key's answer reported (whole, or a stream's).
    pub(crate) fn client_tokens(&self, key: &str, prompt: u64, completion: u64) {
        for (kind, n) in [("prompt", prompt), ("completion", completion)] {
            if n > 0 {
                self.client_tokens
                    .get_or_create(&ClientTokenLabels {
                        key: key.to_string(),
                        kind,
                    })
                    .inc_by(n);
            }
        }
    }

    pub(crate) fn request(&self, protocol: &'static str, outcome: &'static str) {
        self.requests
            .get_or_create(&RequestLabels { protocol, outcome })
            .inc();
    }

    pub(crate) fn attempt(&self, provider: &str, model: &str, outcome: &'static str, reason: &str) {
        self.attempts
            .get_or_create(&AttemptLabels {
                provider: provider.to_string(),
                model: model.to_string(),
                outcome,
                reason: reason.to_string(),
            })
            .inc();
    }

    /// A failure classified: which step decided (`rule`, `model`,
    /// `status rule`, `none`; the label spells the third `status_rule`).
    pub(crate) fn classification(&self, by: &str) {
        let decided_by = match by {
            "rule" => "rule",
            "model" => "model",
            "status rule" => "status_rule",
            _ => "none",
        };
        self.classifications
            .get_or_create(&DecidedByLabels { decided_by })
            .inc();
    }

    /// A continuation of a broken stream (issue 32).
    pub(crate) fn continuation(&self, mode: &'static str, outcome: &'static str) {
        self.continuations
            .get_or_create(&ContinuationLabels { mode, outcome })
            .inc();
    }

    pub(crate) fn fallback(&self) {
        self.fallbacks.inc();
    }

    pub(crate) fn window_started(&self, kind: &'static str) {
        self.windows.get_or_create(&KindLabels { kind }).inc();
    }

    pub(crate) fn probe(&self, outcome: &'static str) {
        self.probes.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    pub(crate) fn upstream_latency(&self, provider: &str, seconds: f64) {
        self.latency
            .get_or_create(&ProviderLabels {
                provider: provider.to_string(),
            })
            .observe(seconds);
    }

    pub(crate) fn first_byte(&self, provider: &str, seconds: f64) {
        self.ttfb
            .get_or_create(&ProviderLabels {
                provider: provider.to_string(),
            })
            .observe(seconds);
    }

    /// A failed attempt's cause beside its reason (issue 48).
    pub(crate) fn failure_cause(&self, provider: &str, reason: &str, cause: &'static str) {
        self.failure_causes
            .get_or_create(&CauseLabels {
                provider: provider.to_string(),
                reason: reason.to_string(),
                cause,
            })
            .inc();
    }

    pub(crate) fn reload(&self, ok: bool) {
        self.reloads
            .get_or_create(&OutcomeLabels {
                outcome: if ok { "ok" } else { "refused" },
            })
            .inc();
    }

    /// The text exposition, with the values read from the state at scrape
    /// time set from `state`.
    pub(crate) fn render(&self, state: &StateView) -> String {
        let _g = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.cooling.clear();
        for (provider, n) in &state.cooling {
            self.cooling
                .get_or_create(&ProviderLabels {
                    provider: provider.clone(),
                })
                .set(*n);
        }
        self.models_cooling.clear();
        for ((provider, model), n) in &state.models_cooling {
            self.models_cooling
                .get_or_create(&ModelLabels {
                    provider: provider.clone(),
                    model: model.clone(),
                })
                .set(*n);
        }
        // Totals kept elsewhere, monotone: the counter catches up.
        let seen = self.state_write_errors.get();
        self.state_write_errors
            .inc_by(state.write_failures.saturating_sub(seen));
        self.state_degraded.set(i64::from(state.degraded));
        self.reload_refused.set(i64::from(state.reload_refused));
        self.backend_up.clear();
        for (agent, up, outages) in &state.backends {
            let labels = AgentLabels {
                agent: agent.clone(),
            };
            self.backend_up.get_or_create(&labels).set(i64::from(*up));
            let c = self.backend_outages.get_or_create(&labels);
            c.inc_by(outages.saturating_sub(c.get()));
        }
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new();
        m.request("openai", "ok");
        m.attempt("openai", "gpt", "failed", "rate_limit");
        m.failure_cause("openai", "timeout", "connect");
        m.reload(false);
        let text = m.render(&StateView {
            cooling: vec![("openai".into(), 2)],
            models_cooling: vec![(("openai".into(), "gpt-5".into()), 1)],
            write_failures: 3,
            degraded: true,
            reload_refused: true,
            backends: vec![("main".into(), false, 2)],
        });
        assert!(
            text.contains(r#"failover_requests_total{protocol="openai",outcome="ok"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"failover_attempts_total{provider="openai",model="gpt",outcome="failed",reason="rate_limit"} 1"#));
        assert!(text.contains(r#"failover_profiles_cooling{provider="openai"} 2"#));
        assert!(
            text.contains(r#"failover_failure_causes_total{provider="openai",reason="timeout",cause="connect"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"failover_models_cooling{provider="openai",model="gpt-5"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"failover_reloads_total{outcome="refused"} 1"#));
        assert!(text.contains("failover_state_write_errors_total 3\n"));
        assert!(text.contains("failover_state_degraded 1\n"));
        assert!(text.contains("failover_reload_refused 1\n"), "{text}");
        assert!(text.contains(r#"failover_state_backend_up{agent="main"} 0"#));
        assert!(text.contains(r#"failover_state_backend_outages_total{agent="main"} 2"#));
        assert!(text.ends_with("# EOF\n"));
        // A later scrape catches the totals up, never counts twice.
        let text = m.render(&StateView {
            write_failures: 5,
            backends: vec![("main".into(), true, 2)],
            ..StateView::default()
        });
        assert!(
            text.contains("failover_state_write_errors_total 5\n"),
            "{text}"
        );
        assert!(text.contains(r#"failover_state_backend_outages_total{agent="main"} 2"#));
        assert!(text.contains(r#"failover_state_backend_up{agent="main"} 1"#));
    }
}

//! `GET /metrics`: Prometheus text, through `prometheus-client`.
//!
//! Every label value comes from the config or from a closed list (a
//! client protocol, an outcome, a reason the rules declare), never from a
//! client's text: a model a client names that the config does not is
//! counted as `other`, so a client cannot grow the label set. No label or
//! value is a secret (profile ids are not labels at all).

use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

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
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
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
    fallbacks: Counter,
    windows: Family<KindLabels, Counter>,
    cooling: Family<ProviderLabels, Gauge>,
    probes: Family<OutcomeLabels, Counter>,
    latency: Family<ProviderLabels, Histogram, fn() -> Histogram>,
    ttfb: Family<ProviderLabels, Histogram, fn() -> Histogram>,
    reloads: Family<OutcomeLabels, Counter>,
    /// Serialises scrapes (the cooling gauge is rebuilt per scrape).
    scrape: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("failover");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Client requests by protocol and outcome",
            requests.clone(),
        );
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "attempts",
            "Upstream attempts (and skipped candidates) by provider, model, outcome and reason",
            attempts.clone(),
        );
        let fallbacks = Counter::default();
        registry.register(
            "fallbacks",
            "Requests answered by a candidate after an earlier one failed or was skipped",
            fallbacks.clone(),
        );
        let windows = Family::<KindLabels, Counter>::default();
        registry.register(
            "windows_started",
            "Cooldown and disable windows started on auth profiles",
            windows.clone(),
        );
        let cooling = Family::<ProviderLabels, Gauge>::default();
        registry.register(
            "profiles_cooling",
            "Auth profiles in cooldown or disabled now, by provider",
            cooling.clone(),
        );
        let probes = Family::<OutcomeLabels, Counter>::default();
        registry.register("probes", "Cooldown probes by outcome", probes.clone());
        let latency: Family<ProviderLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "upstream_latency_seconds",
            "Upstream call duration, by provider",
            latency.clone(),
        );
        let ttfb: Family<ProviderLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "upstream_first_byte_seconds",
            "Upstream time to first byte (response head, or first stream event), by provider",
            ttfb.clone(),
        );
        let reloads = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "reloads",
            "Rule-set and config reloads by result (ok, refused)",
            reloads.clone(),
        );
        Metrics {
            registry,
            requests,
            attempts,
            fallbacks,
            windows,
            cooling,
            probes,
            latency,
            ttfb,
            reloads,
            scrape: Mutex::new(()),
        }
    }

    pub fn request(&self, protocol: &'static str, outcome: &'static str) {
        self.requests
            .get_or_create(&RequestLabels { protocol, outcome })
            .inc();
    }

    pub fn attempt(&self, provider: &str, model: &str, outcome: &'static str, reason: &str) {
        self.attempts
            .get_or_create(&AttemptLabels {
                provider: provider.to_string(),
                model: model.to_string(),
                outcome,
                reason: reason.to_string(),
            })
            .inc();
    }

    pub fn fallback(&self) {
        self.fallbacks.inc();
    }

    pub fn window_started(&self, kind: &'static str) {
        self.windows.get_or_create(&KindLabels { kind }).inc();
    }

    pub fn probe(&self, outcome: &'static str) {
        self.probes.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    pub fn upstream_latency(&self, provider: &str, seconds: f64) {
        self.latency
            .get_or_create(&ProviderLabels {
                provider: provider.to_string(),
            })
            .observe(seconds);
    }

    pub fn first_byte(&self, provider: &str, seconds: f64) {
        self.ttfb
            .get_or_create(&ProviderLabels {
                provider: provider.to_string(),
            })
            .observe(seconds);
    }

    pub fn reload(&self, ok: bool) {
        self.reloads
            .get_or_create(&OutcomeLabels {
                outcome: if ok { "ok" } else { "refused" },
            })
            .inc();
    }

    /// The text exposition, with the cooling gauge set from `cooling`
    /// (provider, profiles blocked now).
    pub fn render(&self, cooling: &[(String, i64)]) -> String {
        let _g = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.cooling.clear();
        for (provider, n) in cooling {
            self.cooling
                .get_or_create(&ProviderLabels {
                    provider: provider.clone(),
                })
                .set(*n);
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
        m.reload(false);
        let text = m.render(&[("openai".into(), 2)]);
        assert!(
            text.contains(r#"failover_requests_total{protocol="openai",outcome="ok"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"failover_attempts_total{provider="openai",model="gpt",outcome="failed",reason="rate_limit"} 1"#));
        assert!(text.contains(r#"failover_profiles_cooling{provider="openai"} 2"#));
        assert!(text.contains(r#"failover_reloads_total{outcome="refused"} 1"#));
        assert!(text.ends_with("# EOF\n"));
    }
}

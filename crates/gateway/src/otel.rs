//! OpenTelemetry traces (issue 48): with `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, `serve` exports the
//! runner's spans over OTLP/HTTP (protobuf): `failover_run` per request,
//! a `failover_attempt` child per upstream call with the GenAI semantic
//! conventions' attributes, the `model_fallback_decision` events on the
//! run span (docs/tracing.md). The standard `OTEL_*` variables apply
//! (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`);
//! `OTEL_SDK_DISABLED=true` turns it off.
//!
//! Off by default and then free: no layer is built, and the spans'
//! callsites stay disabled (the log layer takes events only).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;

/// The tracer provider and the layer that feeds it, when traces are on.
pub(crate) struct Traces {
    provider: SdkTracerProvider,
}

/// Whether the environment asks for traces.
fn wanted(env: &dyn Fn(&str) -> Option<String>) -> bool {
    let set = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The exporting layer and its provider (to flush at exit), or `None`
/// when traces are not asked for. `Err`: the exporter cannot be built
/// (a malformed endpoint), said at start.
pub(crate) fn start<S>() -> Result<Option<(impl Layer<S>, Traces)>, String>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let env = |k: &str| std::env::var(k).ok();
    if !wanted(&env) {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("error: OpenTelemetry exporter (OTEL_EXPORTER_OTLP_ENDPOINT): {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(env("OTEL_SERVICE_NAME").unwrap_or_else(|| "failover".into()))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("failover");
    // The runner's spans and the gateway's events (failover::*), at INFO
    // and above; never a dependency's.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target().starts_with("failover") && *m.level() <= tracing::Level::INFO
        }));
    Ok(Some((layer, Traces { provider })))
}

impl Traces {
    /// Exports what is waiting and stops the exporter (at exit).
    pub(crate) fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("warning: OpenTelemetry: the last spans were not exported: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    // Issue 48: off unless an endpoint is set; OTEL_SDK_DISABLED wins.
    #[test]
    fn i48_traces_only_when_an_endpoint_is_set() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!super::wanted(&env(&[])));
        assert!(!super::wanted(&env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            " "
        )])));
        assert!(super::wanted(&env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:4318"
        )])));
        assert!(super::wanted(&env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c/v1/traces"
        )])));
        assert!(!super::wanted(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "TRUE"),
        ])));
    }
}

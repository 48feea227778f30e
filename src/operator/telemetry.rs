//! Traces (`ruleop run --otlp-endpoint URL`): one trace per reconcile, sent over OTLP/HTTP
//! to a collector. The root is kube-runtime's `reconciling object` span (its `object.ref`
//! and `object.reason` say which resource and which watch event caused it); ruleop's
//! `reconcile`, `render`, `child write` and `status write` spans are its children. The
//! spans of the process (a rule's span lives as long as the rule) are left out of the
//! export, so that each reconcile is a trace of its own.
//!
//! Owns: the exporter's setup and its flush at exit. Used by: the command line's logging
//! (set up before the runtime starts, from `run`'s arguments).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The spans a trace is made of (the rest of the process's spans are not exported).
pub const EXPORTED_SPANS: &[&str] = &[
    "reconciling object",
    "reconcile",
    "render",
    "child write",
    "status write",
];

/// How the spans travel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (what collectors take on port 4318 by default).
    #[default]
    #[value(name = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/HTTP with JSON bodies.
    #[value(name = "http/json")]
    HttpJson,
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(
        "--otlp-endpoint {0}: only http:// is supported (send to a collector or an agent on the node, which may forward over TLS)"
    )]
    Scheme(String),
    #[error("cannot set up the OTLP exporter for {endpoint}: {source}")]
    Exporter {
        endpoint: String,
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The exporter in use; flushes what it holds when dropped (at the end of `run`).
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("traces: the last spans could not be sent: {e}");
        }
    }
}

/// Where the spans go: the collector's base URL gets `/v1/traces`, as the OTLP
/// specification has it for `OTEL_EXPORTER_OTLP_ENDPOINT`; a URL that already ends
/// there is used as it is.
pub fn traces_url(endpoint: &str) -> Result<String, TelemetryError> {
    if !endpoint.starts_with("http://") {
        return Err(TelemetryError::Scheme(endpoint.to_string()));
    }
    let base = endpoint.trim_end_matches('/');
    Ok(if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    })
}

/// Sets up the exporter; returns the layer that feeds it (filtered to the spans of a
/// reconcile, and ruleop's events inside them) and the handle that flushes it.
pub fn setup<S>(
    endpoint: &str,
    protocol: OtlpProtocol,
) -> Result<(impl Layer<S>, Traces), TelemetryError>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let url = traces_url(endpoint)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url.clone())
        .with_protocol(match protocol {
            OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
            OtlpProtocol::HttpJson => Protocol::HttpJson,
        })
        .build()
        .map_err(|source| TelemetryError::Exporter {
            endpoint: url,
            source,
        })?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("ruleop")
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("ruleop");
    let only_reconciles = tracing_subscriber::filter::filter_fn(|m| {
        if m.is_span() {
            EXPORTED_SPANS.contains(&m.name())
        } else {
            m.target().starts_with("ruleop") && *m.level() <= tracing::Level::INFO
        }
    });
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(only_reconciles);
    Ok((layer, Traces { provider }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collector_base_url_gets_the_traces_path_once() {
        assert_eq!(
            traces_url("http://otel:4318").unwrap(),
            "http://otel:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://otel:4318/").unwrap(),
            "http://otel:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://otel:4318/v1/traces").unwrap(),
            "http://otel:4318/v1/traces"
        );
        let e = traces_url("https://otel:4318").unwrap_err().to_string();
        assert!(e.contains("only http://"), "{e}");
    }
}

//! The generated `main`'s trace export: when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, every span (a delivery's `process <subject>` among
//! them) goes to that collector over OTLP/HTTP with protobuf bodies (feature `otlp`). Without
//! the feature, or with an endpoint that is not a URL, a warning says so and the service runs
//! without exporting.

use super::AppInfo;
use super::cli::{LogFormat, install_tracing_as};

/// The variable naming the traces' own endpoint, used as it is.
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// The variable naming the collector; traces go to its `/v1/traces`.
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// The value of variable `name`, when set and not blank.
fn var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

/// Where the variables send traces: the variable read, its value, and the URL of the traces'
/// endpoint, or why the value is not one. `None` when neither variable is set.
fn endpoint() -> Option<(&'static str, String, Result<String, String>)> {
    if let Some(value) = var(TRACES_ENDPOINT) {
        let url = url(&value).map(|()| value.clone());
        return Some((TRACES_ENDPOINT, value, url));
    }
    let value = var(ENDPOINT)?;
    let url = url(&value).map(|()| format!("{}/v1/traces", value.trim_end_matches('/')));
    Some((ENDPOINT, value, url))
}

/// Whether `value` is an `http://` or `https://` URL naming a host.
fn url(value: &str) -> Result<(), String> {
    let uri: hyper::Uri = value.parse().map_err(|err| format!("not a URL ({err})"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err("not an http:// or https:// URL".to_owned());
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("a URL without a host".to_owned());
    }
    Ok(())
}

/// The trace export of a running `main`, to finish once the app stopped.
pub(crate) struct Export {
    #[cfg(feature = "otlp")]
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
}

impl Export {
    /// Sends the spans not sent yet and stops the exporter (blocking: outside the runtime).
    pub(crate) fn finish(self) {
        #[cfg(feature = "otlp")]
        if let Err(err) = self.provider.shutdown() {
            tracing::warn!(%err, "the last traces could not be sent to the OTLP collector");
        }
    }
}

/// Installs the generated `main`'s `tracing` subscriber: the log lines in `format` and, when the
/// variables ask for it, the export of traces to the OTLP collector, named after the app unless
/// `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`) names it.
pub(crate) fn install(format: LogFormat, info: &AppInfo) -> Option<Export> {
    let Some((from, value, url)) = endpoint() else {
        install_tracing_as(format);
        return None;
    };
    #[cfg(not(feature = "otlp"))]
    {
        let _ = (value, url, info);
        install_tracing_as(format);
        tracing::warn!(
            "{from} is set, but this program is built without the OTLP exporter: no trace is exported; build it with the `otlp` feature of ruststream-nats (`ruststream-nats = {{ .., features = [\"otlp\"] }}`)"
        );
        None
    }
    #[cfg(feature = "otlp")]
    match url.and_then(|url| export::provider(&url, info).map(|provider| (url, provider))) {
        Ok((url, provider)) => export::install(format, provider, from, &url),
        Err(why) => {
            install_tracing_as(format);
            tracing::warn!(
                "{from} is `{value}`, which the OTLP exporter cannot use: {why}; no trace is exported: set it to the collector's OTLP/HTTP URL, such as http://otel-collector:4318"
            );
            None
        }
    }
}

#[cfg(feature = "otlp")]
mod export {
    use opentelemetry::KeyValue;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig as _;
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::SdkTracerProvider;

    use super::{AppInfo, Export, LogFormat, var};

    /// The tracer provider exporting to `url` in batches (the SDK's `OTEL_BSP_*` variables
    /// tune them; `OTEL_EXPORTER_OTLP_HEADERS` and `_TIMEOUT` are read by the exporter).
    pub(super) fn provider(url: &str, info: &AppInfo) -> Result<SdkTracerProvider, String> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(url)
            .build()
            .map_err(|err| err.to_string())?;
        Ok(SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource(info))
            .build())
    }

    /// The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), with the app's name
    /// and version where those leave them unset.
    fn resource(info: &AppInfo) -> Resource {
        let attributes = var("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
        let mut resource = Resource::builder();
        if var("OTEL_SERVICE_NAME").is_none() && !attributes.contains("service.name=") {
            resource = resource.with_service_name(info.name().to_owned());
        }
        if !attributes.contains("service.version=") {
            resource = resource
                .with_attribute(KeyValue::new("service.version", info.version().to_owned()));
        }
        resource.build()
    }

    /// Installs the log lines in `format` beside the OpenTelemetry layer of `provider`.
    pub(super) fn install(
        format: LogFormat,
        provider: SdkTracerProvider,
        from: &str,
        url: &str,
    ) -> Option<Export> {
        use std::io::IsTerminal as _;
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;

        use crate::app::subscriber::{fmt_layer, log_filter, not_the_delivery_span};

        let colors = std::io::stdout().is_terminal();
        // The delivery span is made (the exporter wants it) and left out of the lines only.
        let installed = tracing_subscriber::registry()
            .with(log_filter())
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("ruststream")))
            .with(fmt_layer(format, std::io::stdout, colors).with_filter(not_the_delivery_span()))
            .try_init();
        if installed.is_err() {
            // The program's own subscriber was installed first: it decides what is exported.
            let _ = provider.shutdown();
            return None;
        }
        for protocol in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(asked) = var(protocol).filter(|p| p != "http/protobuf") {
                tracing::warn!(
                    "{protocol} is `{asked}`, but RustStream exports over http/protobuf: point {from} at the collector's OTLP/HTTP port (4318 by default)"
                );
            }
        }
        tracing::info!("exporting traces over OTLP/HTTP to {url} ({from})");
        Some(Export { provider })
    }
}

#[cfg(test)]
mod tests {
    use super::url;

    #[test]
    fn an_endpoint_is_an_http_url_with_a_host() {
        assert_eq!(url("http://127.0.0.1:4318"), Ok(()));
        assert_eq!(url("https://collector.example/otlp"), Ok(()));
        assert!(url("not a url").unwrap_err().starts_with("not a URL"));
        assert_eq!(
            url("grpc://collector:4317"),
            Err("not an http:// or https:// URL".to_owned())
        );
        assert_eq!(
            url("collector:4318"),
            Err("not an http:// or https:// URL".to_owned())
        );
    }
}

//! The pieces of the generated `main`'s `tracing` subscriber: the `RUST_LOG` filter, the `fmt`
//! layer of the log lines, and the filter that keeps the delivery span out of them. The log
//! subscriber ([`cli::log_subscriber`](super::cli::log_subscriber)) and the one that also
//! exports traces (`otlp.rs`) are made of them.

use super::cli::LogFormat;

/// The filter `RUST_LOG` names (`info` when unset). The log lines carry the `DeliveryLog` the
/// brokers make for them (`ruststream::telemetry::DeliveryLog`): asked for here.
pub(crate) fn log_filter() -> tracing_subscriber::filter::Targets {
    crate::delivery_log::DeliveryLog::want();
    crate::app::log_filter::from_env(std::env::var("RUST_LOG").ok().as_deref())
}

/// Leaves the delivery span out of the log lines: they write its `DeliveryLog` instead.
pub(crate) fn not_the_delivery_span()
-> tracing_subscriber::filter::FilterFn<impl Fn(&tracing::Metadata<'_>) -> bool> {
    tracing_subscriber::filter::filter_fn(|meta| {
        !(meta.is_span() && meta.name() == super::log_fields::DELIVERY_SPAN)
    })
}

/// The `fmt` layer writing `format` to `writer`, with colors when `colors`.
pub(crate) fn fmt_layer<S, W>(
    format: LogFormat,
    writer: W,
    colors: bool,
) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer as _;

    use super::log_fields::{DeliveryLines, JsonSpanFields};

    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(colors)
        .with_writer(writer);
    match format {
        LogFormat::Human => layer
            .map_event_format(|inner| DeliveryLines { inner, json: false })
            .boxed(),
        LogFormat::Json => layer
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .fmt_fields(JsonSpanFields)
            .map_event_format(|inner| DeliveryLines { inner, json: true })
            .boxed(),
    }
}

//! How the generated `main`'s log lines are written: the delivery being handled
//! ([`DeliveryLog`]) in each line written while its handler runs, and (JSON) span fields: as a JSON object, each value
//! as it comes, with no map of `serde_json::Value`s in between. A field recorded later (the
//! delivery span's outcome) is appended to the object, where `tracing_subscriber`'s
//! `JsonFields` parses the object back and writes it again: the delivery span records once
//! per message, so that would be paid on every message.
//!
//! The object reads as `JsonFields` writes it: strings and `Debug` values as JSON strings,
//! integers, floats and booleans as JSON numbers and booleans, bytes as an array of numbers,
//! `log.*` fields (from the `log` bridge) left out, a raw identifier's `r#` dropped.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::span::Record;
use tracing::{Event, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::time::FormatTime as _;
use tracing_subscriber::fmt::{FmtContext, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::delivery_log::{DeliveryLog, Plain};

/// The name the delivery span has, which the generated `main`'s lines leave out (they write the
/// [`DeliveryLog`] instead).
pub(crate) const DELIVERY_SPAN: &str = "ruststream.delivery";

/// The generated `main`'s lines: `tracing_subscriber`'s (`E`), and while a handler runs, with
/// its delivery:
///
/// - human: the same layout with the delivery before the spans, written as the `fmt` layer
///   writes a span: `2026-11-30T21:40:02.118123Z  INFO ruststream.delivery{messaging.destination.name=…
///   ruststream.registration=…}: payments: payment captured id=12`;
/// - JSON: a `delivery` object with the same fields.
pub(crate) struct DeliveryLines<E> {
    pub(crate) inner: E,
    pub(crate) json: bool,
}

impl<S, N, E> FormatEvent<S, N> for DeliveryLines<E>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    E: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some(delivery) = DeliveryLog::with_current(Clone::clone) else {
            return self.inner.format_event(ctx, writer, event);
        };
        if self.json {
            let mut line = String::new();
            self.inner
                .format_event(ctx, Writer::new(&mut line), event)?;
            return json_line(&line, &delivery, writer);
        }
        let meta = event.metadata();
        tracing_subscriber::fmt::time::SystemTime.format_time(&mut writer)?;
        write!(writer, " {:>5} {delivery}:", meta.level().as_str())?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    write!(writer, "{{{fields}}}")?;
                }
                writer.write_char(':')?;
            }
        }
        write!(writer, " {}: ", meta.target())?;
        ctx.format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// `line` (a JSON object) with `delivery` added as its `delivery` object.
fn json_line(line: &str, delivery: &DeliveryLog, mut writer: Writer<'_>) -> fmt::Result {
    let Some(open) = line.trim_end().strip_suffix('}') else {
        return writer.write_str(line);
    };
    let comma = if open.ends_with('{') { "" } else { "," };
    write!(
        writer,
        "{open}{comma}\"delivery\":{{\"messaging.destination.name\":\""
    )?;
    write!(Escaped(&mut writer), "{}", Plain(&delivery.subject))?;
    writer.write_char('"')?;
    if let Some(sequence) = delivery.stream_sequence {
        write!(writer, ",\"messaging.nats.stream_sequence\":{sequence}")?;
    }
    if let Some(delivered) = delivery.delivered {
        write!(writer, ",\"messaging.nats.delivered\":{delivered}")?;
    }
    writer.write_str(",\"ruststream.registration\":\"")?;
    write!(Escaped(&mut writer), "{}", Plain(&delivery.registration))?;
    writer.write_str("\"}}\n")
}

/// The span fields of JSON lines (see the module).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct JsonSpanFields;

impl<'w> FormatFields<'w> for JsonSpanFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        writer.write_char('{')?;
        let mut visitor = JsonVisitor {
            writer: &mut writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result?;
        writer.write_char('}')
    }

    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &Record<'_>,
    ) -> fmt::Result {
        // Reopen the object this formatter closed.
        if current.fields.pop() != Some('}') {
            current.fields.clear();
            return self.format_fields(current.as_writer(), fields);
        }
        let first = current.fields == "{";
        let mut writer = current.as_writer();
        let mut visitor = JsonVisitor {
            writer: &mut writer,
            first,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        let result = visitor.result;
        writer.write_char('}')?;
        result
    }
}

struct JsonVisitor<'a, 'w> {
    writer: &'a mut Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl JsonVisitor<'_, '_> {
    /// Writes `"name":` (after a comma but for the first), `None` for a field left out.
    fn key(&mut self, field: &Field) -> Option<()> {
        let name = field.name();
        if self.result.is_err() || name.starts_with("log.") {
            return None;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        let comma = if self.first { "" } else { "," };
        self.first = false;
        self.result = write!(self.writer, "{comma}\"")
            .and_then(|()| Escaped(&mut *self.writer).write_str(name))
            .and_then(|()| self.writer.write_str("\":"));
        self.result.ok()
    }

    fn string(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        if self.key(field).is_some() {
            self.result = self
                .writer
                .write_char('"')
                .and_then(|()| Escaped(&mut *self.writer).write_fmt(value))
                .and_then(|()| self.writer.write_char('"'));
        }
    }

    fn raw(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        if self.key(field).is_some() {
            self.result = self.writer.write_fmt(value);
        }
    }
}

impl Visit for JsonVisitor<'_, '_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        if value.is_finite() {
            self.raw(field, format_args!("{value:?}"));
        } else {
            self.raw(field, format_args!("null"));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.raw(field, format_args!("{value}"));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.raw(field, format_args!("{value}"));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.raw(field, format_args!("{value}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.string(field, format_args!("{value}"));
    }

    fn record_bytes(&mut self, field: &Field, value: &[u8]) {
        if self.key(field).is_some() {
            let mut result = self.writer.write_char('[');
            for (i, byte) in value.iter().enumerate() {
                let comma = if i == 0 { "" } else { "," };
                result = result.and_then(|()| write!(self.writer, "{comma}{byte}"));
            }
            self.result = result.and_then(|()| self.writer.write_char(']'));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.string(field, format_args!("{value:?}"));
    }
}

/// Writes what it is given as the inside of a JSON string.
struct Escaped<'a, W: fmt::Write>(&'a mut W);

impl<W: fmt::Write> fmt::Write for Escaped<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut plain = 0;
        for (i, c) in s.char_indices() {
            let escape = match c {
                '"' => "\\\"",
                '\\' => "\\\\",
                '\n' => "\\n",
                '\r' => "\\r",
                '\t' => "\\t",
                c if c < ' ' => "",
                _ => continue,
            };
            self.0.write_str(&s[plain..i])?;
            if escape.is_empty() {
                write!(self.0, "\\u{:04x}", u32::from(c))?;
            } else {
                self.0.write_str(escape)?;
            }
            plain = i + c.len_utf8();
        }
        self.0.write_str(&s[plain..])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;
    use crate::delivery_log::DeliveryLog;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl MakeWriter<'_> for Lines {
        type Writer = Self;
        fn make_writer(&self) -> Self {
            self.clone()
        }
    }

    /// What `JsonFields` and these fields write for the same span, parsed.
    fn span_of_a_line(json_fields: bool) -> serde_json::Value {
        let lines = Lines::default();
        let builder = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .json()
            .with_current_span(true);
        let subscriber: tracing::Dispatch = if json_fields {
            builder.finish().into()
        } else {
            builder.fmt_fields(JsonSpanFields).finish().into()
        };
        tracing::dispatcher::with_default(&subscriber, || {
            let span = tracing::info_span!(
                "delivery",
                subject = "orders.\"created\"\n\u{1}",
                sequence = 7_u64,
                offset = -3_i64,
                ratio = 0.5_f64,
                redelivered = false,
                payload = &b"ab"[..],
                r#type = ?Some(1),
                outcome = tracing::field::Empty,
                sent = tracing::field::Empty,
            );
            span.record("outcome", "ack");
            span.record("sent", tracing::field::display("+ACK"));
            span.in_scope(|| tracing::info!("handled"));
        });
        let text =
            String::from_utf8(lines.0.lock().expect("not poisoned").clone()).expect("UTF-8 lines");
        let line: serde_json::Value = serde_json::from_str(text.trim()).expect("a JSON line");
        line["span"].clone()
    }

    /// The lines the generated `main`'s subscriber writes for an event inside a handler (the
    /// delivery current, a span of the handler's own open) and one outside.
    async fn lines_of(format: crate::app::cli::LogFormat) -> Vec<String> {
        let lines = Lines::default();
        let subscriber = crate::app::cli::log_subscriber(format, lines.clone(), false);
        let _guard = tracing::dispatcher::set_default(&subscriber);
        let delivery = DeliveryLog {
            subject: "orders.created".into(),
            registration: "orders".into(),
            stream_sequence: Some(7),
            delivered: Some(2),
        };
        delivery
            .scope(async {
                let _inner = tracing::info_span!("charge", card = "visa").entered();
                tracing::info!(order = 1, "handling the order");
            })
            .await;
        tracing::info!("outside");
        let text =
            String::from_utf8(lines.0.lock().expect("not poisoned").clone()).expect("UTF-8 lines");
        text.lines().map(str::to_owned).collect()
    }

    #[tokio::test]
    async fn a_line_written_while_a_handler_runs_names_its_delivery() {
        let human = lines_of(crate::app::cli::LogFormat::Human).await;
        assert_eq!(human.len(), 2, "{human:?}");
        assert!(
            human[0].ends_with(
                " INFO ruststream.delivery{messaging.destination.name=orders.created messaging.nats.stream_sequence=7 messaging.nats.delivered=2 ruststream.registration=orders}:charge{card=\"visa\"}: ruststream::app::log_fields::tests: handling the order order=1"
            ),
            "{human:?}"
        );
        assert!(
            human[1].ends_with(" INFO ruststream::app::log_fields::tests: outside"),
            "{human:?}"
        );
        let json = lines_of(crate::app::cli::LogFormat::Json).await;
        let line: serde_json::Value = serde_json::from_str(&json[0]).expect("a JSON line");
        assert_eq!(line["fields"]["message"], "handling the order", "{line}");
        assert_eq!(line["span"]["card"], "visa", "{line}");
        let delivery = &line["delivery"];
        assert_eq!(delivery["messaging.destination.name"], "orders.created");
        assert_eq!(delivery["messaging.nats.stream_sequence"], 7);
        assert_eq!(delivery["messaging.nats.delivered"], 2);
        assert_eq!(delivery["ruststream.registration"], "orders");
        let outside: serde_json::Value = serde_json::from_str(&json[1]).expect("a JSON line");
        assert!(outside.get("delivery").is_none(), "{outside}");
    }

    #[test]
    fn the_generated_mains_subscriber_makes_no_delivery_span() {
        for format in [
            crate::app::cli::LogFormat::Human,
            crate::app::cli::LogFormat::Json,
        ] {
            let subscriber = crate::app::cli::log_subscriber(format, Lines::default(), false);
            tracing::dispatcher::with_default(&subscriber, || {
                assert!(tracing::info_span!("ruststream.delivery", n = 1).is_disabled());
                assert!(!tracing::info_span!("charge", n = 1).is_disabled());
            });
        }
    }

    #[test]
    fn span_fields_read_as_tracing_subscribers_json_fields_write_them() {
        let ours = span_of_a_line(false);
        assert_eq!(ours, span_of_a_line(true));
        assert_eq!(ours["subject"], "orders.\"created\"\n\u{1}");
        assert_eq!(ours["sequence"], 7);
        assert_eq!(ours["outcome"], "ack");
        assert_eq!(ours["sent"], "+ACK");
        assert_eq!(ours["type"], "Some(1)");
    }
}

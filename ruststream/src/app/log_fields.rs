//! How the generated `main`'s JSON log lines write span fields: as a JSON object, each value
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
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormattedFields;
use tracing_subscriber::fmt::format::{FormatFields, Writer};

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

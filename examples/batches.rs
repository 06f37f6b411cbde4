// A batch handler on JetStream: sensor readings written to a time-series database in bulk, and
// each reading settled on its own with the `Vec<HandlerOutcome>` the handler returns.
//
// | reading | outcome | on the server |
// | --- | --- | --- |
// | written | `ack()` | `+ACK`: finished |
// | below absolute zero (a broken sensor) | `drop()` | `+TERM`: never delivered again |
// | its series is being compacted | `retry_after(2 s)` | `-NAK` with the delay: delivered again, delivered + 1, in a later batch |
//
// ```text
// cargo run --example batches -- describe   # the registrations, without connecting
// cargo run --example batches               # runs against nats://localhost:4222
// ```
//
// The twin without macros is `examples/manual/batches.rs`.

use std::time::Duration;

use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

/// How long a reading waits on the server while its series is being compacted.
const COMPACTION_BACKOFF: Duration = Duration::from_secs(2);

/// The lowest temperature there is, in degrees Celsius.
const ABSOLUTE_ZERO: f64 = -273.15;

/// One measurement of one sensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "sensors.readings")]
struct Reading {
    sensor: String,
    celsius: f64,
}

/// Writes readings in bulk. The consumer hands over up to 100 readings that are ready at once;
/// the handler answers one outcome per reading, in the order of the batch. Message `i` of the
/// batch is settled with outcome `i`: a batch with one bad reading does not hold back the good
/// ones.
#[subscriber(
    JetStreamSubject::new("sensors.readings", "SENSORS")
        .durable("store")
        .batch(nonzero!(100))
)]
async fn store(readings: &[Reading], ctx: &mut BatchContext<'_>) -> Vec<HandlerOutcome> {
    tracing::info!(batch = ctx.len(), "writing readings");
    readings
        .iter()
        .enumerate()
        .map(|(i, reading)| {
            // The server's delivery count of this message: 1 the first time.
            let delivered = ctx.context(i).and_then(|c| c.delivered());
            if reading.celsius < ABSOLUTE_ZERO {
                // Delivering it again gives the same reading: end it.
                tracing::warn!(
                    reading.sensor,
                    reading.celsius,
                    "a reading below absolute zero"
                );
                return HandlerOutcome::drop();
            }
            match write(reading, delivered) {
                Ok(()) => HandlerOutcome::ack(),
                Err(Compacting) => {
                    tracing::info!(reading.sensor, ?delivered, "series compacting, held");
                    HandlerOutcome::retry_after(COMPACTION_BACKOFF)
                }
            }
        })
        .collect()
}

#[ruststream::app]
fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("sensors", "0.1.0")).with_broker(
        // Declared so that the service runs on a bare nats-server.
        NatsBroker::new("nats://localhost:4222").declare_stream("SENSORS", ["sensors.>"]),
        |b| {
            b.include(store);
        },
    )
}

/// The series of a sensor is being compacted and takes no writes for now.
#[derive(Debug)]
struct Compacting;

/// A stand-in for the time-series database: the series of a sensor named `*-compacting` refuses
/// the first delivery of a reading (the compaction is over when it comes back); any other
/// reading is written.
fn write(reading: &Reading, delivered: Option<u64>) -> Result<(), Compacting> {
    if reading.sensor.ends_with("-compacting") && delivered == Some(1) {
        return Err(Compacting);
    }
    tracing::debug!(reading.sensor, reading.celsius, "reading written");
    Ok(())
}

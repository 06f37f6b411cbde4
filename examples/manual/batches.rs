// A batch handler on JetStream without macros: the twin of `examples/batches.rs`. A batch
// handler implements `HandleBatch` and answers a `BatchOutcome`: `Each` settles message `i` of
// the batch with outcome `i`, `All` settles the whole batch with one outcome.
//
// ```text
// cargo run --example manual_batches -- describe
// ```

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

/// Writes readings in bulk, settling each one on its own: a written reading is acknowledged, one
/// below absolute zero is terminated, one whose series is being compacted is held 2 s.
struct Store;

impl HandleBatch<Reading> for Store {
    async fn handle_batch(
        &self,
        readings: &[Reading],
        _outs: &(),
        ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        tracing::info!(batch = ctx.len(), "writing readings");
        let outcomes = readings
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
            .collect();
        BatchOutcome::Each(outcomes)
    }
}

#[ruststream::app]
fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("sensors", "0.1.0")).with_broker(
        // Declared so that the service runs on a bare nats-server.
        NatsBroker::new("nats://localhost:4222").declare_stream("SENSORS", ["sensors.>"]),
        |b| {
            b.include(
                JetStreamSubject::new("sensors.readings", "SENSORS")
                    .durable("store")
                    .batch(nonzero!(100))
                    .handler(Store),
            )
            .name("store");
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

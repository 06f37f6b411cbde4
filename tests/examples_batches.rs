//! The sensor service of `examples/batches.rs` and its manual twin `examples/manual/batches.rs`,
//! tested unchanged in process (`TestApp`, paused clock) and live (a real nats-server, with the
//! example's real 2 s delay): a batch handler settles each message with its own outcome.
//!
//! The readings are stored before the service starts, so its first pull takes them as one batch.
//!
//! Each example's code is included into a module of this test (`include!` of the file itself).

mod support;

/// The scenarios, expanded inside the module of each twin (`super::*` is the example's code).
macro_rules! batches_scenarios {
    () => {
        fn reading(sensor: &str, celsius: f64) -> Reading {
            Reading {
                sensor: sensor.to_owned(),
                celsius,
            }
        }

        /// One reading of each kind: written, below absolute zero, compacting, written.
        fn readings() -> Vec<Reading> {
            vec![
                reading("cellar", 12.5),
                reading("attic", -300.0),
                reading("freezer-compacting", -18.0),
                reading("garage", 4.0),
            ]
        }

        /// What the handler answers for [`readings`], in order.
        fn first_outcomes() -> Vec<HandlerOutcome> {
            vec![
                HandlerOutcome::ack(),
                HandlerOutcome::drop(),
                HandlerOutcome::retry_after(COMPACTION_BACKOFF),
                HandlerOutcome::ack(),
            ]
        }

        /// The sensor of each reading `handled`, and the outcome it got, by sensor.
        fn outcomes_by_sensor(
            handled: Vec<ruststream_nats::testing::HandledDelivery>,
        ) -> Vec<(String, HandlerOutcome)> {
            let mut by_sensor: Vec<(String, HandlerOutcome)> = handled
                .into_iter()
                .map(|h| {
                    let r: Reading = serde_json::from_slice(&h.payload).expect("decode");
                    let outcome = h.handled.outcome().cloned().expect("an outcome");
                    (r.sensor, outcome)
                })
                .collect();
            by_sensor.sort_by(|a, b| a.0.cmp(&b.0));
            by_sensor
        }

        /// [`outcomes_by_sensor`] once every reading of [`readings`] is settled, however they were
        /// split into batches: the compacting freezer's twice.
        fn every_reading_settled() -> Vec<(String, HandlerOutcome)> {
            vec![
                ("attic".to_owned(), HandlerOutcome::drop()),
                ("cellar".to_owned(), HandlerOutcome::ack()),
                (
                    "freezer-compacting".to_owned(),
                    HandlerOutcome::retry_after(COMPACTION_BACKOFF),
                ),
                ("freezer-compacting".to_owned(), HandlerOutcome::ack()),
                ("garage".to_owned(), HandlerOutcome::ack()),
            ]
        }

        mod in_process {
            use std::sync::Arc;

            use ruststream::Headers;
            use ruststream_nats::prelude::*;
            use ruststream_nats::testing::{InProcessNats, TestApp};
            use ruststream_nats::transport::{JetStreamPublish as _, StreamAdmin as _, StreamSpec};

            use super::{
                COMPACTION_BACKOFF, Reading, app, every_reading_settled, first_outcomes,
                outcomes_by_sensor, reading, readings,
            };
            use crate::support::examples::nak_with;

            /// The app started on an emulated server whose stream already holds `readings`.
            async fn start_with(readings: &[Reading]) -> TestApp {
                let nats = InProcessNats::new();
                nats.declare_stream(StreamSpec {
                    name: "SENSORS".to_owned(),
                    subjects: vec!["sensors.>".to_owned()],
                })
                .await
                .expect("the stream");
                for r in readings {
                    let payload = serde_json::to_vec(r).expect("encode");
                    nats.publish_stored(
                        Arc::from("sensors.readings"),
                        Headers::new(),
                        payload.into(),
                    )
                    .await
                    .expect("stored");
                }
                TestApp::start_on(app(), nats)
                    .await
                    .expect("the app starts")
            }

            #[tokio::test(start_paused = true)]
            async fn a_batch_is_settled_message_by_message() {
                let t = start_with(&readings()).await;

                assert_eq!(t.outcomes("store"), first_outcomes());
                assert_eq!(t.delivered("store"), [Some(1); 4]);
                assert_eq!(
                    t.nats().acknowledgements("SENSORS", "store"),
                    [
                        "+ACK".to_owned(),
                        "+TERM".to_owned(),
                        nak_with(COMPACTION_BACKOFF),
                        "+ACK".to_owned()
                    ]
                );

                // The held reading comes back alone, in a later batch, and is written.
                t.advance(COMPACTION_BACKOFF).await;
                let mut expected = first_outcomes();
                expected.push(HandlerOutcome::ack());
                assert_eq!(t.outcomes("store"), expected);
                let last = t.handled("store").pop().expect("a fifth delivery");
                assert_eq!(last.delivered, Some(2));
                let again: Reading = serde_json::from_slice(&last.payload).expect("decode");
                assert_eq!(again, reading("freezer-compacting", -18.0));
                let info = t
                    .nats()
                    .consumer_info("SENSORS", "store")
                    .expect("the consumer");
                assert_eq!((info.delivered, info.ack_pending), (5, 0));
                t.shutdown().await.expect("a clean shutdown");
            }

            #[tokio::test(start_paused = true)]
            async fn readings_published_while_it_runs_are_settled_each_on_its_own() {
                let t = start_with(&[]).await;
                for r in readings() {
                    t.publish("sensors.readings", &r).await.expect("published");
                }
                t.advance(COMPACTION_BACKOFF).await;

                // However the readings were split into batches, each got its own outcome.
                assert_eq!(
                    outcomes_by_sensor(t.handled("store")),
                    every_reading_settled()
                );
                let info = t
                    .nats()
                    .consumer_info("SENSORS", "store")
                    .expect("the consumer");
                assert_eq!((info.delivered, info.ack_pending), (5, 0));
                t.shutdown().await.expect("a clean shutdown");
            }
        }

        mod live {
            use std::time::{Duration, Instant};

            use ruststream_nats::prelude::*;

            use super::{
                COMPACTION_BACKOFF, Reading, app, every_reading_settled, first_outcomes,
                outcomes_by_sensor, reading, readings,
            };
            use crate::support::examples::{Live, PATIENCE, nak_with};

            #[tokio::test]
            async fn a_batch_is_settled_message_by_message() {
                let mut live = Live::server().await;
                live.create_streams(&app()).await;
                let mut last = 0;
                for r in readings() {
                    last = live.publish_stored("sensors.readings", &r).await;
                }
                let start = Instant::now();
                live.start(app()).await;

                live.until("the first batch", |l| {
                    l.recorder().outcomes("store").len() == 4
                })
                .await;
                assert_eq!(live.recorder().outcomes("store"), first_outcomes());
                assert_eq!(live.recorder().delivered("store"), [Some(1); 4]);
                live.until("four acknowledgements", |l| {
                    l.acks("SENSORS", "store").len() == 4
                })
                .await;
                assert_eq!(
                    live.acks("SENSORS", "store"),
                    [
                        "+ACK".to_owned(),
                        "+TERM".to_owned(),
                        nak_with(COMPACTION_BACKOFF),
                        "+ACK".to_owned()
                    ]
                );
                let held = live
                    .consumer_until("SENSORS", "store", "one reading held", |i| {
                        i.num_ack_pending == 1
                    })
                    .await;
                assert_eq!(held.delivered.consumer_sequence, 4);

                live.until_within(COMPACTION_BACKOFF + PATIENCE, "delivered again", |l| {
                    l.recorder().outcomes("store").len() == 5
                })
                .await;
                assert!(start.elapsed() >= COMPACTION_BACKOFF - Duration::from_millis(100));
                let mut expected = first_outcomes();
                expected.push(HandlerOutcome::ack());
                assert_eq!(live.recorder().outcomes("store"), expected);
                let again = live
                    .recorder()
                    .handled("store")
                    .pop()
                    .expect("a fifth delivery");
                assert_eq!(again.delivered, Some(2));
                let again: Reading = serde_json::from_slice(&again.payload).expect("decode");
                assert_eq!(again, reading("freezer-compacting", -18.0));
                let info = live
                    .consumer_until("SENSORS", "store", "every reading settled", |i| {
                        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= last
                    })
                    .await;
                assert_eq!(info.delivered.consumer_sequence, 5);
                live.stop().await;
            }

            #[tokio::test]
            async fn readings_published_while_it_runs_are_settled_each_on_its_own() {
                let mut live = Live::run(app()).await;
                let mut last = 0;
                for r in readings() {
                    last = live.publish_stored("sensors.readings", &r).await;
                }
                live.until_within(
                    COMPACTION_BACKOFF + PATIENCE,
                    "every reading settled",
                    |l| l.recorder().outcomes("store").len() == 5,
                )
                .await;

                // However the readings were split into batches, each got its own outcome.
                assert_eq!(
                    outcomes_by_sensor(live.recorder().handled("store")),
                    every_reading_settled()
                );
                let info = live
                    .consumer_until("SENSORS", "store", "every reading settled", |i| {
                        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= last
                    })
                    .await;
                assert_eq!(info.delivered.consumer_sequence, 5);
                live.stop().await;
            }
        }
    };
}

/// `examples/batches.rs`, with `#[subscriber]`.
#[allow(dead_code)]
mod batches {
    include!("../examples/batches.rs");

    batches_scenarios!();
}

/// `examples/manual/batches.rs`, with `HandleBatch` by hand.
#[allow(dead_code)]
mod manual_batches {
    include!("../examples/manual/batches.rs");

    batches_scenarios!();
}

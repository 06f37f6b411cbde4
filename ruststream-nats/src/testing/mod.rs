// Over 500 lines: about 110 of them are module docs with the in-process guide's runnable
// example, the rest `TestApp`'s start, settle and advance in both modes, kept together so one
// reads how the two modes differ. What it records lives in `recorder.rs`, the questions in
// `questions.rs`, a real server's side (its wire record, the rule of a live `settle`) in
// `live.rs` and `wire.rs`.

//! Testing a service in process: the unchanged production app, with NATS emulated inside the
//! process and every delay on tokio's clock.
//!
//! [`TestApp::start`] starts the app on an [`InProcessNats`], which keeps Core and JetStream
//! semantics (queue groups, streams, pull consumers, `+ACK`, `-NAK` with a delay, `+TERM`,
//! ack_wait, delivered counts). The runtime above the wire is the production one. Under
//! `#[tokio::test(start_paused = true)]` a `retry_after(30 s)` passes as soon as nothing else can
//! run.
//!
//! ```
//! use std::time::Duration;
//!
//! use ruststream_nats::prelude::*;
//! use ruststream_nats::testing::TestApp;
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Payment {
//!     id: u64,
//! }
//!
//! struct Capture;
//!
//! impl Handle<Payment> for Capture {
//!     async fn handle(
//!         &self,
//!         _payment: &Payment,
//!         _outs: &(),
//!         ctx: &mut Context<'_>,
//!     ) -> Result<(), HandlerOutcome> {
//!         // The bank is busy on the first delivery.
//!         if ctx.delivery().delivered() == Some(1) {
//!             return Err(HandlerOutcome::retry_after(Duration::from_secs(30)));
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let app = RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(
//!     NatsBroker::new("nats://localhost:4222"),
//!     |b| {
//!         b.include(
//!             JetStreamSubject::new("payments.authorized", "PAYMENTS")
//!                 .durable("capture")
//!                 .handler(Capture),
//!         );
//!     },
//! );
//! let t = TestApp::start(app).await?;
//! t.publish("payments.authorized", &Payment { id: 7 }).await?;
//! t.settle().await;
//! assert_eq!(t.outcomes("Capture"), [HandlerOutcome::retry_after(Duration::from_secs(30))]);
//! t.advance(Duration::from_secs(30)).await;
//! assert_eq!(t.outcomes("Capture").len(), 2);
//! assert_eq!(t.delivered("Capture"), [Some(1), Some(2)]);
//! t.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # When `settle` returns
//!
//! [`TestApp::settle`] yields to the runtime until [`QUIET_ROUNDS`] yields in a row saw no
//! change in: the emulation's activity counter (publishes, deliveries, settlements, timers,
//! messages the runtime read), its in-flight count (messages handed over and not read or not
//! settled), the number of deliveries the app's handlers finished, and the number of tasks alive
//! on the runtime. Each yield lets every task that can run, run, so that state means nothing
//! can happen until time passes. A handler waiting on a timer counts as settled; a message held
//! by a `-NAK` delay or waiting for ack_wait does too. An app that never stops changing (a
//! JetStream `retry()` with no cap, redelivered at once forever) makes `settle` panic as soon as
//! one message was delivered [`LOOP_DELIVERIES`] times (in well under a second), or after
//! [`MAX_ROUNDS`] yields, with a message that names the registration; [`TestApp::try_settle`]
//! returns `false` instead.
//!
//! # Streams
//!
//! [`TestApp::start`] creates the streams the app's JetStream registrations read, so a test
//! needs no setup. In production the app refuses to start when such a stream is missing and the
//! broker does not declare it: the test's output says which streams it created that way, and
//! [`TestApp::streams_created_for_the_test`] lists them.
//!
//! The rule assumes the test runs on tokio's current-thread runtime (what `#[tokio::test]`
//! starts), where one yield lets every other ready task run first.
//!
//! # Against a real server
//!
//! [`TestApp::start_live`] runs the same app, and the same test body, against a real
//! nats-server at a URL; [`NatsServer::start`] starts one for the test (a free port, JetStream,
//! a temporary store, stopped on drop). The questions are the same (`outcomes`, `delivered`,
//! `published`, `dead_letters`, [`consumer_info`](TestApp::consumer_info),
//! [`stream_messages`](TestApp::stream_messages),
//! [`acknowledgements`](TestApp::acknowledgements)); [`settle`](TestApp::settle) waits on what
//! the server shows and [`advance`](TestApp::advance) waits real time. `docs/testing.md` has
//! the whole rule and an example.
//!
//! # How `advance` moves the clock
//!
//! [`TestApp::advance`] settles, sleeps until the next deadline the emulation knows (an ack_wait
//! running out, a `-NAK` delay ending) or the end of the duration, whichever comes first, and
//! repeats until the end, settling after each step. Under a paused clock tokio moves time only
//! when every task waits on a timer, to the earliest one, so the timers the emulation does not
//! know (a Core retry copy waiting in the runtime, a handler's own sleep) fire in order too.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use ruststream::registration::RegistrationInfo;
use ruststream::{
    App, Env, Error, ErrorKind, HandlerOutcome, Headers, Observer, PublishError, PublishErrorKind,
    RunningApp,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

mod live;
mod questions;
mod recorder;
mod wire;

pub use ruststream_test_server::{NatsServer, StartError};

use self::live::Live;
pub use self::live::{LIVE_PATIENCE, LIVE_POLL};
pub use self::recorder::{DecodeFailure, HandledDelivery, HandlerPanic, Recorder};
use crate::embedded::declare_merged;
pub use crate::embedded::streams_of;
pub use crate::transport::RawMessage;
pub use crate::transport::in_process::{
    ConsumerFacts, InProcessNats, MAX_PAYLOAD, StoredMessage, StreamLimits,
};
use crate::transport::{CorePubSub, Transport, TransportOverride};

/// How many yields in a row must see no change before [`TestApp::settle`] returns.
pub const QUIET_ROUNDS: u32 = 16;

/// How many yields [`TestApp::settle`] takes before it gives up on an app that keeps changing.
pub const MAX_ROUNDS: u32 = 100_000;

/// How many deliveries of one message make [`TestApp::settle`] give up at once: the message is
/// delivered again without end (a `retry()` without a cap).
pub const LOOP_DELIVERIES: u64 = 1_000;

/// A production app running on NATS emulated in the process.
///
/// See the [module docs](self) for an example and the exact rule of [`settle`](Self::settle).
pub struct TestApp {
    backend: Backend,
    recorder: Arc<Recorder>,
    registrations: Vec<RegistrationInfo>,
    running: Mutex<Option<RunningApp>>,
    /// Streams `start` created that the app's brokers do not declare.
    undeclared: Vec<String>,
    /// How long a live `settle` waits.
    patience: Duration,
}

impl std::fmt::Debug for TestApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApp")
            .field("live", &matches!(self.backend, Backend::Live(_)))
            .field(
                "registrations",
                &self
                    .registrations
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Where the app runs: NATS emulated in the process, or a real server.
enum Backend {
    InProcess(InProcessNats),
    Live(Box<Live>),
}

/// What `settle` compares between yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Snapshot {
    activity: u64,
    in_flight: usize,
    handled: u64,
    tasks: usize,
}

impl TestApp {
    /// Starts `app` on a new [`InProcessNats`]: declares the streams its JetStream descriptors
    /// read (each with the subjects they read from it), starts the unchanged app with the
    /// emulation as its transport and an observer that records every handled delivery, then
    /// [settles](Self::settle).
    ///
    /// # Errors
    ///
    /// What the app's start returns: a registration the app refuses, a failed startup hook, a
    /// consumer the emulation refuses.
    pub async fn start<A: App>(app: A) -> Result<Self, Error> {
        Self::start_on(app, InProcessNats::new()).await
    }

    /// Starts `app` on an existing emulation, which other apps may share (two instances of a
    /// service, a publisher and a consumer).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_on<A: App>(app: A, nats: InProcessNats) -> Result<Self, Error> {
        let registrations = app.registrations();
        let declared: Vec<String> = app.declared_streams().into_iter().map(|(n, _)| n).collect();
        // A misspelt stream name is refused as production refuses it, not created.
        crate::stream_checks::refuse_near_streams(&nats, app.declared_streams(), &registrations)
            .await?;
        let created = declare_streams(&nats, &registrations).await?;
        let undeclared: Vec<String> = created
            .into_iter()
            .filter(|name| !declared.contains(name))
            .collect();
        if !undeclared.is_empty() {
            // Said in the test's output: production refuses to start without them.
            eprintln!(
                "TestApp: created stream(s) {} in the in-process NATS because the app reads them; \
                 in production the app refuses to start unless they exist or the broker declares them \
                 (`NatsBroker::declare_stream`)",
                undeclared.join(", ")
            );
        }
        let recorder = Arc::new(Recorder::default());
        let observer: Arc<dyn Observer> = Arc::clone(&recorder) as Arc<dyn Observer>;
        let env = Env::new()
            .with(TransportOverride(Arc::new(nats.clone())))
            .with_observer(observer);
        let running = app.start(env).await?;
        let t = Self {
            backend: Backend::InProcess(nats),
            recorder,
            registrations,
            running: Mutex::new(Some(running)),
            undeclared,
            patience: LIVE_PATIENCE,
        };
        t.settle().await;
        Ok(t)
    }

    /// Starts `app` against the real nats-server at `url`, for the same test body as
    /// [`start`](Self::start): the app on a connection of its own (its broker's URL and
    /// connection options are replaced by it), every message the server carries recorded
    /// through a second connection subscribed to `>`, the streams the app reads that the server
    /// lacks (and the app does not declare) created, and deleted again by
    /// [`shutdown`](Self::shutdown).
    ///
    /// Run it under tokio's running clock (`#[tokio::test]`, without `start_paused`):
    /// [`settle`](Self::settle) waits on what the server shows, [`advance`](Self::advance)
    /// waits real time, so a `retry_after(30 s)` takes 30 s. Use short delays in live tests.
    /// [`NatsServer::start`] starts a server for the test.
    ///
    /// ```no_run
    /// # use ruststream_nats::prelude::*;
    /// use ruststream_nats::testing::{NatsServer, TestApp};
    /// # async fn example(app: impl App) -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::start();
    /// let t = TestApp::start_live(app, &server.url()).await?;
    /// // ... the same publishes and assertions as in process ...
    /// t.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// `Connect` when no server answers at `url` (the message says how to start one), `Broker`
    /// when a stream cannot be made, and what the app's start returns.
    pub async fn start_live<A: App>(app: A, url: &str) -> Result<Self, Error> {
        let registrations = app.registrations();
        let declared: Vec<String> = app.declared_streams().into_iter().map(|(n, _)| n).collect();
        let recorder = Arc::new(Recorder::default());
        let (live, transport) =
            Live::connect(url, &registrations, &declared, Arc::clone(&recorder)).await?;
        if !live.created().is_empty() {
            eprintln!(
                "TestApp: created stream(s) {} on the nats-server at {url} because the app reads them; \
                 in production the app refuses to start unless they exist or the broker declares them \
                 (`NatsBroker::declare_stream`)",
                live.created().join(", ")
            );
        }
        let env = Env::new()
            .with(TransportOverride(transport))
            .with_observer(live.observer());
        let running = match app.start(env).await {
            Ok(running) => running,
            Err(e) => {
                live.clean_up().await;
                return Err(e);
            }
        };
        live.app_ready().await;
        let undeclared = live.created().to_vec();
        Ok(Self {
            backend: Backend::Live(Box::new(live)),
            recorder,
            registrations,
            running: Mutex::new(Some(running)),
            undeclared,
            patience: LIVE_PATIENCE,
        })
    }

    /// How long [`settle`](Self::settle) waits on a real server before it panics with what is
    /// still pending ([`LIVE_PATIENCE`] unless set); in process it counts yields, not time, and
    /// this has no effect.
    #[must_use]
    pub fn with_patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }

    /// Whether the app runs against a real server ([`start_live`](Self::start_live)).
    pub fn is_live(&self) -> bool {
        matches!(self.backend, Backend::Live(_))
    }

    /// The streams [`start`](Self::start) created because the app reads them, though its
    /// brokers do not declare them: in production they must exist before the app starts (the
    /// test's output says so too).
    pub fn streams_created_for_the_test(&self) -> &[String] {
        &self.undeclared
    }

    /// The emulated server, to ask what a test would ask a real one.
    ///
    /// # Panics
    ///
    /// On a test app started with [`start_live`](Self::start_live): ask the server through
    /// [`consumer_info`](Self::consumer_info), [`stream_messages`](Self::stream_messages) and
    /// [`acknowledgements`](Self::acknowledgements), which work in both modes.
    pub fn nats(&self) -> &InProcessNats {
        match &self.backend {
            Backend::InProcess(nats) => nats,
            Backend::Live(_) => panic!(
                "TestApp::nats: this test app runs against a real nats-server (`start_live`); \
                 use `consumer_info`, `stream_messages` and `acknowledgements`, which ask either"
            ),
        }
    }

    /// Publishes `value`, encoded as JSON, to `subject` as a client would: a stream whose
    /// subjects match stores it, and every Core subscriber gets it. Call
    /// [`settle`](Self::settle) to let the app handle it.
    ///
    /// # Errors
    ///
    /// `Encode` when the value does not encode, `InvalidSubject` for a subject with wildcards or
    /// empty tokens.
    pub async fn publish<T: Serialize + ?Sized>(
        &self,
        subject: &str,
        value: &T,
    ) -> Result<(), PublishError> {
        let payload = serde_json::to_vec(value)
            .map_err(|e| PublishError::new(PublishErrorKind::Encode, subject).with_source(e))?;
        self.publish_raw(subject, Headers::new(), payload).await
    }

    /// A client of the emulated server, as `NatsClient::of(&running)` gives in production:
    /// confirmed and JetStream publishes, requests.
    pub fn client(&self) -> crate::NatsClient {
        let transport: Arc<dyn Transport> = match &self.backend {
            Backend::InProcess(nats) => Arc::new(nats.clone()),
            Backend::Live(live) => live.test_transport(),
        };
        crate::NatsClient::new(crate::publish::NatsPublisher::new(transport))
    }

    /// Sends `value` as a Core request to `subject`, as a client would, and decodes the
    /// response as `R`. The app answers while this waits (no [`settle`](Self::settle) needed).
    ///
    /// # Errors
    ///
    /// `NoResponders` at once when nobody listens on `subject`, `Timeout` when no response
    /// came within `timeout` (on tokio's clock: under a paused clock it passes as soon as
    /// nothing else can run), `Decode` when the response is not an `R`.
    pub async fn request<T: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        subject: &str,
        value: &T,
        timeout: Duration,
    ) -> Result<R, PublishError> {
        self.client().request(subject, value, timeout).await
    }

    /// Publishes `payload` as it is, with `headers`: for payloads that do not decode, and for
    /// custom headers.
    ///
    /// # Errors
    ///
    /// `InvalidSubject` for a subject with wildcards or empty tokens.
    pub async fn publish_raw(
        &self,
        subject: &str,
        headers: Headers,
        payload: impl Into<Bytes>,
    ) -> Result<(), PublishError> {
        match &self.backend {
            Backend::InProcess(nats) => nats
                .publish(Arc::from(subject), headers, payload.into())
                .await
                .map_err(|e| {
                    PublishError::new(PublishErrorKind::InvalidSubject, subject).with_source(e)
                }),
            Backend::Live(live) => live.publish(subject, headers, payload.into()).await,
        }
    }

    /// Returns once nothing can run without time passing: no handler can make progress and no
    /// message can be delivered. See the [module docs](self) for the exact rule.
    ///
    /// Against a real server ([`start_live`](Self::start_live)) it returns once every message
    /// was handled to a final or a pending outcome, as the server shows it: every delivery
    /// settled on the wire, no stored message left for a consumer of the app, every Core
    /// message handled, every dead letter and due retry copy published, every due redelivery
    /// made.
    ///
    /// # Panics
    ///
    /// When the app is still changing after [`MAX_ROUNDS`] yields: something redelivers or
    /// publishes forever without waiting (a JetStream `retry()` with no cap, for one).
    /// Against a real server, when it did not settle within [`LIVE_PATIENCE`] (or
    /// [`with_patience`](Self::with_patience)): the message
    /// lists what is still pending (a delivery without a settlement, a registration that
    /// handled fewer messages than its subject carried, a dead letter not published).
    pub async fn settle(&self) {
        let nats = match &self.backend {
            Backend::InProcess(nats) => nats,
            Backend::Live(live) => {
                if let Err(pending) = live.settle(self.is_running(), self.patience).await {
                    panic!("{}", live_unsettled(self.patience, &pending));
                }
                return;
            }
        };
        if self.settle_rounds(nats, MAX_ROUNDS, true).await {
            return;
        }
        let (most, registration) = self.recorder.most_deliveries();
        if most >= LOOP_DELIVERIES {
            panic!(
                "TestApp::settle: registration `{registration}` took one message {most} times without time passing; \
                 a handler that retries without a delay and without a cap is delivered again forever: \
                 give it `max_attempts(..)` or use `retry_after(..)`"
            );
        }
        panic!(
            "TestApp::settle: the app was still changing after {MAX_ROUNDS} yields without time passing; \
             a handler that retries without a delay and without a cap is delivered again forever: \
             give it `max_attempts(..)` or use `retry_after(..)`"
        );
    }

    /// [`settle`](Self::settle), giving up after `max_yields` yields: whether the app settled.
    /// Against a real server, `max_yields` polls [`LIVE_POLL`] apart.
    pub async fn try_settle(&self, max_yields: u32) -> bool {
        match &self.backend {
            Backend::InProcess(nats) => self.settle_rounds(nats, max_yields, false).await,
            Backend::Live(live) => live
                .settle(self.is_running(), LIVE_POLL * max_yields)
                .await
                .is_ok(),
        }
    }

    fn is_running(&self) -> bool {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Yields until nothing changed for [`QUIET_ROUNDS`] yields (`true`), at most `max_yields`
    /// times; with `fail_fast`, gives up as soon as one message was delivered
    /// [`LOOP_DELIVERIES`] more times meanwhile (it cannot settle: say so now, not after every
    /// round).
    async fn settle_rounds(&self, nats: &InProcessNats, max_yields: u32, fail_fast: bool) -> bool {
        let mut last = self.snapshot(nats);
        let mut quiet = 0;
        let before = self.recorder.most_deliveries().0;
        for _ in 0..max_yields {
            if fail_fast && self.recorder.most_deliveries().0 >= before + LOOP_DELIVERIES {
                return false;
            }
            tokio::task::yield_now().await;
            let now = self.snapshot(nats);
            if now == last {
                quiet += 1;
                if quiet >= QUIET_ROUNDS {
                    return true;
                }
            } else {
                quiet = 0;
                last = now;
            }
        }
        false
    }

    /// Lets `duration` pass on tokio's clock, firing every timer in order, then settles.
    ///
    /// It settles, sleeps until the next deadline the emulation knows (an ack_wait running
    /// out, a `-NAK` delay ending) or the end of `duration`, whichever comes first, and again
    /// until the end. Under a paused clock (`#[tokio::test(start_paused = true)]`) each sleep
    /// ends at once when nothing else can run, and timers the emulation does not know (a Core
    /// retry copy waiting in the runtime, a handler's own sleep) fire in order too; under a
    /// running clock it takes `duration` of real time.
    ///
    /// Against a real server there is no clock to move: it settles, waits `duration` of real
    /// time, and settles again (so every redelivery and retry copy due by then was handled).
    /// A `retry_after(30 s)` makes a live test take 30 s: give live tests short delays.
    pub async fn advance(&self, duration: Duration) {
        let target = Instant::now() + duration;
        let Backend::InProcess(nats) = &self.backend else {
            self.settle().await;
            tokio::time::sleep_until(target).await;
            self.settle().await;
            return;
        };
        loop {
            self.settle().await;
            let now = Instant::now();
            if now >= target {
                return;
            }
            let next = nats
                .next_deadline()
                .filter(|d| *d > now && *d < target)
                .unwrap_or(target);
            tokio::time::sleep_until(next).await;
        }
    }

    /// Every outcome handler `registration` returned, in order (a rejection by an extractor
    /// included). A call that panicked returned nothing: it is in [`panics`](Self::panics), and
    /// a payload that did not decode in [`decode_failures`](Self::decode_failures);
    /// [`handled`](Self::handled) has every call, whatever it ended in.
    ///
    /// # Panics
    ///
    /// When the app has no registration of that name; the message lists the names it has.
    pub fn outcomes(&self, registration: &str) -> Vec<HandlerOutcome> {
        self.check_registration(registration);
        self.recorder.outcomes(registration)
    }

    /// Every call of handler `registration` that panicked, in order: the delivery, the panic's
    /// message and what the runtime did with it (`on_panic`: `retry()` under the cap by
    /// default). The panic does not fail the test by itself: assert on this.
    ///
    /// # Panics
    ///
    /// When the app has no registration of that name.
    pub fn panics(&self, registration: &str) -> Vec<HandlerPanic> {
        self.check_registration(registration);
        self.recorder.panics(registration)
    }

    /// The delivered count of every delivery handler `registration` ran on, in order:
    /// `Some(1)` on a first JetStream delivery, `None` on Core. A payload that did not decode
    /// is left out (the handler did not run).
    ///
    /// # Panics
    ///
    /// When the app has no registration of that name.
    pub fn delivered(&self, registration: &str) -> Vec<Option<u64>> {
        self.check_registration(registration);
        self.recorder.delivered(registration)
    }

    /// Every delivery of `registration` whose payload did not decode, in order.
    ///
    /// # Panics
    ///
    /// When the app has no registration of that name.
    pub fn decode_failures(&self, registration: &str) -> Vec<DecodeFailure> {
        self.check_registration(registration);
        self.recorder.decode_failures(registration)
    }

    /// Everything `registration` was handed, in order: what the handler said and what the
    /// runtime decided.
    ///
    /// # Panics
    ///
    /// When the app has no registration of that name.
    pub fn handled(&self, registration: &str) -> Vec<HandledDelivery> {
        self.check_registration(registration);
        self.recorder.handled(registration)
    }

    /// The recorder of every handled delivery.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// Drains the app: stops taking deliveries, lets handlers in flight finish and settle, runs
    /// the shutdown hooks. The clock advances as the drain needs.
    ///
    /// # Errors
    ///
    /// What the app's stop returns; an error of kind `Shutdown` when it was already shut down.
    pub async fn shutdown(&self) -> Result<(), Error> {
        let running = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(running) = running else {
            return Err(Error::new(
                ErrorKind::Shutdown,
                "the test app was already shut down",
            ));
        };
        let stopped = running.stop().await;
        if let Backend::Live(live) = &self.backend {
            // The streams go even when something is still pending, before the panic says what.
            let settled = live.settle(false, self.patience).await;
            live.clean_up().await;
            if let Err(pending) = settled {
                panic!("{}", live_unsettled(self.patience, &pending));
            }
        } else {
            self.settle().await;
        }
        stopped
    }

    fn snapshot(&self, nats: &InProcessNats) -> Snapshot {
        Snapshot {
            activity: nats.activity(),
            in_flight: nats.in_flight(),
            handled: self.recorder.count(),
            tasks: tokio::runtime::Handle::try_current()
                .map_or(0, |h| h.metrics().num_alive_tasks()),
        }
    }

    fn check_registration(&self, name: &str) {
        if !self.registrations.iter().any(|r| r.name == name) {
            let names: Vec<&str> = self.registrations.iter().map(|r| r.name.as_str()).collect();
            panic!(
                "the app has no registration named `{name}`; it has: {}",
                names.join(", ")
            );
        }
    }
}

/// Declares every stream the app's JetStream descriptors read, adding their subjects to those
/// of a stream the emulation already has.
/// Returns the names of the streams it created.
async fn declare_streams(
    nats: &InProcessNats,
    registrations: &[RegistrationInfo],
) -> Result<Vec<String>, Error> {
    let mut created = Vec::new();
    for spec in streams_of(registrations) {
        if nats.stream_subjects(&spec.name).is_none() {
            created.push(spec.name.clone());
        }
        declare_merged(nats, spec).await?;
    }
    Ok(created)
}

/// The panic of a live settle that ran out of patience, listing what is still pending.
fn live_unsettled(patience: Duration, pending: &str) -> String {
    format!(
        "TestApp::settle: the app did not settle on the nats-server within {patience:?}; \
         still pending:\n  {pending}"
    )
}

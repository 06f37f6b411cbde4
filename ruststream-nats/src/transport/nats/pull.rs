//! A JetStream pull consumer, read continuously: pull requests published to
//! `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`, answered on one inbox.
//!
//! (Longer than 500 lines on purpose: it is one concept, the pull loop of one consumer, whose
//! methods all read and change the same [`Puller`] fields; nearly a sixth of it is this
//! documentation, the reasons behind each rule. Split into files, one state machine would be
//! read in pieces.)
//!
//! async-nats's own continuous pull (`consumer.stream().messages()`, 0.51) counts a request's
//! messages only once its background task reports the request sent; messages that arrive before
//! that are lost to the count (it saturates at zero). It then waits for messages the server will
//! never send, asks for no more, and the consumer stalls until the request's expiry plus five
//! seconds (35 s by default). Measured here: about one stall per 100 000 messages with pulls of
//! 64, and within the first few hundred messages with pulls of 1. This puller counts a request
//! before sending it, so its count is exact.
//!
//! # How much is asked for
//!
//! The client keeps a lookahead of messages no handler has started yet: asked for and on their
//! way, or arrived and waiting. Two costs pull in opposite directions:
//!
//! - too little, and the server waits on the client: every refill is a round trip, during which
//!   the handlers have only what is left of the lookahead;
//! - too much, and messages wait in the client while their `ack_wait` runs (it starts when the
//!   server sends a message): a slow handler would see them delivered again before it got to
//!   them.
//!
//! So the lookahead is at most what the handlers get through in a tenth of `ack_wait` (the rate
//! they take messages at, measured over at least 10 ms), and within that up to `max` (256, or
//! a batch handler's batch size when larger). A request tops the lookahead up once no more than
//! half of it is still to come, so the next one reaches the server while half a lookahead is
//! left to handle. At the default 30 s `ack_wait`, a handler taking over 85 messages a second
//! gets the full 256; one taking a second per message gets 3, and waits no more than about 3 s
//! for any of them. The lookahead starts at `start` (the registration's concurrency, or its batch
//! size) and at most doubles per request.
//!
//! Requests carry an idle heartbeat: while a request waits on an empty stream, the server says
//! so every second. Silence for two heartbeats, or a reconnection, means the server holds no
//! request of ours (a lost connection takes them with it): the count starts again from zero and
//! a new request goes out. A reconnection is noticed without heartbeats too (a pull expiry of
//! zero asks for none).
//!
//! # Outages
//!
//! Nothing is asked for while the client is not connected: a request written during an outage
//! would wait in the client and go out at the reconnection with every other one, asking for more
//! than the handlers can take before `ack_wait` runs out (they would come back as duplicates).
//! The puller waits for the connection instead, and asks once it is back.
//!
//! A consumer that is gone (deleted by an operator, an ephemeral consumer the server forgot
//! while the link was down, a memory stream lost in a restart) answers no request: no message,
//! no heartbeat (or, from some servers, "no responders"). So after a reconnection, and whenever
//! the server was silent for two heartbeats, the puller asks the server whether the consumer
//! still exists; when it does not (or its stream does not), the pull ends, and the runtime opens the consumer again (see
//! `source/`) from where the registration stood. A server that refuses a request because too
//! many wait ("Exceeded MaxWaiting") is asked again after a pause, not at once.
//!
//! # Forged input
//!
//! Anyone allowed to publish to the inbox could hand the registration a message that is not a
//! delivery of its consumer, and have its settlement sent wherever the message's reply subject
//! points. A message on the inbox whose reply subject is not an acknowledgement subject of this
//! stream and consumer (`$JS.ACK.<stream>.<consumer>.…`) is dropped, with a warning at most
//! every [`FORGED_WARNING_EVERY`] that counts them.
//!
//! # Stopping
//!
//! On stop nothing more is asked for, but requests already on the server still bring messages,
//! and some are on their way as the pull stops. Closing the inbox at once would leave those
//! with nobody: the server counts them delivered, and they wait for `ack_wait` before another
//! instance gets them. (async-nats's own `Subscriber::drain` does not help: 0.51 forgets the
//! subscription as soon as its unsubscription is written, not when the server answered the ping
//! behind it, so what was on the way is dropped all the same.) So [`Puller::stop`] keeps the
//! inbox open for a round trip to the server, after which everything the server wrote before
//! has arrived, and then for what the requests still waiting bring, until they asked for no
//! more, nothing came for [`STOP_QUIET`], or [`STOP_WAIT`] passed. It hands all of it over once
//! the inbox is closed (the server drops requests whose inbox nobody listens to): the runtime
//! handles it, and releases with `-NAK` only what cannot start before the drain deadline.
//! Releasing only after the inbox closed matters: a message released while a request of ours
//! still waits would be sent straight back to us. With
//! requests of ours still waiting, a consumer info follows the close ([`Puller::close`]):
//! nats-server 2.9 gives a message (released by us, or stored after the stop) that meets only a
//! dead request to it and loses it until `ack_wait`, and answering the info makes it drop the
//! dead ones.
//!
//! # A fresh request before the last one expires
//!
//! A new request goes out a little before the newest one expires (two heartbeats before, or
//! half the expiry when that is shorter), so the server always holds one that has not expired.
//! nats-server 2.9 needs it: when a delayed redelivery (`-NAK` with a delay) comes due just as
//! the only waiting request expires, the server drops that request, finds no other, and steps
//! its stream cursor back as if the message were new. The redelivery is lost until `ack_wait`
//! runs out and the last new message is delivered again with `delivered` 1. On an otherwise idle
//! consumer a `retry_after` of the default 30 s expiry ends just as the request sent with the
//! delivery expires: the payments demo met it in about one run in five on 2.9.10
//! (`tests/firstrun_redelivery.rs` puts the two on top of each other).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Poll, ready};
use std::time::Duration;

use async_nats::connection::State;
use async_nats::{Client, Message, StatusCode, Subject, Subscriber};
use bytes::Bytes;
use futures::StreamExt;
use tokio::time::{Instant, Sleep};

use super::errors::is_stream_not_found;
use crate::JetStreamInfo;
use crate::jetstream_info::AckSubject;
use crate::transport::{TransportError, TransportErrorKind};

/// A delivery of the consumer, with what its acknowledgement subject says.
pub(crate) type Delivered = (Message, JetStreamInfo);

/// The longest idle heartbeat asked for: how soon a lost request is noticed.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// How often a waiting puller looks at the connection: how soon a reconnection is noticed.
const CHECK: Duration = Duration::from_millis(250);

/// How long the puller waits before asking again after the server refused a request because
/// too many were waiting.
const MAX_WAITING_PAUSE: Duration = Duration::from_secs(1);

/// The most often a warning about forged messages on the inbox is logged.
pub(crate) const FORGED_WARNING_EVERY: Duration = Duration::from_secs(10);

/// The shortest stretch the handling rate is measured over.
const RATE_WINDOW: Duration = Duration::from_millis(10);

/// The share of `ack_wait` a message may spend waiting in the client: a tenth.
const ACK_WAIT_SHARE: u32 = 10;

/// On stop: how long the puller waits for more of what it asked for once nothing came.
const STOP_QUIET: Duration = Duration::from_millis(250);

/// On stop: the longest the puller takes in what its requests still bring.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// The header of a terminated request that says how many of its messages were not delivered.
const PENDING_MESSAGES: &str = "Nats-Pending-Messages";

/// How much a [`Puller`] keeps ahead of the handlers (see the module's documentation).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lookahead {
    /// The first lookahead.
    pub(crate) start: usize,
    /// The largest.
    pub(crate) max: usize,
    /// The consumer's `ack_wait`.
    pub(crate) ack_wait: Duration,
    /// How long a request waits on the server.
    pub(crate) expires: Duration,
}

/// The pull side of one consumer.
pub(crate) struct Puller {
    client: Client,
    subscriber: Subscriber,
    next_subject: Subject,
    inbox: Subject,
    /// The stream and the consumer: a delivery's reply subject must name both. Shared with
    /// every delivery's [`JetStreamInfo`] (no copy per message).
    stream: Arc<str>,
    consumer: Arc<str>,
    /// The JetStream domain the last delivery named, shared with the next one that names it.
    domain: Option<Arc<str>>,
    /// Forged messages dropped since the last warning, and when it was logged.
    forged: u64,
    forged_warned: Option<Instant>,
    /// What every request says besides the batch: `,"expires":..,"idle_heartbeat":..}`.
    request_tail: String,
    /// The lookahead: how many messages not yet taken by a handler the client may hold.
    lookahead: usize,
    /// The most the lookahead grows to.
    max: usize,
    /// How long a message may wait in the client: a tenth of `ack_wait`.
    wait_budget: Duration,
    /// Messages asked for and not yet received, expired or refused.
    outstanding: usize,
    /// Messages handed to the reader, ever.
    returned: u64,
    /// When the rate was last measured, and how many messages had been taken by then.
    sampled: Option<(Instant, u64)>,
    /// Messages taken per second, smoothed.
    rate: Option<f64>,
    heartbeat: Option<Duration>,
    /// Fires when the server was silent for two heartbeats.
    quiet: Pin<Box<Sleep>>,
    /// The connection's count of connects when the outstanding requests were sent.
    connects: u64,
    stats: Arc<async_nats::Statistics>,
    /// The consumer is gone (or refuses our requests): nothing more comes.
    ended: bool,
    /// How long before the newest request expires a fresh one goes out; `None` without expiry.
    renew_before: Option<Duration>,
    /// Fires when the newest request needs a successor (armed by each request).
    renew: Pin<Box<Sleep>>,
    renew_armed: bool,
    /// That moment passed: the next turn sends a request whatever the count says.
    renew_due: bool,
    expires: Duration,
    /// Ask the server whether the consumer still exists before the next request (after a
    /// silence or a reconnection).
    verify: bool,
    /// When the wait for a message began (see [`Puller::poll_wait`]); `None` when not waiting.
    waiting_since: Option<Instant>,
}

impl Puller {
    /// Subscribes to the inbox the messages of `consumer` of `stream` will come to. Nothing is
    /// asked for until [`poll_next`](Self::poll_next).
    pub(crate) async fn open(
        client: Client,
        stream: &str,
        consumer: &str,
        lookahead: Lookahead,
    ) -> Result<Self, TransportError> {
        let Lookahead {
            start,
            max,
            ack_wait,
            expires,
        } = lookahead;
        let max = max.max(1);
        let inbox = client.new_inbox();
        let subscriber = client.subscribe(inbox.clone()).await.map_err(|err| {
            TransportError::new(
                TransportErrorKind::Other,
                format!("cannot subscribe to the inbox of consumer `{consumer}`: {err}"),
            )
        })?;
        // The server wants a heartbeat under half the expiry; no expiry, no heartbeat.
        let heartbeat = (!expires.is_zero()).then(|| HEARTBEAT.min(expires / 2));
        let request_tail = match heartbeat {
            Some(heartbeat) => format!(
                r#","expires":{},"idle_heartbeat":{}}}"#,
                expires.as_nanos(),
                heartbeat.as_nanos()
            ),
            None => "}".to_owned(),
        };
        let stats = client.statistics();
        Ok(Self {
            next_subject: Subject::from(format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}")),
            inbox: Subject::from(inbox),
            stream: Arc::from(stream),
            consumer: Arc::from(consumer),
            domain: None,
            forged: 0,
            forged_warned: None,
            client,
            subscriber,
            request_tail,
            lookahead: start.clamp(1, max),
            max,
            wait_budget: ack_wait / ACK_WAIT_SHARE,
            outstanding: 0,
            returned: 0,
            sampled: None,
            rate: None,
            heartbeat,
            quiet: Box::pin(tokio::time::sleep(Duration::ZERO)),
            connects: stats.connects.load(Ordering::Relaxed),
            stats,
            ended: false,
            renew_before: heartbeat.map(|heartbeat| (2 * heartbeat).min(expires / 2)),
            renew: Box::pin(tokio::time::sleep(Duration::ZERO)),
            renew_armed: false,
            renew_due: false,
            expires,
            verify: false,
            waiting_since: None,
        })
    }

    /// async-nats's id of the inbox's subscription, to name it when the client drops its
    /// messages.
    pub(crate) fn sid(&self) -> Option<u64> {
        crate::events::subscription_id(&self.subscriber)
    }

    /// The next message the server delivered, as far as it comes without awaiting anything but
    /// messages (what nearly every message takes): a delivery, the end or an error
    /// ([`Polled::Ready`]), or the [`Step`] that awaits something else (a pull request to send,
    /// the consumer to check, a pause), for [`step`](Self::step) to take before polling again.
    /// Polled directly by the reader (`reading.rs`), it needs no future per message.
    ///
    /// More is asked for whenever no more than half the lookahead is still to come: before
    /// waiting, and again before a message is handed over. `None` once nothing more can come:
    /// the consumer was deleted, or the connection closed for good. An error is reported once;
    /// the next call carries on.
    pub(crate) fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Polled> {
        loop {
            if self.ended {
                return Poll::Ready(Polled::Ready(None));
            }
            // Not in the middle of a wait: a wait goes on until it ends (see `poll_wait`), as
            // its start is what the server's silence is measured from.
            if self.waiting_since.is_none()
                && (self.verify || self.outstanding <= self.lookahead / 2 || self.renew_due)
                && self.online()
            {
                return Poll::Ready(Polled::Await(Step::Ask));
            }
            let Some(message) = ready!(self.poll_message(cx)) else {
                // Silence (the count was reset), or the newest request is about to expire:
                // ask again.
                continue;
            };
            let Some(message) = message else {
                // The client closed the subscription: the connection is gone for good.
                return Poll::Ready(Polled::Ready(None));
            };
            match message.status {
                None | Some(StatusCode::OK) => {
                    let Some(info) = self.delivered_here(&message) else {
                        continue;
                    };
                    self.outstanding = self.outstanding.saturating_sub(1);
                    self.returned += 1;
                    // Ask for more now, not when the next message is wanted: the request is
                    // on the server while this one is handled.
                    if self.outstanding <= self.lookahead / 2 {
                        return Poll::Ready(Polled::Await(Step::AskThenHand((message, info))));
                    }
                    return Poll::Ready(Polled::Ready(Some(Ok((message, info)))));
                }
                Some(StatusCode::IDLE_HEARTBEAT) => {}
                // A request expired (or, unpinned, was let go): what it did not deliver never
                // comes.
                Some(StatusCode::TIMEOUT | StatusCode::NOT_FOUND | StatusCode::PIN_ID_MISMATCH) => {
                    self.undelivered(&message);
                }
                Some(StatusCode::REQUEST_TERMINATED) => {
                    let description = message.description.as_deref().unwrap_or_default();
                    if description.eq_ignore_ascii_case("Consumer Deleted")
                        || description.eq_ignore_ascii_case("Consumer is push based")
                        || description.starts_with("Exceeded MaxRequest")
                    {
                        // The same request would meet the same answer: the pull ends here.
                        self.ended = true;
                        return Poll::Ready(Polled::Ready(Some(Err(TransportError::new(
                            TransportErrorKind::Other,
                            format!("pulling ended: {description}"),
                        )))));
                    }
                    if description.starts_with("Exceeded MaxWaiting") {
                        // Asking again at once would meet the same answer: pause.
                        self.undelivered(&message);
                        tracing::warn!(
                            consumer = %self.consumer,
                            stream = %self.stream,
                            pause = ?MAX_WAITING_PAUSE,
                            "the server refused a pull request: too many requests wait on the consumer (its max_waiting); asking again after a pause"
                        );
                        return Poll::Ready(Polled::Await(Step::Pause));
                    }
                    // A leadership change, a message over the size asked for: the request
                    // ended.
                    tracing::debug!(description, "a pull request ended early");
                    self.undelivered(&message);
                }
                Some(StatusCode::NO_RESPONDERS) => {
                    // Nobody serves the consumer: it is gone (deleted, an ephemeral consumer
                    // the server forgot, a memory stream lost in a restart), or JetStream is
                    // off. The same request would meet the same answer: the pull ends, and the
                    // runtime opens the consumer again.
                    self.outstanding = 0;
                    self.ended = true;
                    return Poll::Ready(Polled::Ready(Some(Err(TransportError::new(
                        TransportErrorKind::Other,
                        format!(
                            "pulling ended: consumer `{}` of stream `{}` does not answer (no responders: it is gone, or JetStream is off)",
                            self.consumer, self.stream
                        ),
                    )))));
                }
                Some(status) => {
                    // A request refused (a bad request, say) delivers nothing more.
                    self.undelivered(&message);
                    return Poll::Ready(Polled::Ready(Some(Err(TransportError::new(
                        TransportErrorKind::Other,
                        format!(
                            "pulling failed: status {status} ({})",
                            message.description.as_deref().unwrap_or_default()
                        ),
                    )))));
                }
            }
        }
    }

    /// Takes `step`: `Some` with the next delivery (or the end, or an error) when the step ends
    /// in one, `None` when polling goes on.
    pub(crate) async fn step(
        &mut self,
        step: Step,
    ) -> Option<Option<Result<Delivered, TransportError>>> {
        match step {
            Step::Ask => {
                if self.verify && self.online() {
                    self.verify = false;
                    if let Some(gone) = self.gone().await {
                        self.ended = true;
                        return Some(Some(Err(gone)));
                    }
                }
                if (self.outstanding <= self.lookahead / 2 || self.renew_due)
                    && self.online()
                    && let Err(err) = self.pull().await
                {
                    return Some(Some(Err(err)));
                }
                None
            }
            Step::AskThenHand(delivered) => {
                // A failure is reported by the next call, which asks again.
                let _ = self.pull().await;
                Some(Some(Ok(delivered)))
            }
            Step::Pause => {
                tokio::time::sleep(MAX_WAITING_PAUSE).await;
                None
            }
        }
    }

    /// Stops pulling (on stop) and returns every delivery the client holds or that was on its
    /// way (see "Stopping" in the module's documentation): nothing more is asked for; after a
    /// round trip to the server, what it wrote before has arrived; then what the requests still
    /// waiting bring is taken too, until they asked for no more, nothing came for
    /// [`STOP_QUIET`], or [`STOP_WAIT`] passed. The inbox closes when the puller is dropped.
    pub(crate) async fn stop(&mut self) -> Vec<Delivered> {
        self.ended = true;
        let mut held = Vec::new();
        let started = Instant::now();
        let client = self.client.clone();
        let round_trip = client.flush();
        tokio::pin!(round_trip);
        let mut flushed = false;
        let mut quiet_at = started + STOP_QUIET;
        let give_up = started + STOP_WAIT;
        loop {
            if flushed && self.outstanding == 0 {
                break;
            }
            let message = tokio::select! {
                biased;
                message = self.subscriber.next() => message,
                done = &mut round_trip, if !flushed => {
                    flushed = true;
                    if done.is_err() {
                        // The connection is gone, and the requests with it.
                        break;
                    }
                    quiet_at = Instant::now() + STOP_QUIET;
                    continue;
                }
                () = tokio::time::sleep_until(quiet_at.min(give_up)), if flushed => break,
                () = tokio::time::sleep_until(give_up), if !flushed => break,
            };
            let Some(message) = message else { break };
            match message.status {
                None | Some(StatusCode::OK) => {
                    if let Some(info) = self.delivered_here(&message) {
                        self.outstanding = self.outstanding.saturating_sub(1);
                        quiet_at = Instant::now() + STOP_QUIET;
                        held.push((message, info));
                    }
                }
                Some(StatusCode::IDLE_HEARTBEAT) => {}
                Some(_) => self.undelivered(&message),
            }
        }
        tracing::debug!(
            consumer = %self.consumer,
            held = held.len(),
            still_asked = self.outstanding,
            "the pull stopped"
        );
        held
    }

    /// Closes the inbox after [`stop`](Self::stop). When requests of ours may still wait on
    /// the server, it then asks for the consumer's info, on the same connection, before handing
    /// the deliveries over: answering it, the server drops the requests whose inbox nobody
    /// listens to any more. nats-server 2.9 needs it (fixed in later servers): a message that
    /// comes up while the only waiting request is a dead one of ours (a delivery we release, or
    /// one stored after the stop, which the next instance should get at once) is sent to that
    /// request and counted delivered, so it waited for `ack_wait` before anyone got it.
    pub(crate) async fn close(mut self: Box<Self>) {
        // Written to the connection before the info request below (one command queue, in
        // order); the `Drop` of the subscriber only tries once.
        if let Err(err) = self.subscriber.unsubscribe().await {
            tracing::debug!(consumer = %self.consumer, %err, "closing the inbox");
        }
        if self.outstanding == 0 || !self.online() {
            return;
        }
        let js = async_nats::jetstream::new(self.client.clone());
        let info = js
            .get_consumer_from_stream::<async_nats::jetstream::consumer::pull::Config, _, _>(
                &*self.consumer,
                &*self.stream,
            );
        match tokio::time::timeout(STOP_WAIT, info).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => {
                tracing::debug!(consumer = %self.consumer, %err, "asking for the consumer's info after the stop");
            }
            Err(_) => {
                tracing::debug!(consumer = %self.consumer, "no answer to the consumer info after the stop");
            }
        }
    }

    /// Whether the consumer (or its stream) is gone, as the server says: the error that ends the
    /// pull. `None` when it exists or the server could not say.
    async fn gone(&self) -> Option<TransportError> {
        use async_nats::jetstream::context::ConsumerInfoErrorKind;
        let gone = |what: String| {
            Some(TransportError::new(
                TransportErrorKind::Other,
                format!("pulling ended: {what}"),
            ))
        };
        let js = async_nats::jetstream::new(self.client.clone());
        let stream = match js.get_stream(&self.stream).await {
            Ok(stream) => stream,
            Err(err) if is_stream_not_found(&err) => {
                return gone(format!("stream `{}` does not exist any more", self.stream));
            }
            Err(_) => return None,
        };
        match stream.consumer_info(&self.consumer).await {
            Ok(_) => None,
            Err(err) => match err.kind() {
                ConsumerInfoErrorKind::NotFound => gone(format!(
                    "consumer `{}` of stream `{}` does not exist any more",
                    self.consumer, self.stream
                )),
                ConsumerInfoErrorKind::JetStream(js) if js.code() == 404 => gone(format!(
                    "consumer `{}` of stream `{}` does not exist any more",
                    self.consumer, self.stream
                )),
                _ => None,
            },
        }
    }

    /// Whether the client is connected: requests go out only then.
    fn online(&self) -> bool {
        self.client.connection_state() == State::Connected
    }

    /// Whether `message` is a delivery of this consumer: its reply subject is an acknowledgement
    /// subject naming this stream and consumer. Anything else was published to the inbox by
    /// someone else: it is dropped (counted, and logged at most every
    /// [`FORGED_WARNING_EVERY`]). A delivery's facts, read from the subject here, go with it
    /// (the subject is read once per delivery).
    fn delivered_here(&mut self, message: &Message) -> Option<JetStreamInfo> {
        let genuine = message
            .reply
            .as_deref()
            .and_then(AckSubject::parse)
            .filter(|ack| ack.stream == &*self.stream && ack.consumer == &*self.consumer);
        if let Some(ack) = genuine {
            return Some(JetStreamInfo::shared(
                ack,
                &self.stream,
                &self.consumer,
                &mut self.domain,
            ));
        }
        self.forged += 1;
        let now = Instant::now();
        if self
            .forged_warned
            .is_none_or(|at| now.duration_since(at) >= FORGED_WARNING_EVERY)
        {
            tracing::warn!(
                consumer = %self.consumer,
                stream = %self.stream,
                dropped = self.forged,
                subject = %message.subject,
                reply = message.reply.as_deref().unwrap_or(""),
                "dropped messages published to the consumer's inbox that are not its deliveries (their reply subject is not this consumer's acknowledgement subject); nothing was handled or settled for them"
            );
            self.forged = 0;
            self.forged_warned = Some(now);
        }
        None
    }

    /// Sizes the lookahead, then asks for what tops it up (at least half of it), counted before
    /// it is sent: its messages can arrive as soon as it is.
    async fn pull(&mut self) -> Result<(), TransportError> {
        self.resize();
        let batch = self.lookahead.saturating_sub(self.outstanding).max(1);
        let request = Bytes::from(format!(r#"{{"batch":{batch}{}"#, self.request_tail));
        self.outstanding += batch;
        self.connects = self.stats.connects.load(Ordering::Relaxed);
        self.renew_due = false;
        if let Some(before) = self.renew_before {
            // Moved at most once per heartbeat, not per request: firing up to a heartbeat
            // early only sends the successor a little sooner.
            let at = Instant::now() + self.expires.saturating_sub(before);
            if !self.renew_armed || at > self.renew.deadline() + HEARTBEAT {
                self.renew.as_mut().reset(at);
                self.renew_armed = true;
            }
        }
        let sent = self
            .client
            .publish_with_reply(self.next_subject.clone(), self.inbox.clone(), request)
            .await;
        if let Err(err) = sent {
            self.outstanding -= batch;
            return Err(TransportError::new(
                TransportErrorKind::Other,
                format!("pulling failed: {err}"),
            ));
        }
        Ok(())
    }

    /// Measures the rate handlers take messages at (over at least [`RATE_WINDOW`]), and sizes
    /// the lookahead: what they take in the wait budget, at most double the last one, within
    /// 1 and `max`.
    fn resize(&mut self) {
        let now = Instant::now();
        let taken = self.returned;
        let Some((at, before)) = self.sampled else {
            // The first request asks for `start`.
            self.sampled = Some((now, taken));
            return;
        };
        let elapsed = now.duration_since(at);
        if elapsed >= RATE_WINDOW {
            let sample = taken.saturating_sub(before) as f64 / elapsed.as_secs_f64();
            self.rate = Some(self.rate.map_or(sample, |rate| (rate + sample) / 2.0));
            self.sampled = Some((now, taken));
        }
        let grown = self.lookahead.saturating_mul(2).min(self.max);
        self.lookahead = match self.rate {
            Some(rate) => {
                let affordable = rate * self.wait_budget.as_secs_f64();
                (affordable as usize).clamp(1, grown)
            }
            None => grown,
        };
    }

    /// A request ended with messages undelivered: they no longer count. A status without the
    /// count ends them all: asking again too soon only brings a few messages early, waiting for
    /// messages that never come would stall.
    fn undelivered(&mut self, status: &Message) {
        let undelivered = status
            .headers
            .as_ref()
            .and_then(|headers| headers.get(PENDING_MESSAGES))
            .and_then(|value| value.as_str().trim().parse().ok())
            .unwrap_or(self.outstanding);
        self.outstanding = self.outstanding.saturating_sub(undelivered);
    }

    /// The next message: at once when the client holds one, else [`poll_wait`](Self::poll_wait).
    fn poll_message(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Option<Message>>> {
        if self.waiting_since.is_none()
            && let Poll::Ready(message) = self.subscriber.poll_next_unpin(cx)
        {
            return Poll::Ready(Some(message));
        }
        self.poll_wait(cx)
    }

    /// Waits for the next message. `None` when the requests are lost: the server was silent for
    /// two heartbeats, or the client reconnected since they went out (the server holds none of
    /// them, and the count starts again from zero). While the client is not connected it waits
    /// for the connection, asking for nothing. `None` too when the newest request needs a
    /// successor. The wait starts at the first poll and ends when this is ready.
    fn poll_wait(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Option<Message>>> {
        let started = match self.waiting_since {
            Some(started) => started,
            None => {
                let started = Instant::now();
                // Moved at most once per check, not per message.
                if self.quiet.deadline() < started {
                    self.quiet.as_mut().reset(started + CHECK);
                }
                self.waiting_since = Some(started);
                started
            }
        };
        let silent_at = self.heartbeat.map(|heartbeat| started + 2 * heartbeat);
        let waited = loop {
            if let Poll::Ready(message) = self.subscriber.poll_next_unpin(cx) {
                break Some(message);
            }
            if self.renew_armed && self.renew.as_mut().poll(cx).is_ready() {
                // The newest request is about to expire: ask again (see the module docs).
                self.renew_due = true;
                self.renew_armed = false;
                break None;
            }
            if self.quiet.as_mut().poll(cx).is_ready() {
                let now = Instant::now();
                self.quiet.as_mut().reset(now + CHECK);
                if !self.online() {
                    // A lost connection takes the requests with it; nothing is asked for until
                    // it is back.
                    self.outstanding = 0;
                    continue;
                }
                let reconnected = self.stats.connects.load(Ordering::Relaxed) != self.connects;
                let silent = silent_at.is_some_and(|at| now >= at);
                let idle = self.outstanding == 0;
                if silent || reconnected {
                    self.verify = true;
                }
                if silent || reconnected || idle {
                    tracing::debug!(
                        outstanding = self.outstanding,
                        reconnected,
                        "no message nor heartbeat from the server: pulling again"
                    );
                    self.outstanding = 0;
                    break None;
                }
                continue;
            }
            return Poll::Pending;
        };
        self.waiting_since = None;
        Poll::Ready(waited)
    }
}

/// What [`Puller::poll_next`] came to.
pub(crate) enum Polled {
    /// The next delivery; `None` once nothing more can come.
    Ready(Option<Result<Delivered, TransportError>>),
    /// A step that awaits something besides messages, for [`Puller::step`].
    Await(Step),
}

/// A step of the pull that awaits something besides messages.
#[allow(clippy::large_enum_variant)] // made at most once per request, moved once into its future
pub(crate) enum Step {
    /// Check the consumer when asked to, and send a request when one is due.
    Ask,
    /// Send a request, then hand `Delivered` over (the request reaches the server while it is
    /// handled).
    AskThenHand(Delivered),
    /// The server refused a request because too many wait: pause before asking again.
    Pause,
}

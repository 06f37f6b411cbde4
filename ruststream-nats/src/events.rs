//! What async-nats reports about the connection while the app runs, said in the app's terms:
//! credentials the server stopped accepting (an error naming the broker) and messages the client
//! dropped (a warning naming the registration or the consumer, with a count, and the metric):
//! every drop, whatever subscription it hit.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::Duration;

use async_nats::{ClientError, Event, ServerError};
use tokio::sync::watch;
use tokio::time::Instant;

/// How often dropped Core messages are reported (one warning per registration at most).
pub(crate) const SLOW_CONSUMER_REPORT: Duration = Duration::from_secs(1);

/// How often the same connection problem is logged again while it lasts.
const REPEAT_AFTER: Duration = Duration::from_secs(30);

/// Whether the client is connected now, as it says itself (not from its events).
pub(crate) type Connected = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// The connection events of one broker.
pub(crate) struct Events {
    /// The broker's address, without credentials.
    broker: String,
    state: Mutex<State>,
    /// Told of disconnections (`/readyz`, the `ruststream_connected` gauge).
    health: Option<ruststream::telemetry::Health>,
}

#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
enum Kind {
    #[default]
    Core,
    Pull,
    Unnamed,
}

#[derive(Default)]
struct State {
    /// Which registrations read a Core subject (and queue group).
    names: HashMap<(String, Option<String>), Vec<String>>,
    /// async-nats subscription id → its Core subscription.
    subscriptions: HashMap<u64, Dropped>,
    /// Dropped messages of subscriptions this broker did not name (a reply inbox, a watcher).
    unnamed: Dropped,
    /// When a refused credential was last logged, and how many times since.
    refused: Option<(Instant, u64)>,
    /// Whether the connection was lost since it was last made.
    disconnected: bool,
}

#[derive(Default)]
struct Dropped {
    /// The registrations reading the subscription (a pull's: its consumer).
    registrations: String,
    subject: String,
    /// What was dropped: Core messages, or a pull's JetStream deliveries.
    kind: Kind,
    /// Messages dropped so far, and how many of them were reported.
    count: u64,
    reported: u64,
}

impl Events {
    pub(crate) fn new(broker: String) -> Self {
        Self {
            broker,
            state: Mutex::new(State::default()),
            health: None,
        }
    }

    /// Tells `health` of the connection's state from now on (connected now).
    pub(crate) fn with_health(mut self, health: Option<ruststream::telemetry::Health>) -> Self {
        if let Some(health) = &health {
            health.set_connected(&self.broker, true);
            // Counted as connected once: `set_connected(true)` on a connected broker is a no-op.
        }
        self.health = health;
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `registration` reads `subject` (in `queue_group`) on Core.
    pub(crate) fn name_registration(
        &self,
        registration: &str,
        subject: &str,
        queue_group: Option<&str>,
    ) {
        self.state()
            .names
            .entry((subject.to_owned(), queue_group.map(str::to_owned)))
            .or_default()
            .push(registration.to_owned());
    }

    /// Records the async-nats subscription `sid` of a Core subject.
    pub(crate) fn subscribed(&self, sid: u64, subject: &str, queue_group: Option<&str>) {
        let mut state = self.state();
        let registrations = state
            .names
            .get(&(subject.to_owned(), queue_group.map(str::to_owned)))
            .map_or_else(|| "(unnamed)".to_owned(), |names| names.join(", "));
        state.subscriptions.insert(
            sid,
            Dropped {
                registrations,
                subject: subject.to_owned(),
                kind: Kind::Core,
                count: 0,
                reported: 0,
            },
        );
    }

    /// Records the async-nats subscription `sid` of the inbox pulling `consumer` of `stream`.
    pub(crate) fn pulling(&self, sid: u64, consumer: &str, stream: &str) {
        self.state().subscriptions.insert(
            sid,
            Dropped {
                registrations: consumer.to_owned(),
                subject: format!("consumer `{consumer}` of stream `{stream}`"),
                kind: Kind::Pull,
                count: 0,
                reported: 0,
            },
        );
    }

    /// `count` messages of the subscription `sid` were dropped (async-nats's buffer or the
    /// transport's bounded one was full): counted in the metric, logged by [`report_dropped`](
    /// Self::report_dropped).
    pub(crate) fn dropped(&self, sid: u64, count: u64) {
        let mut state = self.state();
        let dropped = match state.subscriptions.get_mut(&sid) {
            Some(dropped) => dropped,
            None => {
                if state.unnamed.kind != Kind::Unnamed {
                    state.unnamed.kind = Kind::Unnamed;
                    state.unnamed.registrations = "(unnamed)".to_owned();
                }
                &mut state.unnamed
            }
        };
        dropped.count += count;
        ruststream::telemetry::slow_consumer_dropped(&dropped.registrations, count);
    }

    /// One event from async-nats.
    pub(crate) fn on_event(&self, event: Event) {
        match event {
            Event::SlowConsumer(sid) | Event::ServerError(ServerError::SlowConsumer(sid)) => {
                self.dropped(sid, 1);
            }
            Event::ServerError(ServerError::AuthorizationViolation) => {
                self.refused("authorization violation");
            }
            Event::ServerError(ServerError::Other(message)) if is_credentials(&message) => {
                self.refused(&message);
            }
            Event::ClientError(ClientError::Other(message)) if is_credentials(&message) => {
                self.refused(&message);
            }
            Event::Disconnected => {
                let again = std::mem::replace(&mut self.state().disconnected, true);
                if let (false, Some(health)) = (again, &self.health) {
                    health.set_connected(&self.broker, false);
                }
                tracing::warn!(
                    broker = %self.broker,
                    "disconnected from NATS; reconnecting"
                );
            }
            Event::Connected => {
                let mut state = self.state();
                let again = std::mem::take(&mut state.disconnected);
                let refused = state.refused.take();
                drop(state);
                if let (true, Some(health)) = (again, &self.health) {
                    health.set_connected(&self.broker, true);
                }
                if again {
                    tracing::info!(broker = %self.broker, "connected to NATS again");
                }
                if refused.is_some() {
                    tracing::info!(broker = %self.broker, "the server accepts the credentials again");
                }
            }
            // The publisher's subscription to the stream advisories (`publish::StreamWatch`),
            // refused by the user's permissions: the app works on, with a slower learning.
            Event::ServerError(ServerError::Other(message))
                if message.contains(crate::subject::STREAM_ADVISORIES) =>
            {
                tracing::warn!(
                    broker = %self.broker,
                    err = %message,
                    "this connection may not subscribe to the stream advisories: a stream created while the app runs is learned only at the periodic look (`RELEARN_AFTER`), and its outputs are Core publishes until then; grant `subscribe` on `$JS.EVENT.ADVISORY.STREAM.>` to learn it at once"
                );
            }
            Event::LameDuckMode => tracing::warn!(
                broker = %self.broker,
                "the NATS server is shutting down (lame duck mode); the client moves to another server"
            ),
            Event::ServerError(err) => tracing::warn!(
                broker = %self.broker,
                %err,
                "the NATS server reported an error"
            ),
            Event::ClientError(err) => tracing::warn!(
                broker = %self.broker,
                %err,
                "the NATS client reported an error"
            ),
            other => {
                tracing::debug!(broker = %self.broker, event = %other, "NATS connection event")
            }
        }
    }

    /// The server refused the credentials the app runs with: an error, then again every
    /// [`REPEAT_AFTER`] while it lasts (with how many times it happened meanwhile).
    fn refused(&self, what: &str) {
        let now = Instant::now();
        let mut state = self.state();
        match &mut state.refused {
            Some((last, count)) if now.duration_since(*last) < REPEAT_AFTER => {
                *count += 1;
            }
            refused => {
                let times = refused.map_or(1, |(_, count)| count + 1);
                *refused = Some((now, 0));
                drop(state);
                tracing::error!(
                    broker = %self.broker,
                    reason = %what,
                    times,
                    "the NATS server no longer accepts the app's credentials (revoked, changed or expired): nothing is received or sent until they are fixed; renew them and restart the app, or restore them on the server"
                );
            }
        }
    }

    /// Logs the Core messages each subscription dropped since the last report.
    pub(crate) fn report_dropped(&self) {
        let mut state = self.state();
        let state = &mut *state;
        for dropped in state.subscriptions.values_mut().chain([&mut state.unnamed]) {
            let new = dropped.count - dropped.reported;
            if new == 0 {
                continue;
            }
            dropped.reported = dropped.count;
            match dropped.kind {
                Kind::Core => {}
                Kind::Pull => {
                    tracing::warn!(
                        consumer = %dropped.registrations,
                        pulling = %dropped.subject,
                        dropped = new,
                        total = dropped.count,
                        "the client dropped JetStream deliveries of a pull (its buffer was full): they are delivered again after ack_wait, with one attempt fewer left"
                    );
                    continue;
                }
                Kind::Unnamed => {
                    tracing::warn!(
                        dropped = new,
                        total = dropped.count,
                        "the client dropped messages of a subscription that is no registration's (a reply inbox, a watcher): its buffer was full"
                    );
                    continue;
                }
            }
            tracing::warn!(
                registration = %dropped.registrations,
                subject = %dropped.subject,
                dropped = new,
                total = dropped.count,
                "the client dropped Core messages (at least this many: async-nats may not report every drop of a burst): the handlers do not keep up and the subscription's buffer is full (slow consumer); raise `.subscription_capacity(..)` on the broker, add `.concurrency(..)`, handle faster, or use JetStream"
            );
        }
    }

    /// Reports dropped messages every [`SLOW_CONSUMER_REPORT`] until the broker stops, then a
    /// last time; as often, takes the connection's state from the client (`connected`), in
    /// case an event was lost.
    pub(crate) async fn report_until_stopped(
        self: std::sync::Arc<Self>,
        mut stop: watch::Receiver<Option<Instant>>,
        connected: Connected,
    ) {
        let mut tick = tokio::time::interval(SLOW_CONSUMER_REPORT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    self.report_dropped();
                    self.reconcile(connected());
                }
                _ = stop.wait_for(Option::is_some) => break,
            }
        }
        self.report_dropped();
    }

    /// The client says it is `connected` (or not): an event async-nats dropped under a burst
    /// (its channel is bounded) must not leave readiness wrong until the next one.
    pub(crate) fn reconcile(&self, connected: bool) {
        let disconnected = self.state().disconnected;
        if connected && disconnected {
            tracing::debug!(broker = %self.broker, "connected, though no event said so");
            self.on_event(Event::Connected);
        } else if !connected && !disconnected {
            tracing::debug!(broker = %self.broker, "disconnected, though no event said so");
            self.on_event(Event::Disconnected);
        }
    }
}

/// Whether the server's or client's message says the credentials were refused.
fn is_credentials(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("authorization violation")
        || message.contains("authentication expired")
        || message.contains("authentication revoked")
        || message.contains("account authentication")
}

/// The subscription id async-nats gave `subscriber` (it shows only in its `Debug`).
pub(crate) fn subscription_id(subscriber: &async_nats::Subscriber) -> Option<u64> {
    let shown = format!("{subscriber:?}");
    let after = &shown[shown.find("sid: ")? + "sid: ".len()..];
    let digits = after.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_counted_for_the_registrations_reading_the_subscription() {
        let events = Events::new("nats://host:4222".to_owned());
        events.name_registration("audit", "audit.events", None);
        events.name_registration("audit_copy", "audit.events", None);
        events.name_registration("grouped", "audit.events", Some("workers"));
        events.subscribed(7, "audit.events", None);
        events.subscribed(8, "audit.events", Some("workers"));
        events.subscribed(9, "unknown.subject", None);
        for _ in 0..3 {
            events.on_event(Event::SlowConsumer(7));
        }
        events.on_event(Event::SlowConsumer(8));
        // A subscription this broker did not open (a request's inbox, say): not counted.
        events.on_event(Event::SlowConsumer(42));
        let state = events.state();
        let seven = &state.subscriptions[&7];
        assert_eq!(seven.registrations, "audit, audit_copy");
        assert_eq!(seven.count, 3);
        assert_eq!(state.subscriptions[&8].registrations, "grouped");
        assert_eq!(state.subscriptions[&8].count, 1);
        assert_eq!(state.subscriptions[&9].registrations, "(unnamed)");
        drop(state);
        events.report_dropped();
        let state = events.state();
        assert_eq!(state.subscriptions[&7].reported, 3);
    }

    #[test]
    fn drops_of_a_pull_or_of_no_registration_are_counted_too() {
        let events = Events::new("nats://host:4222".to_owned());
        events.pulling(3, "orders", "ORDERS");
        events.on_event(Event::SlowConsumer(3));
        events.dropped(3, 2);
        // A subscription nobody named (a reply inbox): counted apart, not lost.
        events.on_event(Event::SlowConsumer(42));
        let state = events.state();
        assert_eq!(state.subscriptions[&3].count, 3);
        assert_eq!(state.subscriptions[&3].kind, Kind::Pull);
        assert_eq!(state.unnamed.count, 1);
        assert_eq!(state.unnamed.kind, Kind::Unnamed);
        drop(state);
        events.report_dropped();
        let state = events.state();
        assert_eq!(state.subscriptions[&3].reported, 3);
        assert_eq!(state.unnamed.reported, 1);
    }

    #[test]
    fn readiness_follows_the_client_when_an_event_was_lost() {
        let health = ruststream::telemetry::Health::new();
        health.set_started();
        let events = Events::new("nats://host:4222".to_owned()).with_health(Some(health.clone()));
        events.on_event(Event::Disconnected);
        assert!(!health.is_ready());
        // The `Connected` event never came: the client's own state says so.
        events.reconcile(true);
        assert!(health.is_ready());
        events.reconcile(true);
        assert!(health.is_ready(), "counted once");
        // And a `Disconnected` event that never came.
        events.reconcile(false);
        assert!(!health.is_ready());
        events.on_event(Event::Disconnected);
        events.reconcile(true);
        assert!(health.is_ready());
    }

    #[test]
    fn refused_credentials_are_recognized() {
        assert!(is_credentials("Authorization Violation"));
        assert!(is_credentials("user authentication expired"));
        assert!(is_credentials("User Authentication Revoked"));
        assert!(!is_credentials("maximum payload exceeded"));
    }
}

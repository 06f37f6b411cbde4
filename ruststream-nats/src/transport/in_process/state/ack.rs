//! Acknowledgements in the emulated server: what `+ACK`, `-NAK`, `-NAK {"delay": ns}`,
//! `+TERM` and `+WPI` published to a delivery's acknowledgement subject do, and the timers of
//! ack_wait and `-NAK` delays. The subject and the payload are read by the same parsers the
//! runtime uses (`crate::jetstream_info`, `crate::ack_wire`).

use tokio::time::Instant;

use super::State;
use super::consumer::PendingState;
use crate::ack_wire::AckWire;
use crate::jetstream_info::AckSubject;

impl State {
    /// Acts on an acknowledgement published to `subject`: anything that is not one, or names
    /// no delivery waiting for a settlement, is ignored, as on the server.
    pub(super) fn acknowledge(&mut self, subject: &str, payload: &[u8], now: Instant) {
        let Some(ack) = AckSubject::parse(subject) else {
            return;
        };
        let Some(kind) = AckWire::parse(payload) else {
            return;
        };
        let stream_name = ack.stream.to_owned();
        let Some(consumer) = self
            .streams
            .get_mut(ack.stream)
            .and_then(|s| s.consumers.get_mut(ack.consumer))
        else {
            return;
        };
        let seq = ack.stream_sequence;
        let Some(pending) = consumer.pending.get_mut(&seq) else {
            return;
        };
        match kind {
            AckWire::Ack | AckWire::Term => {
                let first_dseq = pending.first_dseq;
                consumer.pending.remove(&seq);
                consumer.redeliver.retain(|s| *s != seq);
                consumer.settled(seq, first_dseq);
            }
            AckWire::Nak(Some(delay)) => {
                pending.state = PendingState::Held { until: now + delay };
                consumer.redeliver.retain(|s| *s != seq);
            }
            AckWire::Nak(None) => {
                if pending.state != PendingState::Due {
                    pending.state = PendingState::Due;
                    consumer.redeliver.push_back(seq);
                }
            }
            AckWire::Progress => {
                if let PendingState::Out { .. } = pending.state {
                    pending.state = PendingState::Out {
                        deadline: now + consumer.ack_wait,
                    };
                }
            }
        }
        self.pump_stream(&stream_name);
    }

    /// Moves every delivery whose ack_wait ran out, or whose `-NAK` delay is over, to the
    /// redelivery queue, and delivers what can be delivered.
    pub(in crate::transport::in_process) fn fire_timers(&mut self, now: Instant) {
        let mut fired = 0;
        for stream in self.streams.values_mut() {
            for consumer in stream.consumers.values_mut() {
                for (seq, pending) in &mut consumer.pending {
                    let due = match pending.state {
                        PendingState::Out { deadline } => deadline <= now,
                        PendingState::Held { until } => until <= now,
                        PendingState::Due => false,
                    };
                    if due {
                        pending.state = PendingState::Due;
                        consumer.redeliver.push_back(*seq);
                        fired += 1;
                    }
                }
            }
        }
        if fired > 0 {
            self.activity += 1;
            let names: Vec<String> = self.streams.keys().cloned().collect();
            for name in names {
                self.pump_stream(&name);
            }
        }
    }

    /// The earliest deadline of any delivery (ack_wait or a `-NAK` delay).
    pub(in crate::transport::in_process) fn next_deadline(&self) -> Option<Instant> {
        self.streams
            .values()
            .flat_map(|s| s.consumers.values())
            .flat_map(|c| c.pending.values())
            .filter_map(|p| match p.state {
                PendingState::Out { deadline } => Some(deadline),
                PendingState::Held { until } => Some(until),
                PendingState::Due => None,
            })
            .min()
    }
}

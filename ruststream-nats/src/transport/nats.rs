//! async-nats transport (being built)

//! What the integration tests share: one module tree, declared by each test crate with
//! `mod support;` (every crate uses a part of it). Where each kind of test lives, and how to run
//! it, is in `CONTRIBUTING.md`.
//!
//! - [`nats`]: a real server, a client to ask it, an app started on it, a scripted handler;
//! - [`fidelity`]: one test body run on the in-process NATS and on a real nats-server;
//! - [`differential`]: generated operations run on both, and what a client saw compared;
//! - [`examples`]: an example's unchanged `app()` on a real nats-server;
//! - [`scale`]: a cluster, services as child processes, the server's view of a consumer;
//! - [`security`]: every log line of the binary, to look for a secret in;
//! - [`logs`]: log capture, on the test's thread or for the whole binary;
//! - [`kv`]: the changes a key-value change handler saw;
//! - [`mix`]: a handler answering every kind of outcome, and what the server must hold after;
//! - [`ops`]: the operations endpoints (`/readyz`, `/metrics`) served and asked over HTTP;
//! - [`program`]: this test binary run again as an app's program (the generated `main`).
//!
//! The server itself, its client questions and child processes are the crate
//! `ruststream-test-server` (`tests/test-server`), compiled once for every package.

#![allow(dead_code, unused_imports)]

pub mod differential;
pub mod examples;
pub mod fidelity;
pub mod kv;
pub mod logs;
pub mod mix;
pub mod nats;
pub mod ops;
pub mod program;
pub mod scale;
pub mod security;

//! The command line: `run` (the default), `check`, `describe`, `asyncapi`; `--help` lists them.

use ruststream_nats::prelude::*;

#[ruststream::app]
fn app() -> impl App<State = ()> {
    {{crate_name}}::app()
}

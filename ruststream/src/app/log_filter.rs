//! The log filter of the generated `main`: `RUST_LOG` read as `tracing_subscriber`'s `Targets`
//! (levels per target), which needs no regular-expression engine in every service's build.

/// The log filter `RUST_LOG` names: `info` when unset, `LEVEL` and `target=LEVEL` directives
/// separated by commas. A value that is not one is reported on standard error and `info` is used,
/// so a typo never silences the service's logs.
pub(crate) fn from_env(var: Option<&str>) -> tracing_subscriber::filter::Targets {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    let info = || Targets::new().with_default(LevelFilter::INFO);
    match var.map(str::trim) {
        None | Some("") => info(),
        Some(text) => text.parse::<Targets>().unwrap_or_else(|err| {
            eprintln!(
                "RUST_LOG={text:?} is not a log filter ({err}): logging at info; write `LEVEL` or `target=LEVEL` directives separated by commas (`info,ruststream_nats=debug`)"
            );
            info()
        }),
    }
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::from_env;

    #[test]
    fn unset_or_empty_is_info() {
        for var in [None, Some(""), Some("  ")] {
            let filter = from_env(var);
            assert!(filter.would_enable("anything", &Level::INFO));
            assert!(!filter.would_enable("anything", &Level::DEBUG));
        }
    }

    #[test]
    fn levels_per_target() {
        let filter = from_env(Some("warn,ruststream_nats=debug"));
        assert!(filter.would_enable("ruststream_nats::source", &Level::DEBUG));
        assert!(!filter.would_enable("ruststream_nats::source", &Level::TRACE));
        assert!(filter.would_enable("hello", &Level::WARN));
        assert!(!filter.would_enable("hello", &Level::INFO));
    }

    #[test]
    fn a_bad_value_falls_back_to_info() {
        let filter = from_env(Some("ruststream_nats=loud"));
        assert!(filter.would_enable("ruststream_nats", &Level::INFO));
        assert!(!filter.would_enable("ruststream_nats", &Level::DEBUG));
    }
}

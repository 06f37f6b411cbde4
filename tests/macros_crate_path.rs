//! Where the code the macros write finds the runtime: `crate = path` for a crate that
//! re-exports RustStream, and `ruststream_nats` for a service that depends on it alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use ruststream::Mount;
use ruststream::registration::RegistrationInfo;
use serde::{Deserialize, Serialize};

/// A platform crate's re-export, as a service would reach it.
mod platform {
    pub use ruststream as rs;
    pub use ruststream_nats as nats;
}

use platform::nats::prelude::{FromRef, HandlerOutcome, Outgoing, RustStream, State, subscriber};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.created")]
#[ruststream(crate = crate::platform::rs)]
struct Order {
    id: u64,
}

#[derive(Clone, Default, FromRef)]
#[ruststream(crate = "crate::platform::rs")]
struct Shop {
    name: String,
}

#[subscriber("orders.created", crate = crate::platform::rs)]
async fn record(order: &Order, State(name): State<String>) -> HandlerOutcome {
    let _ = (order.id, name);
    HandlerOutcome::ack()
}

/// `#[ruststream::app(crate = ..)]` writes its `main` (here in a module, never run) against the
/// re-export.
#[allow(dead_code)]
mod with_app {
    use super::platform::rs::{App, AppInfo, RustStream};

    #[ruststream::app(crate = crate::platform::rs)]
    pub fn app() -> impl App<State = ()> {
        RustStream::new(AppInfo::new("shop", "0.1.0"))
    }
}

fn registration<S, M: Mount<S, K>, K>(handler: M) -> RegistrationInfo {
    handler.mount().info()
}

#[test]
fn a_re_exported_runtime_is_named_with_crate() {
    let info = registration::<Shop, _, _>(record);
    assert_eq!(info.name, "record");
    assert_eq!(info.descriptor.subject, "orders.created");
    assert_eq!(Order::SUBJECT, "orders.created");
    let shop = Shop {
        name: "corner".to_owned(),
    };
    assert_eq!(
        <String as platform::rs::FromRef<Shop>>::from_ref(&shop),
        "corner"
    );
    let _ = RustStream::new(platform::rs::AppInfo::new("shop", "0.1.0"));
    assert_eq!(platform::rs::App::info(&with_app::app()).name(), "shop");
}

/// Builds `tests/macros_fixtures/nats_only.rs` as the `main.rs` of a package whose only
/// RustStream dependency is `ruststream-nats`, offline, with this workspace's lock file.
#[test]
fn a_service_that_depends_only_on_ruststream_nats_compiles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nats-only");
    let project = target.join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    let nats = root.join("ruststream-nats");
    std::fs::write(
        project.join("Cargo.toml"),
        format!(
            "[package]\nname = \"nats-only-service\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [workspace]\n\n[dependencies]\nruststream-nats = {{ path = {:?} }}\nserde = {{ version = \"1\", features = [\"derive\"] }}\n",
            nats.display().to_string()
        ),
    )
    .unwrap();
    std::fs::copy(root.join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    std::fs::copy(
        root.join("tests/macros_fixtures/nats_only.rs"),
        project.join("src/main.rs"),
    )
    .unwrap();
    let output = Command::new(env!("CARGO"))
        .args(["check", "--offline", "--quiet", "--manifest-path"])
        .arg(project.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target.join("target"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "a service without a direct `ruststream` dependency does not compile:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

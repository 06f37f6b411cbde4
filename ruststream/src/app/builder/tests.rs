//! The app builder's drain timeout, as the broker sees it.

use std::sync::Mutex;

use super::*;

/// A broker that records the drain timeout it was started with.
struct Recording(Arc<Mutex<Option<Duration>>>);

struct Stopped;

impl RunningBroker for Stopped {
    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }
}

impl Broker for Recording {
    fn kind(&self) -> &'static str {
        "recording"
    }

    fn address(&self) -> String {
        String::new()
    }

    fn validate(&self, _: &[RegistrationInfo]) -> Result<(), Error> {
        Ok(())
    }

    fn start(
        self: Box<Self>,
        _: Vec<crate::Endpoint>,
        env: Env,
    ) -> BoxFuture<'static, Result<Box<dyn RunningBroker>, Error>> {
        if let Ok(mut seen) = self.0.lock() {
            *seen = Some(env.drain_timeout());
        }
        Box::pin(async { Ok(Box::new(Stopped) as Box<dyn RunningBroker>) })
    }
}

/// The drain timeout the broker sees when the app sets `app` and the environment `env`.
async fn drain_timeout(app: Option<Duration>, env: Env) -> Option<Duration> {
    let seen = Arc::new(Mutex::new(None));
    let mut builder = RustStream::new(AppInfo::new("drain", "0.1.0"))
        .with_broker(Recording(Arc::clone(&seen)), |_| {});
    if let Some(timeout) = app {
        builder = builder.drain_timeout(timeout);
    }
    let running = builder.start(env).await.expect("the app starts");
    running.stop().await.expect("the app stops");
    *seen.lock().expect("not poisoned")
}

#[tokio::test]
async fn the_drain_timeout_is_the_environments_then_the_apps_then_thirty_seconds() {
    let secs = Duration::from_secs;
    // An explicit 30 s in the environment is a choice, not the default: it wins over the app's.
    let explicit = Env::new().with_drain_timeout(secs(30));
    assert_eq!(drain_timeout(Some(secs(5)), explicit).await, Some(secs(30)));
    let operator = Env::new()
        .with_drain_timeout(secs(30))
        .with(crate::telemetry::DrainTimeout(secs(7)));
    assert_eq!(drain_timeout(Some(secs(5)), operator).await, Some(secs(7)));
    assert_eq!(
        drain_timeout(Some(secs(5)), Env::new()).await,
        Some(secs(5))
    );
    assert_eq!(drain_timeout(None, Env::new()).await, Some(secs(30)));
}

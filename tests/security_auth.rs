//! Every way `NatsBroker` authenticates, against a nats-server configured for it: user and
//! password, token, NKey seed, credentials file (a JWT the test issues from its own operator),
//! TLS with a CA the test generates, and mutual TLS. Each with its failure: the app refuses to
//! start with an error naming the server (never the secret) and the likely fix. A `tls://` URL
//! keeps TLS on the servers a cluster announces.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ruststream::{Error, ErrorKind, HandlerOutcome};
use ruststream_nats::{CoreSubject, NatsBroker};
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{PATIENCE, eventually, publish_core};
use support::nats::{Scripted, start};
use support::security::{assert_never_shown, capture};

/// Starts an app reading `notices.sent`, proves a message gets through, and stops it.
async fn serves(server: &NatsServer, broker: NatsBroker, client: async_nats::ConnectOptions) {
    let handler = Scripted::always(HandlerOutcome::ack());
    let app = start(broker, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()));
    })
    .await
    .unwrap_or_else(|err| panic!("the app starts: {err}"));
    let client = client
        .connect(server.url())
        .await
        .expect("the test client connects");
    publish_core(&client, "notices.sent", &[], r#"{"id":7}"#).await;
    assert_eq!(handler.until_seen(1).await[0].id, 7);
    app.stop().await.expect("the app stops");
}

/// Starts an app that the server must refuse, and returns the error.
async fn refused(broker: NatsBroker) -> Error {
    let err = start(broker, |b| {
        b.include(
            CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
        );
    })
    .await
    .expect_err("the app refuses to start");
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
    err
}

/// The error names `server` and says `fix`; neither it nor any log line shows `secret`.
fn assert_refusal(err: &Error, server: &NatsServer, fix: &str, secret: &str) {
    let message = err.to_string();
    assert!(
        message.contains(&format!("127.0.0.1:{}", server.port())),
        "the error names the server: {message}"
    );
    assert!(message.contains(fix), "the error says `{fix}`: {message}");
    assert_never_shown(
        &capture(),
        secret,
        &[("Display", message.clone()), ("Debug", format!("{err:?}"))],
    );
}

#[tokio::test]
async fn user_and_password() {
    capture();
    let secret = "pa55-Word/for?alice";
    let server = NatsServer::builder()
        .config(format!(
            "authorization {{ user: alice, password: \"{secret}\" }}"
        ))
        .start();
    serves(
        &server,
        NatsBroker::new(server.url()).user_and_password("alice", secret),
        async_nats::ConnectOptions::with_user_and_password("alice".into(), secret.into()),
    )
    .await;
    let wrong = "not-Alices-Password";
    let err = refused(NatsBroker::new(server.url()).user_and_password("alice", wrong)).await;
    assert_refusal(&err, &server, "refused the user and password", wrong);
}

#[tokio::test]
async fn token() {
    capture();
    let secret = "S3rvice-Token-0a9b";
    let server = NatsServer::builder()
        .config(format!("authorization {{ token: \"{secret}\" }}"))
        .start();
    serves(
        &server,
        NatsBroker::new(server.url()).token(secret),
        async_nats::ConnectOptions::with_token(secret.into()),
    )
    .await;
    let wrong = "Wrong-Token-77";
    let err = refused(NatsBroker::new(server.url()).token(wrong)).await;
    assert_refusal(&err, &server, "refused the token", wrong);
}

#[tokio::test]
async fn nkey_seed() {
    capture();
    let user = nkeys::KeyPair::new_user();
    let seed = user.seed().expect("a seed");
    let server = NatsServer::builder()
        .config(format!(
            "authorization {{ users: [ {{ nkey: \"{}\" }} ] }}",
            user.public_key()
        ))
        .start();
    serves(
        &server,
        NatsBroker::new(server.url()).nkey(seed.clone()),
        async_nats::ConnectOptions::with_nkey(seed.clone()),
    )
    .await;
    let stranger = nkeys::KeyPair::new_user().seed().expect("a seed");
    let err = refused(NatsBroker::new(server.url()).nkey(stranger.clone())).await;
    assert_refusal(&err, &server, "refused the NKey seed", &stranger);
    assert_never_shown(&capture(), &seed, &[]);
}

#[tokio::test]
async fn credentials_file() {
    capture();
    let operator = Operator::new();
    let server = NatsServer::builder()
        .jetstream(false)
        .config(operator.server_config())
        .start();
    let dir = tempfile::tempdir().expect("a temp dir");
    let (creds, seed) = operator.user_creds(dir.path(), "app", None);
    let (test_creds, _) = operator.user_creds(dir.path(), "test", None);
    serves(
        &server,
        NatsBroker::new(server.url()).credentials_file(&creds),
        async_nats::ConnectOptions::with_credentials_file(test_creds)
            .await
            .expect("the test's credentials"),
    )
    .await;

    // A user of an account the server does not know.
    let stranger = Operator::new();
    let (foreign, foreign_seed) = stranger.user_creds(dir.path(), "stranger", None);
    let err = refused(NatsBroker::new(server.url()).credentials_file(&foreign)).await;
    assert_refusal(&err, &server, "refused the credentials file", &foreign_seed);
    assert_never_shown(&capture(), &seed, &[]);

    // A file that is not there.
    let missing = dir.path().join("missing.creds");
    let err = start(
        NatsBroker::new(server.url()).credentials_file(&missing),
        |b| {
            b.include(
                CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
            );
        },
    )
    .await
    .expect_err("no credentials file");
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("missing.creds"), "{err}");
}

#[tokio::test]
async fn tls_with_a_ca_the_test_generates() {
    capture();
    let dir = tempfile::tempdir().expect("a temp dir");
    let pki = Pki::new(dir.path());
    let server = NatsServer::builder()
        .config(format!(
            "tls {{ cert_file: \"{}\", key_file: \"{}\" }}",
            pki.server_cert.display(),
            pki.server_key.display()
        ))
        .start();
    serves(
        &server,
        NatsBroker::new(server.url())
            .root_certificate(&pki.ca)
            .require_tls(true),
        async_nats::ConnectOptions::new()
            .add_root_certificates(pki.ca.clone())
            .require_tls(true),
    )
    .await;
    // A `tls://` URL alone asks for TLS (of the servers the cluster announces too).
    serves(
        &server,
        NatsBroker::new(format!("tls://127.0.0.1:{}", server.port())).root_certificate(&pki.ca),
        async_nats::ConnectOptions::new()
            .add_root_certificates(pki.ca.clone())
            .require_tls(true),
    )
    .await;

    // Another CA: the server's certificate is not trusted.
    let other = Pki::new(&dir.path().join("other"));
    let err = refused(
        NatsBroker::new(server.url())
            .root_certificate(&other.ca)
            .require_tls(true),
    )
    .await;
    assert_refusal(&err, &server, ".root_certificate(..)", "-----BEGIN");
}

#[tokio::test]
async fn mutual_tls() {
    capture();
    let dir = tempfile::tempdir().expect("a temp dir");
    let pki = Pki::new(dir.path());
    let server = NatsServer::builder()
        .config(format!(
            "tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", verify: true }}",
            pki.server_cert.display(),
            pki.server_key.display(),
            pki.ca.display()
        ))
        .start();
    serves(
        &server,
        NatsBroker::new(server.url())
            .root_certificate(&pki.ca)
            .client_certificate(&pki.client_cert, &pki.client_key),
        async_nats::ConnectOptions::new()
            .add_root_certificates(pki.ca.clone())
            .add_client_certificate(pki.client_cert.clone(), pki.client_key.clone()),
    )
    .await;

    // No client certificate: the server refuses the handshake.
    let err = refused(NatsBroker::new(server.url()).root_certificate(&pki.ca)).await;
    assert_refusal(&err, &server, ".client_certificate(..)", "-----BEGIN");

    // A client certificate from another CA.
    let other = Pki::new(&dir.path().join("other"));
    let err = refused(
        NatsBroker::new(server.url())
            .root_certificate(&pki.ca)
            .client_certificate(&other.client_cert, &other.client_key),
    )
    .await;
    assert_refusal(&err, &server, ".client_certificate(..)", "-----BEGIN");
}

/// A `tls://` URL names one node of a cluster whose other node takes plain connections and
/// is announced to the app (INFO `connect_urls`). When the named node dies, the app reaches the
/// other one over TLS or not at all: never in plain text, its password included.
#[tokio::test]
async fn a_tls_url_never_reaches_an_announced_server_in_clear() {
    tls_url_and_an_announced_node(AnnouncedNode::Plain).await;
}

/// The same with an announced node that takes TLS and plain connections (`allow_non_tls`): the
/// app moves to it over TLS and serves there.
#[tokio::test]
async fn a_tls_url_reaches_an_announced_server_over_tls() {
    tls_url_and_an_announced_node(AnnouncedNode::TlsOptional).await;
}

/// How the announced node's client port takes connections.
#[derive(Clone, Copy, PartialEq)]
enum AnnouncedNode {
    /// No TLS at all.
    Plain,
    /// TLS with `allow_non_tls: true`.
    TlsOptional,
}

async fn tls_url_and_an_announced_node(announced: AnnouncedNode) {
    use ruststream_test_server::cluster::{free_port, monitor_json, retry_taken_ports};
    use serde_json::Value;

    capture();
    let dir = tempfile::tempdir().expect("a temp dir");
    let pki = Pki::new(dir.path());
    let secret = "Cluster-Secret-40";
    let name = "tls-discovery-app";
    let tls = format!(
        "tls {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
        pki.server_cert.display(),
        pki.server_key.display()
    );
    let (mut named, other, named_monitor, other_monitor) = retry_taken_ports(|| {
        let [route_a, route_b, monitor_a, monitor_b] = std::array::from_fn(|_| free_port());
        let node = |server: &str, monitor: u16, route: u16, peer: u16, client_tls: &str| {
            NatsServer::builder()
                .config(format!(
                    "server_name: {server}\nhttp: \"127.0.0.1:{monitor}\"\n{client_tls}\
                     authorization {{ user: app, password: \"{secret}\" }}\n\
                     cluster {{\n  name: tls-discovery\n  listen: \"127.0.0.1:{route}\"\n  \
                     routes: [\"nats-route://127.0.0.1:{peer}\"]\n}}\n"
                ))
                .try_start()
        };
        let other_tls = match announced {
            AnnouncedNode::Plain => String::new(),
            AnnouncedNode::TlsOptional => format!("{tls}allow_non_tls: true\n"),
        };
        let named = node("named", monitor_a, route_a, route_b, &tls)?;
        let other = node("other", monitor_b, route_b, route_a, &other_tls)?;
        Ok((named, other, monitor_a, monitor_b))
    });
    // The named node announces the other one's client address once their route is up.
    let other_address = format!("127.0.0.1:{}", other.port());
    eventually(PATIENCE, "the named node announces the other", || {
        let announced = monitor_json(named_monitor, "/varz")
            .and_then(|varz| varz.get("connect_urls").cloned())
            .and_then(|urls| urls.as_array().cloned())
            .is_some_and(|urls| urls.iter().any(|u| u.as_str() == Some(&other_address)));
        async move { announced.then_some(()) }
    })
    .await;

    // Both nodes run JetStream (the app lists the streams when it starts): wait for their leader.
    eventually(PATIENCE, "a JetStream meta leader", || {
        let leader = monitor_json(named_monitor, "/jsz")
            .and_then(|jsz| {
                jsz.get("meta_cluster")?
                    .get("leader")?
                    .as_str()
                    .map(str::to_owned)
            })
            .is_some_and(|leader| !leader.is_empty());
        async move { leader.then_some(()) }
    })
    .await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let app = support::nats::start_with(
        NatsBroker::new(format!("tls://127.0.0.1:{}", named.port()))
            .root_certificate(&pki.ca)
            .user_and_password("app", secret)
            .connection_name(name),
        // Stopping without a server to drain to waits for the drain timeout: a short one.
        ruststream::Env::new().with_drain_timeout(Duration::from_millis(200)),
        |b| {
            b.include(CoreSubject::new("notices.sent").handler(handler.clone()));
        },
    )
    .await
    .unwrap_or_else(|err| panic!("the app starts: {err}"));
    let client = |port: u16| {
        async_nats::ConnectOptions::with_user_and_password("app".into(), secret.into())
            .add_root_certificates(pki.ca.clone())
            .require_tls(true)
            .connect(format!("tls://127.0.0.1:{port}"))
    };
    let through_named = client(named.port())
        .await
        .expect("a client of the named node");
    publish_core(&through_named, "notices.sent", &[], r#"{"id":1}"#).await;
    assert_eq!(handler.until_seen(1).await[0].id, 1);
    drop(through_named);

    // The other node's client connections so far, open or closed (the start's readiness probe).
    let other_connections = || {
        monitor_json(other_monitor, "/connz?state=all&auth=true")
            .and_then(|connz| connz.get("connections").and_then(Value::as_array).cloned())
            .unwrap_or_default()
    };
    let before: Vec<Value> = other_connections()
        .iter()
        .filter_map(|c| c.get("cid").cloned())
        .collect();

    named.kill();
    // The app moves to the other node, the only one left: wait until that node has a new client
    // connection that got past its start (closed, or open and authenticated).
    let connections = eventually(PATIENCE, "the app tries the announced node", || {
        let connections: Vec<Value> = other_connections()
            .into_iter()
            .filter(|c| c.get("cid").is_none_or(|cid| !before.contains(cid)))
            .collect();
        let settled = connections.iter().any(|c| {
            c.get("stop").is_some()
                || c.get("authorized_user").and_then(Value::as_str) == Some("app")
        });
        async move { settled.then_some(connections) }
    })
    .await;
    let text = |c: &Value, field: &str| {
        c.get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    for connection in &connections {
        assert!(
            !text(connection, "tls_version").is_empty()
                || (text(connection, "authorized_user").is_empty()
                    && text(connection, "name").is_empty()),
            "the app reached the announced node in plain text, its password included: \
             {connection}\n{}",
            other.log_tail()
        );
    }
    if announced == AnnouncedNode::TlsOptional {
        // Over TLS the app subscribes on the other node and serves from it.
        eventually(
            PATIENCE,
            "the app subscribed on the other node over TLS",
            || {
                let connected = monitor_json(other_monitor, "/connz?subs=1")
                    .and_then(|connz| connz.get("connections").and_then(Value::as_array).cloned())
                    .unwrap_or_default()
                    .iter()
                    .any(|c| {
                        text(c, "name") == name
                            && !text(c, "tls_version").is_empty()
                            && c.get("subscriptions_list")
                                .and_then(Value::as_array)
                                .is_some_and(|subs| {
                                    subs.iter().any(|s| s.as_str() == Some("notices.sent"))
                                })
                    });
                async move { connected.then_some(()) }
            },
        )
        .await;
        let through_other = client(other.port())
            .await
            .expect("a client of the other node");
        publish_core(&through_other, "notices.sent", &[], r#"{"id":2}"#).await;
        assert_eq!(handler.until_seen(2).await[1].id, 2);
    }
    let _ = app.stop().await;
}

/// Credentials that expire while the app runs: an error log names the broker.
#[tokio::test]
async fn credentials_that_expire_while_running_are_reported() {
    let captured = capture();
    let operator = Operator::new();
    let server = NatsServer::builder()
        .jetstream(false)
        .config(operator.server_config())
        .start();
    let dir = tempfile::tempdir().expect("a temp dir");
    let (creds, _) = operator.user_creds(dir.path(), "expiring", Some(Duration::from_secs(3)));
    let app = support::nats::start_with(
        NatsBroker::new(server.url()).credentials_file(&creds),
        ruststream::Env::new().with_drain_timeout(Duration::from_millis(200)),
        |b| {
            b.include(
                CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
            );
        },
    )
    .await
    .expect("the app starts before its credentials expire");
    let broker = format!("broker=nats://127.0.0.1:{}", server.port());
    let lines = eventually(PATIENCE, "the expiry reported", || {
        let lines = captured.lines_with(&["ERROR", &broker, "no longer accepts"]);
        async move { (!lines.is_empty()).then_some(lines) }
    })
    .await;
    assert!(lines[0].contains("renew"), "{}", lines[0]);
    // Stopping on a connection the server refuses waits for the drain timeout: a short one.
    let _ = app.stop().await;
}

/// A user removed from the server's configuration while the app runs (the server restarted
/// with the new configuration): the reconnect is refused, an error log names the broker, and
/// the app's readiness turns false.
#[tokio::test]
async fn a_revoked_user_is_reported_while_running() {
    let captured = capture();
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = dir.path().join("nats-server.conf");
    std::fs::write(
        &config,
        "authorization { users: [ { user: bob, password: \"bob-Secret-1\" } ] }",
    )
    .expect("the configuration");
    let mut server = NatsServer::builder().config_file(&config).start();
    let health = ruststream::telemetry::Health::new();
    let app = support::nats::start_with(
        NatsBroker::new(format!(
            "nats://bob:bob-Secret-1@127.0.0.1:{}",
            server.port()
        )),
        ruststream::Env::new()
            .with_drain_timeout(Duration::from_millis(200))
            .with(health.clone()),
        |b| {
            b.include(
                CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
            );
        },
    )
    .await
    .expect("the app starts");
    assert_eq!(health.readiness(), Ok(()), "ready once connected");

    std::fs::write(
        &config,
        "authorization { users: [ { user: carol, password: \"carol-Secret-2\" } ] }",
    )
    .expect("the new configuration");
    server.restart();
    let broker = format!("broker=nats://127.0.0.1:{}", server.port());
    let lines = eventually(PATIENCE, "the revocation reported", || {
        let lines = captured.lines_with(&["ERROR", &broker, "no longer accepts"]);
        async move { (!lines.is_empty()).then_some(lines) }
    })
    .await;
    assert!(lines[0].contains("authorization violation"), "{}", lines[0]);
    // The readiness signal (`/readyz`) follows: not ready while the server refuses the app.
    eventually(PATIENCE, "readiness turns false", || {
        let ready = health.is_ready();
        async move { (!ready).then_some(()) }
    })
    .await;
    // Stopping on a connection the server refuses waits for the drain timeout (the subscription
    // cannot be drained): a short one, set above.
    let _ = app.stop().await;
    assert_never_shown(&captured, "bob-Secret-1", &[]);
}

/// Certificates for TLS: a CA, a server certificate for 127.0.0.1 and a client certificate,
/// as PEM files in a directory.
struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
        std::fs::create_dir_all(dir).expect("the directory");
        let write = |name: &str, contents: String| {
            let path = dir.join(name);
            std::fs::write(&path, contents).expect("a PEM file");
            path
        };
        let ca_key = KeyPair::generate().expect("a key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::CrlSign,
        ];
        let ca = ca_params.self_signed(&ca_key).expect("the CA");

        let server_key = KeyPair::generate().expect("a key");
        let mut server_params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("params");
        server_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let server = server_params
            .signed_by(&server_key, &ca, &ca_key)
            .expect("the server certificate");

        let client_key = KeyPair::generate().expect("a key");
        let mut client_params =
            CertificateParams::new(vec!["ruststream-app".to_owned()]).expect("params");
        client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let client = client_params
            .signed_by(&client_key, &ca, &ca_key)
            .expect("the client certificate");

        Self {
            ca: write("ca.pem", ca.pem()),
            server_cert: write("server.pem", server.pem()),
            server_key: write("server-key.pem", server_key.serialize_pem()),
            client_cert: write("client.pem", client.pem()),
            client_key: write("client-key.pem", client_key.serialize_pem()),
        }
    }
}

/// A NATS operator and one account, issuing user JWTs (decentralized authentication).
struct Operator {
    operator: nkeys::KeyPair,
    account: nkeys::KeyPair,
}

impl Operator {
    fn new() -> Self {
        Self {
            operator: nkeys::KeyPair::new_operator(),
            account: nkeys::KeyPair::new_account(),
        }
    }

    /// A server configuration trusting the operator, with the account preloaded.
    fn server_config(&self) -> String {
        let op = self.operator.public_key();
        let acc = self.account.public_key();
        let operator_jwt = jwt(
            &self.operator,
            &op,
            "operator",
            serde_json::json!({ "type": "operator", "version": 2 }),
            None,
        );
        let account_jwt = jwt(
            &self.operator,
            &acc,
            "account",
            serde_json::json!({
                "limits": {
                    "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                    "wildcards": true, "conn": -1, "leaf": -1
                },
                "default_permissions": { "pub": {}, "sub": {} },
                "type": "account",
                "version": 2
            }),
            None,
        );
        format!(
            "operator: \"{operator_jwt}\"\nresolver: MEMORY\nresolver_preload: {{\n  {acc}: \"{account_jwt}\"\n}}\n"
        )
    }

    /// A `.creds` file for a new user of the account (expiring after `ttl`), and its seed.
    fn user_creds(&self, dir: &Path, name: &str, ttl: Option<Duration>) -> (PathBuf, String) {
        let user = nkeys::KeyPair::new_user();
        let seed = user.seed().expect("a seed");
        let user_jwt = jwt(
            &self.account,
            &user.public_key(),
            name,
            serde_json::json!({
                "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                "type": "user", "version": 2
            }),
            ttl,
        );
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n"
        );
        let path = dir.join(format!("{name}.creds"));
        std::fs::write(&path, creds).expect("the creds file");
        (path, seed)
    }
}

/// A NATS JWT about `subject`, signed by `issuer`.
fn jwt(
    issuer: &nkeys::KeyPair,
    subject: &str,
    name: &str,
    nats: serde_json::Value,
    ttl: Option<Duration>,
) -> String {
    let b64 = |bytes: &[u8]| data_encoding::BASE64URL_NOPAD.encode(bytes);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let mut claims = serde_json::json!({
        "jti": b64(format!("{subject}-{now}-{name}").as_bytes()),
        "iat": now,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    if let Some(ttl) = ttl {
        claims["exp"] = serde_json::json!(now + ttl.as_secs());
    }
    let header = b64(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let body = b64(claims.to_string().as_bytes());
    let signing_input = format!("{header}.{body}");
    let signature = issuer.sign(signing_input.as_bytes()).expect("a signature");
    format!("{signing_input}.{}", b64(&signature))
}

//! How the broker connects: credentials and TLS, recorded at build time and turned into
//! async-nats `ConnectOptions` at startup. Nothing here ever prints a credential.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::ConnectOptions;
use ruststream::{Error, ErrorKind};

/// How long connecting at startup may take before the app refuses to start.
pub(crate) const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// How many messages the broker's own client holds for each subscription while the handlers
/// are behind, in place of async-nats's default (65 536), past which async-nats drops Core
/// messages. A handler slower than an unthrottled publisher for a moment falls that far behind
/// in a burst the server itself would still deliver (its slow-consumer limit is 64 MiB, not a
/// message count), so the client must not be the first to drop. async-nats allocates the buffer
/// as it fills; `.subscription_capacity(n)` bounds what Core subscriptions keep.
pub(crate) const CLIENT_SUBSCRIPTION_CAPACITY: usize = 1 << 18;

/// Who the app is to the server.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Auth {
    CredentialsFile(PathBuf),
    UserPassword { user: String, password: String },
    Token(String),
    NKey(String),
}

impl Auth {
    /// What the credentials are, for error messages (never the credentials themselves).
    pub(crate) fn what(&self) -> &'static str {
        match self {
            Self::CredentialsFile(_) => "credentials file (user JWT and NKey seed)",
            Self::UserPassword { .. } => "user and password",
            Self::Token(_) => "token",
            Self::NKey(_) => "NKey seed",
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CredentialsFile(path) => f.debug_tuple("CredentialsFile").field(path).finish(),
            Self::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &"<redacted>")
                .finish(),
            Self::Token(_) => f.write_str("Token(<redacted>)"),
            Self::NKey(_) => f.write_str("NKey(<redacted>)"),
        }
    }
}

/// Connection settings besides the URL.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnectionOptions {
    pub(crate) auth: Option<Auth>,
    pub(crate) root_certificates: Vec<PathBuf>,
    pub(crate) client_certificate: Option<(PathBuf, PathBuf)>,
    pub(crate) require_tls: bool,
    pub(crate) name: Option<String>,
    pub(crate) connection_timeout: Option<Duration>,
    /// How many Core messages the client holds per subscription before it drops.
    pub(crate) subscription_capacity: Option<usize>,
    /// The client's own options (`NatsBroker::with_options`): the settings above apply on top.
    pub(crate) base: Option<ConnectOptions>,
    /// Ways of authenticating the app declared for the AsyncAPI document
    /// (`NatsBroker::security_scheme`).
    pub(crate) declared_security: Vec<ruststream::asyncapi::SecurityScheme>,
}

impl ConnectionOptions {
    /// The settings a client connected by the app cannot take, by the broker method that set
    /// them (`NatsBroker::from_client`).
    pub(crate) fn set_methods(&self) -> Vec<&'static str> {
        let mut set = Vec::new();
        if let Some(auth) = &self.auth {
            set.push(match auth {
                Auth::CredentialsFile(_) => ".credentials_file(..)",
                Auth::UserPassword { .. } => ".user_and_password(..)",
                Auth::Token(_) => ".token(..)",
                Auth::NKey(_) => ".nkey(..)",
            });
        }
        if !self.root_certificates.is_empty() {
            set.push(".root_certificate(..)");
        }
        if self.client_certificate.is_some() {
            set.push(".client_certificate(..)");
        }
        if self.require_tls {
            set.push(".require_tls(true)");
        }
        if self.name.is_some() {
            set.push(".connection_name(..)");
        }
        if self.connection_timeout.is_some() {
            set.push(".connection_timeout(..)");
        }
        if self.base.is_some() {
            set.push(".with_options(..)");
        }
        set
    }

    /// These options for connecting to `servers`: TLS is required of every server, those the
    /// cluster announces too, when one of `servers` says `tls://` (async-nats otherwise takes
    /// a discovered server's `host:port` as plain `nats://`).
    pub(crate) fn for_servers(mut self, servers: &[String]) -> Self {
        let tls = |server: &String| {
            server
                .trim()
                .get(..6)
                .is_some_and(|scheme| scheme.eq_ignore_ascii_case("tls://"))
        };
        if servers.iter().any(tls) {
            self.require_tls = true;
        }
        self
    }

    /// The async-nats options; reads the credentials file when one is set.
    pub(crate) async fn build(&self, address: &str) -> Result<ConnectOptions, Error> {
        // The given options' own timeout and subscription buffer stand unless the broker sets
        // them.
        let mut options = match (&self.base, self.connection_timeout) {
            (Some(base), None) => base.clone(),
            (base, timeout) => base
                .clone()
                .unwrap_or_else(client_defaults)
                .connection_timeout(timeout.unwrap_or(DEFAULT_CONNECTION_TIMEOUT)),
        };
        options = match &self.auth {
            None => options,
            Some(Auth::CredentialsFile(path)) => {
                options.credentials_file(path).await.map_err(|err| {
                    Error::new(
                        ErrorKind::Config,
                        format!(
                            "cannot read the NATS credentials file {} for {address}",
                            path.display()
                        ),
                    )
                    .with_source(err)
                })?
            }
            Some(Auth::UserPassword { user, password }) => {
                options.user_and_password(user.clone(), password.clone())
            }
            Some(Auth::Token(token)) => options.token(token.clone()),
            Some(Auth::NKey(seed)) => options.nkey(seed.clone()),
        };
        for root in &self.root_certificates {
            options = options.add_root_certificates(root.clone());
        }
        if let Some((cert, key)) = &self.client_certificate {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        if self.require_tls {
            options = options.require_tls(true);
        }
        if let Some(name) = &self.name {
            options = options.name(name);
        }
        Ok(options)
    }
}

/// async-nats's options as the broker connects without `.with_options(..)`.
fn client_defaults() -> ConnectOptions {
    ConnectOptions::new().subscription_capacity(CLIENT_SUBSCRIPTION_CAPACITY)
}

/// A URL as the user wrote it, split into what may be printed and handed to async-nats (the
/// servers, without credentials) and what may not (the credentials).
#[derive(Clone, Default)]
pub(crate) struct SplitUrl {
    /// Every server of the URL, without its credentials.
    pub(crate) servers: Vec<String>,
    /// The credentials the URL carries (the same for every server that carries any).
    pub(crate) auth: Option<Auth>,
    /// Why the URL's credentials cannot be used (never quoting them).
    pub(crate) problem: Option<String>,
}

impl fmt::Debug for SplitUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SplitUrl")
            .field("servers", &self.servers)
            .field("auth", &self.auth)
            .field("problem", &self.problem)
            .finish()
    }
}

/// Takes the credentials out of `url`: `nats://user:password@host` (a user and a password) and
/// `nats://token@host` (a token), percent-encoded or not. The credentials end at the last `@`
/// of each server, so a password may hold an unencoded `/`, `?`, `:` or `@`; only a `,` must
/// be written `%2C`, since it separates servers. Several servers are separated by commas.
pub(crate) fn split_credentials(url: &str) -> SplitUrl {
    let mut split = SplitUrl::default();
    let mut distinct: Vec<Auth> = Vec::new();
    for one in url.split(',') {
        let one = one.trim();
        if one.is_empty() {
            continue;
        }
        let (scheme, rest) = match one.find("://") {
            Some(i) => one.split_at(i + 3),
            None => ("", one),
        };
        let Some(at) = rest.rfind('@') else {
            split.servers.push(one.to_owned());
            continue;
        };
        split.servers.push(format!("{scheme}{}", &rest[at + 1..]));
        let userinfo = &rest[..at];
        let auth = match userinfo.split_once(':') {
            Some((user, password)) => Auth::UserPassword {
                user: percent_decode(user),
                password: percent_decode(password),
            },
            None => Auth::Token(percent_decode(userinfo)),
        };
        let empty = match &auth {
            Auth::UserPassword { user, password } => user.is_empty() && password.is_empty(),
            Auth::Token(token) => token.is_empty(),
            _ => false,
        };
        if !empty && !distinct.contains(&auth) {
            distinct.push(auth);
        }
    }
    if distinct.len() > 1 {
        split.problem = Some(format!(
            "the servers of the URL carry {} different credentials, but one connection \
             authenticates the same way with every server; give each server the same \
             credentials, or take them out of the URL and use `.user_and_password(..)` or \
             `.token(..)`",
            distinct.len()
        ));
    }
    split.auth = distinct.into_iter().next();
    split
}

/// `%XX` sequences decoded; anything else (a lone `%` too) kept as written.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            // Two hex digits make one byte.
            out.push(u8::try_from(high * 16 + low).unwrap_or(b'%'));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out)
        .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(url: &str) -> String {
        split_credentials(url).servers.join(",")
    }

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(redact("nats://localhost:4222"), "nats://localhost:4222");
        assert_eq!(
            redact("nats://alice:s3cret@localhost:4222"),
            "nats://localhost:4222"
        );
        assert_eq!(redact("tls://token@host:4222/x"), "tls://host:4222/x");
        assert_eq!(redact("a:b@host:4222"), "host:4222");
        assert_eq!(
            redact("nats://u:p@a:4222, nats://b:4222"),
            "nats://a:4222,nats://b:4222"
        );
        // Unencoded `/`, `?` and `@` in a password: the credentials end at the last `@`.
        assert_eq!(redact("nats://u:pa/ss?w@rd@host:4222"), "nats://host:4222");
    }

    #[tokio::test]
    async fn a_tls_url_requires_tls_of_every_server() {
        let built = |servers: &[&str]| {
            let servers: Vec<String> = servers.iter().map(|s| (*s).to_owned()).collect();
            let options = ConnectionOptions::default().for_servers(&servers);
            async move {
                let built = options.build("test").await.expect("built");
                format!("{built:?}")
            }
        };
        for servers in [&["tls://a:4222"][..], &["nats://a:4222", " TLS://b:4222"]] {
            let shown = built(servers).await;
            assert!(
                shown.contains(r#""tls_required": true"#),
                "{servers:?}: {shown}"
            );
        }
        for servers in [&["nats://a:4222"][..], &["a:4222"], &["nats://tls:4222"]] {
            let shown = built(servers).await;
            assert!(
                shown.contains(r#""tls_required": false"#),
                "{servers:?}: {shown}"
            );
        }
    }

    #[test]
    fn url_credentials_become_options() {
        let split = split_credentials("nats://alice:s3c%2Cret/x?y@host:4222");
        assert_eq!(
            split.auth,
            Some(Auth::UserPassword {
                user: "alice".into(),
                password: "s3c,ret/x?y".into()
            })
        );
        assert_eq!(split.servers, ["nats://host:4222"]);
        assert!(split.problem.is_none());

        let token = split_credentials("nats://T0K%zz3N@host");
        assert_eq!(token.auth, Some(Auth::Token("T0K%zz3N".into())));

        let shared = split_credentials("nats://a:b@one:1,nats://a:b@two:2,nats://three:3");
        assert_eq!(
            shared.servers,
            ["nats://one:1", "nats://two:2", "nats://three:3"]
        );
        assert!(shared.problem.is_none());

        let differing = split_credentials("nats://a:secretOne@one:1,nats://a:secretTwo@two:2");
        let problem = differing.problem.expect("two credentials are refused");
        assert!(!problem.contains("secret"), "{problem}");
        assert!(problem.contains("same"), "{problem}");

        assert!(split_credentials("nats://host:4222").auth.is_none());
        assert!(split_credentials("nats://@host:4222").auth.is_none());
    }

    #[test]
    fn debug_hides_secrets() {
        let auth = Auth::UserPassword {
            user: "alice".into(),
            password: "s3cret".into(),
        };
        let shown = format!(
            "{auth:?} {:?} {:?}",
            Auth::Token("t0k3n".into()),
            Auth::NKey("SUAX".into())
        );
        assert!(shown.contains("alice"));
        assert!(!shown.contains("s3cret"));
        assert!(!shown.contains("t0k3n"));
        assert!(!shown.contains("SUAX"));
    }
}

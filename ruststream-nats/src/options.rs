//! How the broker connects: credentials and TLS, recorded at build time and turned into
//! async-nats `ConnectOptions` at startup. Nothing here ever prints a credential.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::ConnectOptions;
use ruststream::{Error, ErrorKind};

/// How long connecting at startup may take before the app refuses to start.
pub(crate) const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Who the app is to the server.
#[derive(Clone)]
pub(crate) enum Auth {
    CredentialsFile(PathBuf),
    UserPassword { user: String, password: String },
    Token(String),
    NKey(String),
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
}

impl ConnectionOptions {
    /// The async-nats options; reads the credentials file when one is set.
    pub(crate) async fn build(&self, address: &str) -> Result<ConnectOptions, Error> {
        let mut options = ConnectOptions::new().connection_timeout(
            self.connection_timeout
                .unwrap_or(DEFAULT_CONNECTION_TIMEOUT),
        );
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

/// `url` with any `user:password@` removed, for logs and `describe`. Comma-separated lists are
/// redacted one by one.
pub(crate) fn redact(url: &str) -> String {
    url.split(',')
        .map(|one| {
            let one = one.trim();
            let (scheme, rest) = match one.find("://") {
                Some(i) => one.split_at(i + 3),
                None => ("", one),
            };
            let host_end = rest.find(['/', '?']).unwrap_or(rest.len());
            match rest[..host_end].rfind('@') {
                Some(at) => format!("{scheme}{}", &rest[at + 1..]),
                None => one.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

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

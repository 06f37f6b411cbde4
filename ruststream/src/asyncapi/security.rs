//! How a client authenticates to a server, as AsyncAPI security schemes
//! (`components.securitySchemes`, referenced by each server). Never a secret: a scheme says
//! which way, not with what.

use serde_json::{Value, json};

/// One way a broker's client authenticates to the server, for the AsyncAPI document.
///
/// A broker reports those its configuration shows (`NatsBroker` from its URL and its
/// `.user_and_password(..)`, `.token(..)`, `.nkey(..)`, `.credentials_file(..)`,
/// `.client_certificate(..)`); where the configuration cannot tell (a client the app connected
/// itself, an auth callback in `.with_options(..)`), the app declares it on the broker.
///
/// ```
/// use ruststream::asyncapi::SecurityScheme;
///
/// let (id, scheme) = SecurityScheme::Token.to_asyncapi();
/// assert_eq!(id, "nats_token");
/// assert_eq!(scheme["type"], "apiKey");
/// let custom = SecurityScheme::custom("sso", serde_json::json!({"type": "openIdConnect",
///     "openIdConnectUrl": "https://sso.example.com/.well-known/openid-configuration"}));
/// assert_eq!(custom.to_asyncapi().0, "sso");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SecurityScheme {
    /// A user and a password, in the CONNECT message.
    UserPassword,
    /// A token (`auth_token` in the CONNECT message).
    Token,
    /// An NKey: the client signs the server's nonce with its Ed25519 seed.
    NKey,
    /// A user JWT with its NKey seed (a `.creds` file): decentralised auth with accounts.
    Credentials,
    /// A TLS client certificate (mutual TLS).
    ClientCertificate,
    /// Any other scheme, as the AsyncAPI Security Scheme Object `scheme`, under `id`.
    Custom {
        /// The scheme's key in `components.securitySchemes`.
        id: String,
        /// The Security Scheme Object.
        scheme: Value,
    },
}

impl SecurityScheme {
    /// A scheme the broker cannot name, written as AsyncAPI's Security Scheme Object.
    pub fn custom(id: impl Into<String>, scheme: Value) -> Self {
        Self::Custom {
            id: id.into(),
            scheme,
        }
    }

    /// The scheme's key in `components.securitySchemes` and its Security Scheme Object.
    pub fn to_asyncapi(&self) -> (String, Value) {
        let (id, scheme) = match self {
            Self::UserPassword => (
                "nats_user_password",
                json!({"type": "userPassword", "description": "a NATS user and password"}),
            ),
            // AsyncAPI has no NATS token: an API key in the user's place (`nats://TOKEN@host`)
            // is the nearest.
            Self::Token => (
                "nats_token",
                json!({"type": "apiKey", "in": "user",
                    "description": "a NATS token, sent as `auth_token` in the CONNECT message"}),
            ),
            Self::NKey => (
                "nats_nkey",
                json!({"type": "asymmetricEncryption",
                    "description": "a NATS NKey: the client signs the server's nonce with its Ed25519 seed"}),
            ),
            Self::Credentials => (
                "nats_jwt",
                json!({"type": "asymmetricEncryption",
                    "description": "a NATS user JWT and its NKey seed (a .creds file): the client sends the JWT and signs the server's nonce"}),
            ),
            Self::ClientCertificate => (
                "nats_tls_client_certificate",
                json!({"type": "X509", "description": "a TLS client certificate (mutual TLS)"}),
            ),
            Self::Custom { id, scheme } => return (id.clone(), scheme.clone()),
        };
        (id.to_owned(), scheme)
    }
}

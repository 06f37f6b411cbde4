//! How the broker authenticates, as the AsyncAPI document's security schemes: derived from the
//! configuration (which way, never the secret), plus those the app declares where the
//! configuration cannot tell.

use ruststream::asyncapi::SecurityScheme;

use super::NatsBroker;
use crate::options::Auth;

impl NatsBroker {
    /// Declares a way the client authenticates, for the AsyncAPI document (`asyncapi`), where
    /// the broker's configuration cannot tell: a client the app connected
    /// ([`from_client`](Self::from_client)), an auth callback or credentials given in
    /// [`with_options`](Self::with_options), an identity the server maps from TLS. The
    /// broker's own credentials (in the URL, `.user_and_password(..)`, `.token(..)`,
    /// `.nkey(..)`, `.credentials_file(..)`, `.client_certificate(..)`) are described without
    /// it. It changes nothing in how the app connects.
    ///
    /// ```
    /// use ruststream::asyncapi::SecurityScheme;
    /// use ruststream::Broker;
    /// use ruststream_nats::NatsBroker;
    ///
    /// let broker = NatsBroker::new("nats://alice:s3cret@localhost:4222")
    ///     .security_scheme(SecurityScheme::Credentials);
    /// assert_eq!(
    ///     broker.security_schemes(),
    ///     [SecurityScheme::UserPassword, SecurityScheme::Credentials]
    /// );
    /// ```
    pub fn security_scheme(mut self, scheme: SecurityScheme) -> Self {
        self.options.declared_security.push(scheme);
        self
    }

    /// The schemes the configuration shows, then the declared ones, each once.
    pub(super) fn described_security(&self) -> Vec<SecurityScheme> {
        let options = &self.options;
        let derived = options.auth.as_ref().map(|auth| match auth {
            Auth::UserPassword { .. } => SecurityScheme::UserPassword,
            Auth::Token(_) => SecurityScheme::Token,
            Auth::NKey(_) => SecurityScheme::NKey,
            Auth::CredentialsFile(_) => SecurityScheme::Credentials,
        });
        let certificate = options
            .client_certificate
            .as_ref()
            .map(|_| SecurityScheme::ClientCertificate);
        let mut schemes: Vec<SecurityScheme> = Vec::new();
        for scheme in derived
            .into_iter()
            .chain(certificate)
            .chain(options.declared_security.iter().cloned())
        {
            if !schemes.contains(&scheme) {
                schemes.push(scheme);
            }
        }
        schemes
    }
}

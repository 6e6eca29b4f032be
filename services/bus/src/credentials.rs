//! How a replica proves itself to NATS and secures the connection: one of user and
//! password, a token, an NKey seed or a `.creds` file (JWT and NKey), and TLS with the
//! installation's CA and, optionally, a client certificate. Secrets stay in
//! [`SecretString`]s and never reach logs or errors.

use secrecy::{ExposeSecret, SecretString};
use std::path::PathBuf;

/// The credentials a replica connects with (besides any in the URL).
#[derive(Debug, Clone, Default)]
pub enum NatsAuth {
    /// Nothing beyond the URL.
    #[default]
    None,
    UserPassword {
        user: String,
        password: SecretString,
    },
    Token(SecretString),
    /// The seed of an NKey user (`SU…`): the server holds its public key.
    NKey(SecretString),
    /// A `.creds` file (a user JWT and its NKey seed), as `nsc` writes it for an account.
    CredsFile(PathBuf),
}

/// TLS to NATS. A `tls://` URL or a server that requires TLS turns it on as well.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsTls {
    /// Refuse to talk to a server without TLS.
    pub required: bool,
    /// PEM file of the CA that signs the server's certificate (else the system roots).
    pub ca_file: Option<PathBuf>,
    /// PEM files of a client certificate and its key, for servers that verify clients.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl NatsAuth {
    /// The options with these credentials; a `.creds` file is read here.
    pub(crate) async fn apply(
        &self,
        options: async_nats::ConnectOptions,
    ) -> std::io::Result<async_nats::ConnectOptions> {
        Ok(match self {
            NatsAuth::None => options,
            NatsAuth::UserPassword { user, password } => {
                options.user_and_password(user.clone(), password.expose_secret().to_owned())
            }
            NatsAuth::Token(token) => options.token(token.expose_secret().to_owned()),
            NatsAuth::NKey(seed) => options.nkey(seed.expose_secret().to_owned()),
            NatsAuth::CredsFile(path) => options.credentials_file(path).await?,
        })
    }
}

impl NatsTls {
    pub(crate) fn apply(
        &self,
        mut options: async_nats::ConnectOptions,
    ) -> async_nats::ConnectOptions {
        if self.required {
            options = options.require_tls(true);
        }
        if let Some(ca) = &self.ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.client_cert {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        options
    }
}

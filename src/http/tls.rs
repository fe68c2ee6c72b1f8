//! HTTPS: `http.tls` names a PEM certificate chain and private key; [`server_config`] loads
//! them into a rustls configuration (ring provider, TLS 1.2 and 1.3, ALPN `http/1.1`) with
//! start-up errors that name the file, and [`TlsListener`] is the `axum::serve` listener that
//! accepts TCP connections and completes their handshakes side by side, so one slow or silent
//! client delays nobody else's handshake. `axum::serve` does the rest (HTTP/1.1, graceful
//! shutdown) exactly as over plain TCP.
//!
//! It must not log key material or a handshake's contents (a failed handshake is logged at
//! debug level with the peer address). The files are read once at start-up.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::server::TlsStream;

use crate::config::http::TlsSettings;

/// A handshake not finished in this time is dropped (its connection closed).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at most; past this, new connections wait in the kernel's backlog.
pub const MAX_HANDSHAKES: usize = 512;

/// Why TLS could not be set up. Never quotes the key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file could not be read or holds no certificate.
    #[error("http.tls.cert_file {}: {why}", file.display())]
    Cert {
        /// The file.
        file: PathBuf,
        /// Why.
        why: String,
    },
    /// The key file could not be read or holds no private key.
    #[error("http.tls.key_file {}: {why}", file.display())]
    Key {
        /// The file.
        file: PathBuf,
        /// Why.
        why: String,
    },
    /// rustls refused the pair (the key does not belong to the certificate, an unsupported
    /// key type).
    #[error("http.tls: {} with {}: {why}", cert.display(), key.display())]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        why: String,
    },
}

/// Loads the certificate chain and key named by `settings`.
pub fn server_config(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let cert_err = |why: String| TlsError::Cert {
        file: settings.cert_file.clone(),
        why,
    };
    let key_err = |why: String| TlsError::Key {
        file: settings.key_file.clone(),
        why,
    };
    let certs = read(&settings.cert_file).map_err(cert_err)?;
    let certs = CertificateDer::pem_slice_iter(&certs)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_err(format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(cert_err("no CERTIFICATE block".into()));
    }
    let key = read(&settings.key_file).map_err(key_err)?;
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| match e {
        tokio_rustls::rustls::pki_types::pem::Error::NoItemsFound => {
            key_err("no PRIVATE KEY block".into())
        }
        e => key_err(format!("not PEM: {e}")),
    })?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let pair_err = |why: String| TlsError::Pair {
        cert: settings.cert_file.clone(),
        key: settings.key_file.clone(),
        why,
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| pair_err(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| pair_err(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| e.to_string())
}

type Handshake =
    Pin<Box<dyn Future<Output = (io::Result<TlsStream<TcpStream>>, SocketAddr)> + Send>>;

/// A TCP listener that hands `axum::serve` connections whose TLS handshake is done.
/// Handshakes progress while `accept` is polled, which `axum::serve` does all the time until
/// shutdown; at shutdown the unfinished ones are dropped with the listener.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: FuturesUnordered<Handshake>,
}

impl TlsListener {
    /// Serves TLS with `config` on `tcp`.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> TlsListener {
        TlsListener {
            tcp,
            acceptor: TlsAcceptor::from(config),
            handshakes: FuturesUnordered::new(),
        }
    }

    fn start_handshake(&mut self, tcp: TcpStream, addr: SocketAddr) {
        let accept = self.acceptor.accept(tcp);
        self.handshakes.push(Box::pin(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, accept).await {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                )),
            };
            (tls, addr)
        }));
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let room = self.handshakes.len() < MAX_HANDSHAKES;
            tokio::select! {
                accepted = self.tcp.accept(), if room => match accepted {
                    Ok((tcp, addr)) => self.start_handshake(tcp, addr),
                    Err(e) => accept_error(e).await,
                },
                Some((tls, addr)) = self.handshakes.next() => match tls {
                    Ok(tls) => return (tls, addr),
                    Err(error) => tracing::debug!(%addr, %error, "TLS handshake failed"),
                },
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// What `axum::serve` does for plain TCP: a connection's own failure is skipped; anything
/// else (out of file descriptors) is logged and waited out for a second.
async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

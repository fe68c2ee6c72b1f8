//! HTTPS for the simulator ([`crate::SimOptions::tls`]): a CA generated at start-up (rcgen),
//! a serving certificate it signs for every name a client may dial (the listen address,
//! loopback, `localhost` and the `kubernetes.default.svc` names of the in-cluster Service, as
//! kube-apiserver's own), and [`TlsListener`], the `axum::serve` listener that completes
//! handshakes side by side so that one silent client delays nobody else's (the pattern of the
//! product's `http::tls`).
//!
//! client-go sends bearer tokens only over HTTPS, and its in-cluster configuration
//! (`rest.InClusterConfig`) always dials `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`
//! trusting `ca.crt`: this is what lets an unchanged in-cluster client run against the
//! simulator. Key material is never logged.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::server::TlsStream;

/// A handshake not finished in this time is dropped (its connection closed).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at most; past this, new connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 512;

/// The DNS names of the serving certificate besides `localhost`: the in-cluster Service's, as
/// kube-apiserver puts them in its own.
const SERVICE_NAMES: &[&str] = &[
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];
/// The ClusterIP of `default/kubernetes` (seeded in `lib.rs`).
const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);

/// The generated CA and the rustls configuration serving the certificate it signed.
pub(crate) struct Tls {
    /// The CA certificate, PEM: what a kubeconfig's `certificate-authority-data` and a
    /// service-account directory's `ca.crt` carry.
    pub(crate) ca_pem: String,
    pub(crate) config: Arc<ServerConfig>,
}

/// Generates a CA and a serving certificate for `addr` (plus loopback and the Service names).
pub(crate) fn generate(addr: SocketAddr) -> anyhow::Result<Tls> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose, SanType,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = rcgen::DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "leasehold-sim-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, &ca_key);

    let mut ips: Vec<IpAddr> = vec![
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V4(SERVICE_IP),
    ];
    if !addr.ip().is_unspecified() && !ips.contains(&addr.ip()) {
        ips.push(addr.ip());
    }
    let mut names = vec!["localhost".to_owned()];
    names.extend(SERVICE_NAMES.iter().map(|s| (*s).to_owned()));
    let mut leaf = CertificateParams::new(names)?;
    leaf.subject_alt_names
        .extend(ips.into_iter().map(SanType::IpAddress));
    leaf.distinguished_name = rcgen::DistinguishedName::new();
    leaf.distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_key = KeyPair::generate()?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;

    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let chain: Vec<CertificateDer<'static>> = vec![leaf_cert.der().clone()];
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    // The simulator serves HTTP/1.1 only (axum's `http1`); clients that offer h2 fall back.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls {
        ca_pem: ca_cert.pem(),
        config: Arc::new(config),
    })
}

type Handshake =
    Pin<Box<dyn Future<Output = (io::Result<TlsStream<TcpStream>>, SocketAddr)> + Send>>;

/// A TCP listener that hands `axum::serve` connections whose TLS handshake is done.
pub(crate) struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: FuturesUnordered<Handshake>,
}

impl TlsListener {
    pub(crate) fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        Self {
            tcp,
            acceptor: TlsAcceptor::from(config),
            handshakes: FuturesUnordered::new(),
        }
    }

    fn start_handshake(&mut self, tcp: TcpStream, addr: SocketAddr) {
        let _ = tcp.set_nodelay(true);
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

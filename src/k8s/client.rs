//! The Kubernetes client every part of the product uses: kube's own middleware (base URI,
//! authentication with token refresh, extra headers, its retry of 429/503/504) over a
//! connection pool that speaks HTTP/2 when the API server offers it (ALPN), as client-go does.
//!
//! Why not `kube::Client::try_from`: kube's stack speaks HTTP/1.1 only, so every request in
//! flight needs a connection of its own. A member handing 30 targets over at once sent 30
//! Lease writes; those that found no idle connection opened one (TCP and a TLS handshake on a
//! busy API server) and were answered in 30–65 ms instead of 5–20 ms on the whole-cluster tier
//! (docs/real-apiserver.md) — and the time a target goes unworked in a handoff is that write's
//! latency. Over HTTP/2 all of a process's requests and watches share one connection.
//!
//! A connection that stops answering is found by HTTP/2 PINGs ([`KEEP_ALIVE`], answered
//! within [`KEEP_ALIVE_TIMEOUT`], as client-go's `ReadIdleTimeout`/`PingTimeout`) and closed,
//! failing every request on it; the product's own bounds (write timeouts, watch probes) do not
//! rely on that. A plain-HTTP server (the simulator) is spoken to in HTTP/1.1, as before.

use std::time::Duration;

use hyper_rustls::FixedServerNameResolver;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{ClientBuilder, ConfigExt as _};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// Idle time on a connection after which an HTTP/2 PING checks it.
const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// How long an HTTP/2 PING may go unanswered before the connection is closed.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(15);

/// A client for `config`'s API server, HTTP/2 when it offers it. A proxy in `config` goes to
/// kube's own stack (which refuses it: the product is built without kube's proxy support).
pub fn from_config(config: kube::Config) -> Result<kube::Client, kube::Error> {
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name.clone().try_into().map_err(|e| {
            kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
        })?;
        tls = tls.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    let connector = tls.enable_http1().enable_http2().wrap_connector(http);
    let pool = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(KEEP_ALIVE)
        .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(pool);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}

/// A client from `kubeconfig`, else the in-cluster configuration or `$KUBECONFIG`.
pub async fn connect(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    use anyhow::Context as _;
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no Kubernetes config (in-cluster or KUBECONFIG)")?,
    };
    Ok(from_config(config)?)
}

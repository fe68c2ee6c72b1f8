//! HTTPS (`http.tls`): `http::run` on 127.0.0.1:0 with a self-signed certificate made in the
//! test answers a client that trusts it (and only such a client), refuses plain HTTP, stops on
//! its shutdown signal; bad certificate or key files fail at start-up naming the file.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use leasehold::config::Config;
use leasehold::config::http::HttpSettings;
use leasehold::config::http::TlsSettings;
use leasehold::engine::Engine;
use leasehold::http::tls::{TlsError, server_config};
use leasehold::store::Store;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// Writes a self-signed certificate for 127.0.0.1 and localhost; gives (cert, key) paths
/// and the certificate in DER.
fn self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf, Vec<u8>) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    (cert, key, ck.cert.der().to_vec())
}

/// An HTTPS client trusting exactly `roots` (DER certificates).
fn client(
    roots: &[Vec<u8>],
) -> Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Empty<Bytes>,
> {
    let mut store = RootCertStore::empty();
    for der in roots {
        store.add(der.clone().into()).unwrap();
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(store)
            .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    Client::builder(TokioExecutor::new()).build(https)
}

fn settings(cert: &Path, key: &Path) -> HttpSettings {
    serde_saphyr::from_str(&format!(
        "listen: 127.0.0.1:0\nauth: {{mode: none}}\ntls: {{cert_file: {}, key_file: {}}}\n",
        cert.display(),
        key.display()
    ))
    .unwrap()
}

async fn engine(t: &common::TestSim, dir: &Path) -> Engine {
    let yaml = "clusters:
- name: c
  namespace: apps
  selector: {app: c}
  targets: {inline: [t-0]}
";
    let config = Config::parse(yaml, Path::new("test.yaml")).unwrap();
    let db = format!("sqlite:{}", dir.join("h.db").display());
    let store = Store::connect(&db).await.unwrap();
    Engine::new(config, t.client.clone(), store, "cp".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_https_to_a_client_that_trusts_the_certificate() {
    let t = common::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, der) = self_signed(dir.path(), "server");
    let (_, _, other_der) = self_signed(dir.path(), "other");
    let engine = engine(&t, dir.path()).await;
    let e = engine.clone();
    tokio::spawn(async move { e.run(std::future::pending()).await });

    let settings = settings(&cert, &key);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        leasehold::http::run(engine, &settings, listener, None, async {
            let _ = stopped.await;
        })
        .await
    });

    // A client that trusts the certificate gets answers over HTTPS.
    let trusting = client(std::slice::from_ref(&der));
    for (path, want) in [("/healthz", "ok"), ("/api/v1/clusters", "\"name\":\"c\"")] {
        let uri = format!("https://127.0.0.1:{}{path}", addr.port());
        let res = trusting.get(uri.parse().unwrap()).await.unwrap();
        assert_eq!(res.status(), 200, "{path}");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(want), "{path}: {body}");
    }
    // By name too (the certificate names localhost), when localhost is 127.0.0.1.
    let uri = format!("https://localhost:{}/healthz", addr.port());
    if let Ok(res) = trusting.get(uri.parse().unwrap()).await {
        assert_eq!(res.status(), 200);
    }

    // A client that trusts another certificate is refused by its own TLS check.
    let other = client(&[other_der]);
    let uri = format!("https://127.0.0.1:{}/healthz", addr.port());
    let err = other.get(uri.parse().unwrap()).await.unwrap_err();
    let chain = format!("{:?}", err);
    assert!(
        chain.contains("UnknownIssuer") || chain.contains("BadSignature"),
        "{chain}"
    );

    // Plain HTTP to the TLS port gets no HTTP answer (the server closes the connection).
    let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), plain.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the server kept a plain-HTTP connection open");
    assert!(
        !buf.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );

    // A silent client does not hold up anyone else's handshake.
    // (A new client: the first one would reuse its kept-alive connection.)
    let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fresh = client(std::slice::from_ref(&der));
    let res = tokio::time::timeout(Duration::from_secs(5), fresh.get(uri.parse().unwrap()))
        .await
        .expect("a handshake waited behind a silent connection")
        .unwrap();
    assert_eq!(res.status(), 200);

    // Graceful shutdown: `run` returns once signalled.
    stop.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(20), server)
        .await
        .expect("the server did not stop")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_certificate_or_key_files_fail_at_start_up_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, _) = self_signed(dir.path(), "server");
    let (_, other_key, _) = self_signed(dir.path(), "other");
    let missing = dir.path().join("missing.pem");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a PEM file\n").unwrap();
    let tls = |c: &Path, k: &Path| TlsSettings {
        cert_file: c.to_owned(),
        key_file: k.to_owned(),
    };

    assert!(server_config(&tls(&cert, &key)).is_ok());
    let cases: [(TlsSettings, &Path, &str); 5] = [
        (tls(&missing, &key), &missing, "http.tls.cert_file"),
        (tls(&junk, &key), &junk, "no CERTIFICATE block"),
        (tls(&cert, &missing), &missing, "http.tls.key_file"),
        // A certificate where the key should be.
        (tls(&cert, &cert), &cert, "no PRIVATE KEY block"),
        (tls(&cert, &other_key), &other_key, "http.tls"),
    ];
    for (settings, file, want) in cases {
        let err = server_config(&settings).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&file.display().to_string()), "{msg}");
        assert!(msg.contains(want), "{msg}");
        if file == other_key {
            assert!(matches!(err, TlsError::Pair { .. }), "{err:?}");
        }
    }

    // `http::run` stops with that error before serving.
    let t = common::start().await;
    let engine = engine(&t, dir.path()).await;
    let settings = settings(&missing, &key);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = leasehold::http::run(engine, &settings, listener, None, std::future::pending())
        .await
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains(&missing.display().to_string()), "{msg}");
}

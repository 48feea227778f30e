//! The webhook's HTTPS server: TLS with a certificate that can be swapped while it serves
//! (a renewal needs no restart), HTTP/1.1, `POST /validate-rules` answering AdmissionReviews.

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

/// The path the API server posts Rule reviews to.
pub const PATH: &str = "/validate-rules";

/// The largest review read (a Rule is at most a rules file, 1 MiB, and the API server
/// sends the old object too).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// The certificate served now.
#[derive(Debug, Default)]
pub struct Current(RwLock<Option<Arc<CertifiedKey>>>);

impl Current {
    /// Serves `cert` and `key` (PEM) from now on.
    pub fn set(&self, cert: &str, key: &str) -> Result<(), String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("the certificate does not read: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
            .map_err(|e| format!("the key does not read: {e}"))?;
        let signing = rustls::crypto::ring::sign::any_supported_type(&key)
            .map_err(|e| format!("the key is of no supported type: {e}"))?;
        if let Ok(mut c) = self.0.write() {
            *c = Some(Arc::new(CertifiedKey::new(certs, signing)));
        }
        Ok(())
    }

    pub fn is_set(&self) -> bool {
        self.0.read().is_ok_and(|c| c.is_some())
    }
}

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok().and_then(|c| c.clone())
    }
}

/// Binds `addr` (before anything else, so a port that is taken fails the start).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    current: Arc<Current>,
    served: Arc<super::review::Served>,
) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = match rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
    {
        Ok(b) => b.with_no_client_auth().with_cert_resolver(current),
        Err(e) => {
            tracing::error!(error = %e, "the webhook cannot serve TLS");
            return;
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let served = served.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |req| handle(req, served.clone()));
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(error = %e, "webhook connection");
            }
        });
    }
}

fn reply(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

async fn handle(
    req: Request<Incoming>,
    served: Arc<super::review::Served>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    if req.method() != hyper::Method::POST || req.uri().path() != PATH {
        return Ok(reply(StatusCode::NOT_FOUND, "{}".into()));
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(reply(StatusCode::PAYLOAD_TOO_LARGE, "{}".into())),
    };
    let Ok(review) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return Ok(reply(StatusCode::BAD_REQUEST, "{}".into()));
    };
    let answer = super::review::answer(&review, &served);
    Ok(reply(StatusCode::OK, answer.to_string()))
}

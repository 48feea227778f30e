//! The webhook's HTTPS server: TLS with a certificate that can be swapped while it serves
//! (a renewal needs no restart), HTTP/1.1, `POST /validate-rules` answering AdmissionReviews.

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The path the API server posts Rule reviews to.
pub const PATH: &str = "/validate-rules";
/// The path the API server posts ConversionReviews to.
pub use crate::schema::crd::CONVERT_PATH;

/// The largest review read (a Rule is at most a rules file, 1 MiB, and the API server
/// sends the old object too).
const MAX_BODY: usize = 3 * 1024 * 1024;
/// The largest ConversionReview taken. The API server sends one per object it reads from
/// storage in another version (a LIST, a watch) and one per list it answers whole, so a
/// review holds one object of at most etcd's 1.5 MiB, or a page of a list; 16 MiB takes a
/// page of 500 objects of 32 KiB. A larger body is refused at once (413), unread.
const MAX_CONVERT_BODY: usize = 16 * 1024 * 1024;

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

/// What a review needs: the kinds served, the installation's policy, and a client to ask
/// the API server whether a Rule's author holds the right it demands.
pub struct Reviewer {
    pub served: Arc<super::review::Served>,
    pub policy: crate::rules::policy::Policy,
    pub client: kube::Client,
    /// Connections, the bytes of bodies held and the conversions under way, in all and
    /// from one address.
    pub budget: Arc<super::budget::Budget>,
}

/// How long a request's body may take to arrive.
const READ_BODY: Duration = Duration::from_secs(5);

/// A TLS acceptor serving what `current` holds (safe default protocol versions, ring).
pub fn acceptor(current: Arc<Current>) -> Result<tokio_rustls::TlsAcceptor, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(current);
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    current: Arc<Current>,
    reviewer: Arc<Reviewer>,
) {
    let acceptor = match acceptor(current) {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(error = %e, "the webhook cannot serve TLS");
            return;
        }
    };
    loop {
        let Ok((tcp, peer)) = listener.accept().await else {
            continue;
        };
        // Each connection waits for its place (its address's share, then one of all);
        // past the places to wait in, it is closed at once. The accept loop never waits.
        let Some(waiting) = reviewer.budget.arrive(peer.ip()) else {
            tracing::debug!(source = %peer.ip(), "webhook connection closed: too many waiting");
            drop(tcp);
            continue;
        };
        let acceptor = acceptor.clone();
        let reviewer = reviewer.clone();
        tokio::spawn(async move {
            let Some(conn) = waiting.serve().await else {
                tracing::debug!(source = %peer.ip(), "webhook connection closed: no place in time");
                return;
            };
            let conn = Arc::new(conn);
            let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
            else {
                return;
            };
            let service =
                hyper::service::service_fn(move |req| handle(req, reviewer.clone(), conn.clone()));
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(error = %e, "webhook connection");
            }
        });
    }
}

fn reply(code: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

async fn handle(
    req: Request<Incoming>,
    reviewer: Arc<Reviewer>,
    conn: Arc<super::budget::Connection>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let path = req.uri().path().to_string();
    if req.method() != hyper::Method::POST || (path != PATH && path != CONVERT_PATH) {
        return Ok(reply(StatusCode::NOT_FOUND, "{}"));
    }
    // The body's bytes from the budget first (a body larger than the API server sends is
    // refused unread), then the whole body within the API server's own wait.
    let limit = if path == CONVERT_PATH {
        MAX_CONVERT_BODY
    } else {
        MAX_BODY
    };
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let bytes = match reviewer.budget.body(&conn, declared, limit).await {
        Ok(p) => p,
        Err(super::budget::Refused::TooLarge) => {
            return Ok(reply(StatusCode::PAYLOAD_TOO_LARGE, "{}"));
        }
        Err(super::budget::Refused::Busy) => return Ok(busy()),
    };
    let read = Limited::new(req.into_body(), limit).collect();
    let body = match tokio::time::timeout(READ_BODY, read).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(_)) => return Ok(reply(StatusCode::PAYLOAD_TOO_LARGE, "{}")),
        Err(_) => return Ok(reply(StatusCode::REQUEST_TIMEOUT, "{}")),
    };
    if path == CONVERT_PATH {
        return Ok(convert_in_turn(body, bytes, &reviewer, &conn).await);
    }
    let Ok(review) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return Ok(reply(StatusCode::BAD_REQUEST, "{}"));
    };
    drop(body);
    let answer = review_one(&review, &reviewer, &conn).await;
    drop(bytes);
    Ok(reply(StatusCode::OK, answer.to_string()))
}

/// 429, to try again in a moment.
fn busy() -> Response<Full<Bytes>> {
    let mut r = reply(StatusCode::TOO_MANY_REQUESTS, "{}");
    r.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("1"),
    );
    r
}

/// A conversion in its turn (429 if it does not come in time), off the async threads.
async fn convert_in_turn(
    body: Bytes,
    bytes: super::budget::Held,
    reviewer: &Reviewer,
    conn: &super::budget::Connection,
) -> Response<Full<Bytes>> {
    let Ok(turn) = reviewer.budget.conversion(conn).await else {
        return busy();
    };
    let served = reviewer.served.clone();
    // The turn and the bytes go with the work: a client that hangs up stops waiting for
    // it, but the conversion under way still counts until it ends.
    let work = move || {
        let _held = (turn, bytes);
        convert(&body, &served)
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(Some(answer)) => reply(StatusCode::OK, answer),
        Ok(None) => reply(StatusCode::BAD_REQUEST, "{}"),
        Err(_) => reply(StatusCode::INTERNAL_SERVER_ERROR, "{}"),
    }
}

/// The answer to a ConversionReview's body, by the rule in force for the objects' kind
/// (None: the body is no ConversionReview).
fn convert(body: &[u8], served: &super::review::Served) -> Option<Vec<u8>> {
    let (group, kind) = crate::convert::review::first_kind(body)?;
    let rule = served.converting(&group, &kind);
    if let Some(r) = rule
        .as_ref()
        .filter(|r| !served.serves(&group, &r.watch.resource))
    {
        tracing::debug!(%group, %kind, rule = %r.name, "converting by the last conversion of a rule no longer in force");
    }
    let started = std::time::Instant::now();
    let (answer, outcome) = crate::convert::review::answer_body(body, |g, k| {
        let r = rule.as_ref().filter(|_| g == group && k == kind)?;
        Some((r.conversion.as_ref()?, &r.program))
    })
    .ok()?;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    match outcome {
        crate::convert::review::Outcome::Success(objects) => {
            tracing::debug!(%group, %kind, objects, bytes = body.len(), elapsed_ms, "conversion");
        }
        crate::convert::review::Outcome::Failure(message) => {
            tracing::warn!(%group, %kind, %message, "conversion failed");
        }
    }
    Some(answer)
}

/// The answer to one review: refused as busy if its turn does not come in time (never
/// admitted unchecked), else checked, then its author's right asked.
async fn review_one(
    review: &serde_json::Value,
    reviewer: &Reviewer,
    conn: &super::budget::Connection,
) -> serde_json::Value {
    let uid = &review["request"]["uid"];
    let Ok(_turn) = reviewer.budget.review(conn).await else {
        return super::review::refused(
            uid,
            429,
            "TooManyRequests",
            "ruleop is reviewing as many Rules as it takes at once; apply again in a moment",
        );
    };
    let answer = super::review::answer(review, &reviewer.served, &reviewer.policy);
    let Some((who, demands)) = answer.ask else {
        return answer.review;
    };
    let name = review["request"]["object"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let Some(who) = who else {
        return super::review::forbidden(review, name, "the request names no user to check");
    };
    for demand in &demands {
        match crate::access::authority::denied(&reviewer.client, &who, demand).await {
            Ok(None) => {}
            Ok(Some(why)) => {
                tracing::info!(rule = %name, user = %who.user, verb = %demand.verb, "Rule refused: its author lacks the right it demands");
                return super::review::forbidden(review, name, &why);
            }
            Err(e) => {
                let why = format!(
                    "whether {} may write it could not be asked of the API server ({e}); apply again",
                    who.user
                );
                return super::review::forbidden(review, name, &why);
            }
        }
    }
    answer.review
}

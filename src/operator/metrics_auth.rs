//! Who may read `/metrics` (`ruleop run --metrics-auth kubernetes`): the caller's bearer
//! token is authenticated by the API server (a TokenReview) and its user must be allowed
//! `get` on the non-resource URL `/metrics` (a SubjectAccessReview), as kube-rbac-proxy
//! and controller-runtime's metrics filter do. Verdicts are kept a short while, so that a
//! Prometheus scraping every 30 s costs two reviews a minute at most.
//!
//! The reviews go on a client of their own (never the one that renews the Lease) within a
//! budget: a few a second and two at once for tokens not already judged, so that a flood of
//! made-up tokens costs the API server a few reviews a second and is answered 429; a
//! token's verdict, granted or refused, is kept for the next scrape.
//!
//! Owns: the verdict on a scrape. Used by: the admin server.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How /metrics is guarded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsAuth {
    /// Anyone who reaches the port (keep it behind a NetworkPolicy).
    #[default]
    None,
    /// A token the API server authenticates, of a user allowed `get` on `/metrics`.
    Kubernetes,
}

/// The path the SubjectAccessReview asks about.
pub const METRICS_PATH: &str = "/metrics";

/// How long a verdict is kept: a granted one, and a refused one.
const KEEP_ALLOWED: Duration = Duration::from_secs(60);
const KEEP_REFUSED: Duration = Duration::from_secs(10);
/// Verdicts kept at most (a flood of made-up tokens cannot grow the map).
const KEEP_AT_MOST: usize = 1024;
/// Reviews of tokens not kept: this many a second on average, this many in a burst, and
/// this many under way at once; past that a scrape is answered 429 at once.
const REVIEWS_PER_SECOND: f64 = 5.0;
const REVIEWS_BURST: u32 = 10;
const REVIEWS_AT_ONCE: usize = 2;

/// What a scrape gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// 401: no token, or one the API server does not know.
    Unauthenticated(String),
    /// 403: a known user without `get` on /metrics.
    Forbidden(String),
    /// 503: the API server could not be asked (the scrape is tried again).
    Unknown(String),
    /// 429: more tokens to review than the budget takes now.
    Busy,
}

#[derive(Debug, thiserror::Error)]
enum ReviewError {
    #[error("the API server did not answer the review: {0}")]
    Api(#[from] kube::Error),
}

/// Decides on scrapes, with the API server's reviews.
pub struct Gatekeeper {
    /// A client of its own: the Lease's client renews the Lease alone.
    client: kube::Client,
    kept: Mutex<HashMap<[u8; 32], (Verdict, Instant)>>,
    pace: Option<std::sync::Arc<crate::client::limiter::Pace>>,
    at_once: tokio::sync::Semaphore,
}

impl Gatekeeper {
    pub fn new(client: kube::Client) -> Gatekeeper {
        Gatekeeper {
            client,
            kept: Mutex::new(HashMap::new()),
            pace: crate::client::limiter::Pace::new(REVIEWS_PER_SECOND, REVIEWS_BURST),
            at_once: tokio::sync::Semaphore::new(REVIEWS_AT_ONCE),
        }
    }

    /// The verdict on a request with this `Authorization` header.
    pub async fn check(&self, authorization: Option<&str>) -> Verdict {
        let Some(token) = bearer(authorization) else {
            return Verdict::Unauthenticated(
                "a bearer token is needed (Authorization: Bearer <token>)".into(),
            );
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(v) = self.kept(&key) {
            return v;
        }
        // A token not judged yet: within the budget, or 429 now.
        let Ok(_turn) = self.at_once.try_acquire() else {
            return Verdict::Busy;
        };
        if self.pace.as_ref().is_some_and(|p| !p.take_now()) {
            return Verdict::Busy;
        }
        let verdict = match self.review(token).await {
            Ok(v) => v,
            Err(e) => return Verdict::Unknown(e.to_string()),
        };
        self.keep(key, verdict.clone());
        verdict
    }

    fn kept(&self, key: &[u8; 32]) -> Option<Verdict> {
        let kept = self.kept.lock().ok()?;
        let (v, until) = kept.get(key)?;
        (Instant::now() < *until).then(|| v.clone())
    }

    fn keep(&self, key: [u8; 32], v: Verdict) {
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        let now = Instant::now();
        if kept.len() >= KEEP_AT_MOST {
            kept.retain(|_, (_, until)| *until > now);
            if kept.len() >= KEEP_AT_MOST {
                kept.clear();
            }
        }
        let ttl = if v == Verdict::Allowed {
            KEEP_ALLOWED
        } else {
            KEEP_REFUSED
        };
        kept.insert(key, (v, now + ttl));
    }

    async fn review(&self, token: &str) -> Result<Verdict, ReviewError> {
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let asked = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = reviews.create(&PostParams::default(), &asked).await?;
        let status = answer.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                let why = status
                    .error
                    .unwrap_or_else(|| "the API server does not know this token".into());
                return Ok(Verdict::Unauthenticated(why));
            }
        };
        self.authorize(user).await
    }

    async fn authorize(&self, user: UserInfo) -> Result<Verdict, ReviewError> {
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let name = user.username.clone().unwrap_or_default();
        let asked = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.into()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews.create(&PostParams::default(), &asked).await?;
        Ok(match answer.status {
            Some(s) if s.allowed => Verdict::Allowed,
            _ => Verdict::Forbidden(format!(
                "user `{name}` may not get {METRICS_PATH} (bind it to a ClusterRole with nonResourceURLs: [\"{METRICS_PATH}\"], verbs: [\"get\"], such as ruleop-metrics-reader)"
            )),
        })
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(header: Option<&str>) -> Option<&str> {
    let (scheme, token) = header?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_is_taken() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }
}

//! Why a child could not be written or deleted, and how an API server's answer is taken:
//! a refusal of the object (the user's to fix) or a passing fault (retried).

/// Why a child could not be applied or pruned.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused the object; retrying unchanged will not help soon (see
    /// [`Refusal`] for what ruleop does then).
    #[error("{kind} {name}: the API server refused it ({code} {reason}): {message}")]
    Refused {
        kind: String,
        name: String,
        code: u16,
        reason: String,
        message: String,
        class: Refusal,
    },
    /// A passing fault (connection, timeout, conflict, server error): retried with backoff.
    #[error("{kind} {name}: {source}")]
    Transient {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// A create found an object of that name already there (not in ruleop's cache: it
    /// lacks the rule's label), or an update found another object than the one judged.
    #[error("{kind} {name}: another object of this name is there")]
    Exists { kind: String, name: String },
    /// This replica no longer holds the leader Lease (or cannot show it does): nothing
    /// was sent.
    #[error("not the leader (the Lease was not renewed in time): nothing written")]
    NotLeader,
    /// A write that went on by itself ended without an answer (stopped, or a bug in
    /// ruleop): retried with backoff.
    #[error("{kind} {name}: the write ended without an answer ({why})")]
    Lost {
        kind: String,
        name: String,
        why: String,
    },
}

/// The two kinds of refusal (the error classification table of docs/reference/status.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The object is wrong (400, 422, other 4xx, a 500 for a value of the wrong type): the
    /// rule or the custom resource must change. Reported; retried on a change, and every
    /// five minutes in case the cause was outside (an admission policy).
    Invalid,
    /// Not allowed (403: RBAC, a quota, an admission policy): fixed outside the resource.
    /// Reported; retried with backoff until it goes through.
    Forbidden,
}

/// How an API server's answer is taken: a refusal of some class, or None (transient:
/// 401 after a token rotation, 404 while a namespace or kind comes and goes, 408, 409,
/// 429, 5xx, and anything that is not an answer).
pub fn classify(code: u16, message: &str) -> Option<Refusal> {
    match code {
        403 => Some(Refusal::Forbidden),
        401 | 404 | 408 | 409 | 429 => None,
        400..=499 => Some(Refusal::Invalid),
        500 if message.contains("failed to create typed patch object") => Some(Refusal::Invalid),
        _ => None,
    }
}

impl ApplyError {
    pub(crate) fn from_kube(kind: &str, name: &str, e: kube::Error) -> ApplyError {
        match e {
            kube::Error::Api(s) if is_uid_mismatch(s.code, &s.message) => ApplyError::Exists {
                kind: kind.to_string(),
                name: name.to_string(),
            },
            kube::Error::Api(s) if classify(s.code, &s.message).is_some() => ApplyError::Refused {
                kind: kind.to_string(),
                name: name.to_string(),
                code: s.code,
                reason: s.reason.clone(),
                message: s.message.clone(),
                class: classify(s.code, &s.message).unwrap_or(Refusal::Invalid),
            },
            other => ApplyError::Transient {
                kind: kind.to_string(),
                name: name.to_string(),
                source: other,
            },
        }
    }

    /// The refusal class, when the API server refused.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            ApplyError::Refused { class, .. } => Some(*class),
            _ => None,
        }
    }
}

/// The answer to an apply whose `metadata.uid` is not the live object's: the object is
/// another than the one the apply was meant for.
fn is_uid_mismatch(code: u16, message: &str) -> bool {
    (code == 409 && message.contains("uid mismatch"))
        || (code == 422 && message.contains("metadata.uid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_told_from_passing_faults() {
        assert_eq!(classify(422, "invalid"), Some(Refusal::Invalid));
        assert_eq!(classify(400, "bad request"), Some(Refusal::Invalid));
        assert_eq!(classify(413, "too large"), Some(Refusal::Invalid));
        assert_eq!(classify(403, "forbidden"), Some(Refusal::Forbidden));
        assert_eq!(classify(403, "exceeded quota"), Some(Refusal::Forbidden));
        for transient in [401, 404, 408, 409, 429, 500, 503, 504] {
            assert_eq!(classify(transient, "x"), None, "{transient}");
        }
        assert_eq!(
            classify(
                500,
                "failed to create typed patch object (ns/x; /v1, Kind=ConfigMap): .data.size: expected string"
            ),
            Some(Refusal::Invalid)
        );
        assert!(is_uid_mismatch(
            422,
            "metadata.uid: Invalid value: field is immutable"
        ));
        assert!(!is_uid_mismatch(422, "spec.replicas: Invalid value"));
    }
}

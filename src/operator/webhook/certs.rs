//! The webhook's certificates, made by ruleop itself: a CA (ten years) and a serving
//! certificate it signs (one year, for the Service's DNS names or the URL's host),
//! kept in a Secret of ruleop's namespace so every replica serves the same. The serving
//! certificate is made again when it has less than 30 days left, by the same CA: the
//! CA bundle the API server trusts does not change. A CA with less than 30 days left is
//! made again with it.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::collections::BTreeMap;
use time::{Duration, OffsetDateTime};

/// The Secret's keys.
pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
/// The Secret's annotations: when each certificate ends (RFC 3339), and for which names
/// the serving one was made.
pub const CA_NOT_AFTER: &str = "ruleop.dev/ca-not-after";
pub const NOT_AFTER: &str = "ruleop.dev/not-after";
pub const NAMES: &str = "ruleop.dev/names";

/// How long before its end a certificate is made again.
pub const RENEW_BEFORE: Duration = Duration::days(30);

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot make the webhook's certificate: {0}")]
    Make(#[from] rcgen::Error),
    #[error("the webhook's Secret lacks `{0}`")]
    Missing(&'static str),
    #[error("the webhook's Secret holds a `tls.crt` that cannot be read: {0}")]
    Unreadable(String),
}

/// A CA and a serving certificate, in PEM, with when each ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certs {
    pub ca_cert: String,
    pub ca_key: String,
    pub cert: String,
    pub key: String,
    pub ca_not_after: OffsetDateTime,
    pub not_after: OffsetDateTime,
    /// The DNS names and IP addresses the serving certificate is for.
    pub names: Vec<String>,
}

fn ca_params(not_after: OffsetDateTime) -> Result<CertificateParams, rcgen::Error> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "ruleop webhook CA");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.not_before = OffsetDateTime::now_utc() - Duration::hours(1);
    p.not_after = not_after;
    Ok(p)
}

/// A serving certificate for `names` signed by the CA (`ca_key`, its `ca_not_after`).
fn serving(
    names: &[String],
    ca_key: &KeyPair,
    ca_not_after: OffsetDateTime,
) -> Result<(String, String, OffsetDateTime), rcgen::Error> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.subject_alt_names = names
        .iter()
        .map(|n| match n.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => n.clone().try_into().map(SanType::DnsName),
        })
        .collect::<Result<_, _>>()?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    p.distinguished_name = dn;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.not_before = OffsetDateTime::now_utc() - Duration::hours(1);
    let not_after = (OffsetDateTime::now_utc() + Duration::days(365)).min(ca_not_after);
    p.not_after = not_after;
    let key = KeyPair::generate()?;
    let issuer = Issuer::new(ca_params(ca_not_after)?, ca_key);
    let cert = p.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

/// A new CA and serving certificate for `names`.
pub fn make(names: &[String]) -> Result<Certs, CertError> {
    let ca_not_after = OffsetDateTime::now_utc() + Duration::days(3650);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params(ca_not_after)?.self_signed(&ca_key)?;
    let (cert, key, not_after) = serving(names, &ca_key, ca_not_after)?;
    Ok(Certs {
        ca_cert: ca_cert.pem(),
        ca_key: ca_key.serialize_pem(),
        cert,
        key,
        ca_not_after,
        not_after,
        names: names.to_vec(),
    })
}

/// What to do with the certificates `have` for `names` at `now`: None to keep them, or
/// the certificates to keep from now on (the serving one made again by the same CA, or
/// everything made again).
pub fn renew(
    have: Option<&Certs>,
    names: &[String],
    now: OffsetDateTime,
) -> Result<Option<Certs>, CertError> {
    let Some(have) = have else {
        return make(names).map(Some);
    };
    if have.ca_not_after - now < RENEW_BEFORE {
        return make(names).map(Some);
    }
    if have.not_after - now >= RENEW_BEFORE && have.names == names {
        return Ok(None);
    }
    let ca_key = KeyPair::from_pem(&have.ca_key)?;
    let (cert, key, not_after) = serving(names, &ca_key, have.ca_not_after)?;
    Ok(Some(Certs {
        cert,
        key,
        not_after,
        names: names.to_vec(),
        ..have.clone()
    }))
}

/// The Secret's data and annotations holding `c`.
pub fn to_secret(c: &Certs) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let data = [
        (CA_CERT, &c.ca_cert),
        (CA_KEY, &c.ca_key),
        (TLS_CERT, &c.cert),
        (TLS_KEY, &c.key),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.clone()))
    .collect();
    let stamp = |t: OffsetDateTime| {
        k8s_openapi::jiff::Timestamp::from_second(t.unix_timestamp())
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    let annotations = [
        (CA_NOT_AFTER, stamp(c.ca_not_after)),
        (NOT_AFTER, stamp(c.not_after)),
        (NAMES, c.names.join(",")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    (data, annotations)
}

/// The certificates a Secret holds (its data decoded, its annotations).
pub fn from_secret(
    data: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<Certs, CertError> {
    let get = |k: &'static str| data.get(k).cloned().ok_or(CertError::Missing(k));
    let when = |k: &'static str| {
        annotations
            .get(k)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .and_then(|t| OffsetDateTime::from_unix_timestamp(t.as_second()).ok())
            .ok_or(CertError::Missing(k))
    };
    Ok(Certs {
        ca_cert: get(CA_CERT)?,
        ca_key: get(CA_KEY)?,
        cert: get(TLS_CERT)?,
        key: get(TLS_KEY)?,
        ca_not_after: when(CA_NOT_AFTER)?,
        not_after: when(NOT_AFTER)?,
        names: annotations
            .get(NAMES)
            .map(|n| n.split(',').map(str::to_string).collect())
            .unwrap_or_default(),
    })
}

/// The certificates of a Secret another writes (cert-manager's `kubernetes.io/tls` with
/// `ca.crt`): the serving certificate and key, the CA that signed it, and when the
/// certificate ends (read from it). No CA key: ruleop never signs with it.
pub fn from_external_secret(data: &BTreeMap<String, String>) -> Result<Certs, CertError> {
    let get = |k: &'static str| data.get(k).cloned().ok_or(CertError::Missing(k));
    let cert = get(TLS_CERT)?;
    let not_after = not_after_of(&cert)?;
    Ok(Certs {
        ca_cert: get(CA_CERT)?,
        ca_key: String::new(),
        key: get(TLS_KEY)?,
        cert,
        ca_not_after: not_after,
        not_after,
        names: Vec::new(),
    })
}

/// When a PEM certificate ends.
fn not_after_of(pem: &str) -> Result<OffsetDateTime, CertError> {
    let bad = |why: String| CertError::Unreadable(why);
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| bad(e.to_string()))?;
    let cert = pem.parse_x509().map_err(|e| bad(e.to_string()))?;
    OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp())
        .map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serving_certificate_is_made_again_by_the_same_ca_when_its_end_nears() {
        let names = vec![
            "ruleop-webhook.ruleop-system.svc".to_string(),
            "127.0.0.1".into(),
        ];
        let c = make(&names).unwrap();
        assert!(c.cert.starts_with("-----BEGIN CERTIFICATE-----"));
        let now = OffsetDateTime::now_utc();
        assert_eq!(renew(Some(&c), &names, now).unwrap(), None, "a year left");
        let late = now + Duration::days(340);
        let r = renew(Some(&c), &names, late).unwrap().expect("renewed");
        assert_eq!(
            r.ca_cert, c.ca_cert,
            "the same CA: the API server's bundle holds"
        );
        assert_ne!(r.cert, c.cert);
        // Other names: a serving certificate for them, by the same CA.
        let other = renew(Some(&c), &["x.svc".to_string()], now)
            .unwrap()
            .unwrap();
        assert_eq!(other.ca_cert, c.ca_cert);
        // Round trip through the Secret.
        let (data, ann) = to_secret(&c);
        let back = from_secret(&data, &ann).unwrap();
        assert_eq!(back.cert, c.cert);
        assert_eq!(back.names, names);
        assert_eq!(
            back.not_after.unix_timestamp(),
            c.not_after.unix_timestamp()
        );
    }

    #[test]
    fn a_secret_another_wrote_is_served_as_it_is_with_its_end_read_from_the_certificate() {
        let c = make(&["ruleop-webhook.ruleop-system.svc".to_string()]).unwrap();
        let data: BTreeMap<String, String> = [
            (TLS_CERT, c.cert.clone()),
            (TLS_KEY, c.key.clone()),
            (CA_CERT, c.ca_cert.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let got = from_external_secret(&data).unwrap();
        assert_eq!(
            (&got.cert, &got.key, &got.ca_cert),
            (&c.cert, &c.key, &c.ca_cert)
        );
        assert_eq!(got.not_after.unix_timestamp(), c.not_after.unix_timestamp());
        let mut no_ca = data.clone();
        no_ca.remove(CA_CERT);
        assert!(matches!(
            from_external_secret(&no_ca),
            Err(CertError::Missing("ca.crt"))
        ));
        let mut junk = data;
        junk.insert(TLS_CERT.into(), "not a certificate".into());
        assert!(matches!(
            from_external_secret(&junk),
            Err(CertError::Unreadable(_))
        ));
    }
}

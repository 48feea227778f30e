//! The admin server over TLS (`--admin-tls-cert`, `--admin-tls-key`): the certificate and
//! key read from files (a mounted Secret, such as cert-manager's), read again when they
//! change (a Secret volume swaps them in place), so a renewed certificate is served within
//! [`RECHECK`] with no restart.

use super::webhook::serve::Current;
use axum::Router;
use hyper_util::rt::TokioIo;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often the files are looked at.
pub const RECHECK: Duration = Duration::from_secs(30);

/// Where the certificate and key are.
#[derive(Debug, Clone)]
pub struct Files {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Files {
    fn modified(&self) -> Option<(SystemTime, SystemTime)> {
        let at = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        Some((at(&self.cert)?, at(&self.key)?))
    }

    fn load(&self, into: &Current) -> Result<(), String> {
        let read = |p: &PathBuf| {
            std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))
        };
        into.set(&read(&self.cert)?, &read(&self.key)?)
    }
}

/// The certificate served from `files`, kept as they change; an error if they do not load
/// now.
pub fn watch(files: Files) -> Result<Arc<Current>, String> {
    let current = Arc::new(Current::default());
    files.load(&current)?;
    let kept = current.clone();
    tokio::spawn(async move {
        let mut seen = files.modified();
        loop {
            tokio::time::sleep(RECHECK).await;
            let now = files.modified();
            if now == seen {
                continue;
            }
            match files.load(&kept) {
                Ok(()) => {
                    tracing::info!(cert = %files.cert.display(), "admin server's certificate read again");
                    seen = now;
                }
                // (Half-swapped files: the next look reads them whole.)
                Err(e) => {
                    tracing::warn!(error = %e, "admin server's new certificate not usable; the old one stays")
                }
            }
        }
    });
    Ok(current)
}

/// Serves `app` over TLS on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, app: Router, current: Arc<Current>) {
    let acceptor = match super::webhook::serve::acceptor(current) {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(error = %e, "the admin server cannot serve TLS");
            return;
        }
    };
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
            else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(error = %e, "admin connection");
            }
        });
    }
}

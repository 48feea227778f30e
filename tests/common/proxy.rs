//! A loopback TCP proxy that can freeze connections: a frozen one stays open and carries
//! nothing, ever, as a stalled network path would.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct Proxy {
    pub addr: std::net::SocketAddr,
    /// Connections with an id up to this are frozen (u64::MAX: every one, new ones too).
    frozen_before: Arc<AtomicU64>,
    next_id: Arc<AtomicU64>,
}

impl Proxy {
    pub async fn start(upstream: std::net::SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen_before = Arc::new(AtomicU64::new(0));
        let next_id = Arc::new(AtomicU64::new(1));
        let fb = frozen_before.clone();
        let ids = next_id.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = ids.fetch_add(1, Ordering::SeqCst);
                let fb = fb.clone();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let pipe = |mut r: tokio::net::tcp::OwnedReadHalf,
                                mut w: tokio::net::tcp::OwnedWriteHalf,
                                fb: Arc<AtomicU64>| async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            if id <= fb.load(Ordering::SeqCst) {
                                // Frozen: hold the connection open, forward nothing, ever.
                                std::future::pending::<()>().await;
                            }
                            let n = match tokio::time::timeout(
                                Duration::from_millis(200),
                                r.read(&mut buf),
                            )
                            .await
                            {
                                Ok(Ok(0)) | Ok(Err(_)) => return,
                                Ok(Ok(n)) => n,
                                Err(_) => continue,
                            };
                            if id <= fb.load(Ordering::SeqCst) {
                                std::future::pending::<()>().await;
                            }
                            if w.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    let a = tokio::spawn(pipe(cr, sw, fb.clone()));
                    let b = tokio::spawn(pipe(sr, cw, fb));
                    let _ = tokio::join!(a, b);
                });
            }
        });
        Proxy {
            addr,
            frozen_before,
            next_id,
        }
    }

    /// Freezes every connection opened so far; later ones flow.
    pub fn freeze_existing(&self) -> u64 {
        let last = self.next_id.load(Ordering::SeqCst) - 1;
        self.frozen_before.store(last, Ordering::SeqCst);
        last
    }

    /// Freezes every connection, those to come too: the path is cut.
    pub fn freeze_all(&self) {
        self.frozen_before.store(u64::MAX, Ordering::SeqCst);
    }

    /// The path heals: connections frozen so far stay dead, new ones flow.
    pub fn heal(&self) {
        let last = self.next_id.load(Ordering::SeqCst) - 1;
        self.frozen_before.store(last, Ordering::SeqCst);
    }
}

/// A copy of `kubeconfig` whose server is reached through a new proxy, in `dir`.
pub async fn proxied_kubeconfig(kubeconfig: &str, dir: &std::path::Path) -> (Proxy, String) {
    let mut kc: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    let server = kc["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_string();
    let upstream: std::net::SocketAddr = server.trim_start_matches("https://").parse().unwrap();
    let proxy = Proxy::start(upstream).await;
    kc["clusters"][0]["cluster"]["server"] = serde_json::json!(format!("https://{}", proxy.addr));
    let path = dir.join("kubeconfig-proxied");
    std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
    (proxy, path.to_str().unwrap().to_string())
}

//! Upstream calls honour `HTTP_PROXY` / `HTTPS_PROXY` / `NO_PROXY` (read
//! at start, as curl reads them): through a real `CONNECT` proxy on
//! loopback, with the proxy URL's credentials as `Proxy-Authorization`.
//!
//! One test in its own binary: it sets process environment variables,
//! which no other test may see.

use std::sync::{Arc, Mutex};

use crate::serve_support::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A CONNECT proxy on 127.0.0.1: records each request head, then tunnels.
struct Proxy {
    addr: std::net::SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    async fn start() -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                        if client.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let text = String::from_utf8_lossy(&head).to_string();
                    seen.lock().unwrap().push(text.clone());
                    let target = text
                        .strip_prefix("CONNECT ")
                        .and_then(|r| r.split(' ').next())
                        .unwrap_or("")
                        .to_string();
                    let Ok(mut up) = tokio::net::TcpStream::connect(&target).await else {
                        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                        return;
                    };
                    let _ = client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                });
            }
        });
        Proxy { addr, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

async fn gateway(name: &str, prim: &Mock, back: &Mock) -> failover_gateway::Running {
    let dir = temp_dir(name);
    write_profiles(&dir);
    std::fs::write(
        dir.join("gateway.yaml"),
        config_text(&Setup::default(), prim, back),
    )
    .unwrap();
    failover_gateway::start(failover_gateway::Options {
        sources: failover_gateway::Sources {
            config: dir.join("gateway.yaml"),
            state: dir.join("state"),
            rules: Vec::new(),
            no_defaults: false,
            model: Default::default(),
        },
        listen: "127.0.0.1:0".into(),
        watch: false,
        workers: 0,
    })
    .await
    .unwrap()
}

async fn ask(gw: &failover_gateway::Running) -> reqwest::Response {
    // The test's own client goes straight to the gateway.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    http.post(format!("http://{}/v1/chat/completions", gw.addr))
        .json(&json!({"model": "prim/model-a", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap()
}

const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

#[tokio::test]
async fn upstream_calls_go_through_the_environments_proxy() {
    // No other test's gateway starts while the variables are set.
    let _env = PROXY_ENV.write().await;
    for v in PROXY_VARS {
        std::env::remove_var(v);
    }
    let proxy = Proxy::start().await;
    let prim = Mock::start().await;
    let back = Mock::start().await;
    prim.always(ok_openai("via the proxy"));

    // HTTP_PROXY with credentials: the call is tunnelled, authenticated.
    std::env::set_var("HTTP_PROXY", format!("http://user:pw@{}", proxy.addr));
    let gw = gateway("proxy-on", &prim, &back).await;
    let r = ask(&gw).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"], "via the proxy",
        "{body}"
    );
    let heads = proxy.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    let target = prim.url().trim_start_matches("http://").to_string();
    assert!(
        heads[0].starts_with(&format!("CONNECT {target} HTTP/1.1\r\n")),
        "{heads:?}"
    );
    // base64("user:pw")
    assert!(
        heads[0]
            .to_ascii_lowercase()
            .contains("proxy-authorization: basic dxnlcjpwdw=="),
        "{heads:?}"
    );
    assert_eq!(prim.hits(), 1);
    gw.shutdown().await;

    // NO_PROXY names the upstream's host: straight to it.
    std::env::set_var("NO_PROXY", "127.0.0.1");
    let gw = gateway("proxy-bypassed", &prim, &back).await;
    assert_eq!(ask(&gw).await.status(), 200);
    assert_eq!(proxy.heads().len(), 1, "the proxy saw a bypassed call");
    assert_eq!(prim.hits(), 2);
    gw.shutdown().await;

    // No variable at all: direct.
    for v in PROXY_VARS {
        std::env::remove_var(v);
    }
    let gw = gateway("proxy-off", &prim, &back).await;
    assert_eq!(ask(&gw).await.status(), 200);
    assert_eq!(proxy.heads().len(), 1);
    assert_eq!(prim.hits(), 3);
    gw.shutdown().await;
}

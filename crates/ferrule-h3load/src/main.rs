//! `h3load`: a closed-loop HTTP/3 load generator, as h2load is for HTTP/2: `-c` connections,
//! each keeping `-m` requests in flight, for `-D` seconds after a warm-up. Prints one JSON
//! line: requests/s, requests, errors, non-2xx, and the client's own CPU seconds (to tell a
//! client-bound run).
//!
//! ```text
//! h3load [-c 10] [-m 10] [-D 5] [--warm-up 2] --ca CA.pem https://127.0.0.1:PORT/path
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Buf;
use quinn::crypto::rustls::QuicClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

struct Options {
    connections: usize,
    streams: usize,
    duration: Duration,
    warm_up: Duration,
    ca: String,
    url: http::Uri,
}

fn parse() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let mut options = Options {
        connections: 10,
        streams: 10,
        duration: Duration::from_secs(5),
        warm_up: Duration::from_secs(2),
        ca: String::new(),
        url: http::Uri::default(),
    };
    let mut url = None;
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "-c" => options.connections = value()?.parse().map_err(|e| format!("-c: {e}"))?,
            "-m" => options.streams = value()?.parse().map_err(|e| format!("-m: {e}"))?,
            "-D" => options.duration = seconds(&value()?)?,
            "--warm-up" => options.warm_up = seconds(&value()?)?,
            "--ca" => options.ca = value()?,
            _ if url.is_none() => url = Some(arg),
            _ => return Err(format!("unexpected argument {arg}")),
        }
    }
    let url = url.ok_or("give the URL")?;
    options.url = url.parse().map_err(|e| format!("bad URL: {e}"))?;
    if options.ca.is_empty() {
        return Err("give --ca, the CA certificate (PEM) the server's is signed by".into());
    }
    Ok(options)
}

fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .map(Duration::from_secs_f64)
        .map_err(|e| format!("bad seconds {text}: {e}"))
}

#[derive(Default)]
struct Counts {
    measuring: AtomicBool,
    done: AtomicBool,
    ok: AtomicU64,
    non_2xx: AtomicU64,
    errors: AtomicU64,
}

fn client_config(ca: &str) -> Result<quinn::ClientConfig, Box<dyn std::error::Error>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca)? {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    Ok(quinn::ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(tls)?,
    )))
}

async fn connection(
    options: Arc<Options>,
    addr: SocketAddr,
    config: quinn::ClientConfig,
    counts: Arc<Counts>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
    endpoint.set_default_client_config(config);
    let host = options.url.host().unwrap_or("localhost");
    let quic = endpoint.connect(addr, host)?.await?;
    let (mut driver, send_request) = h3::client::new(h3_quinn::Connection::new(quic)).await?;
    let driving = tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let mut streams = Vec::new();
    for _ in 0..options.streams {
        let mut send_request = send_request.clone();
        let options = options.clone();
        let counts = counts.clone();
        streams.push(tokio::spawn(async move {
            while !counts.done.load(Ordering::Relaxed) {
                let request = http::Request::get(options.url.clone()).body(()).unwrap();
                let outcome = async {
                    let mut stream = send_request.send_request(request).await?;
                    stream.finish().await?;
                    let response = stream.recv_response().await?;
                    while let Some(mut chunk) = stream.recv_data().await? {
                        chunk.advance(chunk.remaining());
                    }
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response.status())
                }
                .await;
                if !counts.measuring.load(Ordering::Relaxed) {
                    continue;
                }
                match outcome {
                    Ok(status) if status.is_success() => counts.ok.fetch_add(1, Ordering::Relaxed),
                    Ok(_) => counts.non_2xx.fetch_add(1, Ordering::Relaxed),
                    Err(_) => counts.errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    for stream in streams {
        let _ = stream.await;
    }
    driving.abort();
    endpoint.close(0u32.into(), b"");
    Ok(())
}

/// This process's user plus system CPU time so far, from /proc (100 Hz ticks).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split(' ').collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat (11 and 12 after the name); 100 Hz ticks.
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let options = match parse() {
        Ok(options) => Arc::new(options),
        Err(problem) => {
            eprintln!("h3load: {problem}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let authority = options
            .url
            .authority()
            .expect("the URL has host:port")
            .as_str();
        let addr: SocketAddr = tokio::net::lookup_host(authority)
            .await
            .expect("the host resolves")
            .next()
            .expect("an address");
        let config = client_config(&options.ca).expect("the CA file");
        let counts = Arc::new(Counts::default());
        let mut clients = Vec::new();
        for _ in 0..options.connections {
            let task = connection(options.clone(), addr, config.clone(), counts.clone());
            clients.push(tokio::spawn(task));
        }
        tokio::time::sleep(options.warm_up).await;
        let (cpu, started) = (cpu_seconds(), Instant::now());
        counts.measuring.store(true, Ordering::Relaxed);
        tokio::time::sleep(options.duration).await;
        counts.measuring.store(false, Ordering::Relaxed);
        let (cpu, elapsed) = (cpu_seconds() - cpu, started.elapsed().as_secs_f64());
        counts.done.store(true, Ordering::Relaxed);
        let mut failed = 0;
        for client in clients {
            if !matches!(client.await, Ok(Ok(()))) {
                failed += 1;
            }
        }
        let ok = counts.ok.load(Ordering::Relaxed);
        println!(
            "{{\"rps\": {:.1}, \"requests\": {}, \"non_2xx\": {}, \"errors\": {}, \
             \"failed_connections\": {}, \"client_cpu_s\": {:.2}, \"seconds\": {:.2}}}",
            ok as f64 / elapsed,
            ok,
            counts.non_2xx.load(Ordering::Relaxed),
            counts.errors.load(Ordering::Relaxed),
            failed,
            cpu,
            elapsed,
        );
    });
}

//! The QUIC echo service of the example (`quic_echo`) and its client
//! (`quic_client`): every bidirectional stream's bytes come back on the
//! same stream. The client writes a known pattern on each stream and checks
//! every byte it reads back. The client's two modes: bulk (`run_client`:
//! one connection, many streams) and handshakes (`run_handshakes`: many
//! fresh connections, each with a full TLS 1.3 handshake).
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use quinn::{ClientConfig, Endpoint, ServerConfig, TransportConfig, VarInt};

/// The name the example's certificate is made for (and the client checks).
pub const SERVER_NAME: &str = "udpdemux.test";
/// The ALPN both sides speak.
pub const ALPN: &[u8] = b"udx-echo";

/// Flow control sized for a LAN, and enough streams for the test's 100 at
/// once. The windows bound the bytes a side holds unread (received) and
/// unacknowledged (sent). On the bench's veth the bandwidth-delay product
/// is tens of KB (200 MB/s, 150-450 µs), so 1 MiB a connection is already
/// ten of them and fits a core's L2 cache with room to spare. With 16 MiB
/// (and 1 MiB a stream), as here before, a server that runs receive, quinn
/// and the echo in turns on one thread (`--runtime lcore`) found its
/// streams' data evicted by the time it copied it: bulk echo 150-157 MB/s
/// against 195-215 with these windows, 6 alternating pairs each; the
/// kernel backend's server, with two threads, 160-178 with either
/// (docs/benchmarks.md).
fn transport(streams: u32) -> TransportConfig {
    let mut t = TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(streams))
        .stream_receive_window(VarInt::from_u32(256 << 10))
        .receive_window(VarInt::from_u32(1 << 20))
        .send_window(1 << 20)
        .max_idle_timeout(Some(Duration::from_secs(30).try_into().expect("30 s")));
    t
}

/// A self-signed certificate for [`SERVER_NAME`], made now, and the
/// server's config with it: its DER (the client trusts exactly it).
pub fn server_config(streams: u32) -> Result<(ServerConfig, Vec<u8>), String> {
    let ck = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
        .map_err(|e| format!("cannot make the certificate: {e}"))?;
    let cert = ck.cert.der().to_vec();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let mut tls = quinn::rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(cert.clone())], key)
        .map_err(|e| format!("bad certificate: {e}"))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| format!("TLS config unfit for QUIC: {e}"))?;
    let mut sc = ServerConfig::with_crypto(Arc::new(crypto));
    sc.transport_config(Arc::new(transport(streams)));
    Ok((sc, cert))
}

/// The client's config: trusts only `cert` (DER).
pub fn client_config(cert: &[u8], streams: u32) -> Result<ClientConfig, String> {
    let mut roots = quinn::rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(cert.to_vec()))
        .map_err(|e| format!("bad server certificate: {e}"))?;
    let mut tls = quinn::rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    // Every connection makes a full handshake (certificate, signature,
    // key exchange): no session resumption, so no 0-RTT either. The
    // handshake benchmark counts full handshakes, and one bulk connection
    // has nothing to resume.
    tls.resumption = quinn::rustls::client::Resumption::disabled();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| format!("TLS config unfit for QUIC: {e}"))?;
    let mut cc = ClientConfig::new(Arc::new(crypto));
    cc.transport_config(Arc::new(transport(streams)));
    Ok(cc)
}

/// What a serving endpoint did with its connections (the server's exit
/// line; every accepted connection should end closed by its peer).
#[derive(Debug, Default)]
pub struct ServeStats {
    /// Connection attempts the endpoint handed to `serve` (each ends
    /// accepted or failed, or is still handshaking).
    pub incoming: AtomicU64,
    /// Handshakes completed.
    pub accepted: AtomicU64,
    /// Incoming connections whose handshake failed.
    pub failed: AtomicU64,
    /// Accepted connections that ended with the peer's application close
    /// (what the client does when it is done).
    pub closed_by_peer: AtomicU64,
    /// Accepted connections that ended any other way (timed out, reset,
    /// closed here at stop).
    pub closed_other: AtomicU64,
    /// quinn's `ConnectionStats` of the ended connections, summed: UDP
    /// datagrams sent and the sends they took (GSO batches), datagrams
    /// received, ACK frames each way, packets declared lost, and the
    /// `DATA_BLOCKED` / `STREAM_DATA_BLOCKED` frames sent (the server held
    /// back by the client's flow control). What tells two backends' runs
    /// of the same client apart when they move the same streams.
    pub udp_tx: AtomicU64,
    pub udp_tx_ios: AtomicU64,
    pub udp_rx: AtomicU64,
    pub acks_tx: AtomicU64,
    pub acks_rx: AtomicU64,
    pub lost_packets: AtomicU64,
    pub blocked_tx: AtomicU64,
}

impl ServeStats {
    /// Accepted connections that have not ended yet.
    pub fn live(&self) -> u64 {
        let n = |c: &AtomicU64| c.load(Ordering::SeqCst);
        n(&self.accepted).saturating_sub(n(&self.closed_by_peer) + n(&self.closed_other))
    }

    /// The counters as a JSON object, with `open`: the connections the
    /// endpoints still held at the stop (quinn's `open_connections`,
    /// draining included), after waiting `settle_ms` for them to end.
    pub fn json(&self, open: usize, settle_ms: u128) -> String {
        let n = |c: &AtomicU64| c.load(Ordering::SeqCst);
        format!(
            r#"{{"incoming":{},"accepted":{},"failed":{},"closed_by_peer":{},"closed_other":{},"open":{open},"settle_ms":{settle_ms},"udp_tx":{},"udp_tx_ios":{},"udp_rx":{},"acks_tx":{},"acks_rx":{},"lost_packets":{},"blocked_tx":{}}}"#,
            n(&self.incoming),
            n(&self.accepted),
            n(&self.failed),
            n(&self.closed_by_peer),
            n(&self.closed_other),
            n(&self.udp_tx),
            n(&self.udp_tx_ios),
            n(&self.udp_rx),
            n(&self.acks_tx),
            n(&self.acks_rx),
            n(&self.lost_packets),
            n(&self.blocked_tx)
        )
    }
}

/// Serve echo on `endpoint` until it is closed: every connection, every
/// bidirectional stream, on tasks of the current runtime; counted in
/// `stats`.
pub async fn serve(endpoint: Endpoint, stats: Arc<ServeStats>) {
    while let Some(incoming) = endpoint.accept().await {
        let stats = Arc::clone(&stats);
        stats.incoming.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else {
                stats.failed.fetch_add(1, Ordering::SeqCst);
                return;
            };
            stats.accepted.fetch_add(1, Ordering::SeqCst);
            let end = loop {
                match conn.accept_bi().await {
                    Ok((send, recv)) => {
                        tokio::spawn(echo_back(send, recv));
                    }
                    Err(e) => break e,
                }
            };
            let ended = match end {
                quinn::ConnectionError::ApplicationClosed(_) => &stats.closed_by_peer,
                _ => &stats.closed_other,
            };
            let c = conn.stats();
            for (sum, v) in [
                (&stats.udp_tx, c.udp_tx.datagrams),
                (&stats.udp_tx_ios, c.udp_tx.ios),
                (&stats.udp_rx, c.udp_rx.datagrams),
                (&stats.acks_tx, c.frame_tx.acks),
                (&stats.acks_rx, c.frame_rx.acks),
                (&stats.lost_packets, c.path.lost_packets),
                (
                    &stats.blocked_tx,
                    c.frame_tx.data_blocked + c.frame_tx.stream_data_blocked,
                ),
            ] {
                sum.fetch_add(v, Ordering::Relaxed);
            }
            ended.fetch_add(1, Ordering::SeqCst);
        });
    }
}

/// One stream of the echo service: what comes in goes back out.
async fn echo_back(mut send: quinn::SendStream, mut recv: quinn::RecvStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match recv.read(&mut buf).await {
            Ok(Some(n)) => {
                if send.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            Ok(None) => break,
            Err(_) => return,
        }
    }
    let _ = send.finish();
}

/// Byte `i` of stream `s`'s pattern (differs between streams and along each).
pub fn pattern(s: u32, i: u64) -> u8 {
    (i.wrapping_mul(131) ^ u64::from(s).wrapping_mul(0x9e37_79b9) ^ (i >> 8)) as u8
}

/// What one client run did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub streams_ok: u32,
    pub bytes_echoed: u64,
    pub first_error: Option<String>,
    pub secs: f64,
    /// The connection's path as quinn saw it at the end: where a bulk
    /// transfer's time went when the CPUs were not busy (a long RTT, a
    /// window cut by losses).
    pub path: Option<quinn::PathStats>,
}

/// Connect to `server`, open `streams` bidirectional streams at once, write
/// `bytes` of each stream's pattern on each and read them back, checking
/// every byte.
pub async fn run_client(
    endpoint: &Endpoint,
    server: SocketAddr,
    streams: u32,
    bytes: u64,
) -> Outcome {
    let t0 = Instant::now();
    let mut out = Outcome::default();
    let conn = match endpoint.connect(server, SERVER_NAME) {
        Ok(c) => match c.await {
            Ok(c) => c,
            Err(e) => {
                out.first_error = Some(format!("handshake: {e}"));
                return out;
            }
        },
        Err(e) => {
            out.first_error = Some(format!("connect: {e}"));
            return out;
        }
    };
    let mut tasks = Vec::new();
    for s in 0..streams {
        let conn = conn.clone();
        tasks.push(tokio::spawn(
            async move { echo_stream(&conn, s, bytes).await },
        ));
    }
    for t in tasks {
        match t.await {
            Ok(Ok(n)) => {
                out.streams_ok += 1;
                out.bytes_echoed += n;
            }
            Ok(Err(e)) => {
                out.first_error.get_or_insert(e);
            }
            Err(e) => {
                out.first_error.get_or_insert(format!("task: {e}"));
            }
        }
    }
    out.path = Some(conn.stats().path);
    conn.close(VarInt::from_u32(0), b"done");
    out.secs = t0.elapsed().as_secs_f64();
    out
}

/// What one handshake run did.
#[derive(Debug, Default)]
pub struct HandshakeOutcome {
    pub ok: u32,
    pub failures: u32,
    pub first_error: Option<String>,
    pub secs: f64,
}

/// Make `count` fresh connections to `server`, `concurrency` at a time: for
/// each, a full handshake, then (when `bytes` > 0) one stream echoing
/// `bytes` of the pattern, checked, then a clean close. The time runs from
/// the first connect to the last close (not the draining after it).
pub async fn run_handshakes(
    endpoint: &Endpoint,
    server: SocketAddr,
    count: u32,
    concurrency: u32,
    bytes: u64,
) -> HandshakeOutcome {
    let t0 = Instant::now();
    let next = Arc::new(AtomicU32::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency.clamp(1, count.max(1)) {
        let (endpoint, next) = (endpoint.clone(), Arc::clone(&next));
        workers.push(tokio::spawn(async move {
            let mut out = HandshakeOutcome::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break out;
                }
                match one_connection(&endpoint, server, i, bytes).await {
                    Ok(()) => out.ok += 1,
                    Err(e) => {
                        out.failures += 1;
                        out.first_error.get_or_insert(e);
                    }
                }
            }
        }));
    }
    let mut out = HandshakeOutcome::default();
    for w in workers {
        match w.await {
            Ok(o) => {
                out.ok += o.ok;
                out.failures += o.failures;
                if let Some(e) = o.first_error {
                    out.first_error.get_or_insert(e);
                }
            }
            Err(e) => {
                out.failures += 1;
                out.first_error.get_or_insert(format!("task: {e}"));
            }
        }
    }
    out.secs = t0.elapsed().as_secs_f64();
    out
}

/// One fresh connection of `run_handshakes`.
async fn one_connection(
    endpoint: &Endpoint,
    server: SocketAddr,
    i: u32,
    bytes: u64,
) -> Result<(), String> {
    let conn = endpoint
        .connect(server, SERVER_NAME)
        .map_err(|e| format!("connection {i}: connect: {e}"))?
        .await
        .map_err(|e| format!("connection {i}: handshake: {e}"))?;
    if bytes > 0 {
        echo_stream(&conn, i, bytes)
            .await
            .map_err(|e| format!("connection {i}: {e}"))?;
    }
    conn.close(VarInt::from_u32(0), b"done");
    Ok(())
}

async fn echo_stream(conn: &quinn::Connection, s: u32, bytes: u64) -> Result<u64, String> {
    let (mut send, mut recv) = conn
        .open_bi()
        .await
        .map_err(|e| format!("stream {s}: open: {e}"))?;
    let writer = tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        let mut at = 0u64;
        while at < bytes {
            let n = (bytes - at).min(buf.len() as u64) as usize;
            for (k, b) in buf[..n].iter_mut().enumerate() {
                *b = pattern(s, at + k as u64);
            }
            send.write_all(&buf[..n])
                .await
                .map_err(|e| format!("stream {s}: write at {at}: {e}"))?;
            at += n as u64;
        }
        send.finish()
            .map_err(|e| format!("stream {s}: finish: {e}"))?;
        Ok::<_, String>(())
    });
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = 0u64;
    loop {
        match recv.read(&mut buf).await {
            Ok(Some(n)) => {
                for (k, b) in buf[..n].iter().enumerate() {
                    let want = pattern(s, at + k as u64);
                    if *b != want {
                        return Err(format!(
                            "stream {s}: byte {} is {b:#04x}, sent {want:#04x}",
                            at + k as u64
                        ));
                    }
                }
                at += n as u64;
                if at > bytes {
                    return Err(format!("stream {s}: {at} bytes back, sent {bytes}"));
                }
            }
            Ok(None) => break,
            Err(e) => return Err(format!("stream {s}: read at {at}: {e}")),
        }
    }
    writer
        .await
        .map_err(|e| format!("stream {s}: writer: {e}"))??;
    if at != bytes {
        return Err(format!("stream {s}: {at} bytes back, sent {bytes}"));
    }
    Ok(at)
}

//! The listener's guard (issue 39): every accepted connection counts against a cap per client
//! address and a cap in total, must send its first request within a deadline, and is closed when
//! it has had no request in flight and no byte either way for the idle timeout. Without these,
//! connections that send nothing (or half a request header) stay open forever: 20,110 of them
//! took a server to its file-descriptor limit and its health check stopped answering.
//!
//! HTTP/1 header reads are bounded by hyper's own `header_read_timeout` (a request trickled in
//! byte by byte); the deadline and idle watchdog here cover the rest: connections that never
//! send a byte, idle keep-alive and idle HTTP/2 connections. An upgraded agent WebSocket keeps
//! its place under both caps until its session ends, but leaves the deadline and the idle
//! watchdog: its session has the protocol's connect deadline, a team token and heartbeats.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// What the listener allows (`max_connections`, `max_connections_per_address`,
/// `header_timeout_s`, `idle_timeout_s` in the server's configuration).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectionLimits {
    /// Open connections in total (agents, browsers, API clients, upgraded WebSockets).
    pub max_connections: usize,
    /// Open connections from one client address.
    pub max_per_address: usize,
    /// Time to the first byte of the first request, and to the end of any request's headers.
    pub header_timeout: Duration,
    /// Time with no request in flight and no byte either way before a connection is closed.
    pub idle_timeout: Duration,
}

/// One open connection's place under both caps; dropping it frees the place.
#[derive(Debug)]
pub struct Admission {
    counts: Arc<Counts>,
    address: IpAddr,
}

#[derive(Debug, Default)]
struct Counts {
    total: AtomicUsize,
    per_address: Mutex<HashMap<IpAddr, usize>>,
}

/// Counts open connections against [`ConnectionLimits`]' caps.
#[derive(Debug, Clone)]
pub struct Gate {
    limits: ConnectionLimits,
    counts: Arc<Counts>,
}

/// Why a connection was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Total,
    PerAddress,
}

impl Gate {
    pub fn new(limits: ConnectionLimits) -> Self {
        Gate {
            limits,
            counts: Arc::default(),
        }
    }

    pub fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    /// A place for a new connection from `address`, or why there is none.
    pub fn admit(&self, address: IpAddr) -> Result<Admission, Refusal> {
        let mut per = self.counts.per_address.lock().unwrap_or_else(|e| e.into_inner());
        if self.counts.total.load(Ordering::Relaxed) >= self.limits.max_connections {
            return Err(Refusal::Total);
        }
        let n = per.entry(address).or_insert(0);
        if *n >= self.limits.max_per_address {
            return Err(Refusal::PerAddress);
        }
        *n += 1;
        self.counts.total.fetch_add(1, Ordering::Relaxed);
        Ok(Admission {
            counts: self.counts.clone(),
            address,
        })
    }

    /// Open connections now.
    pub fn open(&self) -> usize {
        self.counts.total.load(Ordering::Relaxed)
    }
}

impl Admission {
    /// The client address this place is counted under.
    pub fn address(&self) -> IpAddr {
        self.address
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut per = self.counts.per_address.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = per.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.address);
            }
        }
        self.counts.total.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The WebSocket first frames read at once from one client address. A frame may be up to
/// 16 MiB (a batch's actions), and the limit on a session's first one (256 KiB, before its token
/// is checked) can only be applied once the whole frame has arrived: unauthenticated
/// connections that each stalled one byte short of 16 MiB held 380 MB for the connect deadline
/// (24 of them; 4 GiB from one address at the per-address connection cap). A connection reads
/// its first frame only with one of [`Openings::PER_ADDRESS`] places of its address, given back
/// when that frame has arrived; the others wait unread, their bytes in the kernel's buffers
/// (TCP's flow control), so one address holds at most 128 MiB of first frames. There is no cap
/// in all: it would let a few addresses that open sockets and say nothing stall every agent's
/// connect; a crowd of addresses is the listener's caps' business (`max_connections`).
#[derive(Debug, Default)]
pub struct Openings {
    per_address: Mutex<HashMap<IpAddr, Arc<tokio::sync::Semaphore>>>,
}

/// A place to read a first frame; dropping it gives the place back.
#[derive(Debug)]
pub struct OpeningPlace {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Openings {
    /// First frames read at once from one address. An agent's sessions each send their connect
    /// at once (both SDKs do), which takes milliseconds, so a team's burst of sessions, or a
    /// lab's behind one NAT, waits a little at most.
    pub const PER_ADDRESS: usize = 8;

    /// Waits for a place to read a first frame from `address`.
    pub async fn enter(&self, address: IpAddr) -> OpeningPlace {
        let own = {
            let mut per = self.per_address.lock().unwrap_or_else(|e| e.into_inner());
            // Addresses with every place free and nobody waiting are forgotten.
            per.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < Self::PER_ADDRESS);
            per.entry(address)
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(Self::PER_ADDRESS)))
                .clone()
        };
        OpeningPlace {
            _permit: own.acquire_owned().await.expect("never closed"),
        }
    }
}

/// When a connection last moved, and whether a request is being served.
#[derive(Debug)]
pub struct Activity {
    opened: Instant,
    /// Milliseconds after `opened` of the last byte read or written.
    last_ms: AtomicU64,
    read_any: AtomicBool,
    in_flight: AtomicUsize,
    /// Set when the server closes while the client may still be sending (an over-size
    /// WebSocket frame): the socket is then drained before it is closed.
    linger: AtomicBool,
    /// Set by [`Activity::close_now`]: why the server ends the connection itself.
    closing: Mutex<Option<&'static str>>,
    wake: tokio::sync::Notify,
    /// Request bodies whose handler is waiting for bytes ([`WatchedBody`]): a request in flight
    /// keeps its connection from the idle timeout, unless it is waiting for a body that does not
    /// come (a team held connections for ever by sending a header and part of a body).
    bodies_waiting: AtomicUsize,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Activity {
            opened: Instant::now(),
            last_ms: AtomicU64::new(0),
            read_any: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            linger: AtomicBool::new(false),
            closing: Mutex::new(None),
            wake: tokio::sync::Notify::new(),
            bodies_waiting: AtomicUsize::new(0),
        })
    }

    fn touch(&self) {
        let ms = self.opened.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Marks a request as being served until the guard drops (a slow handler that writes
    /// nothing for a while is not idle).
    pub fn request(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        RequestGuard(self.clone())
    }

    /// Asks for a lingering close: when the connection is dropped, its write side is shut down
    /// and what the client still sends is read and discarded (for at most [`LINGER`]) before
    /// the socket closes. Closing a socket with unread input makes the kernel send a reset,
    /// and a reset makes the client's kernel discard what the server wrote last, such as the
    /// WebSocket close frame that says why.
    pub fn linger_on_close(&self) {
        self.linger.store(true, Ordering::Relaxed);
    }

    /// Ends the connection now (every request on it, all of an HTTP/2 connection's streams),
    /// with `why` in the log: for a gRPC agent that stops reading, whose response stream the
    /// HTTP/2 layer no longer polls and so cannot end by itself.
    pub fn close_now(&self, why: &'static str) {
        self.closing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
        self.wake.notify_one();
    }

    /// Resolves when the connection has outlived its deadline or [`Activity::close_now`] was
    /// called, with the reason.
    pub async fn expired(&self, limits: ConnectionLimits) -> &'static str {
        loop {
            if let Some(why) = *self.closing.lock().unwrap_or_else(|p| p.into_inner()) {
                return why;
            }
            let now = self.opened.elapsed();
            let (deadline, why) = if !self.read_any.load(Ordering::Relaxed) {
                (limits.header_timeout, "no request within the header timeout")
            } else {
                let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
                (last + limits.idle_timeout, "idle")
            };
            // A request in flight is not idle, unless its handler waits for a body that stalled:
            // then no byte either way for the idle timeout ends it too.
            // (Every request in flight waiting: on HTTP/2 one stream's stalled upload must not
            // take the protection of another's slow handler.)
            let in_flight = self.in_flight.load(Ordering::Relaxed);
            let stalled = in_flight > 0 && self.bodies_waiting.load(Ordering::Relaxed) >= in_flight;
            let busy = in_flight > 0 && !stalled;
            let why = if stalled { "a request body stalled" } else { why };
            if now >= deadline && !busy {
                return why;
            }
            let wait = if busy {
                limits.idle_timeout
            } else {
                deadline.saturating_sub(now)
            };
            tokio::select! {
                () = tokio::time::sleep(wait.max(Duration::from_millis(10))) => {}
                () = self.wake.notified() => {}
            }
        }
    }
}

/// A request's body, counted in its connection's [`Activity`] while its handler waits for bytes
/// that have not come (`bodies_waiting`). gRPC requests are not wrapped: an agent's request
/// stream waits between messages by design, and has the protocol's heartbeats.
pub struct WatchedBody {
    inner: hyper::body::Incoming,
    activity: Arc<Activity>,
    waiting: bool,
}

impl WatchedBody {
    pub fn new(inner: hyper::body::Incoming, activity: Arc<Activity>) -> Self {
        WatchedBody {
            inner,
            activity,
            waiting: false,
        }
    }

    fn set_waiting(&mut self, waiting: bool) {
        if waiting != self.waiting {
            self.waiting = waiting;
            match waiting {
                true => self.activity.bodies_waiting.fetch_add(1, Ordering::Relaxed),
                false => self.activity.bodies_waiting.fetch_sub(1, Ordering::Relaxed),
            };
            // The watchdog may be sleeping on the request's account: it looks again.
            self.activity.wake.notify_one();
        }
    }
}

impl http_body::Body for WatchedBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        self.set_waiting(polled.is_pending());
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for WatchedBody {
    fn drop(&mut self) {
        self.set_waiting(false);
    }
}

pub struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a lingering close reads what the client still sends.
pub const LINGER: Duration = Duration::from_secs(5);

/// A TCP stream that records its activity.
pub struct Watched {
    /// Taken out only when dropped with a lingering close.
    stream: Option<TcpStream>,
    activity: Arc<Activity>,
}

impl Watched {
    pub fn new(stream: TcpStream) -> (Self, Arc<Activity>) {
        let activity = Activity::new();
        (
            Watched {
                stream: Some(stream),
                activity: activity.clone(),
            },
            activity,
        )
    }
}

impl Watched {
    fn stream_mut(&mut self) -> &mut TcpStream {
        self.stream
            .as_mut()
            .expect("the stream is only taken when the connection drops")
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if !self.activity.linger.load(Ordering::Relaxed) {
            return;
        }
        if let (Some(stream), Ok(runtime)) = (self.stream.take(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(drain_then_close(stream));
        }
    }
}

/// The lingering close: a FIN after what was written, then the client's remaining bytes read
/// and discarded until it closes its side or [`LINGER`] passes.
async fn drain_then_close(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.shutdown().await;
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut sink = vec![0u8; 64 << 10];
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
        if n == 0 {
            break;
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(self.stream_mut()).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read_any.store(true, Ordering::Relaxed);
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(self.stream_mut()).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(self.stream_mut()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(self.stream_mut()).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(self.stream_mut()).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(TcpStream::is_write_vectored)
    }
}

/// Raises this process's soft limit on open files to its hard limit (as Go's runtime does) and
/// returns the soft limit then in force; `None` where it cannot be read.
pub fn raise_descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read the struct passed by pointer, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// Refusals counted between warnings, so a flood of connections logs a line every few seconds
/// rather than one per connection.
#[derive(Debug)]
pub struct RefusalLog {
    since: Instant,
    total: u64,
    per_address: u64,
}

impl Default for RefusalLog {
    fn default() -> Self {
        RefusalLog {
            since: Instant::now(),
            total: 0,
            per_address: 0,
        }
    }
}

impl RefusalLog {
    pub fn record(&mut self, refusal: Refusal, peer: SocketAddr, gate: &Gate) {
        match refusal {
            Refusal::Total => self.total += 1,
            Refusal::PerAddress => self.per_address += 1,
        }
        if self.since.elapsed() >= Duration::from_secs(10) || self.total + self.per_address == 1 {
            let limits = gate.limits();
            tracing::warn!(
                "connections refused: {} at the total cap ({}), {} at the per-address cap ({}; latest from {}); {} open",
                self.total,
                limits.max_connections,
                self.per_address,
                limits.max_per_address,
                peer.ip(),
                gate.open()
            );
            *self = RefusalLog::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address reads at most PER_ADDRESS first frames at once; the next waits until one is
    /// in, while another address goes on.
    #[tokio::test]
    async fn first_frames_are_read_a_few_at_a_time_per_address() {
        let openings = Openings::default();
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let mut held = Vec::new();
        for _ in 0..Openings::PER_ADDRESS {
            held.push(openings.enter(a).await);
        }
        let wait = Duration::from_millis(50);
        assert!(
            tokio::time::timeout(wait, openings.enter(a)).await.is_err(),
            "one place too many"
        );
        tokio::time::timeout(wait, openings.enter(b))
            .await
            .expect("another address does not wait");
        held.pop();
        tokio::time::timeout(wait, openings.enter(a))
            .await
            .expect("a place came back");
        drop(held);
        let _ = openings.enter(ip("10.0.0.3")).await;
        assert_eq!(
            openings.per_address.lock().unwrap().len(),
            1,
            "free addresses are forgotten"
        );
    }

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 3,
            max_per_address: 2,
            header_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_caps_count_open_connections_and_free_them_on_drop() {
        let gate = Gate::new(limits());
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = gate.admit(a).unwrap();
        let _a2 = gate.admit(a).unwrap();
        assert_eq!(gate.admit(a).unwrap_err(), Refusal::PerAddress);
        let _b1 = gate.admit(b).unwrap();
        assert_eq!(gate.admit(b).unwrap_err(), Refusal::Total);
        drop(a1);
        assert_eq!(gate.open(), 2);
        let _a3 = gate.admit(a).unwrap();
        assert_eq!(gate.open(), 3);
    }

    /// `close_now` ends a busy connection at once (a request in flight keeps the idle
    /// watchdog away, not this).
    #[tokio::test]
    async fn a_connection_closed_by_the_server_expires_at_once() {
        let activity = Activity::new();
        activity.read_any.store(true, Ordering::Relaxed);
        let _busy = activity.request();
        let long = ConnectionLimits {
            idle_timeout: Duration::from_secs(3600),
            header_timeout: Duration::from_secs(3600),
            ..limits()
        };
        let waiting = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired(long).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a busy connection expired by itself");
        activity.close_now("a test");
        let why = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert_eq!(why.expect("still open").unwrap(), "a test");
    }
}

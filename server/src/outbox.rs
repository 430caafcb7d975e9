//! A session's messages to its agent: an unbounded channel (the lanes, the committer and the
//! gateway all send, from threads and tasks alike) that counts what waits in it, so that the
//! gateway stops reading from a client that does not read what it is sent. Without the count,
//! a client that sent frames each answered with an error, and read nothing, grew the server's
//! memory without bound (190 MB in 6 s).

use arena_sdk::protocol::Msg;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// Messages waiting for the transport beyond which the gateway reads nothing more from the
/// client until they drain (a batch of 4096 episodes ending together is 4096 messages).
pub const MAX_WAITING: usize = 16_384;

/// The transport is gone: the message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the agent's connection is gone")]
pub struct Gone;

/// The sending side; clones share the count.
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: UnboundedSender<Msg>,
    waiting: Arc<AtomicUsize>,
}

/// The transport's side.
#[derive(Debug)]
pub struct OutboxReceiver {
    rx: UnboundedReceiver<Msg>,
    waiting: Arc<AtomicUsize>,
    progress: Arc<Progress>,
}

/// What the transport has taken, for [`Backlog::stalled`].
#[derive(Debug, Default)]
struct Progress {
    taken: AtomicU64,
    receiver_gone: AtomicBool,
}

/// Watches whether the transport keeps taking what waits, without keeping the outbox open
/// (holding an [`Outbox`] would keep the receiver from ever seeing the end of the session).
#[derive(Debug)]
pub struct Backlog {
    waiting: Arc<AtomicUsize>,
    progress: Arc<Progress>,
}

/// A new outbox and its receiver.
pub fn outbox() -> (Outbox, OutboxReceiver) {
    let (tx, rx) = unbounded_channel();
    let waiting = Arc::new(AtomicUsize::new(0));
    (
        Outbox {
            tx,
            waiting: waiting.clone(),
        },
        OutboxReceiver {
            rx,
            waiting,
            progress: Arc::default(),
        },
    )
}

impl Outbox {
    /// Queues `msg`; [`Gone`] when the transport has stopped taking messages.
    pub fn send(&self, msg: Msg) -> Result<(), Gone> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.tx.send(msg).map_err(|_| {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            Gone
        })
    }

    /// Whether the transport has stopped taking messages.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Messages queued and not yet taken by the transport.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Whether the client is so far behind that its further frames should wait.
    pub fn backed_up(&self) -> bool {
        self.waiting() >= MAX_WAITING
    }
}

impl OutboxReceiver {
    /// The next message; None once every sender is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Msg> {
        let msg = self.rx.recv().await;
        self.count_taken(msg.is_some());
        msg
    }

    /// A message already waiting, if any.
    pub fn try_recv(&mut self) -> Option<Msg> {
        let msg = self.rx.try_recv().ok();
        self.count_taken(msg.is_some());
        msg
    }

    fn count_taken(&self, taken: bool) {
        if taken {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            self.progress.taken.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A watch on this receiver's progress.
    pub fn backlog(&self) -> Backlog {
        Backlog {
            waiting: self.waiting.clone(),
            progress: self.progress.clone(),
        }
    }
}

impl Drop for OutboxReceiver {
    fn drop(&mut self) {
        self.progress.receiver_gone.store(true, Ordering::Relaxed);
    }
}

impl Backlog {
    /// Resolves with true once messages have waited for `limit` with none taken (checked every
    /// quarter of the limit, so within 1.25 × `limit`), or with false when the receiver is
    /// dropped first. A quiet session, with nothing to send, is not stalled.
    pub async fn stalled(&self, limit: Duration) -> bool {
        let tick = (limit / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut taken = self.progress.taken.load(Ordering::Relaxed);
        let mut since = Instant::now();
        loop {
            tokio::time::sleep(tick).await;
            if self.progress.receiver_gone.load(Ordering::Relaxed) {
                return false;
            }
            let now_taken = self.progress.taken.load(Ordering::Relaxed);
            if self.waiting.load(Ordering::Relaxed) == 0 || now_taken != taken {
                taken = now_taken;
                since = Instant::now();
            } else if since.elapsed() >= limit {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arena_sdk::protocol::Heartbeat;

    #[tokio::test]
    async fn the_count_follows_the_queue() {
        let (out, mut rx) = outbox();
        let beat = || Msg::Heartbeat(Heartbeat { time: 1.0 });
        for _ in 0..3 {
            out.send(beat()).unwrap();
        }
        assert_eq!(out.clone().waiting(), 3);
        rx.recv().await.unwrap();
        assert_eq!(out.waiting(), 2);
        assert!(!out.backed_up());
        drop(rx);
        assert!(out.send(beat()).is_err());
        assert_eq!(out.waiting(), 2, "a refused message is not counted");
        assert!(out.is_closed());
    }

    #[tokio::test]
    async fn a_backlog_stalls_only_while_messages_wait_untaken() {
        // Far longer than a message waits while the transport reads (20 ms), so that a loaded
        // machine's pauses do not look like a stall.
        let limit = Duration::from_secs(2);
        let beat = || Msg::Heartbeat(Heartbeat { time: 1.0 });
        let (out, mut rx) = outbox();
        // Nothing waiting: a quiet session is not stalled.
        let quiet = tokio::time::timeout(limit * 3 / 2, rx.backlog().stalled(limit)).await;
        assert!(quiet.is_err(), "an empty outbox was called stalled");
        // Taken as fast as they come: not stalled either.
        let backlog = rx.backlog();
        let watch = tokio::spawn(async move { backlog.stalled(limit).await });
        for _ in 0..30 {
            out.send(beat()).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            rx.try_recv().unwrap();
        }
        assert!(!watch.is_finished(), "a reading transport was called stalled");
        // Left waiting: stalled after the limit (counted from the last check that found the
        // outbox empty, at most a tick before the send).
        out.send(beat()).unwrap();
        let started = Instant::now();
        assert!(watch.await.unwrap());
        assert!(started.elapsed() >= limit * 3 / 4, "{:?}", started.elapsed());
        // A dropped receiver ends the watch without a stall.
        let backlog = rx.backlog();
        drop(rx);
        assert!(!backlog.stalled(limit).await);
    }
}

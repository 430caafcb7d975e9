//! A session's messages to its agent: an unbounded channel (the lanes, the committer and the
//! gateway all send, from threads and tasks alike) that counts what waits in it, so that the
//! gateway stops reading from a client that does not read what it is sent. Without the count,
//! a client that sent frames each answered with an error, and read nothing, grew the server's
//! memory without bound (190 MB in 6 s).

use arena_sdk::protocol::Msg;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
        OutboxReceiver { rx, waiting },
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
        if msg.is_some() {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        msg
    }

    /// A message already waiting, if any.
    pub fn try_recv(&mut self) -> Option<Msg> {
        let msg = self.rx.try_recv().ok();
        if msg.is_some() {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        msg
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
}

//! The server's stop as its agent sessions see it (SIGINT / SIGTERM, `arena serve`).
//!
//! Once the stopping server has given its running episodes back (or tried to), every session is
//! told to end: it sends `disconnect {reason: "shutdown"}` (docs/protocol.md §3), which both
//! SDKs take as a lost connection and wait out (reconnecting to another replica or to this one
//! restarted), and its lanes give back what they still run, charged to nobody. Without it a
//! gRPC session held the HTTP/2 graceful shutdown until its lanes ran out of episodes,
//! stepping runs that were no longer this server's, and a WebSocket session was cut without a
//! word when the process ended. The transports count their open connections here until their
//! session has ended, so that the stop waits (bounded) for the last messages to go out.

use std::time::Duration;
use tokio::sync::watch;

/// Told once; counts the agent connections still open.
#[derive(Debug)]
pub struct SessionStop {
    told: watch::Sender<bool>,
    open: watch::Sender<usize>,
}

/// One open agent connection, counted until dropped.
#[derive(Debug)]
pub struct OpenConnection {
    open: watch::Sender<usize>,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.open.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Default for SessionStop {
    fn default() -> Self {
        Self {
            told: watch::Sender::new(false),
            open: watch::Sender::new(0),
        }
    }
}

impl SessionStop {
    /// Counts an agent connection for as long as the returned value lives.
    pub fn open_connection(&self) -> OpenConnection {
        self.open.send_modify(|n| *n += 1);
        OpenConnection {
            open: self.open.clone(),
        }
    }

    /// Agent connections open now.
    pub fn open_connections(&self) -> usize {
        *self.open.borrow()
    }

    /// Tells every session, running or still to come, to end.
    pub fn tell(&self) {
        self.told.send_replace(true);
    }

    /// Whether [`SessionStop::tell`] was called.
    pub fn is_told(&self) -> bool {
        *self.told.borrow()
    }

    /// Resolves once [`SessionStop::tell`] was called (at once if it already was).
    pub async fn told(&self) {
        let mut told = self.told.subscribe();
        // The sender lives as long as `self`, so `wait_for` fails only if it is gone.
        let _ = told.wait_for(|t| *t).await;
    }

    /// Waits until no agent connection is open, at most `limit`; returns how many still are.
    pub async fn closed_within(&self, limit: Duration) -> usize {
        let mut open = self.open.subscribe();
        let _ = tokio::time::timeout(limit, open.wait_for(|n| *n == 0)).await;
        *open.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn told_once_for_all_and_connections_counted_until_dropped() {
        let stop = std::sync::Arc::new(SessionStop::default());
        let first = stop.open_connection();
        let second = stop.open_connection();
        let waiting = tokio::spawn({
            let stop = stop.clone();
            async move { stop.told().await }
        });
        assert_eq!(stop.closed_within(Duration::from_millis(10)).await, 2);
        assert!(!stop.is_told());
        stop.tell();
        waiting.await.unwrap();
        assert!(stop.is_told());
        // Told already: a session that starts now learns it at once.
        stop.told().await;
        drop(first);
        assert_eq!(stop.closed_within(Duration::from_millis(10)).await, 1);
        let closing = tokio::spawn({
            let stop = stop.clone();
            async move { stop.closed_within(Duration::from_secs(60)).await }
        });
        drop(second);
        assert_eq!(closing.await.unwrap(), 0);
    }
}

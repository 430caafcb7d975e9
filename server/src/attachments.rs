//! Which session runs each submission on this server, and the hand-over to its client's next
//! connection.
//!
//! A submission is attached to one session at a time; another connect for it is refused
//! `submission_busy`. A connection can die without the server seeing it (a NAT's or a Wi-Fi
//! network's drop sends no FIN): the client notices at once and reconnects, but the server would
//! hold the dead session until its step deadlines and heartbeat timeout ran out, ending its
//! running episodes as timeouts (final) rather than as a lost connection (re-run). A connect that
//! names the session it lost (`Connect.previous_session_id`, the id its `connected` gave), or
//! that comes again with the `connect_key` its lost session attached with (a connect whose
//! `connected` never arrived: its client has no session id), takes that session's place: the
//! old session ends as a lost connection, and the new one attaches. Session ids are listed to
//! the team's members on the submission's page, so a member can end a teammate's session this
//! way (nothing across teams: a connect for another team's submission is refused before). The
//! hand-over is this server's: a reconnect that reaches another replica is `submission_busy` there
//! only if that replica holds the submission too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// How long a connect that took a session's place waits for that session to end (its lanes give
/// their episodes back first).
const HAND_OVER_WAIT: Duration = Duration::from_secs(10);

/// The session holding a submission, and how it is told to give way.
#[derive(Debug)]
struct Holder {
    session_id: String,
    /// The `connect_key` the session's connect came with ("" for none).
    connect_key: String,
    give_way: Arc<Notify>,
}

/// The submissions with a connected session on this server.
#[derive(Debug, Default)]
pub struct Attachments {
    held: Mutex<HashMap<String, Holder>>,
}

/// A submission's attachment to a session; detaches when dropped (the session's end).
#[derive(Debug)]
pub struct Attachment {
    attachments: Arc<Attachments>,
    submission: String,
    session_id: String,
    give_way: Arc<Notify>,
}

impl Attachment {
    /// Resolves when the client's next connection has taken this session's place.
    pub async fn given_way(&self) {
        self.give_way.notified().await;
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let mut held = self.attachments.held.lock().unwrap_or_else(|p| p.into_inner());
        if held
            .get(&self.submission)
            .is_some_and(|h| h.session_id == self.session_id)
        {
            held.remove(&self.submission);
        }
    }
}

/// Why a submission could not be attached: it is held by a session that is not the one named.
#[derive(Debug, PartialEq, Eq)]
pub struct Busy;

impl Attachments {
    /// Whether a session runs `submission` here now.
    pub fn contains(&self, submission: &str) -> bool {
        self.lock().contains_key(submission)
    }

    /// How many submissions a session runs here now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no session runs a submission here now.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Attaches `submission` to the new session `session_id`, whose connect came with
    /// `connect_key` ("" for none). When it is held by the session `previous` (non-empty)
    /// names, or by one whose connect came with the same (non-empty) key, that session is told
    /// to give way and is waited for.
    pub async fn attach(
        self: &Arc<Self>,
        submission: &str,
        session_id: &str,
        previous: &str,
        connect_key: &str,
    ) -> Result<Attachment, Busy> {
        let deadline = tokio::time::Instant::now() + HAND_OVER_WAIT;
        let mut told = false;
        loop {
            {
                let mut held = self.lock();
                match held.get(submission) {
                    None => {
                        let give_way = Arc::new(Notify::new());
                        held.insert(
                            submission.to_string(),
                            Holder {
                                session_id: session_id.to_string(),
                                connect_key: connect_key.to_string(),
                                give_way: give_way.clone(),
                            },
                        );
                        return Ok(Attachment {
                            attachments: self.clone(),
                            submission: submission.to_string(),
                            session_id: session_id.to_string(),
                            give_way,
                        });
                    }
                    Some(holder)
                        if (!previous.is_empty() && holder.session_id == previous)
                            || (!connect_key.is_empty() && holder.connect_key == connect_key) =>
                    {
                        if !told {
                            tracing::info!(
                                session = %previous,
                                submission,
                                "the agent's new connection takes the session's place"
                            );
                            // A permit waits for the session's loop if it is not listening now.
                            holder.give_way.notify_one();
                            told = true;
                        }
                    }
                    Some(_) => return Err(Busy),
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Busy);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Holder>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_session_named_gives_way_and_no_other_does() {
        let attachments = Arc::new(Attachments::default());
        let first = attachments.attach("sub-1", "ses-a", "", "key-a").await.unwrap();
        assert!(attachments.contains("sub-1"));
        // Another session, or a name or key that is not the holder's: busy.
        assert_eq!(attachments.attach("sub-1", "ses-b", "", "").await.unwrap_err(), Busy);
        assert_eq!(
            attachments
                .attach("sub-1", "ses-b", "ses-x", "key-x")
                .await
                .unwrap_err(),
            Busy
        );
        // The holder named: told to give way; it ends (drops its attachment), the new one attaches.
        let holder = tokio::spawn(async move {
            first.given_way().await;
            drop(first);
        });
        let second = attachments.attach("sub-1", "ses-b", "ses-a", "").await.unwrap();
        holder.await.unwrap();
        assert!(attachments.contains("sub-1"));
        // The key its connect came with: a client that never learnt the session's id.
        let holder = tokio::spawn(async move {
            second.given_way().await;
            drop(second);
        });
        assert_eq!(
            attachments.attach("sub-1", "ses-c", "", "key-a").await.unwrap_err(),
            Busy
        );
        drop(holder);
        let third = attachments.attach("sub-2", "ses-c", "", "key-c").await.unwrap();
        let holder = tokio::spawn(async move {
            third.given_way().await;
            drop(third);
        });
        let fourth = attachments.attach("sub-2", "ses-d", "", "key-c").await.unwrap();
        holder.await.unwrap();
        drop(fourth);
        assert!(!attachments.contains("sub-2"));
    }
}

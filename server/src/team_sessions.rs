//! How many agent sessions each team runs at once on this server (`max_sessions_per_team`).
//!
//! Every session holds a lane per batch, each with its simulator (a practice session too, for as
//! long as its agent keeps it alive), so one token opening sessions over a few connections (gRPC
//! multiplexes a stream per session on one connection, past the per-connection caps) could hold
//! the server's memory and threads. A session past the limit is refused `rate_limited` with the
//! limit and a time to retry, which both SDKs wait for before they connect again. Sessions the
//! server runs itself (hosted evaluations) have their own limit (`hosted_runs`).

use crate::access::{AccessError, rfc3339};
use crate::storage::Team;
use arena_sdk::protocol::codes;
use axum::http::StatusCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// When a refused session is told to try again: sessions end at any time, so a short wait.
const RETRY_AFTER_MS: i64 = 5_000;

/// The sessions each team runs at once.
#[derive(Debug)]
pub struct TeamSessions {
    limit: u32,
    running: Mutex<HashMap<i64, u32>>,
}

/// A team's place among its running sessions, given back when dropped (the session's end).
#[derive(Debug)]
pub struct SessionPlace {
    sessions: Arc<TeamSessions>,
    team: i64,
}

impl Drop for SessionPlace {
    fn drop(&mut self) {
        let mut running = self.sessions.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = running.get_mut(&self.team) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                running.remove(&self.team);
            }
        }
    }
}

impl TeamSessions {
    /// `limit` = 0 turns the limit off.
    pub fn new(limit: u32) -> Arc<Self> {
        Arc::new(Self {
            limit,
            running: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more session of `team`, or `rate_limited` when it runs `limit` already.
    pub fn take(self: &Arc<Self>, team: &Team, now_ms: i64) -> Result<SessionPlace, AccessError> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let n = running.entry(team.id).or_insert(0);
        if self.limit > 0 && *n >= self.limit {
            let retry = now_ms + RETRY_AFTER_MS;
            return Err(AccessError {
                status: StatusCode::TOO_MANY_REQUESTS,
                code: codes::RATE_LIMITED,
                message: format!(
                    "team {:?} runs {} sessions on this server, the most it allows at once (max_sessions_per_team); retry after {} or once one ends",
                    team.name,
                    self.limit,
                    rfc3339(retry)
                ),
                limit: Some(self.limit),
                resets_at_ms: Some(retry),
            });
        }
        *n += 1;
        Ok(SessionPlace {
            sessions: self.clone(),
            team: team.id,
        })
    }

    /// Sessions `team` runs now.
    pub fn running(&self, team: i64) -> u32 {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.get(&team).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team(id: i64) -> Team {
        Team {
            id,
            name: format!("team-{id}"),
            created_at: 0,
        }
    }

    #[test]
    fn a_team_runs_at_most_the_limit_and_gets_places_back() {
        let sessions = TeamSessions::new(2);
        let (a, b) = (team(1), team(2));
        let first = sessions.take(&a, 0).unwrap();
        let _second = sessions.take(&a, 0).unwrap();
        let refused = sessions.take(&a, 1_000).unwrap_err();
        assert_eq!(refused.code, codes::RATE_LIMITED);
        assert_eq!((refused.limit, refused.resets_at_ms), (Some(2), Some(6_000)));
        assert!(refused.message.contains("team-1"), "{}", refused.message);
        // Another team is counted apart.
        let _other = sessions.take(&b, 0).unwrap();
        drop(first);
        assert_eq!(sessions.running(1), 1);
        let _again = sessions.take(&a, 0).expect("a place given back");
    }

    #[test]
    fn zero_is_no_limit() {
        let sessions = TeamSessions::new(0);
        let places: Vec<_> = (0..100).map(|_| sessions.take(&team(1), 0).unwrap()).collect();
        assert_eq!(sessions.running(1), 100);
        drop(places);
        assert_eq!(sessions.running(1), 0);
    }
}

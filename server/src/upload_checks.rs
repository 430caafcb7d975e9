//! Turns for checking uploaded policy files: [`UPLOAD_CHECKS`] at once across the server, and
//! one at a time per team. A check may take its child's whole budget (a minute of wall time), so
//! without the team's turn one team's slow files could hold every place while other teams'
//! uploads waited behind them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

/// Uploaded policy files checked at once (the rest wait their turn).
pub const UPLOAD_CHECKS: usize = 2;

type TeamTurns = Arc<Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>>;

#[derive(Debug)]
pub struct UploadChecks {
    places: Arc<Semaphore>,
    /// Each team with an upload checked or waiting: its turn. An entry goes with its last holder.
    teams: TeamTurns,
}

impl Default for UploadChecks {
    fn default() -> Self {
        Self {
            places: Arc::new(Semaphore::new(UPLOAD_CHECKS)),
            teams: Default::default(),
        }
    }
}

/// A check's right to run: its team's turn and one of the server's places, released on drop.
pub struct UploadTurn {
    team: i64,
    teams: TeamTurns,
    turn: Option<OwnedMutexGuard<()>>,
    _place: OwnedSemaphorePermit,
}

impl UploadChecks {
    /// Waits for `team`'s turn (its earlier uploads checked), then for a place.
    pub async fn turn(&self, team: i64) -> Result<UploadTurn, tokio::sync::AcquireError> {
        let team_turn = {
            let mut teams = self.teams.lock().expect("upload turns");
            // Entries nobody holds or waits for (a wait dropped with its request) go.
            teams.retain(|_, t| Arc::strong_count(t) > 1);
            teams.entry(team).or_default().clone()
        };
        let turn = team_turn.lock_owned().await;
        let place = self.places.clone().acquire_owned().await?;
        Ok(UploadTurn {
            team,
            teams: self.teams.clone(),
            turn: Some(turn),
            _place: place,
        })
    }

    /// Teams with an upload checked or waiting now.
    pub fn teams_waiting(&self) -> usize {
        let mut teams = self.teams.lock().expect("upload turns");
        teams.retain(|_, t| Arc::strong_count(t) > 1);
        teams.len()
    }
}

/// Removes a team's entry once nobody holds or waits for its turn.
fn prune(teams: &TeamTurns, team: i64) {
    let mut teams = teams.lock().expect("upload turns");
    if teams.get(&team).is_some_and(|t| Arc::strong_count(t) == 1) {
        teams.remove(&team);
    }
}

impl Drop for UploadTurn {
    fn drop(&mut self) {
        // The guard holds a count of the team's entry: released first.
        self.turn.take();
        prune(&self.teams, self.team);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_team_waits_for_its_own_check_not_for_others() {
        let checks = UploadChecks::default();
        let first = checks.turn(1).await.unwrap();
        // The same team's second upload waits for its first...
        let second = tokio::time::timeout(std::time::Duration::from_millis(50), checks.turn(1)).await;
        assert!(second.is_err(), "a team's second check ran beside its first");
        // ...while another team takes the other place at once.
        let other = tokio::time::timeout(std::time::Duration::from_secs(5), checks.turn(2))
            .await
            .expect("another team's check waited behind the first team's");
        drop(other);
        assert_eq!(
            checks.teams_waiting(),
            1,
            "the timed-out wait and the other team left no entry"
        );
        drop(first);
        assert_eq!(checks.teams_waiting(), 0);
        let again = checks.turn(1).await.unwrap();
        drop(again);
        assert_eq!(checks.teams_waiting(), 0);
    }

    #[tokio::test]
    async fn the_places_bound_checks_across_teams() {
        let checks = UploadChecks::default();
        let held: Vec<_> = futures_util::future::join_all((0..UPLOAD_CHECKS as i64).map(|t| checks.turn(t)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let over = tokio::time::timeout(std::time::Duration::from_millis(50), checks.turn(99)).await;
        assert!(over.is_err(), "more checks ran than places");
        drop(held);
        assert!(checks.turn(99).await.is_ok());
        assert_eq!(checks.teams_waiting(), 0);
    }
}

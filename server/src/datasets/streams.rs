//! Places for streamed (`jsonl.gz`) dataset downloads: each holds a blocking thread for as long
//! as its client reads, so the server streams `dataset_streams` at once, and one team at most a
//! quarter of them (one team that opened every place and read nothing had every other team's
//! downloads answered `busy`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The server's stream places.
#[derive(Debug)]
pub struct DatasetStreams {
    places: Arc<Semaphore>,
    limit: usize,
    per_team: Arc<Mutex<HashMap<i64, usize>>>,
}

/// One stream's place; given back when dropped.
#[derive(Debug)]
pub struct StreamPlace {
    _place: OwnedSemaphorePermit,
    _team: Option<TeamShare>,
}

#[derive(Debug)]
struct TeamShare {
    team: i64,
    per_team: Arc<Mutex<HashMap<i64, usize>>>,
}

impl Drop for TeamShare {
    fn drop(&mut self) {
        let mut counts = self.per_team.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.team) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.team);
            }
        }
    }
}

/// Why no place was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoPlace {
    /// The team streams its share already (said at once: only its own downloads free one).
    TeamShare { share: usize },
    /// Every place stayed taken for the wait.
    Busy { limit: usize },
}

impl DatasetStreams {
    pub fn new(limit: usize) -> Self {
        Self {
            places: Arc::new(Semaphore::new(limit)),
            limit,
            per_team: Default::default(),
        }
    }

    /// A team's share: a quarter of the places, at least one.
    pub fn team_share(&self) -> usize {
        (self.limit / 4).max(1)
    }

    /// A place for a stream of `team` (None: the organiser, who has no share), waiting up to
    /// `wait` for one to be free.
    pub async fn place(&self, team: Option<i64>, wait: std::time::Duration) -> Result<StreamPlace, NoPlace> {
        let share = match team {
            Some(team) => {
                let mut counts = self.per_team.lock().unwrap_or_else(|e| e.into_inner());
                let n = counts.entry(team).or_insert(0);
                if *n >= self.team_share() {
                    return Err(NoPlace::TeamShare {
                        share: self.team_share(),
                    });
                }
                *n += 1;
                Some(TeamShare {
                    team,
                    per_team: self.per_team.clone(),
                })
            }
            None => None,
        };
        // The team's count is taken first and given back (the share dropped) if no place comes.
        match tokio::time::timeout(wait, self.places.clone().acquire_owned()).await {
            Ok(Ok(place)) => Ok(StreamPlace {
                _place: place,
                _team: share,
            }),
            _ => Err(NoPlace::Busy { limit: self.limit }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_team_streams_its_share_and_the_others_still_get_places() {
        let streams = DatasetStreams::new(8);
        let wait = Duration::from_millis(50);
        assert_eq!(streams.team_share(), 2);
        let a1 = streams.place(Some(1), wait).await.unwrap();
        let _a2 = streams.place(Some(1), wait).await.unwrap();
        assert_eq!(
            streams.place(Some(1), wait).await.unwrap_err(),
            NoPlace::TeamShare { share: 2 }
        );
        let mut held = Vec::new();
        for team in [2, 2, 3, 3] {
            held.push(streams.place(Some(team), wait).await.expect("another team's share"));
        }
        // The organiser has no share; the places are all taken now.
        held.push(streams.place(None, wait).await.expect("a place left"));
        held.push(streams.place(None, wait).await.expect("the last place"));
        assert_eq!(
            streams.place(Some(4), wait).await.unwrap_err(),
            NoPlace::Busy { limit: 8 }
        );
        // A refusal for want of a place gives the team's count back.
        assert_eq!(
            streams.per_team.lock().unwrap().get(&4),
            None,
            "given back on the refusal"
        );
        drop(a1);
        assert!(streams.place(Some(4), wait).await.is_ok());
        assert_eq!(
            streams.per_team.lock().unwrap().get(&4),
            None,
            "given back when dropped"
        );
        assert_eq!(streams.team_share(), 2);
        assert_eq!(DatasetStreams::new(2).team_share(), 1);
    }
}

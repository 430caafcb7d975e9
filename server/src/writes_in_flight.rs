//! Objects this process is producing right now, for readers that would rather wait a moment
//! than find nothing.
//!
//! A submission is COMPLETED before its merged trajectory file is written (the merge runs after
//! the agent has its results, off the completion's path): a download asked for meanwhile waits
//! for the merge of this server instead of answering that there is no file yet. Another
//! replica's merge is not seen here; its readers get the "not merged yet" answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The keys being written, each with how many writers hold it.
#[derive(Debug, Clone, Default)]
pub struct WritesInFlight {
    keys: Arc<Mutex<HashMap<String, usize>>>,
}

/// Held while `key` is being written; dropping it ends the write.
#[derive(Debug)]
pub struct Writing {
    keys: Arc<Mutex<HashMap<String, usize>>>,
    key: String,
}

/// How often a waiting reader looks again.
const POLL: Duration = Duration::from_millis(20);

impl WritesInFlight {
    /// Marks `key` as being written until the returned guard is dropped.
    pub fn begin(&self, key: &str) -> Writing {
        *self.lock().entry(key.to_string()).or_default() += 1;
        Writing {
            keys: self.keys.clone(),
            key: key.to_string(),
        }
    }

    /// [`Self::begin`] unless a writer holds `key` already (None then), in one step.
    pub fn try_begin(&self, key: &str) -> Option<Writing> {
        let mut keys = self.lock();
        if keys.contains_key(key) {
            return None;
        }
        keys.insert(key.to_string(), 1);
        Some(Writing {
            keys: self.keys.clone(),
            key: key.to_string(),
        })
    }

    /// Whether a writer holds `key`.
    pub fn is_writing(&self, key: &str) -> bool {
        self.lock().contains_key(key)
    }

    /// Waits until no writer holds `key`, at most `limit`: false when one still does.
    pub async fn wait(&self, key: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.is_writing(key) {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
        true
    }

    /// [`Self::wait`] for blocking code.
    pub fn wait_blocking(&self, key: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.is_writing(key) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(POLL);
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // A panic while holding this lock cannot leave the map inconsistent (one insert or
        // remove): go on with it.
        self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        let mut keys = self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = keys.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                keys.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reader_waits_for_every_writer_of_its_key_and_no_longer() {
        let writes = WritesInFlight::default();
        assert!(writes.wait("a", Duration::ZERO).await, "nothing is written");
        let first = writes.begin("a");
        let second = writes.begin("a");
        let other = writes.begin("b");
        assert!(writes.is_writing("a") && writes.is_writing("b"));
        assert!(
            !writes.wait("a", Duration::from_millis(50)).await,
            "two writers hold it"
        );
        drop(first);
        assert!(
            !writes.wait("a", Duration::from_millis(50)).await,
            "one writer still holds it"
        );
        let waiting = {
            let writes = writes.clone();
            tokio::spawn(async move { writes.wait("a", Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(60)).await;
        drop(second);
        assert!(
            waiting.await.unwrap(),
            "the reader goes on once the last writer is done"
        );
        assert!(writes.is_writing("b") && !writes.is_writing("a"));
        assert!(writes.try_begin("b").is_none(), "held by another writer");
        drop(other);
        assert!(writes.wait_blocking("b", Duration::ZERO));
        let only = writes.try_begin("b").expect("free again");
        assert!(writes.is_writing("b"));
        drop(only);
        assert!(!writes.is_writing("b"));
    }
}

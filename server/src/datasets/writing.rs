//! Who writes a stored export, and how many at once: one writer per export key (a second
//! request for the same export waits for the first and then reads its file, instead of writing
//! it again), and at most [`EXPORTS_AT_ONCE`] exports written together.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Exports written at once; the others wait their turn.
pub const EXPORTS_AT_ONCE: usize = 2;

/// The writers of stored exports.
#[derive(Debug)]
pub struct ExportWriters {
    by_key: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    pub places: tokio::sync::Semaphore,
}

impl Default for ExportWriters {
    fn default() -> Self {
        ExportWriters {
            by_key: Mutex::default(),
            places: tokio::sync::Semaphore::new(EXPORTS_AT_ONCE),
        }
    }
}

impl ExportWriters {
    /// The right to write `key`, once whoever holds it is done.
    pub async fn claim(&self, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
            // Keys nobody holds or waits for any more.
            by_key.retain(|_, l| Arc::strong_count(l) > 1);
            by_key.entry(key.to_string()).or_default().clone()
        };
        lock.lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_writer_per_key() {
        let writers = ExportWriters::default();
        let first = writers.claim("a").await;
        let other = writers.claim("b").await;
        let second = tokio::time::timeout(std::time::Duration::from_millis(50), writers.claim("a")).await;
        assert!(second.is_err(), "a second writer of the same key went ahead");
        drop(first);
        let _second = writers.claim("a").await;
        drop(other);
        assert_eq!(writers.by_key.lock().unwrap().len(), 2);
        let _third = writers.claim("c").await;
        assert_eq!(writers.by_key.lock().unwrap().len(), 2, "the free key b was dropped");
    }
}

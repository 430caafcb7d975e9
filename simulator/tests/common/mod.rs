//! Helpers shared by the simulator's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// `../shared/<rel>` beside the checkout, or None (with the reason printed) when absent.
pub fn shared(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared").join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "skipped: {} is not present (../shared beside the checkout)",
            p.display()
        );
        None
    }
}

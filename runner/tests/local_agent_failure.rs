//! The local runner treats an agent's failure as the server does: the run stops with the
//! agent's reason (an ONNX model whose engine failed fills its actions with NaN, which would
//! otherwise fail every episode of the batch as a "non-finite action" and carry on).

use arena_bench::spec::{MotionSource, find_benchmark, shipped_dir};
use arena_runner::episode;
use arena_runner::local::{LocalOptions, run_local};
use arena_sdk::protocol::EpisodeInfo;
use arena_sdk::{Agent, Batch};
use std::path::Path;

/// Zero actions until `fail_at`, then NaN actions and a failure, as `OnnxAgent` reports one.
struct FailsAt {
    fail_at: u64,
    failed: Option<String>,
}

impl Agent for FailsAt {
    fn reset(&mut self, _episodes: &[EpisodeInfo]) {}
    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        if batch.step >= self.fail_at {
            actions.fill(f32::NAN);
            self.failed = Some("the model's engine failed: shape mismatch".into());
        }
    }
    fn failure(&self) -> Option<String> {
        self.failed.clone()
    }
}

#[test]
fn an_agents_failure_stops_the_local_run_with_its_reason() {
    let names = arena_bench::metrics::metric_names();
    let (_, mut spec) = find_benchmark("g1-smoke", &shipped_dir(), &names).unwrap();
    spec.motions.source = MotionSource::Builtin(vec!["stand".into(), "squat".into()]);
    let config = episode::env_config(&spec, None, 2, 1);
    let clips = episode::benchmark_clips(&spec, Path::new("."), &config.robot).unwrap();
    let options = LocalOptions {
        batch: 2,
        threads: 1,
        ..Default::default()
    };
    let mut agent = FailsAt {
        fail_at: 3,
        failed: None,
    };
    let err = run_local(&spec, &clips, &mut agent, &options, &mut |_, _, _| {}).unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("the agent failed at step 3") && err.contains("shape mismatch"),
        "{err}"
    );
    // An agent that never fails runs the benchmark through.
    let mut agent = FailsAt {
        fail_at: u64::MAX,
        failed: None,
    };
    let aggregator = run_local(&spec, &clips, &mut agent, &options, &mut |_, _, _| {}).unwrap();
    assert_eq!(aggregator.episodes().len(), 2);
}

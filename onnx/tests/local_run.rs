//! The committed tracker's ONNX file, run by `OnnxAgent` (tract, the file's metadata) through
//! the local runner on `g1-smoke-robot`, tracks as the same policy served from its checkpoint
//! by the SDK's plain-Rust tracker (`arena-ppo eval`'s agent): every episode ends the same way
//! and the tracking errors agree to within what float round-off in the actor can move a
//! closed-loop rollout.

use arena_bench::spec::{find_benchmark, shipped_dir};
use arena_onnx::{OnnxAgent, OnnxPolicy, PolicyOverrides, Supply};
use arena_runner::episode;
use arena_runner::local::{LocalOptions, run_local};
use arena_sdk::tracker::{TrackerAgent, TrackerPolicy};
use std::path::Path;

#[test]
fn the_onnx_file_tracks_as_its_checkpoint_does() {
    let names = arena_bench::metrics::metric_names();
    let (_, spec) = find_benchmark("g1-smoke-robot", &shipped_dir(), &names).unwrap();
    let clips = episode::benchmark_clips(&spec, Path::new("."), &arena_sim::RobotConfig::default()).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ppo/checkpoints/g1-smoke");
    let options = LocalOptions {
        batch: 6,
        threads: 1,
        ..Default::default()
    };
    let policy = OnnxPolicy::load(
        &dir.join("policy.onnx"),
        &PolicyOverrides::default(),
        Supply::AgentOptions,
    )
    .unwrap();
    let mut onnx = OnnxAgent::new(policy);
    let hosted = run_local(&spec, &clips, &mut onnx, &options, &mut |_, _, _| {}).unwrap();
    assert!(onnx.error.is_none(), "{:?}", onnx.error);
    let mut tracker = TrackerAgent::new(TrackerPolicy::load(&dir).unwrap());
    let reference = run_local(&spec, &clips, &mut tracker, &options, &mut |_, _, _| {}).unwrap();
    let (a, b) = (hosted.episodes(), reference.episodes());
    assert_eq!(a.len(), b.len());
    assert!(a.len() >= 6, "{} episodes", a.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!((&x.motion, x.status, x.num_steps), (&y.motion, y.status, y.num_steps));
        for key in ["mpjpe_g", "mpjpe_rr", "r_mpkpe"] {
            let (p, q) = (x.metrics[key], y.metrics[key]);
            assert!(
                (p - q).abs() <= 0.05 * q.abs().max(1e-3),
                "{} {key}: onnx {p} checkpoint {q}",
                x.motion
            );
        }
        eprintln!(
            "{}: mpjpe_g onnx {:.3} checkpoint {:.3}",
            x.motion, x.metrics["mpjpe_g"], y.metrics["mpjpe_g"]
        );
    }
}

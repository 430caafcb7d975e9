//! Issue 40 §2: the inference engine, measured. Runs each committed policy on the same random
//! observations with tract (arena-onnx's engine) and with onnxruntime through its C API (the
//! library of the `onnxruntime` PyPI wheel, loaded at run time), at batches of 1, 64 and 1024,
//! and prints the per-batch latency of each (best of --repeats runs of --calls calls), the
//! largest difference between their actions and the largest action (the inputs are uniform in
//! ±2 before the policies' normalisers, so actions reach tens: the difference is float32
//! round-off of those; `tests/engine.rs` checks it on inputs at the normalisers' scale).
//!
//! `cargo run --release -p arena-onnx --features ort --example onnx_engines -- --ort-lib
//! .venv/lib/python3.*/site-packages/onnxruntime/capi/libonnxruntime.so.*` (`make bench-onnx`).

use arena_onnx::Engine;
use std::path::PathBuf;
use std::time::Instant;

struct Args {
    ort_lib: PathBuf,
    policies: Vec<PathBuf>,
    calls: usize,
    repeats: usize,
    threads: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        ort_lib: PathBuf::new(),
        policies: Vec::new(),
        calls: 200,
        repeats: 3,
        threads: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--ort-lib" => a.ort_lib = value()?.into(),
            "--policy" => a.policies.push(value()?.into()),
            "--calls" => a.calls = value()?.parse().map_err(|e| format!("--calls: {e}"))?,
            "--repeats" => a.repeats = value()?.parse().map_err(|e| format!("--repeats: {e}"))?,
            "--threads" => a.threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "-h" | "--help" => {
                return Err(
                    "usage: onnx_engines --ort-lib LIBONNXRUNTIME.so [--policy FILE.onnx ...] [--calls N] \
                            [--repeats N] [--threads N]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.ort_lib.as_os_str().is_empty() {
        return Err("--ort-lib is required (the onnxruntime wheel's capi/libonnxruntime.so.*)".into());
    }
    if a.policies.is_empty() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ppo/checkpoints");
        a.policies = ["g1-smoke", "g1-moves-dance"]
            .iter()
            .map(|n| root.join(n).join("policy.onnx"))
            .collect();
    }
    Ok(a)
}

/// Observations around the policies' normaliser scale, from a fixed seed.
fn observations(rows: usize, size: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..rows * size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0) as f32
        })
        .collect()
}

/// Best of `repeats` of the mean seconds per call over `calls` calls.
fn best_seconds(repeats: usize, calls: usize, mut call: impl FnMut()) -> f64 {
    (0..repeats)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                call();
            }
            t.elapsed().as_secs_f64() / calls as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let environment = ort::init_from(&a.ort_lib)?.build()?;
    println!(
        "engines: tract-onnx 0.23 (pure Rust) and onnxruntime ({}), {} intra-op thread(s), best of {} x {} calls",
        a.ort_lib.display(),
        a.threads,
        a.repeats,
        a.calls
    );
    println!(
        "{:<16} {:>6} {:>13} {:>13} {:>8} {:>12} {:>10}",
        "policy", "batch", "tract µs", "ort µs", "ort/tr", "max |diff|", "max |a|"
    );
    for path in &a.policies {
        let tract = Engine::load(path)?;
        let mut session = ort::session::Session::builder(&environment)?
            .with_intra_threads(a.threads)?
            .commit_from_file(path)?;
        let name = path
            .parent()
            .and_then(|p| p.file_name())
            .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        let n = tract.obs_size();
        for batch in [1usize, 64, 1024] {
            let obs = observations(batch, n, batch as u64);
            let times: Vec<f32> = (0..batch).map(|i| (i % 500 + 1) as f32).collect();
            let mut ort_run = |obs: &[f32], times: &[f32]| -> Vec<f32> {
                let o = ort::value::Tensor::from_array(([batch, n], obs.to_vec())).expect("tensor");
                let t = ort::value::Tensor::from_array(([batch, 1], times.to_vec())).expect("tensor");
                let out = session
                    .run(ort::inputs!["obs" => o, "time_step" => t])
                    .expect("onnxruntime runs");
                let (_, values) = out["actions"].try_extract_tensor::<f32>().expect("f32 actions");
                values.to_vec()
            };
            let from_ort = ort_run(&obs, &times);
            let from_tract = tract.run(&obs, &times, batch)?;
            let diff = from_ort
                .iter()
                .zip(&from_tract)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max);
            let calls = (a.calls * 64 / batch.max(64)).max(5);
            let tract_s = best_seconds(a.repeats, calls, || {
                std::hint::black_box(tract.run(&obs, &times, batch).expect("tract runs"));
            });
            let ort_s = best_seconds(a.repeats, calls, || {
                std::hint::black_box(ort_run(&obs, &times));
            });
            println!(
                "{name:<16} {batch:>6} {:>13.1} {:>13.1} {:>8.2} {:>12.2e} {:>10.3}",
                tract_s * 1e6,
                ort_s * 1e6,
                ort_s / tract_s,
                diff,
                from_ort.iter().fold(0.0f32, |m, v| m.max(v.abs()))
            );
        }
    }
    Ok(())
}

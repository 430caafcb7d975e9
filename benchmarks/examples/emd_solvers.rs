//! The dense and the sparse EMD solvers side by side on the same sets, to place
//! `emd::DENSE_MAX_ROWS`: tracked windows (a smooth 23-value curve and a copy following it a
//! few frames late with noise, like an evaluation's state slice), a robot that falls and lies
//! still, and unstructured points, at several sizes. Prints each solver's best time over `--repeats` and the ratio.
//!
//! `cargo run --release -p arena-bench --example emd_solvers -- --repeats 50 --sizes 50,100,200,256,300,500`

use arena_bench::emd::{Solver, emd_by};
use std::time::Instant;

/// A small deterministic generator (xorshift), so the example needs no extra crates.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

fn tracked(rng: &mut Rng, n: usize, dim: usize, lag: f64, noise: f64) -> (Vec<f64>, Vec<f64>) {
    let phase: Vec<f64> = (0..dim).map(|_| 3.0 * rng.uniform()).collect();
    let at = |t: f64, d: usize| (0.05 * t * (1.0 + 0.1 * d as f64) + phase[d]).sin();
    let mut robot = Vec::with_capacity(n * dim);
    let mut reference = Vec::with_capacity(n * dim);
    for t in 0..n {
        for (d, _) in phase.iter().enumerate() {
            reference.push(at(t as f64, d));
            robot.push(at(t as f64 - lag, d) + noise * rng.uniform());
        }
    }
    (robot, reference)
}

/// A robot that tracks for the first third of the window, then lies still (a fall with no fall
/// rule): its frames from there on are one frame repeated, the hardest case for the dense
/// solver (ties all along its augmenting paths).
fn fallen(rng: &mut Rng, n: usize, dim: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut robot, reference) = tracked(rng, n, dim, 2.0, 0.05);
    let fell = n / 3;
    let still: Vec<f64> = robot[fell * dim..(fell + 1) * dim].iter().map(|v| v + 0.5).collect();
    for t in fell..n {
        robot[t * dim..(t + 1) * dim].copy_from_slice(&still);
    }
    (robot, reference)
}

fn best_seconds(repeats: usize, mut f: impl FnMut() -> f64) -> (f64, f64) {
    let mut best = f64::INFINITY;
    let mut value = 0.0;
    for _ in 0..repeats {
        let started = Instant::now();
        value = f();
        best = best.min(started.elapsed().as_secs_f64());
    }
    (best, value)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let repeats = match args.iter().position(|a| a == "--repeats") {
        Some(i) => match args.get(i + 1).and_then(|v| v.parse::<usize>().ok()) {
            Some(r) if r > 0 => r,
            _ => {
                eprintln!("--repeats needs a positive whole number");
                std::process::exit(2);
            }
        },
        None => 50,
    };
    let sizes: Vec<usize> = match args.iter().position(|a| a == "--sizes") {
        Some(i) => args
            .get(i + 1)
            .map(|v| {
                v.split(',')
                    .map(|x| x.trim().parse::<usize>())
                    .collect::<Result<Vec<_>, _>>()
            })
            .and_then(Result::ok)
            .filter(|s| !s.is_empty() && s.iter().all(|&n| n > 0))
            .unwrap_or_else(|| {
                eprintln!("--sizes needs positive whole numbers separated by commas, such as 100,500");
                std::process::exit(2);
            }),
        None => vec![50, 100, 200, 256, 300, 500],
    };
    let dim = 23;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    println!("best of {repeats}; sizes in frames of {dim} values; µs per solve");
    println!("{:<34} {:>10} {:>10} {:>8}", "sets", "dense", "sparse", "sparse/dense");
    for n in sizes.iter().copied() {
        let uniform = |rng: &mut Rng| -> Vec<f64> { (0..n * dim).map(|_| rng.uniform()).collect() };
        let cases = [
            (
                format!("tracked {n}, 2 frames late"),
                tracked(&mut rng, n, dim, 2.0, 0.05),
            ),
            (
                format!("tracked {n}, 10 frames late"),
                tracked(&mut rng, n, dim, 10.0, 0.3),
            ),
            (format!("fallen {n}, still from 1/3"), fallen(&mut rng, n, dim)),
            (format!("unstructured {n}"), (uniform(&mut rng), uniform(&mut rng))),
        ];
        for (name, (a, b)) in cases {
            let solve = |solver| {
                emd_by(&a, &b, dim, solver)
                    .expect("valid sets")
                    .expect("equal sizes")
                    .value
            };
            let (dense_s, dense) = best_seconds(repeats, || solve(Solver::Dense));
            let (sparse_s, sparse) = best_seconds(repeats, || solve(Solver::Sparse { neighbours: 16 }));
            assert!((dense - sparse).abs() <= 1e-12 * sparse, "{name}: {dense} vs {sparse}");
            println!(
                "{name:<34} {:>10.1} {:>10.1} {:>8.2}",
                dense_s * 1e6,
                sparse_s * 1e6,
                sparse_s / dense_s
            );
        }
    }
}

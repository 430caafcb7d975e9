//! Times the EMD solver on two raw little-endian f64 files (rows × dim), for the benchmark
//! script: `cargo run --release -p arena-bench --example emd_timing -- A.bin B.bin DIM [K]`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let read = |p: &str| -> Vec<f64> {
        std::fs::read(p)
            .expect("readable file")
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let (a, b) = (read(&args[1]), read(&args[2]));
    let dim: usize = args[3].parse().unwrap();
    let k: usize = args
        .get(4)
        .map(|s| s.parse().unwrap())
        .unwrap_or(arena_bench::emd::DEFAULT_NEIGHBOURS);
    let t = std::time::Instant::now();
    let r = arena_bench::emd::emd_with(&a, &b, dim, k).unwrap();
    println!("{:.15} {:.4} {:?}", r.value, t.elapsed().as_secs_f64(), r.stats);
}

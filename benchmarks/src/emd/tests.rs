//! Exact EMD against brute force and hand-computed cases; bad input.

use super::transport::gcd;
use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The sparse solver alone, whatever the sizes.
fn sparse(a: &[f64], b: &[f64], dim: usize, k: usize) -> Emd {
    emd_by(a, b, dim, Solver::Sparse { neighbours: k }).unwrap().unwrap()
}

fn random_points(rng: &mut ChaCha8Rng, rows: usize, dim: usize) -> Vec<f64> {
    (0..rows * dim).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// Minimum over all permutations of the mean matched cost (rows n = m). Partial sums that
/// already exceed the best complete one are cut (costs are non-negative).
fn brute_force_assignment(cost: &[Vec<f64>]) -> f64 {
    fn go(cost: &[Vec<f64>], row: usize, used: &mut Vec<bool>, acc: f64, best: &mut f64) {
        if acc >= *best {
            return;
        }
        if row == cost.len() {
            *best = best.min(acc);
            return;
        }
        for j in 0..cost.len() {
            if !used[j] {
                used[j] = true;
                go(cost, row + 1, used, acc + cost[row][j], best);
                used[j] = false;
            }
        }
    }
    let mut best = f64::INFINITY;
    go(cost, 0, &mut vec![false; cost.len()], 0.0, &mut best);
    best / cost.len() as f64
}

/// Minimum mean assignment cost by dynamic programming over subsets of columns: best[mask]
/// is the cheapest way to give the first popcount(mask) rows the columns in mask. Exhaustive
/// like the permutation search, but fast enough for the replicated unequal cases (N ≤ 12).
fn subset_dp_assignment(cost: &[Vec<f64>]) -> f64 {
    let n = cost.len();
    let mut best = vec![f64::INFINITY; 1 << n];
    best[0] = 0.0;
    for mask in 0usize..(1 << n) {
        let row = mask.count_ones() as usize;
        if row == n || best[mask].is_infinite() {
            continue;
        }
        for j in (0..n).filter(|j| mask & (1 << j) == 0) {
            let next = mask | (1 << j);
            best[next] = best[next].min(best[mask] + cost[row][j]);
        }
    }
    best[(1 << n) - 1] / n as f64
}

/// Brute force for any sizes: replicate rows of A m/g times and of B n/g times, so the
/// transportation problem becomes an assignment problem of size n·m/g.
fn brute_force(a: &[f64], b: &[f64], dim: usize) -> f64 {
    let (n, m) = (a.len() / dim, b.len() / dim);
    let g = gcd(n, m);
    let ra: Vec<usize> = (0..n).flat_map(|i| std::iter::repeat_n(i, m / g)).collect();
    let rb: Vec<usize> = (0..m).flat_map(|j| std::iter::repeat_n(j, n / g)).collect();
    let cost: Vec<Vec<f64>> = ra
        .iter()
        .map(|&i| {
            rb.iter()
                .map(|&j| euclidean(&a[i * dim..(i + 1) * dim], &b[j * dim..(j + 1) * dim]))
                .collect()
        })
        .collect();
    if n == m {
        brute_force_assignment(&cost)
    } else {
        subset_dp_assignment(&cost)
    }
}

#[test]
fn matches_brute_force_on_small_sets() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for (n, m) in [
        (1, 1),
        (1, 4),
        (4, 1),
        (2, 3),
        (3, 2),
        (5, 5),
        (6, 6),
        (7, 7),
        (4, 6),
        (6, 4),
        (3, 4),
        (3, 6),
        (2, 5),
    ] {
        for trial in 0..20 {
            let dim = 1 + trial % 4;
            let a = random_points(&mut rng, n, dim);
            let b = random_points(&mut rng, m, dim);
            let want = brute_force(&a, &b, dim);
            // The public path (dense where n = m), and the sparse solver on every size.
            let got = emd(&a, &b, dim).unwrap();
            assert!(
                (got - want).abs() <= 1e-12 * want.max(1.0),
                "n={n} m={m} dim={dim}: {got} vs brute force {want}"
            );
            for k in [1, 2, DEFAULT_NEIGHBOURS] {
                let got = sparse(&a, &b, dim, k).value;
                assert!(
                    (got - want).abs() <= 1e-12 * want.max(1.0),
                    "n={n} m={m} dim={dim} k={k}: sparse {got} vs brute force {want}"
                );
            }
        }
    }
}

#[test]
fn hand_computed_cases() {
    // Identical sets: zero. Shifted by (3, 4): every unit moves 5.
    let a = [0.0, 0.0, 1.0, 0.0, 0.0, 2.0];
    assert_eq!(emd(&a, &a, 2).unwrap(), 0.0);
    let b: Vec<f64> = a.chunks(2).flat_map(|p| [p[0] + 3.0, p[1] + 4.0]).collect();
    assert!((emd(&a, &b, 2).unwrap() - 5.0).abs() < 1e-12);
    // One point against two: mean of the two distances.
    let got = emd(&[0.0], &[1.0, 3.0], 1).unwrap();
    assert!((got - 2.0).abs() < 1e-12);
    // {0, 1} vs {0.5}: 0.5 each way. Order of the rows never matters.
    assert!((emd(&[1.0, 0.0], &[0.5], 1).unwrap() - 0.5).abs() < 1e-12);
    // Crossing is never optimal: {0, 10} vs {1, 11} = 1, not 10.
    assert!((emd(&[0.0, 10.0], &[11.0, 1.0], 1).unwrap() - 1.0).abs() < 1e-12);
}

#[test]
fn certificate_rounds_recover_from_a_poor_graph() {
    // With one neighbour the sparse graph misses optimal pairs; the dense certificate must
    // add them and the answer must equal the one found with many neighbours.
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let a = random_points(&mut rng, 300, 5);
    let b = random_points(&mut rng, 240, 5);
    let poor = emd_with(&a, &b, 5, 1).unwrap();
    let rich = emd_with(&a, &b, 5, 64).unwrap();
    assert!(poor.stats.rounds > 1, "{:?}", poor.stats);
    assert!(
        (poor.value - rich.value).abs() <= 1e-12 * rich.value,
        "{poor:?} {rich:?}"
    );
}

#[test]
fn bad_input_is_an_error() {
    assert_eq!(emd(&[], &[1.0], 1), Err(EmdError::Empty { n: 0, m: 1 }));
    assert_eq!(emd(&[1.0], &[1.0], 0), Err(EmdError::ZeroDimension));
    assert!(matches!(
        emd(&[1.0, 2.0, 3.0], &[1.0, 2.0], 2),
        Err(EmdError::Ragged { set: 'A', .. })
    ));
    let err = emd(&[1.0, 2.0], &[1.0, f64::NAN], 2).unwrap_err();
    assert_eq!(err.to_string(), "set B, row 0, column 1: non-finite value NaN");
}

/// A tracked window: a smooth reference curve of `n` frames, and the robot's frames following
/// it `lag` frames late with noise of `noise` (relative to the curve's unit amplitude).
fn tracked_window(rng: &mut ChaCha8Rng, n: usize, dim: usize, lag: usize, noise: f64) -> (Vec<f64>, Vec<f64>) {
    let phase: Vec<f64> = (0..dim).map(|_| rng.random_range(0.0..6.3)).collect();
    let frame = |t: f64, d: usize| (0.05 * t * (1.0 + d as f64 * 0.1) + phase[d]).sin();
    let reference: Vec<f64> = (0..n)
        .flat_map(|t| (0..dim).map(move |d| (t, d)))
        .map(|(t, d)| frame(t as f64, d))
        .collect();
    let robot: Vec<f64> = (0..n)
        .flat_map(|t| (0..dim).map(move |d| (t, d)))
        .map(|(t, d)| frame(t as f64 - lag as f64, d) + noise * rng.random_range(-1.0..1.0))
        .collect();
    (robot, reference)
}

#[test]
fn dense_equals_sparse_on_equal_sizes() {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let dim = 23;
    let mut cases: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    for n in [2, 3, 17, 64, 100, DENSE_MAX_ROWS] {
        cases.push((
            format!("uniform {n}"),
            random_points(&mut rng, n, dim),
            random_points(&mut rng, n, dim),
        ));
        for (lag, noise) in [(0, 0.01), (3, 0.05), (10, 0.3)] {
            let (a, b) = tracked_window(&mut rng, n, dim, lag, noise);
            cases.push((format!("tracked {n} lag {lag} noise {noise}"), a, b));
        }
        // A robot that falls a third of the way in and lies still: one frame repeated.
        let (mut fallen, reference) = tracked_window(&mut rng, n, dim, 2, 0.05);
        let still = fallen[n / 3 * dim..(n / 3 + 1) * dim].to_vec();
        for t in n / 3..n {
            fallen[t * dim..(t + 1) * dim].copy_from_slice(&still);
        }
        cases.push((format!("fallen {n}"), fallen, reference));
        // A reference that stands still: every matching costs the same.
        let still: Vec<f64> = (0..n).flat_map(|_| [0.3; 23]).collect();
        cases.push((format!("still {n}"), random_points(&mut rng, n, dim), still));
        // Points on a small grid: many equal costs, repeated rows on both sides.
        let grid = |rng: &mut ChaCha8Rng| -> Vec<f64> { (0..n * dim).map(|_| rng.random_range(0..3) as f64).collect() };
        cases.push((format!("grid {n}"), grid(&mut rng), grid(&mut rng)));
    }
    for (name, a, b) in cases {
        let dense = emd_with(&a, &b, dim, DEFAULT_NEIGHBOURS).unwrap();
        assert!(dense.stats.dense, "{name}: the dense solver was not the one used");
        let sparse = sparse(&a, &b, dim, DEFAULT_NEIGHBOURS);
        assert!(
            (dense.value - sparse.value).abs() <= 1e-12 * sparse.value.max(1e-300),
            "{name}: dense {} vs sparse {}",
            dense.value,
            sparse.value
        );
    }
    // One row more and the sparse solver takes the problem.
    let n = DENSE_MAX_ROWS + 1;
    let (a, b) = tracked_window(&mut rng, n, dim, 2, 0.05);
    assert!(!emd_with(&a, &b, dim, DEFAULT_NEIGHBOURS).unwrap().stats.dense);
}

#[test]
fn values_too_large_to_measure_are_an_error() {
    // Squared differences of 1e300 overflow: refused by every path, naming the value.
    let a = [1e300, 0.0, 5.0];
    let b = [-1e300, 1.0, 2.0];
    for got in [
        emd_with(&a, &b, 1, DEFAULT_NEIGHBOURS).map(|e| e.value),
        emd_by(&a, &b, 1, Solver::Sparse { neighbours: 16 }).map(|e| e.map(|e| e.value).unwrap_or(0.0)),
        emd_by(&a, &b, 1, Solver::Dense).map(|e| e.map(|e| e.value).unwrap_or(0.0)),
    ] {
        let err = got.unwrap_err();
        assert!(
            matches!(
                err,
                EmdError::TooLarge {
                    set: 'A',
                    row: 0,
                    column: 0,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("1e300"), "{err}");
    }
    // Large but measurable values are solved.
    let (a, b) = ([1e100, 0.0], [-1e100, 1.0]);
    let got = emd(&a, &b, 1).unwrap();
    assert!((got - 1e100).abs() <= 1e-12 * 1e100, "{got}");
}

#[test]
fn dense_matches_brute_force_with_many_ties() {
    // Points on a 3-value grid: equal costs everywhere, repeated rows, several optimal matchings.
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    for n in 1..=7 {
        for trial in 0..40 {
            let dim = 1 + trial % 3;
            let grid =
                |rng: &mut ChaCha8Rng| -> Vec<f64> { (0..n * dim).map(|_| rng.random_range(0..3) as f64).collect() };
            let (a, b) = (grid(&mut rng), grid(&mut rng));
            let want = brute_force(&a, &b, dim);
            let got = emd_by(&a, &b, dim, Solver::Dense).unwrap().expect("the check holds");
            assert!(
                (got.value - want).abs() <= 1e-12 * want.max(1.0),
                "n={n} dim={dim}: dense {} vs brute force {want}",
                got.value
            );
        }
    }
}

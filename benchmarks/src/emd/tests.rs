//! Exact EMD against brute force and hand-computed cases; bad input.

use super::transport::gcd;
use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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
            for k in [1, 2, DEFAULT_NEIGHBOURS] {
                let got = emd_with(&a, &b, dim, k).unwrap().value;
                assert!(
                    (got - want).abs() <= 1e-12 * want.max(1.0),
                    "n={n} m={m} dim={dim} k={k}: {got} vs brute force {want}"
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

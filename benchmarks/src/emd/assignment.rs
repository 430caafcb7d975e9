//! The dense solver for sets of equal size: with n = m every mass is one unit, so EMD is the
//! cheapest perfect matching of rows to rows, divided by n (module docs). An evaluation's
//! windows are this case (both sides hold one frame per control step), and at their sizes
//! (about a hundred frames) the whole n × n cost matrix is cheaper to solve than the sparse
//! solver's candidate graph and certificate passes.
//!
//! Shortest augmenting paths on the dense matrix, as Jonker and Volgenant (1987) arrange them:
//! - column reduction: each column's potential v_j is its least cost, and the column goes to
//!   the row that has it while that row is still free;
//! - then each free row in turn: Dijkstra over the columns with reduced costs c_ij − v_j, all
//!   columns at the current least distance taken at once (so ties, such as a reference that
//!   stands still, end at the first free one), the potentials of the finished columns raised,
//!   and the path flipped.
//!
//! The result is checked as the sparse solver's is: the potentials must be a feasible dual on
//! every pair, within the same tolerance; if rounding ever broke that, [`solve`] says so and
//! the caller solves the problem the sparse way.

use super::distance::ColumnBlocks;
use super::{Emd, EmdStats, Points};

/// Largest set size solved densely (5.1 s of frames at 50 Hz; its n² costs take 512 kB). The
/// example `emd_solvers` runs both solvers on the same sets; on the 2-core machine (the dense
/// solver on one thread, the sparse one on both), at 256 frames the dense one was 2.3–4.8 times
/// faster on every kind of set, and at 500 frames it lost on a robot that falls and lies still
/// (22 against 19 ms: ties all along its paths). The replay rollout of `python/emd_vs_pot.py
/// --bench` agrees: windows of its real frames solved 2.5 times faster densely at 300 frames
/// and 1.4 times slower at 500.
pub const DENSE_MAX_ROWS: usize = 256;

const FREE: usize = usize::MAX;

/// The cheapest matching of `a`'s rows to `b`'s (same count, at most [`DENSE_MAX_ROWS`]):
/// its mean cost, or `None` where the final potentials fail the optimality check.
pub(super) fn solve(a: Points<'_>, b: Points<'_>) -> Option<Emd> {
    let n = a.rows();
    debug_assert_eq!(n, b.rows());
    let blocks = ColumnBlocks::new(b);
    let mut cost = vec![0.0f64; n * n];
    for (i, row) in cost.chunks_exact_mut(n).enumerate() {
        blocks.distances(a.row(i), row);
    }
    let mut lap = Lap::new(&cost, n);
    lap.column_reduction();
    let free: Vec<usize> = (0..n).filter(|&i| lap.col_of_row[i] == FREE).collect();
    for &f in &free {
        lap.augment(f);
    }
    if !lap.dual_feasible() {
        return None;
    }
    let total: f64 = (0..n).map(|i| cost[i * n + lap.col_of_row[i]]).sum();
    Some(Emd {
        value: total / n as f64,
        stats: EmdStats {
            dense: true,
            rounds: 1,
            edges: n * n,
            augmentations: free.len(),
            coarse_rounds: 0,
        },
    })
}

/// The matching and the column potentials, with the search's scratch.
struct Lap<'c> {
    cost: &'c [f64],
    n: usize,
    /// Column potentials: every reduced cost c_ij − v_j − u_i stays ≥ 0 (u implicit).
    v: Vec<f64>,
    col_of_row: Vec<usize>,
    row_of_col: Vec<usize>,
    /// Shortest distance of each column from the row being matched, and the row before it.
    dist: Vec<f64>,
    pred: Vec<usize>,
    /// The columns, ordered: [..low) finished, [low..up) at the current least distance, [up..)
    /// not yet reached at it.
    order: Vec<usize>,
}

impl<'c> Lap<'c> {
    fn new(cost: &'c [f64], n: usize) -> Self {
        Lap {
            cost,
            n,
            v: vec![0.0; n],
            col_of_row: vec![FREE; n],
            row_of_col: vec![FREE; n],
            dist: vec![0.0; n],
            pred: vec![0; n],
            order: (0..n).collect(),
        }
    }

    fn row(&self, i: usize) -> &'c [f64] {
        &self.cost[i * self.n..(i + 1) * self.n]
    }

    /// v_j = min_i c_ij; a column goes to the row of its minimum if that row is still free.
    /// Column minima are taken row by row, so the matrix is read in its own order.
    fn column_reduction(&mut self) {
        let n = self.n;
        let mut min_row = vec![0usize; n];
        let first = self.row(0);
        self.v.copy_from_slice(first);
        for i in 1..n {
            let row = self.row(i);
            for j in 0..n {
                if row[j] < self.v[j] {
                    self.v[j] = row[j];
                    min_row[j] = i;
                }
            }
        }
        for (j, &i) in min_row.iter().enumerate() {
            if self.col_of_row[i] == FREE {
                self.col_of_row[i] = j;
                self.row_of_col[j] = i;
            }
        }
    }

    /// Matches free row `f`: Dijkstra from it to the nearest free column, then the potentials
    /// of the columns finished before the last distance level rise and the path is flipped.
    fn augment(&mut self, f: usize) {
        let n = self.n;
        let row_f = self.row(f);
        for j in 0..n {
            self.dist[j] = row_f[j] - self.v[j];
            self.pred[j] = f;
            self.order[j] = j;
        }
        let (mut low, mut up, mut finished) = (0usize, 0usize, 0usize);
        let mut min = 0.0;
        let end = 'search: loop {
            if low == up {
                // Every column at the last level is scanned: find the next least distance.
                finished = low;
                min = self.dist[self.order[up]];
                up += 1;
                // `up` moves as ties are found; the columns to look at stay those after the first.
                let rest = up;
                for k in rest..n {
                    let j = self.order[k];
                    let d = self.dist[j];
                    if d <= min {
                        if d < min {
                            up = low;
                            min = d;
                        }
                        self.order.swap(k, up);
                        up += 1;
                    }
                }
                if let Some(&j) = self.order[low..up].iter().find(|&&j| self.row_of_col[j] == FREE) {
                    break 'search j;
                }
            }
            // Scan one column at the least distance through the row that holds it.
            let j1 = self.order[low];
            low += 1;
            let i = self.row_of_col[j1];
            let row_i = self.row(i);
            let shift = row_i[j1] - self.v[j1] - min;
            let mut k = up;
            while k < n {
                let j = self.order[k];
                let d = row_i[j] - self.v[j] - shift;
                if d < self.dist[j] {
                    self.dist[j] = d;
                    self.pred[j] = i;
                    if d == min {
                        if self.row_of_col[j] == FREE {
                            break 'search j;
                        }
                        self.order.swap(k, up);
                        up += 1;
                    }
                }
                k += 1;
            }
        };
        for k in 0..finished {
            let j = self.order[k];
            self.v[j] += self.dist[j] - min;
        }
        let mut j = end;
        loop {
            let i = self.pred[j];
            self.row_of_col[j] = i;
            let before = self.col_of_row[i];
            self.col_of_row[i] = j;
            if i == f {
                break;
            }
            j = before;
        }
    }

    /// LP duality: with u_i = c_{i,x(i)} − v_{x(i)}, the matching is optimal if every pair has
    /// c_ij − v_j ≥ u_i (here within 1e-12 of the largest cost, the sparse solver's tolerance).
    fn dual_feasible(&self) -> bool {
        let max_cost = self.cost.iter().copied().fold(0.0, f64::max);
        let tol = 1e-12 * max_cost.max(f64::MIN_POSITIVE);
        (0..self.n).all(|i| {
            let row = self.row(i);
            let x = self.col_of_row[i];
            let u = row[x] - self.v[x];
            row.iter().zip(&self.v).all(|(c, v)| c - v >= u - tol)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_rejects_a_matching_that_is_not_the_cheapest() {
        // Crossing costs 2, straight 0: the crossed matching with zero potentials must fail.
        let cost = [0.0, 1.0, 1.0, 0.0];
        let mut lap = Lap::new(&cost, 2);
        lap.col_of_row = vec![1, 0];
        lap.row_of_col = vec![1, 0];
        assert!(!lap.dual_feasible());
        lap.col_of_row = vec![0, 1];
        lap.row_of_col = vec![0, 1];
        assert!(lap.dual_feasible());
    }
}

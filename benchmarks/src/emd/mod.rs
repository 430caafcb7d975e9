//! Exact earth mover's distance between two sets of frames.
//!
//! EMD here is the optimal-transport cost between the uniform distributions on the rows of
//! `A` (n × d) and `B` (m × d) with the Euclidean distance between rows as ground cost — the
//! quantity POT's `ot.emd2(ones(n)/n, ones(m)/m, cdist(A, B))` computes.
//!
//! ## Algorithm
//! With g = gcd(n, m), giving each row of `A` a supply of m/g units and each row of `B` a
//! demand of n/g units makes every mass an integer (total N = n·m/g), so the problem is an
//! integer transportation problem (an assignment problem when n = m) and
//! EMD = (optimal integer cost) / N exactly.
//!
//! The optimal plan uses few of the n·m pairs, so we solve on a sparse candidate graph and then
//! *prove* optimality on the dense problem:
//! 1. Candidate edges, multiscale: the problem on every other row is solved first (recursively;
//!    below [`DIRECT_PAIRS`] pairs the candidates are simply each row's k nearest rows both
//!    ways). Its potentials, extended to all rows by c-transforms, are dual-feasible for the
//!    dense problem and nearly optimal, so each source's k pairs of least *reduced* cost are
//!    very likely to hold the optimal plan. The north-west-corner staircase is added too: it
//!    alone admits a feasible plan, so the sparse problem is never infeasible.
//! 2. Successive shortest paths with potentials (primal-dual; Dijkstra from one source with
//!    excess, stopping at the first sink with deficit, JV-style), which keeps complementary
//!    slackness: every residual edge has a non-negative reduced cost.
//! 3. Certificate: the potentials π are a feasible dual for the *dense* problem iff every pair
//!    (i, j) has c_ij + π_i − π_j ≥ 0. A parallel pass over the pairs checks this (only rows
//!    whose potential fell since the last pass can have turned violating). If some
//!    pairs violate it, they join the graph, the affected sources are re-priced (their flow is
//!    released) and step 2 resumes from the current plan. When no pair violates, the plan is
//!    optimal for the dense problem (LP duality), so the returned value is exact.
//!
//! The loop adds at least one edge per round, so it ends; if it ever ran past [`MAX_ROUNDS`]
//! it returns [`EmdError::NotConverged`] rather than an approximation.
//!
//! Sets of equal size up to [`DENSE_MAX_ROWS`] rows (an evaluation's windows: one frame per
//! control step on each side) skip all this: their assignment problem is solved on the whole
//! cost matrix (`assignment.rs`), with the same optimality check, and goes the sparse way only
//! if that check ever failed.
//!
//! Files: this one holds the API, the input checks and the multiscale driver; `transport.rs` the
//! sparse solver (steps 1-3); `assignment.rs` the dense one; `distance.rs` the row distances.

mod assignment;
mod distance;
#[cfg(test)]
mod tests;
mod transport;

pub use assignment::DENSE_MAX_ROWS;

pub use distance::euclidean;
use transport::Transport;

/// Candidate pairs per row in the initial graph (measured: 16 is a good trade-off
/// between the cost of the sparse solve and the number of certificate rounds).
pub const DEFAULT_NEIGHBOURS: usize = 16;
/// Upper bound on certificate rounds; never reached in practice (see the module docs).
pub const MAX_ROUNDS: usize = 10_000;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmdError {
    #[error("EMD needs at least one frame in each set (got {n} and {m})")]
    Empty { n: usize, m: usize },
    #[error("EMD needs the same feature size in both sets (got {a} and {b})")]
    DimensionMismatch { a: usize, b: usize },
    #[error("EMD feature size must be positive")]
    ZeroDimension,
    #[error("set {set} has {len} values, which is not a whole number of {dim}-value rows")]
    Ragged { set: char, len: usize, dim: usize },
    #[error("set {set}, row {row}, column {column}: non-finite value {value}")]
    NonFinite {
        set: char,
        row: usize,
        column: usize,
        value: f64,
    },
    #[error(
        "set {set}, row {row}, column {column}: value {value:e} is too large to measure (distances and their sums must stay finite: at most {limit:e} in magnitude here)"
    )]
    TooLarge {
        set: char,
        row: usize,
        column: usize,
        value: f64,
        limit: f64,
    },
    #[error("EMD solver did not prove optimality after {rounds} rounds (this is a bug; please report it)")]
    NotConverged { rounds: usize },
}

/// Solver statistics, for benchmarks and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EmdStats {
    /// Whether the dense assignment solver answered (equal sizes up to [`DENSE_MAX_ROWS`]).
    pub dense: bool,
    /// Certificate passes over all n·m pairs (1 when the first sparse solve was optimal; 1 for
    /// the dense solver's check).
    pub rounds: usize,
    /// Edges in the final candidate graph (all n² pairs for the dense solver).
    pub edges: usize,
    /// Shortest-path augmentations.
    pub augmentations: usize,
    /// Certificate rounds spent on the coarser problems.
    pub coarse_rounds: usize,
}

/// A solved EMD: the value and, for diagnostics, how the solver got there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Emd {
    pub value: f64,
    pub stats: EmdStats,
}

/// Rows of a point set: `data` holds `len / dim` rows of `dim` values, row-major.
#[derive(Debug, Clone, Copy)]
pub struct Points<'a> {
    pub(super) data: &'a [f64],
    pub(super) dim: usize,
}

impl<'a> Points<'a> {
    pub fn new(data: &'a [f64], dim: usize) -> Self {
        Points { data, dim }
    }

    pub(super) fn rows(&self) -> usize {
        self.data.len() / self.dim
    }

    pub(super) fn row(&self, i: usize) -> &'a [f64] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// Exact EMD between the rows of `a` and `b` (row-major, `dim` values per row).
pub fn emd(a: &[f64], b: &[f64], dim: usize) -> Result<f64, EmdError> {
    emd_with(a, b, dim, DEFAULT_NEIGHBOURS).map(|e| e.value)
}

/// [`emd`] with a chosen neighbour count (the sparse solver's), returning solver statistics
/// too. Sets of equal size up to [`DENSE_MAX_ROWS`] rows are solved densely.
pub fn emd_with(a: &[f64], b: &[f64], dim: usize, neighbours: usize) -> Result<Emd, EmdError> {
    let (pa, pb) = checked(a, b, dim)?;
    if pa.rows() == pb.rows()
        && pa.rows() <= DENSE_MAX_ROWS
        && let Some(emd) = assignment::solve(pa, pb)
    {
        return Ok(emd);
    }
    Ok(solve_multiscale(pa, pb, neighbours.max(1))?.0)
}

/// Which solver [`emd_by`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Solver {
    /// The dense assignment solver: sets of equal size only, any size (its n² costs in memory).
    Dense,
    /// The sparse transportation solver with this many candidate pairs per row.
    Sparse { neighbours: usize },
}

/// [`emd`] by the solver named, for benchmarks and cross-checks. The dense solver answers
/// `Ok(None)` for sets of different sizes, or where its optimality check failed.
pub fn emd_by(a: &[f64], b: &[f64], dim: usize, solver: Solver) -> Result<Option<Emd>, EmdError> {
    let (pa, pb) = checked(a, b, dim)?;
    match solver {
        Solver::Dense if pa.rows() != pb.rows() => Ok(None),
        Solver::Dense => Ok(assignment::solve(pa, pb)),
        Solver::Sparse { neighbours } => Ok(Some(solve_multiscale(pa, pb, neighbours.max(1))?.0)),
    }
}

/// The input checks every entry point shares: both sets whole rows of finite values, neither
/// empty.
fn checked<'a>(a: &'a [f64], b: &'a [f64], dim: usize) -> Result<(Points<'a>, Points<'a>), EmdError> {
    if dim == 0 {
        return Err(EmdError::ZeroDimension);
    }
    for (set, data) in [('A', a), ('B', b)] {
        if data.len() % dim != 0 {
            return Err(EmdError::Ragged {
                set,
                len: data.len(),
                dim,
            });
        }
        if let Some(k) = data.iter().position(|v| !v.is_finite()) {
            return Err(EmdError::NonFinite {
                set,
                row: k / dim,
                column: k % dim,
                value: data[k],
            });
        }
    }
    let (pa, pb) = (Points::new(a, dim), Points::new(b, dim));
    let (n, m) = (pa.rows(), pb.rows());
    if n == 0 || m == 0 {
        return Err(EmdError::Empty { n, m });
    }
    // A difference squared and summed over `dim` values, and sums of up to n + m distances
    // (the potentials), must stay finite; beyond that the solvers would compare infinities.
    let limit = (f64::MAX / (4.0 * dim as f64)).sqrt() / (n + m) as f64;
    for (set, data) in [('A', a), ('B', b)] {
        if let Some(k) = data.iter().position(|v| v.abs() > limit) {
            return Err(EmdError::TooLarge {
                set,
                row: k / dim,
                column: k % dim,
                value: data[k],
                limit,
            });
        }
    }
    Ok((pa, pb))
}

/// Problems with fewer pairs than this are solved directly from nearest-neighbour candidates.
pub const DIRECT_PAIRS: usize = 300 * 300;

/// Solves on every other row first and uses those potentials to pick the candidate edges
/// (see the module docs); returns the value and the final potentials.
fn solve_multiscale(a: Points<'_>, b: Points<'_>, k: usize) -> Result<(Emd, Vec<f64>), EmdError> {
    let (n, m) = (a.rows(), b.rows());
    let mut t = Transport::new(a, b, k);
    if n * m <= DIRECT_PAIRS || n < 4 || m < 4 {
        let max_cost = t.build_candidates();
        t.set_tolerance(max_cost);
        t.initial_plan();
    } else {
        let every_other = |p: Points<'_>| -> Vec<f64> { p.data.chunks(p.dim).step_by(2).flatten().copied().collect() };
        let (ca, cb) = (every_other(a), every_other(b));
        let (coarse, coarse_pi) = solve_multiscale(Points::new(&ca, a.dim), Points::new(&cb, b.dim), k)?;
        let nc = ca.len() / a.dim;
        t.stats.coarse_rounds = coarse.stats.rounds + coarse.stats.coarse_rounds;
        t.seed_from_coarse(Points::new(&ca, a.dim), &coarse_pi[..nc]);
    }
    let emd = t.run()?;
    Ok((emd, std::mem::take(&mut t.pi)))
}

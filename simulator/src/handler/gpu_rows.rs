//! Typed views of the shared file's rows that are in the physics' precision (float32, or
//! float64 for MJX with x64): the device outputs the worker writes and the `Inputs` block the
//! handler writes ([`super::gpu_layout`]).

use super::gpu_layout::INPUT_WIDTH;

/// Rows of `Inputs` (every env's, or one env's) in the physics' precision, for writing.
pub(crate) enum PhysicsRowsMut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
}

impl<'a> PhysicsRowsMut<'a> {
    /// `column` of every row.
    pub(crate) fn set_in_every_row(&mut self, column: usize, value: f64) {
        match self {
            PhysicsRowsMut::F32(v) => v.chunks_exact_mut(INPUT_WIDTH).for_each(|r| r[column] = value as f32),
            PhysicsRowsMut::F64(v) => v.chunks_exact_mut(INPUT_WIDTH).for_each(|r| r[column] = value),
        }
    }

    /// Calls `f(env, its row)` for every env's row, on `pool`'s threads where there is one: one
    /// thread converting thousands of rows to the physics' precision takes a tenth of a
    /// millisecond or more of each step, alone, while the other cores wait.
    pub(crate) fn for_each_row(self, pool: Option<&rayon::ThreadPool>, f: impl Fn(usize, PhysicsRowsMut<'_>) + Sync) {
        match self {
            PhysicsRowsMut::F32(v) => each_row(v, pool, |env, row| f(env, PhysicsRowsMut::F32(row))),
            PhysicsRowsMut::F64(v) => each_row(v, pool, |env, row| f(env, PhysicsRowsMut::F64(row))),
        }
    }

    /// One env's row.
    pub(crate) fn row(self, env: usize) -> PhysicsRowsMut<'a> {
        let range = env * INPUT_WIDTH..(env + 1) * INPUT_WIDTH;
        match self {
            PhysicsRowsMut::F32(v) => PhysicsRowsMut::F32(&mut v[range]),
            PhysicsRowsMut::F64(v) => PhysicsRowsMut::F64(&mut v[range]),
        }
    }

    pub(crate) fn set(&mut self, column: usize, value: f64) {
        match self {
            PhysicsRowsMut::F32(v) => v[column] = value as f32,
            PhysicsRowsMut::F64(v) => v[column] = value,
        }
    }

    pub(crate) fn add(&mut self, column: usize, value: f64) {
        match self {
            PhysicsRowsMut::F32(v) => v[column] += value as f32,
            PhysicsRowsMut::F64(v) => v[column] += value,
        }
    }

    pub(crate) fn write(&mut self, columns: std::ops::Range<usize>, values: &[f64]) {
        match self {
            PhysicsRowsMut::F32(v) => {
                assert_eq!(columns.len(), values.len(), "input columns");
                for (o, x) in v[columns].iter_mut().zip(values) {
                    *o = *x as f32;
                }
            }
            PhysicsRowsMut::F64(v) => v[columns].copy_from_slice(values),
        }
    }

    pub(crate) fn fill(&mut self, columns: std::ops::Range<usize>, value: f64) {
        match self {
            PhysicsRowsMut::F32(v) => v[columns].fill(value as f32),
            PhysicsRowsMut::F64(v) => v[columns].fill(value),
        }
    }
}

/// One env's row of an array in the physics' precision as the worker wrote it (or took it).
#[derive(Clone, Copy)]
pub(crate) enum PhysicsRow<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl PhysicsRow<'_> {
    pub(crate) fn get(self, i: usize) -> f64 {
        match self {
            PhysicsRow::F32(v) => f64::from(v[i]),
            PhysicsRow::F64(v) => v[i],
        }
    }

    pub(crate) fn sub(self, range: std::ops::Range<usize>) -> Self {
        match self {
            PhysicsRow::F32(v) => PhysicsRow::F32(&v[range]),
            PhysicsRow::F64(v) => PhysicsRow::F64(&v[range]),
        }
    }

    /// Asks the CPU to load the row's cache lines ahead of their use (a hint; no effect on any
    /// value, and none on machines without the instruction).
    pub(crate) fn prefetch(self) {
        let (start, bytes) = match self {
            PhysicsRow::F32(v) => (v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)),
            PhysicsRow::F64(v) => (v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)),
        };
        crate::prefetch::for_read(start, bytes);
    }

    /// Widens into `out` (float32 values are exact in float64), which must be as long.
    pub(crate) fn copy_into(self, out: &mut [f64]) {
        match self {
            PhysicsRow::F32(v) => {
                assert_eq!(v.len(), out.len(), "output row length");
                for (o, x) in out.iter_mut().zip(v) {
                    *o = f64::from(*x);
                }
            }
            PhysicsRow::F64(v) => out.copy_from_slice(v),
        }
    }
}

/// `f(env, row)` for each `INPUT_WIDTH` row of `values`, on `pool` where there is one.
fn each_row<T: Send>(values: &mut [T], pool: Option<&rayon::ThreadPool>, f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    /// Rows a task takes at least: a row is a few dozen values.
    const MIN_ROWS: usize = 256;
    match pool {
        Some(pool) => pool.install(|| {
            values
                .par_chunks_exact_mut(INPUT_WIDTH)
                .enumerate()
                .with_min_len(MIN_ROWS)
                .for_each(|(env, row)| f(env, row))
        }),
        None => values
            .chunks_exact_mut(INPUT_WIDTH)
            .enumerate()
            .for_each(|(env, row)| f(env, row)),
    }
}

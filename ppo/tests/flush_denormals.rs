//! `arena_torch::denormals`: the guard flushes subnormals on the calling thread and on
//! libtorch's OpenMP pool while alive, and restores IEEE behaviour after (the PPO update's
//! backward pass, issue 41 §3).

use arena_torch::denormals::{FlushDenormals, flushing_here};
use tch::{Kind, Tensor};

/// The smallest normal float32 times a half: a product that lands below the normal range.
fn subnormal_product() -> f32 {
    let a = Tensor::from_slice(&[f32::MIN_POSITIVE]);
    (a * 0.5).double_value(&[0]) as f32
}

#[test]
fn the_guard_flushes_while_alive_and_restores_after() {
    assert!(!flushing_here(), "the test thread starts without flushing");
    assert!(subnormal_product() > 0.0, "IEEE: the product is subnormal, not zero");
    {
        let guard = FlushDenormals::new(tch::get_num_threads() as usize);
        if cfg!(target_arch = "x86_64") {
            assert!(flushing_here());
            assert!(guard.threads().0);
            assert_eq!(subnormal_product(), 0.0, "flushed to zero");
        }
    }
    assert!(!flushing_here(), "restored");
    assert!(subnormal_product() > 0.0);
}

#[test]
fn libtorchs_pool_threads_flush_too() {
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipped: flushing is implemented for x86-64 only");
        return;
    }
    tch::set_num_threads(2);
    // A large elementwise product, which libtorch splits over its pool; every result is
    // subnormal under IEEE.
    let n = 1 << 20;
    let a = Tensor::full([n], f32::MIN_POSITIVE as f64, (Kind::Float, tch::Device::Cpu));
    let positive = |t: &Tensor| t.gt(0.0).sum(Kind::Int64).int64_value(&[]);
    assert_eq!(positive(&(&a * 0.5)), n, "IEEE everywhere");
    let guard = FlushDenormals::new(2);
    let (_, pool) = guard.threads();
    if pool == 0 {
        eprintln!("skipped: libtorch's pool is not libgomp's here");
        return;
    }
    assert_eq!(positive(&(&a * 0.5)), 0, "every thread flushed, the pool's included");
    drop(guard);
    assert_eq!(positive(&(&a * 0.5)), n, "every thread restored");
}

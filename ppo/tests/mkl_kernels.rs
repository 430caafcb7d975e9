//! oneMKL's vendor check answered by arena-torch (`arena_torch::mkl_kernels`): the binaries that
//! link libtorch resolve it to that definition, and libtorch's matrix products stay what they
//! compute.

use tch::{Kind, Tensor};

#[test]
fn libtorch_asks_this_binary_whether_the_cpu_is_intel() {
    assert!(
        arena_torch::mkl_kernels::cpu_features_choose(),
        "mkl_serv_intel_cpu_true resolves to libtorch's own definition: the binary does not export \
         arena-torch's (torchkit/build_torch.rs)"
    );
    // A product through oneMKL against the same sums in float64, at the sizes of a PPO update's
    // first layer.
    tch::manual_seed(7);
    let a = Tensor::randn([768, 286], (Kind::Float, tch::Device::Cpu));
    let b = Tensor::randn([286, 256], (Kind::Float, tch::Device::Cpu));
    let product = a.matmul(&b);
    let exact = a.to_kind(Kind::Double).matmul(&b.to_kind(Kind::Double));
    let error = (product.to_kind(Kind::Double) - &exact).abs().max().double_value(&[]);
    let scale = exact.abs().max().double_value(&[]);
    assert!(error <= 1e-5 * scale, "largest error {error} of values up to {scale}");
}

//! Embeds the run-time search paths of libtorch and of the repo-local MuJoCo, so `arena-ppo`
//! and its tests run without LD_LIBRARY_PATH (shared/notes/DEPENDENCIES.md). ARENA_PPO_CUDA=1
//! builds the binary for the GPU machine (links libtorch_cuda).
include!("../simulator/build_rpath.rs");
include!("../torchkit/build_torch.rs");

fn main() {
    link_torch_and_mujoco("ARENA_PPO_CUDA");
}

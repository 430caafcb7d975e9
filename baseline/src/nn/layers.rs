//! Building blocks of BFM_ZERO_FACTS §5.1, each with an optional ensemble dimension P.
//!
//! Ensemble ("parallel") layers hold a weight `[P, in, out]` and a bias `[P, 1, out]` and compute
//! `bias + x·W` with a batched matmul on `[P, N, in]` inputs; the plain Linear keeps PyTorch's
//! `[out, in]` layout. Names follow the checkpoint: in every Block/ResBlock `mlp.0` is the
//! LayerNorm and `mlp.1` the Linear.

use arena_torch::params::{Scope, orthogonal};
use tch::Tensor;

const LN_EPS: f64 = 1e-5;

/// A dense layer, plain or ensemble.
#[derive(Debug)]
pub enum Dense {
    Plain { weight: Tensor, bias: Tensor },
    Parallel { weight: Tensor, bias: Tensor },
}

impl Dense {
    /// Orthogonal weights (gain 1 plain, √2 per ensemble member) and zero biases (§5.2 init).
    pub fn new(s: &mut Scope, input: i64, output: i64, ensemble: Option<i64>) -> Self {
        match ensemble {
            None => {
                let weight = s.param("weight", || orthogonal(output, input, 1.0));
                let zeros = s.zeros(&[output]);
                let bias = s.param("bias", || zeros);
                Dense::Plain { weight, bias }
            }
            Some(p) => {
                let init = || {
                    let members: Vec<Tensor> = (0..p)
                        .map(|_| orthogonal(input, output, std::f64::consts::SQRT_2))
                        .collect();
                    Tensor::stack(&members, 0)
                };
                let weight = s.param("weight", init);
                let zeros = s.zeros(&[p, 1, output]);
                let bias = s.param("bias", || zeros);
                Dense::Parallel { weight, bias }
            }
        }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        match self {
            Dense::Plain { weight, bias } => x.linear(weight, Some(bias)),
            Dense::Parallel { weight, bias } => bias.baddbmm(x, weight, 1.0, 1.0),
        }
    }
}

/// LayerNorm with affine parameters, plain (`[d]`) or ensemble (`[P, 1, d]`).
#[derive(Debug)]
pub struct Norm {
    weight: Tensor,
    bias: Tensor,
    dim: i64,
    parallel: bool,
}

impl Norm {
    pub fn new(s: &mut Scope, dim: i64, ensemble: Option<i64>) -> Self {
        let shape: Vec<i64> = match ensemble {
            None => vec![dim],
            Some(p) => vec![p, 1, dim],
        };
        let (ones, zeros) = (s.ones(&shape), s.zeros(&shape));
        let weight = s.param("weight", || ones);
        let bias = s.param("bias", || zeros);
        Norm {
            weight,
            bias,
            dim,
            parallel: ensemble.is_some(),
        }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        if self.parallel {
            x.layer_norm([self.dim], None::<&Tensor>, None::<&Tensor>, LN_EPS, false) * &self.weight + &self.bias
        } else {
            x.layer_norm([self.dim], Some(&self.weight), Some(&self.bias), LN_EPS, false)
        }
    }
}

/// `Block(i→o, act)` = LN(i) → Linear(i, o) → Mish if `act`.
#[derive(Debug)]
pub struct Block {
    norm: Norm,
    linear: Dense,
    mish: bool,
}

impl Block {
    pub fn new(s: &mut Scope, input: i64, output: i64, mish: bool, ensemble: Option<i64>) -> Self {
        let mut mlp = s.sub("mlp");
        let norm = Norm::new(&mut mlp.sub(0), input, ensemble);
        let linear = Dense::new(&mut mlp.sub(1), input, output, ensemble);
        Block { norm, linear, mish }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let y = self.linear.forward(&self.norm.forward(x));
        if self.mish { y.mish() } else { y }
    }
}

/// `ResBlock(d)` = x + Mish(Linear(LN(x))).
#[derive(Debug)]
pub struct ResBlock(Block);

impl ResBlock {
    pub fn new(s: &mut Scope, dim: i64, ensemble: Option<i64>) -> Self {
        ResBlock(Block::new(s, dim, dim, true, ensemble))
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        x + self.0.forward(x)
    }
}

/// One layer of a residual sequence.
#[derive(Debug)]
enum Layer {
    Block(Block),
    Res(ResBlock),
}

/// A numbered sequence of Blocks and ResBlocks (`name.0`, `name.1`, ...).
#[derive(Debug)]
pub struct Sequence(Vec<Layer>);

impl Sequence {
    /// `ResEmbed(i, h, L)` = Block(i→h, Mish), (L−2)×ResBlock(h), Block(h→h/2, Mish).
    pub fn res_embed(s: &mut Scope, input: i64, hidden: i64, layers: usize, ensemble: Option<i64>) -> Self {
        assert!(layers >= 2, "a residual embedding has at least 2 layers");
        let mut seq = vec![Layer::Block(Block::new(&mut s.sub(0), input, hidden, true, ensemble))];
        for k in 1..layers - 1 {
            seq.push(Layer::Res(ResBlock::new(&mut s.sub(k), hidden, ensemble)));
        }
        seq.push(Layer::Block(Block::new(
            &mut s.sub(layers - 1),
            hidden,
            hidden / 2,
            true,
            ensemble,
        )));
        Sequence(seq)
    }

    /// The residual trunk: L×ResBlock(h), then Block(h→out) without activation.
    pub fn res_trunk(s: &mut Scope, hidden: i64, layers: usize, output: i64, ensemble: Option<i64>) -> Self {
        let mut seq: Vec<Layer> = (0..layers)
            .map(|k| Layer::Res(ResBlock::new(&mut s.sub(k), hidden, ensemble)))
            .collect();
        seq.push(Layer::Block(Block::new(
            &mut s.sub(layers),
            hidden,
            output,
            false,
            ensemble,
        )));
        Sequence(seq)
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let mut y = x.shallow_clone();
        for layer in &self.0 {
            y = match layer {
                Layer::Block(b) => b.forward(&y),
                Layer::Res(r) => r.forward(&y),
            };
        }
        y
    }
}

/// `SphereNorm(x) = sqrt(dim)·x/‖x‖` (L2 norm clamped at 1e-12, as `F.normalize`).
pub fn sphere_norm(x: &Tensor) -> Tensor {
    let dim = *x.size().last().expect("sphere_norm of a scalar");
    let norm = x.norm_scalaropt_dim(2.0, [-1], true).clamp_min(1e-12);
    (x / norm) * (dim as f64).sqrt()
}

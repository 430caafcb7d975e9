//! Named parameter storage. Every tensor of the model lives here under its checkpoint name
//! (BFM_ZERO_FACTS §5.2: `_forward_map.embed_z.0.mlp.1.weight`, ...), so saving and loading a
//! checkpoint is a plain name → tensor map and a module never has to know its own prefix twice.

use std::collections::BTreeMap;
use tch::{Device, Kind, Tensor};

/// One named tensor: a trainable parameter or a buffer (running statistics, target copies).
#[derive(Debug)]
pub struct Entry {
    pub tensor: Tensor,
    pub trainable: bool,
}

/// All tensors of a model, ordered by name (the order optimisers and checkpoints use).
#[derive(Debug, Default)]
pub struct ParamStore {
    entries: BTreeMap<String, Entry>,
}

impl ParamStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `tensor` under `name`; a trainable one gets `requires_grad`.
    /// Panics on a duplicate name: names are fixed by the code, never by user input.
    pub fn insert(&mut self, name: String, tensor: Tensor, trainable: bool) -> Tensor {
        let tensor = if trainable {
            tensor.set_requires_grad(true)
        } else {
            tensor
        };
        let handle = tensor.shallow_clone();
        let previous = self.entries.insert(name.clone(), Entry { tensor, trainable });
        assert!(previous.is_none(), "parameter {name} registered twice");
        handle
    }

    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.entries.get(name).map(|e| &e.tensor)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Entry)> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The trainable tensors whose names start with `prefix`, in name order.
    pub fn trainable_under(&self, prefix: &str) -> Vec<(String, Tensor)> {
        self.entries
            .iter()
            .filter(|(name, e)| e.trainable && name.starts_with(prefix))
            .map(|(name, e)| (name.clone(), e.tensor.shallow_clone()))
            .collect()
    }

    /// Every tensor whose name starts with `prefix`, in name order.
    pub fn all_under(&self, prefix: &str) -> Vec<(String, Tensor)> {
        self.entries
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, e)| (name.clone(), e.tensor.shallow_clone()))
            .collect()
    }

    /// Total number of scalar values of the tensors under `prefix`.
    pub fn numel_under(&self, prefix: &str) -> i64 {
        self.entries
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(_, e)| e.tensor.numel() as i64)
            .sum()
    }
}

/// Where a module registers its tensors: a store, a name prefix and the device.
#[derive(Debug)]
pub struct Scope<'a> {
    store: &'a mut ParamStore,
    /// When set, tensors are taken (sharing storage) from this store instead of initialised:
    /// a second handle on an existing model.
    source: Option<&'a ParamStore>,
    prefix: String,
    device: Device,
    /// False for target copies: their tensors are buffers that no optimiser sees.
    trainable: bool,
}

impl<'a> Scope<'a> {
    pub fn root(store: &'a mut ParamStore, prefix: &str, device: Device, trainable: bool) -> Self {
        Scope {
            store,
            source: None,
            prefix: prefix.to_string(),
            device,
            trainable,
        }
    }

    /// A root whose tensors are shared with `source` (same names) rather than initialised.
    pub fn shared(
        store: &'a mut ParamStore,
        source: Option<&'a ParamStore>,
        prefix: &str,
        device: Device,
        trainable: bool,
    ) -> Self {
        Scope {
            store,
            source,
            prefix: prefix.to_string(),
            device,
            trainable,
        }
    }

    /// A child scope `prefix.name`.
    pub fn sub(&mut self, name: impl std::fmt::Display) -> Scope<'_> {
        let prefix = if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{}", self.prefix, name)
        };
        Scope {
            store: self.store,
            source: self.source,
            prefix,
            device: self.device,
            trainable: self.trainable,
        }
    }

    pub fn device(&self) -> Device {
        self.device
    }

    fn name(&self, leaf: &str) -> String {
        if self.prefix.is_empty() {
            leaf.to_string()
        } else {
            format!("{}.{}", self.prefix, leaf)
        }
    }

    /// A trainable tensor initialised by `init` (or shared from the source store).
    pub fn param(&mut self, leaf: &str, init: impl FnOnce() -> Tensor) -> Tensor {
        let trainable = self.trainable;
        self.register(leaf, init, trainable)
    }

    /// A buffer (never trained) initialised by `init` (or shared from the source store).
    pub fn buffer(&mut self, leaf: &str, init: impl FnOnce() -> Tensor) -> Tensor {
        self.register(leaf, init, false)
    }

    fn register(&mut self, leaf: &str, init: impl FnOnce() -> Tensor, trainable: bool) -> Tensor {
        let name = self.name(leaf);
        let tensor = match self.source {
            Some(src) => src
                .get(&name)
                .unwrap_or_else(|| panic!("shared store lacks {name}"))
                .shallow_clone(),
            None => init().to_device(self.device),
        };
        // A shared tensor already carries requires_grad from its owner.
        let trainable = trainable && self.source.is_none();
        self.store.insert(name, tensor, trainable)
    }

    pub fn zeros(&self, dims: &[i64]) -> Tensor {
        Tensor::zeros(dims, (Kind::Float, self.device))
    }

    pub fn ones(&self, dims: &[i64]) -> Tensor {
        Tensor::ones(dims, (Kind::Float, self.device))
    }
}

/// An orthogonal matrix of `rows × cols` scaled by `gain` (the semi-orthogonal init of
/// Saxe et al., as `torch.nn.init.orthogonal_` draws it: QR of a Gaussian, signs fixed by R).
pub fn orthogonal(rows: i64, cols: i64, gain: f64) -> Tensor {
    let _guard = tch::no_grad_guard();
    let transpose = rows < cols;
    let flat = if transpose {
        Tensor::randn([cols, rows], (Kind::Float, Device::Cpu))
    } else {
        Tensor::randn([rows, cols], (Kind::Float, Device::Cpu))
    };
    let (q, r) = Tensor::linalg_qr(&flat, "reduced");
    let q = q * r.diag(0).sign();
    let q = if transpose { q.tr() } else { q };
    (q * gain).contiguous()
}

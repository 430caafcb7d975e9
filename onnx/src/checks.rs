//! What a policy file must be before the server parses it into a model (issue 40 §1): small,
//! self-contained, and made only of the operators a tracking policy uses. The policies of this
//! field are MLPs (Gemm / MatMul, element-wise arithmetic, activations, Concat, Slice, Gather,
//! Clip, …); control flow (Loop, If, Scan), operators that make tensors of a size computed at
//! run time (ConstantOfShape, Expand, Range, Tile, …), external data, custom domains and
//! model-local functions are refused, so that an uploaded file is close to data: nothing in it
//! can loop. Its size alone does not bound its cost (a broadcast or a product can make tensors
//! far larger than the file): `engine` bounds what a row costs on the optimised graph.

use tract_onnx::pb::{ModelProto, NodeProto, TensorProto, tensor_proto::DataLocation};

/// Bounds on an uploaded file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// The file's size in bytes.
    pub max_file_bytes: u64,
    /// Nodes in the graph.
    pub max_nodes: usize,
    /// Values in all initializers and constants together.
    pub max_parameters: u64,
    /// Any one dimension of an initializer or constant.
    pub max_dim: i64,
    /// Values of every node's results together in one call of the optimised graph (weights
    /// that tract packs into its products are bounded by `max_parameters` instead): a bound on
    /// the intermediate tensors a call makes. Batches run in chunks of as many rows as fit; a
    /// model whose one row does not fit is refused.
    pub max_values_per_call: u64,
    /// Multiply-adds (and divisions) per row, as tract counts them on the optimised graph.
    pub max_fma_per_row: u64,
}

impl Default for Limits {
    /// 64 MiB, 2,000 nodes, 16 M parameters (64 MB of float32), dimensions up to 2²⁰, 64 M
    /// values in a call's results (256 MB of float32), 2³¹ multiply-adds a row: a published
    /// tracker (an MLP of a few hundred thousand parameters, tens of nodes, about a million
    /// multiply-adds and a few thousand values a row) fits with orders of magnitude to spare.
    fn default() -> Self {
        Limits {
            max_file_bytes: 64 << 20,
            max_nodes: 2_000,
            max_parameters: 16 << 20,
            max_dim: 1 << 20,
            max_values_per_call: 64 << 20,
            max_fma_per_row: 1 << 31,
        }
    }
}

/// Inputs of any one node (a tracker's widest, the `Concat` of its observation terms, has tens).
pub const MAX_NODE_INPUTS: usize = 256;

/// A node as a problem names it: by its name, or by its place in the graph when it has none.
fn describe(node: &NodeProto, index: usize) -> String {
    match node.name.is_empty() {
        true => format!("node #{index} ({})", node.op_type),
        false => format!("node '{}' ({})", node.name, node.op_type),
    }
}

/// Whether `perm` holds each of 0 … len − 1 once.
fn is_permutation(perm: &[i64]) -> bool {
    let mut seen = vec![false; perm.len()];
    perm.iter().all(|&axis| {
        usize::try_from(axis)
            .ok()
            .and_then(|a| seen.get_mut(a))
            .is_some_and(|s| !std::mem::replace(s, true))
    })
}

/// The operators a policy may use (the default ONNX domain).
pub const ALLOWED_OPERATORS: [&str; 52] = [
    // Linear algebra and element-wise arithmetic.
    "Gemm",
    "MatMul",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Neg",
    "Abs",
    "Sqrt",
    "Reciprocal",
    "Pow",
    "Exp",
    "Log",
    "Min",
    "Max",
    "Sum",
    "Mean",
    "Clip",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    // Activations.
    "Relu",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "Tanh",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Softmax",
    "LogSoftmax",
    "Gelu",
    "Mish",
    // Normalisation.
    "LayerNormalization",
    "BatchNormalization",
    // Shapes and selection, of sizes fixed by the inputs.
    "Concat",
    "Slice",
    "Gather",
    "Split",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Identity",
    "Cast",
    "Constant",
    "Shape",
];

/// Every reason `model` (a file of `file_bytes` bytes) is refused; empty when it may run.
pub fn check_model(model: &ModelProto, file_bytes: u64, limits: &Limits) -> Vec<String> {
    let mut problems = Vec::new();
    if file_bytes > limits.max_file_bytes {
        problems.push(format!(
            "the file has {file_bytes} bytes, more than the limit of {}",
            limits.max_file_bytes
        ));
    }
    for set in &model.opset_import {
        if !is_default_domain(&set.domain) {
            problems.push(format!(
                "operator set of a custom domain '{}' (only ONNX's own operators run)",
                set.domain
            ));
        }
    }
    if !model.functions.is_empty() {
        problems.push(format!("{} model-local functions (not allowed)", model.functions.len()));
    }
    if !model.training_info.is_empty() {
        problems.push("training information (not allowed in a policy to run)".into());
    }
    let Some(graph) = &model.graph else {
        problems.push("no graph".into());
        return problems;
    };
    if graph.node.len() > limits.max_nodes {
        problems.push(format!(
            "{} nodes, more than the limit of {}",
            graph.node.len(),
            limits.max_nodes
        ));
    }
    let mut refused: Vec<(String, usize)> = Vec::new();
    let mut parameters = 0u64;
    for (index, node) in graph.node.iter().enumerate() {
        let op = if node.op_type.is_empty() {
            "a node without an operator type (op_type)".to_string()
        } else if is_default_domain(&node.domain) {
            node.op_type.clone()
        } else {
            format!("{}.{}", node.domain, node.op_type)
        };
        if !is_default_domain(&node.domain) || !ALLOWED_OPERATORS.contains(&node.op_type.as_str()) {
            match refused.iter_mut().find(|(o, _)| *o == op) {
                Some((_, n)) => *n += 1,
                None => refused.push((op, 1)),
            }
        }
        if node.input.len() > MAX_NODE_INPUTS {
            // tract's optimiser takes about the cube of a node's inputs in time (a `Concat` of
            // 300,000 copies of one input ran for 24 minutes, growing to 23.7 GB).
            problems.push(format!(
                "{} has {} inputs, more than the limit of {MAX_NODE_INPUTS}",
                describe(node, index),
                node.input.len()
            ));
        }
        if node.op_type == "Transpose"
            && let Some(perm) = node.attribute.iter().find(|a| a.name == "perm")
            && !is_permutation(&perm.ints)
        {
            // tract trusts it: a repeated axis sent its axis changes allocating without end.
            problems.push(format!(
                "{}: perm {:?} is not a permutation of the axes 0 to {}",
                describe(node, index),
                perm.ints,
                perm.ints.len().saturating_sub(1)
            ));
        }
        if node.attribute.iter().any(|a| a.g.is_some() || !a.graphs.is_empty()) {
            problems.push(format!(
                "node '{}' ({}) carries a subgraph (not allowed)",
                node.name, node.op_type
            ));
        }
        for tensor in node_tensors(node) {
            parameters = parameters.saturating_add(tensor_size(tensor, "a constant", limits, &mut problems));
        }
    }
    if !refused.is_empty() {
        let list: Vec<String> = refused
            .iter()
            .map(|(op, n)| if *n == 1 { op.clone() } else { format!("{op} ×{n}") })
            .collect();
        problems.push(format!(
            "operators a policy may not use: {} (allowed: {})",
            list.join(", "),
            ALLOWED_OPERATORS.join(", ")
        ));
    }
    if !graph.sparse_initializer.is_empty() {
        problems.push("sparse initializers (not allowed)".into());
    }
    for tensor in &graph.initializer {
        if tensor.data_location == Some(DataLocation::External as i32) || !tensor.external_data.is_empty() {
            problems.push(format!(
                "initializer '{}' is stored outside the file (external data)",
                tensor.name
            ));
            continue;
        }
        parameters = parameters.saturating_add(tensor_size(tensor, "initializer", limits, &mut problems));
    }
    if parameters > limits.max_parameters {
        problems.push(format!(
            "{parameters} parameters, more than the limit of {}",
            limits.max_parameters
        ));
    }
    // Every declared output must be something the graph has (tract panics reading one that is
    // not).
    let produced: std::collections::HashSet<&str> = graph
        .node
        .iter()
        .flat_map(|n| n.output.iter().map(String::as_str))
        .chain(graph.input.iter().map(|i| i.name.as_str()))
        .chain(graph.initializer.iter().map(|t| t.name.as_str()))
        .collect();
    for output in &graph.output {
        if !produced.contains(output.name.as_str()) {
            problems.push(format!("output '{}' is produced by no node of the graph", output.name));
        }
    }
    let metadata: usize = model.metadata_props.iter().map(|p| p.key.len() + p.value.len()).sum();
    if metadata > crate::config::MAX_METADATA_BYTES {
        problems.push(format!(
            "its metadata is {metadata} bytes, more than the limit of {}",
            crate::config::MAX_METADATA_BYTES
        ));
    }
    problems
}

fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

fn node_tensors(node: &NodeProto) -> impl Iterator<Item = &TensorProto> {
    node.attribute.iter().flat_map(|a| a.t.iter().chain(a.tensors.iter()))
}

/// The number of values of `tensor`; a dimension out of bounds is a problem.
fn tensor_size(tensor: &TensorProto, what: &str, limits: &Limits, problems: &mut Vec<String>) -> u64 {
    let mut size = 1u64;
    for d in &tensor.dims {
        if *d < 0 || *d > limits.max_dim {
            problems.push(format!(
                "{what} '{}' has a dimension of {d} (the limit is {})",
                tensor.name, limits.max_dim
            ));
            return 0;
        }
        size = size.saturating_mul(*d as u64);
    }
    size
}

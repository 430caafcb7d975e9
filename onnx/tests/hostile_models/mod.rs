//! ONNX files written from ONNX's protobuf types, for the hostile-file tests: the engine's own
//! (`onnx/tests/hostile.rs`) and the server's upload route (`server/tests/hosted.rs`, which
//! includes this file by path). Each refused case carries a phrase its refusal must contain.

#![allow(dead_code)] // each including test uses part of it

use arena_onnx::Engine;
use std::path::Path;
use tract_onnx::pb::tensor_proto::{DataLocation, DataType};
use tract_onnx::pb::tensor_shape_proto::{Dimension, dimension};
use tract_onnx::pb::type_proto;
use tract_onnx::pb::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};

pub fn value(name: &str, dims: &[Option<i64>]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Some(v) => dimension::Value::DimValue(*v),
                None => dimension::Value::DimParam("batch".into()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: DataType::Float as i32,
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("{op}_{}", outputs.first().unwrap_or(&"")),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

pub fn tensor(name: &str, dims: &[i64], values: Vec<f32>) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: DataType::Float as i32,
        float_data: values,
        ..Default::default()
    }
}

/// A Cast node of `input` to `to`.
pub fn cast(input: &str, output: &str, to: DataType) -> NodeProto {
    let mut n = node("Cast", &[input], &[output]);
    n.attribute.push(AttributeProto {
        name: "to".into(),
        r#type: tract_onnx::pb::attribute_proto::AttributeType::Int as i32,
        i: to as i64,
        ..Default::default()
    });
    n
}

pub fn int64_tensor(name: &str, values: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![values.len() as i64],
        data_type: DataType::Int64 as i32,
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

/// obs [batch, 160] → MatMul by W [160, 29] → `last` node → actions [batch, 29], with the
/// committed tracker's metadata.
pub fn policy(nodes: Vec<NodeProto>, initializers: Vec<TensorProto>, inputs: Vec<ValueInfoProto>) -> ModelProto {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ppo/checkpoints/g1-smoke/policy.onnx");
    let metadata = Engine::load(&committed)
        .unwrap()
        .metadata()
        .iter()
        .map(|(k, v)| StringStringEntryProto {
            key: k.clone(),
            value: v.clone(),
        })
        .collect();
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        metadata_props: metadata,
        graph: Some(GraphProto {
            name: "policy".into(),
            node: nodes,
            initializer: initializers,
            input: inputs,
            output: vec![value("actions", &[None, Some(29)])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn obs_input() -> ValueInfoProto {
    value("obs", &[None, Some(160)])
}

pub fn plain(last: NodeProto, extra: Vec<TensorProto>) -> ModelProto {
    let mut inits = vec![tensor("W", &[160, 29], vec![0.01; 160 * 29])];
    inits.extend(extra);
    policy(
        vec![node("MatMul", &["obs", "W"], &["h"]), last],
        inits,
        vec![obs_input()],
    )
}

/// A file the arena must refuse, and a phrase of the refusal.
pub struct Refused {
    pub name: String,
    pub model: ModelProto,
    pub because: String,
}

/// Every kind of file refused at load: each operator outside the allow-list, a custom domain, a
/// subgraph, sizes beyond the limits, 10,000 nodes, external data, inputs it cannot feed.
pub fn refused_files() -> Vec<Refused> {
    let case = |name: &str, model: ModelProto, because: &str| Refused {
        name: name.into(),
        model,
        because: because.into(),
    };
    let mut cases: Vec<Refused> = REFUSED_OPERATORS
        .iter()
        .map(|op| {
            case(
                &format!("{op}.onnx"),
                plain(node(op, &["h"], &["actions"]), vec![]),
                &format!("operators a policy may not use: {op}"),
            )
        })
        .collect();
    let mut custom = node("FusedGemm", &["h"], &["actions"]);
    custom.domain = "com.microsoft".into();
    let mut model = plain(custom, vec![]);
    model.opset_import.push(OperatorSetIdProto {
        domain: "com.microsoft".into(),
        version: 1,
    });
    cases.push(case("custom.onnx", model, "custom domain 'com.microsoft'"));
    // A subgraph in an attribute, even on an allowed operator.
    let mut sneaky = node("Identity", &["h"], &["actions"]);
    sneaky.attribute.push(AttributeProto {
        name: "body".into(),
        g: Some(GraphProto::default()),
        ..Default::default()
    });
    cases.push(case("subgraph.onnx", plain(sneaky, vec![]), "subgraph"));
    // Dimensions claimed without the data: refused from the header alone.
    cases.push(case(
        "huge-dim.onnx",
        plain(
            node("Add", &["h", "B"], &["actions"]),
            vec![tensor("B", &[1 << 21, 29], vec![])],
        ),
        "initializer 'B' has a dimension of 2097152",
    ));
    cases.push(case(
        "huge-params.onnx",
        plain(
            node("Add", &["h", "B"], &["actions"]),
            vec![tensor("B", &[4096, 4097], vec![])],
        ),
        "parameters, more than the limit",
    ));
    let mut nodes = vec![node("MatMul", &["obs", "W"], &["x0"])];
    for k in 0..10_000 {
        let (a, b) = (format!("x{k}"), format!("x{}", k + 1));
        nodes.push(node("Identity", &[&a], &[&b]));
    }
    nodes.push(node("Identity", &["x10000"], &["actions"]));
    cases.push(case(
        "long.onnx",
        policy(
            nodes,
            vec![tensor("W", &[160, 29], vec![0.0; 160 * 29])],
            vec![obs_input()],
        ),
        "10002 nodes, more than the limit of 2000",
    ));
    // One node of many inputs: tract's optimiser takes about their cube in time (the hosted
    // walkthrough's 300,000 ran for 24 minutes).
    let wide: Vec<&str> = vec!["h"; 300];
    let mut concat = node("Concat", &wide, &["actions"]);
    concat.attribute.push(AttributeProto {
        name: "axis".into(),
        i: 1,
        ..Default::default()
    });
    cases.push(case(
        "wide-concat.onnx",
        plain(concat, vec![]),
        "has 300 inputs, more than the limit of 256",
    ));
    // A permutation with a repeated axis: tract allocated without end (the server aborted).
    let mut transpose = node("Transpose", &["h"], &["actions"]);
    transpose.attribute.push(AttributeProto {
        name: "perm".into(),
        ints: vec![0, 0],
        ..Default::default()
    });
    cases.push(case(
        "transpose-repeated-axis.onnx",
        plain(transpose, vec![]),
        "(Transpose): perm [0, 0] is not a permutation of the axes 0 to 1",
    ));
    let mut outside = tensor("B", &[29], vec![]);
    outside.data_location = Some(DataLocation::External as i32);
    outside.external_data.push(StringStringEntryProto {
        key: "location".into(),
        value: "/etc/passwd".into(),
    });
    cases.push(case(
        "external.onnx",
        plain(node("Add", &["h", "B"], &["actions"]), vec![outside]),
        "initializer 'B' is stored outside the file",
    ));
    cases.push(case(
        "two-inputs.onnx",
        policy(
            vec![
                node("Add", &["obs", "extra"], &["s"]),
                node("MatMul", &["s", "W"], &["actions"]),
            ],
            vec![tensor("W", &[160, 29], vec![0.0; 160 * 29])],
            vec![obs_input(), value("extra", &[None, Some(160)])],
        ),
        "expected one observation input",
    ));
    cases.push(case(
        "fixed-batch.onnx",
        policy(
            vec![node("MatMul", &["obs", "W"], &["actions"])],
            vec![tensor("W", &[160, 29], vec![0.0; 160 * 29])],
            vec![value("obs", &[Some(4), Some(160)])],
        ),
        "fixed batch of 4",
    ));
    cases.push(case(
        "rank3.onnx",
        policy(
            vec![node("Identity", &["obs"], &["actions"])],
            vec![],
            vec![value("obs", &[None, Some(2), Some(160)])],
        ),
        "expected [batch, observation size]",
    ));
    // Small files whose results are not: the outer product of an 8192-wide layer with
    // itself is 67 M values a row (268 MB of float32), and a batch of such rows took the
    // whole server's memory when it was first run (the file has 1.5 M parameters).
    let n = 8192;
    cases.push(case(
        "outer-product.onnx",
        policy(
            vec![
                node("MatMul", &["obs", "W1"], &["h"]),
                node("Unsqueeze", &["h", "axis2"], &["column"]),
                node("Unsqueeze", &["h", "axis1"], &["row"]),
                node("Mul", &["column", "row"], &["outer"]),
                node("Tanh", &["outer"], &["t"]),
                node("MatMul", &["t", "v"], &["r"]),
                node("Squeeze", &["r", "axis2"], &["s"]),
                node("MatMul", &["s", "W2"], &["actions"]),
            ],
            vec![
                tensor("W1", &[160, n], vec![1e-3; 160 * n as usize]),
                tensor("v", &[n, 1], vec![1e-3; n as usize]),
                tensor("W2", &[n, 29], vec![1e-3; n as usize * 29]),
                int64_tensor("axis1", &[1]),
                int64_tensor("axis2", &[2]),
            ],
            vec![obs_input()],
        ),
        "values in the model's results, more than the limit",
    ));
    // Observations declared as integers: said so, not refused inside the graph.
    let mut integer_obs = obs_input();
    if let Some(TypeProto {
        value: Some(type_proto::Value::TensorType(t)),
        ..
    }) = integer_obs.r#type.as_mut()
    {
        t.elem_type = DataType::Int64 as i32;
    }
    cases.push(case(
        "integer-input.onnx",
        policy(
            vec![node("Identity", &["obs"], &["actions"])],
            vec![],
            vec![integer_obs],
        ),
        "input obs is int64; expected floating point observations",
    ));
    // Outputs that are not one row of floating-point actions per observation row.
    cases.push(case(
        "bool-output.onnx",
        plain(cast("h", "actions", DataType::Bool), vec![]),
        "is bool [batch, 29]; expected floating point [batch, actions]",
    ));
    // In ONNX's words: tract reads an int64 output as its TDim.
    cases.push(case(
        "int64-output.onnx",
        plain(cast("h", "actions", DataType::Int64), vec![]),
        "is int64 [batch, 29]; expected floating point",
    ));
    cases.push(case(
        "rank3-output.onnx",
        plain(
            node("Unsqueeze", &["h", "axis1"], &["actions"]),
            vec![int64_tensor("axis1", &[1])],
        ),
        "expected floating point [batch, actions]",
    ));
    // An index computed from the observation, out of range whatever it is: found by the
    // run on zeros at load (tract's Gather does not check its indices on every path).
    let to_index = cast("shifted", "index", DataType::Int64);
    cases.push(case(
        "gather-out-of-range.onnx",
        policy(
            vec![
                node("Slice", &["obs", "zero_i", "one_i", "one_i"], &["first"]),
                node("Mul", &["first", "zero"], &["nothing"]),
                node("Add", &["nothing", "far"], &["shifted"]),
                to_index,
                node("Gather", &["table", "index"], &["picked"]),
                node("Squeeze", &["picked", "one_i"], &["actions"]),
            ],
            vec![
                tensor("table", &[10, 29], vec![0.5; 290]),
                tensor("zero", &[1], vec![0.0]),
                tensor("far", &[1], vec![1000.0]),
                int64_tensor("zero_i", &[0]),
                int64_tensor("one_i", &[1]),
            ],
            vec![obs_input()],
        ),
        "row(s) of zeros",
    ));
    // Sizes the metadata does not agree with: 100 observation values for 160.
    cases.push(case(
        "narrow.onnx",
        policy(
            vec![node("MatMul", &["obs", "W"], &["actions"])],
            vec![tensor("W", &[100, 29], vec![0.0; 100 * 29])],
            vec![value("obs", &[None, Some(100)])],
        ),
        "the model takes 100 observation values; the policy's terms make 160",
    ));
    // A declared output nothing produces (tract panicked reading it).
    cases.push(case(
        "dangling-output.onnx",
        policy(
            vec![node("MatMul", &["obs", "W"], &["acts"])],
            vec![tensor("W", &[160, 29], vec![0.0; 160 * 29])],
            vec![obs_input()],
        ),
        "output 'actions' is produced by no node of the graph",
    ));
    // Metadata that would cost the checks minutes (millions of names), and lists that are long
    // or do not align with the terms they describe.
    let with_metadata = |key: &str, value: String| {
        let mut model = plain(node("Identity", &["h"], &["actions"]), vec![]);
        match model.metadata_props.iter_mut().find(|p| p.key == key) {
            Some(p) => p.value = value,
            None => model
                .metadata_props
                .push(StringStringEntryProto { key: key.into(), value }),
        }
        model
    };
    cases.push(case(
        "huge-metadata.onnx",
        with_metadata("joint_names", "a,".repeat(3 << 20)),
        "its metadata is 629",
    ));
    cases.push(case(
        "many-names.onnx",
        with_metadata("joint_names", "a,".repeat(300)),
        "joint_names has 300 entries",
    ));
    let terms = plain(node("Identity", &["h"], &["actions"]), vec![])
        .metadata_props
        .iter()
        .find(|p| p.key == "observation_names")
        .map(|p| p.value.split(',').count())
        .unwrap();
    cases.push(case(
        "misaligned-scales.onnx",
        with_metadata("observation_terms_scale", vec!["1.0"; terms - 1].join(",")),
        &format!(
            "metadata key 'observation_terms_scale' has {} entries for {terms} observation terms",
            terms - 1
        ),
    ));
    cases
}

/// Operators outside the allow-list, each refused by name.
pub const REFUSED_OPERATORS: [&str; 9] = [
    "Loop",
    "If",
    "Scan",
    "ConstantOfShape",
    "Expand",
    "Range",
    "Tile",
    "NonZero",
    "Resize",
];

/// Runs on zeros, but takes a row of its table at 1000 × the first observation value: out of
/// range for any value from 0.01 on.
pub fn index_from_observation_policy() -> ModelProto {
    let to_index = cast("scaled", "index", DataType::Int64);
    policy(
        vec![
            node("Slice", &["obs", "zero_i", "one_i", "one_i"], &["first"]),
            node("Mul", &["first", "thousand"], &["scaled"]),
            to_index,
            node("Gather", &["table", "index"], &["picked"]),
            node("Squeeze", &["picked", "one_i"], &["actions"]),
        ],
        vec![
            tensor("table", &[10, 29], vec![0.5; 290]),
            tensor("thousand", &[1], vec![1000.0]),
            int64_tensor("zero_i", &[0]),
            int64_tensor("one_i", &[1]),
        ],
        vec![obs_input()],
    )
}

/// Runs but gives x / 0 in every output: infinite or NaN actions.
pub fn non_finite_policy() -> ModelProto {
    plain(
        node("Div", &["h", "Z"], &["actions"]),
        vec![tensor("Z", &[29], vec![0.0; 29])],
    )
}

/// Valid, but slow: the observation through 64 layers 1024 wide that share one weight matrix
/// (1.2 M parameters, within every limit, but about 134 MFLOP a row); its outputs are small and
/// finite.
pub fn slow_policy() -> ModelProto {
    let width = 1024;
    let inits = vec![
        tensor("W0", &[160, width], vec![1e-3; 160 * width as usize]),
        tensor("W", &[width, width], vec![1e-3; (width * width) as usize]),
        tensor("Wout", &[width, 29], vec![1e-3; width as usize * 29]),
    ];
    let mut nodes = vec![node("MatMul", &["obs", "W0"], &["h0"])];
    let layers = 64;
    for k in 1..=layers {
        let (a, b) = (format!("h{}", k - 1), format!("h{k}"));
        nodes.push(node("MatMul", &[&a, "W"], &[&b]));
    }
    nodes.push(node("MatMul", &[&format!("h{layers}"), "Wout"], &["actions"]));
    policy(nodes, inits, vec![obs_input()])
}

//! The inference engine: an ONNX tracking policy loaded with tract and run on batches.
//!
//! A policy takes one observation input `[batch, N]` (float) and optionally `time_step`
//! `[batch, 1]` (the episode step + 1, the exporters' name), and gives `[batch, 29]` actions
//! (the output named `actions` or `action`, else the first). The batch may be dynamic (one call
//! per batch) or fixed at 1 (one call per row), as onnxruntime runs them.

use crate::checks::{Limits, check_model};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::infer::Factoid;
use tract_onnx::tract_hir::internal::DimLike;

/// Input names the exporters use for the motion time step (mjlab, holosoma).
pub const TIME_INPUTS: [&str; 1] = ["time_step"];
/// Output names of the action, in order of preference; else the first output.
pub const ACTION_OUTPUTS: [&str; 2] = ["actions", "action"];

/// Why a policy cannot be loaded or run: the file and every problem found.
#[derive(Debug, thiserror::Error)]
#[error("{}: {}", path.display(), problems.join("; "))]
pub struct EngineError {
    pub path: PathBuf,
    pub problems: Vec<String>,
}

/// A loaded policy, ready to run.
pub struct Engine {
    path: PathBuf,
    plan: std::sync::Arc<TypedSimplePlan>,
    obs_size: usize,
    action_size: usize,
    /// Where the observation and `time_step` sit among the model's inputs.
    obs_input: usize,
    time_input: Option<usize>,
    /// The types the file declares for them (float32 when it declares none): the runner's
    /// float32 values are cast to them, as the Python runner feeds onnxruntime the declared types.
    obs_type: DatumType,
    time_type: DatumType,
    /// Whether the batch axis is symbolic (else the model runs one row per call).
    batched: bool,
    /// Rows per call at most ([`Limits::max_values_per_call`]): larger batches run in chunks.
    chunk_rows: usize,
    /// The file's `metadata_props`.
    metadata: BTreeMap<String, String>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("path", &self.path)
            .field("obs_size", &self.obs_size)
            .field("action_size", &self.action_size)
            .field("time_input", &self.time_input)
            .field("batched", &self.batched)
            .field("chunk_rows", &self.chunk_rows)
            .finish()
    }
}

impl Engine {
    /// Loads and optimises the model at `path` within the default [`Limits`].
    pub fn load(path: &Path) -> Result<Self, EngineError> {
        Self::load_within(path, &Limits::default())
    }

    /// Loads the model at `path` if it passes [`check_model`] within `limits` (checked before
    /// the graph is built), and optimises it.
    pub fn load_within(path: &Path, limits: &Limits) -> Result<Self, EngineError> {
        let fail = |message: String| EngineError {
            path: path.to_path_buf(),
            problems: vec![message],
        };
        let bytes = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?.len();
        if bytes > limits.max_file_bytes {
            return Err(fail(format!(
                "the file has {bytes} bytes, more than the limit of {}",
                limits.max_file_bytes
            )));
        }
        let onnx = tract_onnx::onnx();
        let proto = onnx
            .proto_model_for_path(path)
            .map_err(|e| fail(format!("not a model tract can read: {e:#}")))?;
        let problems = check_model(&proto, bytes, limits);
        if !problems.is_empty() {
            return Err(EngineError {
                path: path.to_path_buf(),
                problems,
            });
        }
        let metadata = proto
            .metadata_props
            .iter()
            .map(|p| (p.key.clone(), p.value.clone()))
            .collect();
        // tract may panic on a malformed graph the checks above did not foresee: a refusal,
        // not a crash of whoever loads it (`arena eval --onnx`, the CLI agent).
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Self::build(path, &onnx, &proto, metadata, limits)
        }));
        match built {
            Ok(result) => result,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into());
                Err(fail(format!("tract failed reading it: {message}")))
            }
        }
    }

    /// The engine of a model that passed [`check_model`]: its graph typed, its inputs and
    /// action output chosen, optimised, planned and run once.
    fn build(
        path: &Path,
        onnx: &tract_onnx::model::Onnx,
        proto: &tract_onnx::pb::ModelProto,
        metadata: BTreeMap<String, String>,
        limits: &Limits,
    ) -> Result<Self, EngineError> {
        let fail = |message: String| EngineError {
            path: path.to_path_buf(),
            problems: vec![message],
        };
        let mut model = onnx
            .model_for_proto_model(proto)
            .map_err(|e| fail(format!("not a model tract can read: {e:#}")))?;
        let names: Vec<String> = model
            .input_outlets()
            .map_err(|e| fail(format!("{e:#}")))?
            .iter()
            .map(|o| model.node(o.node).name.clone())
            .collect();
        let time_input = names.iter().position(|n| TIME_INPUTS.contains(&n.as_str()));
        let obs_inputs: Vec<usize> = (0..names.len()).filter(|i| Some(*i) != time_input).collect();
        let [obs_input] = obs_inputs[..] else {
            return Err(fail(format!(
                "expected one observation input (and optionally time_step); the model has {}",
                names.join(", ")
            )));
        };
        let fact = model.input_fact(obs_input).map_err(|e| fail(format!("{e:#}")))?.clone();
        let shape = fact
            .shape
            .dims()
            .map(|d| d.concretize())
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
        if shape.len() != 2 {
            return Err(fail(format!(
                "input {} has shape {:?}; expected [batch, observation size]",
                names[obs_input], fact.shape
            )));
        }
        // The observations go in as the file declares them (float32, float64 or float16, as
        // onnxruntime takes them from the Python runner); an integer input is told so, not
        // refused by the unification error of a node inside it.
        let obs_type = fact.datum_type.concretize().unwrap_or(f32::datum_type());
        if !is_float(obs_type) {
            return Err(fail(format!(
                "input {} is {}; expected floating point observations",
                names[obs_input],
                onnx_type_name(obs_type)
            )));
        }
        let obs_size = shape[1].to_usize().map_err(|_| {
            fail(format!(
                "input {}: the observation size must be a number",
                names[obs_input]
            ))
        })?;
        let batched = shape[0].to_usize().is_err();
        if let Ok(b) = shape[0].to_usize()
            && b != 1
        {
            return Err(fail(format!(
                "input {} has a fixed batch of {b}; the runner feeds 1 or a dynamic batch",
                names[obs_input]
            )));
        }
        // One symbol for every batch axis, so a batch of any size runs the optimised model.
        let batch = model.symbols.sym("batch");
        let rows: TDim = if batched { batch.clone().into() } else { 1.into() };
        model
            .set_input_fact(obs_input, obs_type.fact([rows.clone(), obs_size.into()]).into())
            .map_err(|e| fail(format!("{e:#}")))?;
        let mut time_type = f32::datum_type();
        if let Some(t) = time_input {
            let declared = model.input_fact(t).map_err(|e| fail(format!("{e:#}")))?;
            time_type = declared.datum_type.concretize().unwrap_or(time_type);
            let number = is_float(time_type) || time_type == i64::datum_type() || time_type == i32::datum_type();
            if !number {
                return Err(fail(format!(
                    "input {} is {}; expected a number",
                    names[t],
                    onnx_type_name(time_type)
                )));
            }
            model
                .set_input_fact(t, time_type.fact([rows.clone(), 1.into()]).into())
                .map_err(|e| fail(format!("{e:#}")))?;
        }
        // The outputs by the names the file declares them under (a node's name is the
        // producer's, e.g. "/actor/Gemm", never "actions"), in tract's order of them.
        let outlets = model.output_outlets().map_err(|e| fail(format!("{e:#}")))?.to_vec();
        let declared: Vec<String> = proto
            .graph
            .as_ref()
            .map(|g| g.output.iter().map(|o| o.name.clone()).collect())
            .unwrap_or_default();
        let outputs: Vec<String> = if declared.len() == outlets.len() {
            declared
        } else {
            outlets.iter().map(|o| model.node(o.node).name.clone()).collect()
        };
        let action = ACTION_OUTPUTS
            .iter()
            .find_map(|n| outputs.iter().position(|o| o == n))
            .unwrap_or(0);
        if outputs.is_empty() {
            return Err(fail("the model has no output".into()));
        }
        let keep = model.output_outlets().map_err(|e| fail(format!("{e:#}")))?[action];
        model
            .select_output_outlets(&[keep])
            .map_err(|e| fail(format!("{e:#}")))?;
        let typed = model
            .into_optimized()
            .map_err(|e| fail(format!("tract cannot prepare it: {e:#}")))?;
        let out_fact = typed.output_fact(0).map_err(|e| fail(format!("{e:#}")))?;
        let dims: Vec<TDim> = out_fact.shape.iter().cloned().collect();
        let float = is_float(out_fact.datum_type);
        let action_size = match &dims[..] {
            [b, width] if *b == rows && float => width.to_usize().ok(),
            // One row per call: any shape of the row's values (`[29]`, `[1, 1, 29]`), as before.
            _ if !batched && float => dims.iter().map(|d| d.to_usize().ok()).product::<Option<usize>>(),
            _ => None,
        }
        .ok_or_else(|| {
            let shape: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            fail(format!(
                "output {} is {} [{}]; expected floating point [batch, actions] with a fixed number of actions",
                outputs[action],
                onnx_type_name(out_fact.datum_type),
                shape.join(", ")
            ))
        })?;
        let chunk_rows = Footprint::chunk_rows(&typed, &batch, limits).map_err(fail)?;
        let plan = typed
            .into_runnable()
            .map_err(|e| fail(format!("tract cannot plan it: {e:#}")))?;
        let engine = Engine {
            path: path.to_path_buf(),
            plan,
            obs_size,
            action_size,
            obs_input,
            time_input,
            obs_type,
            time_type,
            batched,
            chunk_rows,
            metadata,
        };
        engine.smoke_test().map_err(fail)?;
        Ok(engine)
    }

    /// Runs the model once on zeros (one row, and two when it takes a batch), so that a model
    /// that cannot run (a shape that does not hold, an index out of range, a panic inside
    /// tract) is refused when it is loaded, not found out in the middle of an evaluation.
    fn smoke_test(&self) -> Result<(), String> {
        let sizes: &[usize] = if self.batched { &[1, 2] } else { &[1] };
        for &rows in sizes {
            let obs = vec![0.0f32; rows * self.obs_size];
            let times = vec![1.0f32; rows];
            self.run_rows(&obs, &times, rows)
                .map_err(|e| format!("running it on {rows} row(s) of zeros failed: {e}"))?;
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's `metadata_props` (key → value).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    pub fn obs_size(&self) -> usize {
        self.obs_size
    }

    pub fn action_size(&self) -> usize {
        self.action_size
    }

    /// Whether the model takes the motion time step.
    pub fn takes_time_step(&self) -> bool {
        self.time_input.is_some()
    }

    /// Whether the model runs a whole batch in one call (else one row per call).
    pub fn batched(&self) -> bool {
        self.batched
    }

    /// Runs `rows` observation rows (`rows × obs_size` values, row-major) with their time steps
    /// (one per row; ignored when the model takes none): `rows × action_size` actions.
    pub fn run(&self, obs: &[f32], time_steps: &[f32], rows: usize) -> Result<Vec<f32>, EngineError> {
        let fail = |message: String| EngineError {
            path: self.path.clone(),
            problems: vec![message],
        };
        if obs.len() != rows * self.obs_size || time_steps.len() != rows {
            return Err(fail(format!(
                "{} observation values and {} time steps for {rows} rows of {}",
                obs.len(),
                time_steps.len(),
                self.obs_size
            )));
        }
        // One row per call for a fixed batch; else chunks that keep a call's results within
        // the limit its load computed.
        let chunk = if self.batched { self.chunk_rows.max(1) } else { 1 };
        if rows <= chunk {
            return self.run_rows(obs, time_steps, rows).map_err(fail);
        }
        let mut out = Vec::with_capacity(rows * self.action_size);
        for first in (0..rows).step_by(chunk) {
            let n = chunk.min(rows - first);
            let values = &obs[first * self.obs_size..(first + n) * self.obs_size];
            out.extend(self.run_rows(values, &time_steps[first..first + n], n).map_err(fail)?);
        }
        Ok(out)
    }

    /// Rows per call at most (1 for a model of a fixed batch).
    pub fn chunk_rows(&self) -> usize {
        if self.batched { self.chunk_rows } else { 1 }
    }

    fn run_rows(&self, obs: &[f32], time_steps: &[f32], rows: usize) -> Result<Vec<f32>, String> {
        let as_declared = |values: &[f32], shape: &[usize], dt: DatumType| -> Result<TValue, String> {
            let tensor = Tensor::from_shape(shape, values).map_err(|e| format!("{e:#}"))?;
            let tensor = match dt == f32::datum_type() {
                true => tensor,
                false => tensor.cast_to_dt(dt).map_err(|e| format!("{e:#}"))?.into_owned(),
            };
            Ok(tensor.into())
        };
        let obs = as_declared(obs, &[rows, self.obs_size], self.obs_type)?;
        let inputs: TVec<TValue> = match self.time_input {
            None => tvec![obs],
            Some(t) => {
                let times = as_declared(time_steps, &[rows, 1], self.time_type)?;
                if t < self.obs_input {
                    tvec![times, obs]
                } else {
                    tvec![obs, times]
                }
            }
        };
        // A panic inside tract (an index out of range on a path that does not check) is the
        // model's failure, not the process's.
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.plan.run(inputs)))
            .map_err(|panic| format!("tract panicked running the model: {}", panic_message(&*panic)))?
            .map_err(|e| format!("{e:#}"))?;
        let actions = out[0].cast_to::<f32>().map_err(|e| format!("{e:#}"))?;
        let actions: Vec<f32> = actions
            .to_plain_array_view::<f32>()
            .map_err(|e| format!("{e:#}"))?
            .iter()
            .copied()
            .collect();
        if actions.len() != rows * self.action_size {
            return Err(format!(
                "the model gave {} values for {rows} rows of {}",
                actions.len(),
                self.action_size
            ));
        }
        Ok(actions)
    }
}

/// Whether a tensor of this type holds real numbers the runner can feed or read as float32.
fn is_float(dt: DatumType) -> bool {
    [f32::datum_type(), f64::datum_type(), f16::datum_type()].contains(&dt)
}

/// ONNX's name of a tract type (an int64 tensor is tract's TDim).
fn onnx_type_name(dt: DatumType) -> String {
    match dt {
        t if t == f32::datum_type() => "float32".to_string(),
        t if t == f64::datum_type() => "float64".to_string(),
        t if t == f16::datum_type() => "float16".to_string(),
        t if t == i64::datum_type() || t == TDim::datum_type() => "int64".to_string(),
        t if t == i32::datum_type() => "int32".to_string(),
        t if t == bool::datum_type() => "bool".to_string(),
        other => format!("{other:?}"),
    }
}

/// The text a panic carried (its payload is a `&str` or a `String` when it has one).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// What a call of the optimised graph takes: the values of every node's outputs and the
/// multiply-adds tract counts, at a number of rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Footprint {
    values: u64,
    fma: u64,
}

impl Footprint {
    /// Largest batch this engine runs in one call.
    const MAX_CHUNK: i64 = 4096;

    fn at(model: &TypedModel, batch: &Symbol, rows: i64) -> Result<Footprint, String> {
        let at = SymbolValues::default().with(batch, rows);
        let size = |d: &TDim, node: &TypedNode| match d.eval_to_i64(&at) {
            Ok(v) if v >= 0 => Ok(v as u64),
            Ok(v) => Err(format!("node {}: a size of {v}", node.name)),
            // A size computed at run time (a slice by indices the model computes), like the
            // operators the checks refuse for making tensors of computed sizes.
            Err(_) => Err(format!(
                "node {}: the size of its results ({d}) is computed at run time, not given by the batch; \
                 such a model cannot be bounded",
                node.name
            )),
        };
        let mut total = Footprint { values: 0, fma: 0 };
        for node in model.nodes() {
            for output in &node.outputs {
                let mut volume: u64 = 1;
                for d in output.fact.shape.iter() {
                    volume = volume.saturating_mul(size(d, node)?);
                }
                total.values = total.values.saturating_add(volume);
            }
            let inputs = model.node_input_facts(node.id).map_err(|e| format!("{e:#}"))?;
            let costs = node.op.cost(&inputs).map_err(|e| format!("{e:#}"))?;
            for (cost, count) in costs {
                if cost.is_compute() {
                    total.fma = total.fma.saturating_add(size(&count, node)?);
                }
            }
        }
        Ok(total)
    }

    /// The most rows (up to [`Footprint::MAX_CHUNK`]) whose call keeps within
    /// `limits.max_values_per_call`, after checking that one row is within the limits at all.
    fn chunk_rows(model: &TypedModel, batch: &Symbol, limits: &Limits) -> Result<usize, String> {
        let one = Footprint::at(model, batch, 1)?;
        if one.values > limits.max_values_per_call {
            return Err(format!(
                "one row makes {} values in the model's results, more than the limit of {}",
                one.values, limits.max_values_per_call
            ));
        }
        if one.fma > limits.max_fma_per_row {
            return Err(format!(
                "one row takes {} multiply-adds, more than the limit of {}",
                one.fma, limits.max_fma_per_row
            ));
        }
        // The values grow with the rows (a model of a fixed batch does not depend on them); a
        // batch whose sizes cannot be evaluated counts as one that does not fit.
        let (mut fits, mut over) = (1i64, Footprint::MAX_CHUNK + 1);
        while over - fits > 1 {
            let mid = (fits + over) / 2;
            if Footprint::at(model, batch, mid).is_ok_and(|f| f.values <= limits.max_values_per_call) {
                fits = mid;
            } else {
                over = mid;
            }
        }
        Ok(fits as usize)
    }
}

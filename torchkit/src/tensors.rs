//! Reading safetensors files with errors that name the file and say what is wrong.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tch::Tensor;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{path}: tensor {name}: {message}")]
    Tensor {
        path: PathBuf,
        name: String,
        message: String,
    },
}

/// A [`CheckpointError::File`] for `path`.
pub fn file_err(path: &Path, message: impl std::fmt::Display) -> CheckpointError {
    CheckpointError::File {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// Reads a safetensors file; a missing one is said with `missing`, not as libtorch's debug text.
pub fn read_tensors(path: &Path, missing: &str) -> Result<HashMap<String, Tensor>, CheckpointError> {
    if !path.is_file() {
        return Err(file_err(path, missing));
    }
    Tensor::read_safetensors(path)
        .map(|tensors| tensors.into_iter().collect())
        .map_err(|e| file_err(path, format!("not a readable safetensors file ({e})")))
}

/// Writes tensors (moved to the CPU first) as safetensors.
pub fn write_tensors(path: &Path, tensors: &[(String, Tensor)]) -> Result<(), CheckpointError> {
    let cpu: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(k, t)| (k.clone(), t.detach().to_device(tch::Device::Cpu).contiguous()))
        .collect();
    Tensor::write_safetensors(&cpu, path).map_err(|e| file_err(path, e))
}

//! Command-line values the trainers share.

/// `--device`: `cpu`, or `cuda` where libtorch sees a CUDA device (a binary built against a
/// CUDA libtorch with libtorch_cuda linked: `ARENA_PPO_CUDA=1` / `ARENA_BFM_CUDA=1`).
pub fn parse_device(text: &str) -> Result<tch::Device, String> {
    match text {
        "cpu" => Ok(tch::Device::Cpu),
        "cuda" if tch::Cuda::is_available() => Ok(tch::Device::Cuda(0)),
        "cuda" => Err(
            "libtorch finds no CUDA device on this machine (a CUDA build of libtorch with \
                       libtorch_cuda linked, and a GPU, are needed)"
                .into(),
        ),
        other => Err(format!("expected cpu or cuda, got {other:?}")),
    }
}

/// `--time-limit`: a positive number of minutes, at most a year.
pub fn parse_minutes(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(m) if m.is_finite() && m > 0.0 && m <= MAX_MINUTES => Ok(m),
        _ => Err(format!(
            "expected a positive number of minutes, at most {MAX_MINUTES} (a year), got {text:?}"
        )),
    }
}

/// The longest `--time-limit`: a year, far past any run, and well inside what a `Duration`
/// holds (a limit of 1e18 minutes made one panic).
pub const MAX_MINUTES: f64 = 525_600.0;

/// Applies one `section.key=value` override (the value in TOML syntax; a bare word is taken as
/// a string) to a configuration, returning the updated one; the caller validates it.
pub fn apply_override<T: serde::Serialize + serde::de::DeserializeOwned>(
    config: &T,
    assignment: &str,
) -> Result<T, String> {
    let (key, value) = assignment
        .split_once('=')
        .ok_or_else(|| format!("override `{assignment}`: expected section.key=value"))?;
    let mut doc: toml::Table =
        toml::from_str(&toml::to_string(config).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let parsed: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .or_else(|_| toml::from_str::<toml::Table>(&format!("v = \"{value}\"")))
        .map_err(|e| format!("override `{assignment}`: {e}"))?
        .remove("v")
        .expect("v");
    let mut table = &mut doc;
    let parts: Vec<&str> = key.trim().split('.').collect();
    for part in &parts[..parts.len() - 1] {
        table = table
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| format!("override `{assignment}`: `{part}` is not a section"))?;
    }
    table.insert(parts[parts.len() - 1].to_string(), parsed);
    toml::Value::Table(doc)
        .try_into()
        .map_err(|e| format!("override `{assignment}`: {e}"))
}

/// `key: saved → wanted` for every leaf where two JSON values differ (a resumed run's
/// configuration against its checkpoint's).
pub fn json_differences(saved: &serde_json::Value, wanted: &serde_json::Value, key: &str) -> Vec<String> {
    match (saved, wanted) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            let null = serde_json::Value::Null;
            keys.into_iter()
                .flat_map(|k| {
                    json_differences(
                        a.get(k).unwrap_or(&null),
                        b.get(k).unwrap_or(&null),
                        &format!("{key}.{k}"),
                    )
                })
                .collect()
        }
        (a, b) if a != b => vec![format!("{key}: {a} in the checkpoint, {b} in the configuration")],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_and_differences() {
        assert_eq!(parse_minutes("1.5"), Ok(1.5));
        assert!(parse_minutes("0").is_err() && parse_minutes("nan").is_err() && parse_minutes("x").is_err());
        assert_eq!(parse_minutes("525600"), Ok(MAX_MINUTES));
        let too_long = parse_minutes("1e18").unwrap_err();
        assert!(too_long.contains("at most"), "{too_long}");
        // Every accepted value converts.
        assert!(std::time::Duration::try_from_secs_f64(MAX_MINUTES * 60.0).is_ok());
        let a = serde_json::json!({"ppo": {"lr": 1e-3, "epochs": 5}});
        let b = serde_json::json!({"ppo": {"lr": 3e-4, "epochs": 5}});
        assert_eq!(
            json_differences(&a, &b, "config"),
            vec!["config.ppo.lr: 0.001 in the checkpoint, 0.0003 in the configuration".to_string()]
        );
    }
}

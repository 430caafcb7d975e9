//! A training run's folder: `checkpoint/`, `train_log.csv`, `eval_log.csv`. A new checkpoint is
//! written beside the last one and takes its place by renames, so a kill at any instant leaves a
//! complete checkpoint that [`RunPaths::recover_interrupted_save`] finds.

use anyhow::Context;
use std::path::PathBuf;

/// Where a run writes.
#[derive(Debug, Clone)]
pub struct RunPaths {
    pub dir: PathBuf,
}

impl RunPaths {
    pub fn checkpoint(&self) -> PathBuf {
        self.dir.join("checkpoint")
    }
    pub fn train_log(&self) -> PathBuf {
        self.dir.join("train_log.csv")
    }
    pub fn eval_log(&self) -> PathBuf {
        self.dir.join("eval_log.csv")
    }
    /// Where a checkpoint is written before it replaces the last one.
    fn checkpoint_tmp(&self) -> PathBuf {
        self.dir.join("checkpoint.tmp")
    }
    /// Where the last checkpoint waits while the new one takes its place.
    fn checkpoint_old(&self) -> PathBuf {
        self.dir.join("checkpoint.old")
    }

    /// An empty folder to write the next checkpoint into; [`RunPaths::commit_checkpoint`]
    /// makes it the checkpoint.
    pub fn begin_checkpoint(&self) -> anyhow::Result<PathBuf> {
        let tmp = self.checkpoint_tmp();
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        Ok(tmp)
    }

    /// Replaces the checkpoint with the folder [`RunPaths::begin_checkpoint`] gave, never
    /// leaving the run without one: at every instant either `checkpoint` or (`checkpoint.old`
    /// and the complete `checkpoint.tmp`) exists.
    pub fn commit_checkpoint(&self) -> anyhow::Result<PathBuf> {
        let (dir, tmp, old) = (self.checkpoint(), self.checkpoint_tmp(), self.checkpoint_old());
        let _ = std::fs::remove_dir_all(&old);
        if dir.exists() {
            std::fs::rename(&dir, &old).with_context(|| format!("moving {} aside", dir.display()))?;
        }
        std::fs::rename(&tmp, &dir).with_context(|| format!("moving the checkpoint to {}", dir.display()))?;
        let _ = std::fs::remove_dir_all(&old);
        Ok(dir)
    }

    /// Refuses to start a new run in a folder that holds an earlier one: its checkpoint (call
    /// [`RunPaths::recover_interrupted_save`] first, so an interrupted save counts), or the logs of
    /// a run stopped before its first checkpoint, which the new run would append to.
    pub fn check_free_for_new_run(&self) -> anyhow::Result<()> {
        if self.checkpoint().exists() {
            anyhow::bail!(
                "{} already holds a run; pass --resume to continue it or choose another --out",
                self.dir.display()
            );
        }
        if let Some(log) = [self.train_log(), self.eval_log()].into_iter().find(|p| p.exists()) {
            anyhow::bail!(
                "{} holds {} of an earlier run that stopped before its first checkpoint; \
                 remove it (or choose another --out) to start a new run there",
                self.dir.display(),
                log.file_name().and_then(|n| n.to_str()).unwrap_or("a log")
            );
        }
        Ok(())
    }

    /// Finishes a checkpoint replacement that a kill interrupted: with `checkpoint.old` present,
    /// `checkpoint.tmp` is complete, so it becomes the checkpoint. Returns what it did, for the log.
    pub fn recover_interrupted_save(&self) -> anyhow::Result<Option<String>> {
        let (ckpt, tmp, old) = (self.checkpoint(), self.checkpoint_tmp(), self.checkpoint_old());
        if !old.exists() {
            return Ok(None);
        }
        let what = if !ckpt.exists() && tmp.exists() {
            std::fs::rename(&tmp, &ckpt).with_context(|| format!("moving {} to {}", tmp.display(), ckpt.display()))?;
            format!(
                "finished replacing the checkpoint that a stop interrupted ({})",
                ckpt.display()
            )
        } else {
            format!(
                "removed the previous checkpoint left by an interrupted save ({})",
                old.display()
            )
        };
        std::fs::remove_dir_all(&old).with_context(|| format!("removing {}", old.display()))?;
        Ok(Some(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_keeps_a_checkpoint_and_an_interrupted_one_is_finished() {
        let root = tempfile::tempdir().unwrap();
        let paths = RunPaths {
            dir: root.path().to_path_buf(),
        };
        for round in 0..2 {
            let tmp = paths.begin_checkpoint().unwrap();
            std::fs::write(tmp.join("n"), format!("{round}")).unwrap();
            paths.commit_checkpoint().unwrap();
            assert_eq!(
                std::fs::read_to_string(paths.checkpoint().join("n")).unwrap(),
                format!("{round}")
            );
        }
        // A kill between the two renames: the old one aside, the new one complete.
        let tmp = paths.begin_checkpoint().unwrap();
        std::fs::write(tmp.join("n"), "2").unwrap();
        std::fs::rename(paths.checkpoint(), paths.checkpoint_old()).unwrap();
        let what = paths.recover_interrupted_save().unwrap().unwrap();
        assert!(what.contains("finished replacing"), "{what}");
        assert_eq!(std::fs::read_to_string(paths.checkpoint().join("n")).unwrap(), "2");
        assert_eq!(paths.recover_interrupted_save().unwrap(), None);
    }
}

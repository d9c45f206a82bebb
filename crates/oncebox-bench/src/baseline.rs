//! The raw baselines oncebox is compared with: the least journal + outbox Postgres needs, as
//! pgbench scripts (`baseline/*.sql` beside this crate, embedded in the binary). `setup.sql`
//! makes the reference tables, `intake.sql` is one intent per transaction, `fill.sql` a backlog,
//! `cycle.sql` a claim of 100 with a lease and its batched completion.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The reference tables.
pub(crate) const SETUP: &str = include_str!("../baseline/setup.sql");
/// One intent per transaction: journal row + outbox row.
pub(crate) const INTAKE: &str = include_str!("../baseline/intake.sql");
/// A backlog for the delivery cycle (`-v rows=N`).
pub(crate) const FILL: &str = include_str!("../baseline/fill.sql");
/// Claim 100 with a lease and epoch, then complete them.
pub(crate) const CYCLE: &str = include_str!("../baseline/cycle.sql");

/// The baseline scripts as files pgbench and psql can read: the embedded copies written to a
/// temporary directory, or the directory `--baseline-dir` names.
pub(crate) struct Scripts {
    dir: PathBuf,
    _temp: Option<TempDir>,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::debug!(error = %e, dir = %self.0.display(), "could not remove the baseline scripts");
        }
    }
}

impl Scripts {
    /// The scripts in `dir`, or the embedded ones when `dir` is `None`.
    pub(crate) fn new(dir: Option<&Path>) -> anyhow::Result<Scripts> {
        if let Some(dir) = dir {
            return Ok(Scripts {
                dir: dir.to_owned(),
                _temp: None,
            });
        }
        let dir = std::env::temp_dir().join(format!("oncebox-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).context("cannot create a directory for the scripts")?;
        for (name, text) in [
            ("setup.sql", SETUP),
            ("intake.sql", INTAKE),
            ("fill.sql", FILL),
            ("cycle.sql", CYCLE),
        ] {
            std::fs::write(dir.join(name), text).with_context(|| format!("cannot write {name}"))?;
        }
        Ok(Scripts {
            dir: dir.clone(),
            _temp: Some(TempDir(dir)),
        })
    }

    /// The path of script `name` when it exists.
    pub(crate) fn get(&self, name: &str) -> Option<PathBuf> {
        let p = self.dir.join(name);
        p.exists().then_some(p)
    }

    /// Where the scripts are, for messages.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Whether pgbench can be run.
pub(crate) fn pgbench_available() -> bool {
    std::process::Command::new("pgbench")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

//! The demo's worker processes: this very binary, run as `oncebox worker`. Each child is killed
//! when the pool is dropped, so no exit path of the demo leaves a worker behind.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::Context;
use tokio::process::{Child, Command};

/// Worker processes of the demo's pool.
pub(super) const WORKERS: usize = 3;

/// The running workers.
pub(super) struct WorkerPool {
    children: Vec<Child>,
    config: PathBuf,
    url: String,
    spawned: usize,
}

impl WorkerPool {
    /// A pool of workers for the database at `url`, configured by the file `config`.
    pub(super) fn new(config: PathBuf, url: String) -> WorkerPool {
        WorkerPool {
            children: Vec::new(),
            config,
            url,
            spawned: 0,
        }
    }

    /// Starts one more worker.
    pub(super) fn spawn(&mut self) -> anyhow::Result<()> {
        let exe = std::env::current_exe().context("cannot find the oncebox binary")?;
        let id = format!("demo-worker-{}", self.spawned);
        let child = Command::new(exe)
            .args(["worker", "--config"])
            .arg(&self.config)
            .args(["--id", &id, "--lease", "3s", "--poll-interval", "100ms"])
            .args(["--grace", "2s", "--concurrency", "32"])
            .env("DATABASE_URL", &self.url)
            .env_remove("ONCEBOX_CRASH_AT")
            // Dead letters are not published in the demo (none are expected): keep its output clean.
            .env_remove("AMQP_URL")
            .env("ONCEBOX_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start a worker process")?;
        self.spawned += 1;
        self.children.push(child);
        Ok(())
    }

    /// SIGKILL: the worker gets no chance to finish or release anything.
    pub(super) async fn kill_one(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.children.pop() {
            child.kill().await.context("cannot kill a worker")?;
        }
        Ok(())
    }

    /// SIGTERM to every worker, then waits for them to exit.
    pub(super) async fn stop_all(&mut self) -> anyhow::Result<()> {
        for child in &self.children {
            if let Some(pid) = child.id() {
                let sent = Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status()
                    .await
                    .context("cannot run kill")?;
                anyhow::ensure!(sent.success(), "kill -TERM {pid} failed");
            }
        }
        for mut child in self.children.drain(..) {
            child.wait().await.context("cannot reap a worker")?;
        }
        Ok(())
    }
}

//! Child processes of a test: killed when their guard is dropped, waited for with a deadline.

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How long a test waits for a child to exit before it fails.
pub(crate) const EXIT_DEADLINE: Duration = Duration::from_secs(60);

/// A running child process, killed (SIGKILL) and reaped when dropped.
pub(crate) struct Proc {
    child: Child,
    what: String,
    exited: Option<ExitStatus>,
}

impl Proc {
    /// Spawns `cmd`; `what` names it in failures.
    pub(crate) fn spawn(cmd: &mut Command, what: impl Into<String>) -> Proc {
        let what = what.into();
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Proc {
            child,
            what,
            exited: None,
        }
    }

    /// The process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the process to exit, without blocking the runtime; fails the test after
    /// [`EXIT_DEADLINE`].
    pub(crate) async fn exited(&mut self) -> ExitStatus {
        self.exited_within(EXIT_DEADLINE).await
    }

    /// As [`Proc::exited`], with another deadline.
    pub(crate) async fn exited_within(&mut self, limit: Duration) -> ExitStatus {
        if let Some(status) = self.exited {
            return status;
        }
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.exited = Some(status);
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "{} did not exit within {limit:?}",
                self.what
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, then waits for the exit.
    pub(crate) async fn stop(mut self) -> ExitStatus {
        self.signal("-TERM");
        self.exited().await
    }

    /// SIGKILL, then waits for the exit.
    pub(crate) async fn kill(&mut self) -> ExitStatus {
        self.child.kill().expect("SIGKILL");
        self.exited().await
    }

    /// Sends a signal by name (`-TERM`, `-INT`).
    pub(crate) fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill {signal} {}", self.what);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

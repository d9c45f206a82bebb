//! The run/stop shape every part of a worker has, and the supervisor that runs them.
//!
//! A worker is a handful of services — claimer, reconciler, dead-letter notifier, asker,
//! completer, lease renewer, gauges — each in its own module. Each runs until its stop token is
//! cancelled and has finished what it must, then returns. The supervisor stops them in stages,
//! so that nothing is cut off mid-way: first the services that produce work (claimer,
//! reconciler, notifier, asker: on the worker's own cancellation), then the completer (once no
//! outcome can arrive), then the background ones (renewer, gauges). A service that panics, or returns while it should
//! still be running, is logged with its name and stops the whole worker with an error, so that
//! whatever runs the process restarts it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::context::Context;

/// One long-running part of a worker.
pub(crate) trait Service: Send + 'static {
    /// The name in logs, errors and metrics.
    const NAME: &'static str;

    /// Runs until `stop` is cancelled and what was started is finished; every wait selects on
    /// `stop`.
    fn run(self, ctx: Arc<Context>, stop: CancellationToken) -> impl Future<Output = ()> + Send;
}

/// When a service is told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Stage {
    /// Produces work: stops when the worker is cancelled.
    Front,
    /// Records what the front produced: stops once every front service has ended.
    Drain,
    /// Keeps the rest alive (leases, gauges): stops last.
    Background,
}

const STAGES: [Stage; 3] = [Stage::Front, Stage::Drain, Stage::Background];

/// A service that failed: panicked, or ended while it should have been running.
#[derive(Debug, thiserror::Error)]
#[error("the {service} service {what}")]
pub struct ServiceFailed {
    /// The service's name.
    pub service: &'static str,
    /// What happened.
    pub what: String,
}

/// Runs a worker's services and stops them in stages.
pub(crate) struct Supervisor {
    ctx: Arc<Context>,
    cancel: CancellationToken,
    tokens: HashMap<Stage, CancellationToken>,
    tasks: JoinSet<()>,
    running: HashMap<Id, (&'static str, Stage)>,
}

impl Supervisor {
    /// A supervisor whose front stage stops when `cancel` is cancelled.
    pub(crate) fn new(ctx: Arc<Context>, cancel: CancellationToken) -> Supervisor {
        let tokens = STAGES
            .into_iter()
            .map(|s| {
                let token = match s {
                    Stage::Front => cancel.clone(),
                    _ => CancellationToken::new(),
                };
                (s, token)
            })
            .collect();
        Supervisor {
            ctx,
            cancel,
            tokens,
            tasks: JoinSet::new(),
            running: HashMap::new(),
        }
    }

    /// Starts `service` in `stage`.
    pub(crate) fn spawn<S: Service>(&mut self, stage: Stage, service: S) {
        let stop = self.tokens[&stage].clone();
        let handle = self.tasks.spawn(service.run(self.ctx.clone(), stop));
        self.running.insert(handle.id(), (S::NAME, stage));
    }

    /// Waits for every service, stopping the stages in order as the previous one ends. Returns
    /// the first failure, after the others have stopped as they would on a cancellation.
    pub(crate) async fn wait(mut self) -> Result<(), ServiceFailed> {
        let mut failed: Option<ServiceFailed> = None;
        self.advance();
        while let Some(joined) = self.tasks.join_next_with_id().await {
            let (id, outcome) = match joined {
                Ok((id, ())) => (id, None),
                Err(e) => (e.id(), Some(panic_text(e))),
            };
            let Some((name, _stage)) = self.running.remove(&id) else {
                continue;
            };
            // Before the worker is cancelled, no service may end. After it, the drain and
            // background stages end when their input is gone or their token fires.
            let early = !self.cancel.is_cancelled();
            let what = match outcome {
                Some(panic) => Some(format!("panicked: {panic}")),
                None if early => Some("ended while the worker was running".to_owned()),
                None => None,
            };
            if let Some(what) = what {
                tracing::error!(service = name, %what, "a worker service failed: stopping the worker");
                failed.get_or_insert(ServiceFailed {
                    service: name,
                    what,
                });
                self.cancel.cancel();
            } else {
                tracing::debug!(service = name, "service stopped");
            }
            self.advance();
        }
        failed.map_or(Ok(()), Err)
    }

    /// Cancels each stage whose predecessors have all ended (once the worker is cancelled).
    fn advance(&self) {
        if !self.cancel.is_cancelled() {
            return;
        }
        for pair in STAGES.windows(2) {
            let (before, next) = (pair[0], pair[1]);
            let before_done = !self.running.values().any(|(_, s)| *s == before);
            if before_done && self.tokens[&before].is_cancelled() {
                self.tokens[&next].cancel();
            }
        }
    }
}

fn panic_text(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return "was cancelled".to_owned();
    }
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

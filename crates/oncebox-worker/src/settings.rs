//! How a worker runs: every setting and its default, in one place that the library and the
//! command line (`oncebox worker --help`) both read.

use std::num::NonZeroUsize;
use std::time::Duration;

use oncebox_core::duration::NonZeroDuration;

/// How a worker runs. [`WorkerSettings::default`] holds the defaults `oncebox worker` shows.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// This worker's name: the lease owner, in logs and the retry report.
    pub id: String,
    /// Deliveries in flight at once.
    pub concurrency: NonZeroUsize,
    /// Rows per claim, at most.
    pub batch: NonZeroUsize,
    /// Lease length; must exceed every destination's timeout by [`LEASE_MARGIN`].
    pub lease: NonZeroDuration,
    /// Poll for work this often when no notification arrives.
    pub poll_interval: NonZeroDuration,
    /// On shutdown, wait this long for in-flight deliveries before releasing them.
    pub grace: Duration,
    /// Completions recorded per statement, at most.
    pub record_batch: NonZeroUsize,
    /// While work arrives faster than [`WorkerSettings::notify_below`], look again this soon
    /// after an empty claim (no NOTIFY needed).
    pub busy_poll: NonZeroDuration,
    /// While the pool's new work arrives slower than this many rows per second, the worker
    /// stays registered as waiting, so that every submit wakes it with NOTIFY (about half a
    /// millisecond from commit to receiver); at or above it the worker deregisters and polls
    /// every [`WorkerSettings::busy_poll`], so that a busy pool costs submits nothing (a
    /// notifying commit takes a cluster-wide lock). The pool's rate is the notifications heard
    /// (every waiting worker hears every notifying submit) or this worker's claim rate times
    /// the delivering workers. It registers again once the rate falls below half of this, or
    /// after a second without work (with 0, only then).
    pub notify_below: u32,
    /// RabbitMQ URL for dead letters; without it they wait in the outbox.
    pub amqp_url: Option<String>,
    /// The dead-letter exchange; queues are `<exchange>.<reason>`.
    pub dead_letter_exchange: String,
    /// Claim deliveries (default); false runs only reconciliation and dead letters.
    pub deliver: bool,
    /// Where people open the console (`https://ops.example.com`): approval requests link to
    /// the intent's page there. Without it they give only the page's path.
    pub console_url: Option<String>,
}

/// How much longer than the longest destination timeout a lease must be: the time to record an
/// outcome after the call returns.
pub const LEASE_MARGIN: Duration = Duration::from_secs(2);

/// Reconcile rows claimed at once.
pub(crate) const RECONCILE_BATCH: i64 = 32;

/// Dead-letter rows claimed (and published) at once.
pub(crate) const NOTIFY_BATCH: i64 = 50;

/// Approval requests claimed (and sent) at once.
pub(crate) const ASK_BATCH: i64 = 20;

const fn nonzero(n: usize) -> NonZeroUsize {
    match NonZeroUsize::new(n) {
        Some(n) => n,
        None => NonZeroUsize::MIN,
    }
}

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings {
            id: "worker".into(),
            concurrency: nonzero(64),
            batch: nonzero(100),
            lease: NonZeroDuration::from_secs(30),
            poll_interval: NonZeroDuration::from_millis(500),
            grace: Duration::from_secs(10),
            record_batch: nonzero(256),
            busy_poll: NonZeroDuration::from_millis(2),
            notify_below: 500,
            amqp_url: None,
            dead_letter_exchange: "oncebox.dead-letter".into(),
            deliver: true,
            console_url: None,
        }
    }
}

impl WorkerSettings {
    /// The lease, as a plain duration.
    pub fn lease(&self) -> Duration {
        self.lease.get()
    }

    /// The poll interval, as a plain duration.
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval.get()
    }

    /// Checks the settings against the destinations' longest timeout.
    ///
    /// # Errors
    /// A message naming the lease when it does not exceed `longest_timeout` by [`LEASE_MARGIN`].
    pub fn check(&self, longest_timeout: Duration) -> Result<(), String> {
        if self.lease() < longest_timeout + LEASE_MARGIN {
            return Err(format!(
                "the lease ({}) must exceed the longest destination timeout ({:?}) by at least {:?}",
                self.lease, longest_timeout, LEASE_MARGIN
            ));
        }
        Ok(())
    }
}

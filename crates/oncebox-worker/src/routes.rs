//! Which destination (and policy) serves each action.

use std::collections::HashMap;
use std::sync::Arc;

use oncebox_core::RetryPolicy;
use oncebox_core::config::{Config, IdempotencyMode};
use oncebox_delivery::{HttpDestination, HttpLookup};
use tokio::sync::Semaphore;

/// How one action is delivered.
#[derive(Debug)]
pub struct Route {
    /// The destination's adapter.
    pub destination: HttpDestination,
    /// Its retry policy.
    pub policy: RetryPolicy,
    /// How it treats repeated keys.
    pub mode: IdempotencyMode,
    /// Its per-worker in-flight limit, if configured.
    pub limit: Option<Arc<Semaphore>>,
    /// Its reconciliation lookup, if configured.
    pub lookup: Option<HttpLookup>,
    /// How long after dispatch a lookup that finds nothing may lag behind.
    pub consistency_window: std::time::Duration,
}

/// Action name → route, built once at start-up.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    by_action: HashMap<String, Arc<Route>>,
}

/// A route that cannot be built.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct RouteError(#[from] oncebox_delivery::BuildError);

impl Routes {
    /// Builds a route for every configured action (header secrets must be resolved).
    ///
    /// # Errors
    /// [`RouteError`] naming the destination field at fault.
    pub fn from_config(config: &Config) -> Result<Routes, RouteError> {
        let mut by_dest: HashMap<&str, Arc<Route>> = HashMap::new();
        for (name, dest) in &config.destinations {
            by_dest.insert(
                name,
                Arc::new(Route {
                    destination: HttpDestination::new(name, dest)?,
                    policy: dest.retry.policy(),
                    mode: dest.idempotency,
                    limit: dest.max_in_flight.map(|n| Arc::new(Semaphore::new(n))),
                    lookup: dest.lookup.as_ref().map(HttpLookup::new),
                    consistency_window: dest.consistency_window,
                }),
            );
        }
        let by_action = config
            .actions
            .iter()
            .filter_map(|(action, a)| {
                by_dest
                    .get(a.destination.as_str())
                    .map(|r| (action.clone(), r.clone()))
            })
            .collect();
        Ok(Routes { by_action })
    }

    /// The route of `action`; `None` for an action no longer configured.
    pub fn get(&self, action: &str) -> Option<&Arc<Route>> {
        self.by_action.get(action)
    }

    /// The longest request timeout of any destination.
    pub fn longest_timeout(&self) -> std::time::Duration {
        self.by_action
            .values()
            .map(|r| r.destination.timeout())
            .max()
            .unwrap_or_default()
    }
}

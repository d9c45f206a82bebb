//! Which destination (and policy) serves each action.

use std::collections::HashMap;
use std::sync::Arc;

use oncebox_core::RetryPolicy;
use oncebox_core::config::{Config, Destination, IdempotencyMode};
use oncebox_delivery::{
    AmqpDestination, DeliveryRequest, HttpDestination, HttpLookup, McpDestination,
};
use tokio::sync::Semaphore;

/// A destination's transport adapter.
#[derive(Debug)]
pub enum Adapter {
    /// HTTP.
    Http(HttpDestination),
    /// RabbitMQ.
    Amqp(AmqpDestination),
    /// A tool on an MCP server.
    Mcp(McpDestination),
}

impl Adapter {
    /// The destination's name.
    pub fn name(&self) -> &str {
        match self {
            Adapter::Http(h) => h.name(),
            Adapter::Amqp(a) => a.name(),
            Adapter::Mcp(m) => m.name(),
        }
    }

    /// The request (or confirm) timeout.
    pub fn timeout(&self) -> std::time::Duration {
        match self {
            Adapter::Http(h) => h.timeout(),
            Adapter::Amqp(a) => a.timeout(),
            Adapter::Mcp(m) => m.timeout(),
        }
    }

    /// Delivers one attempt within `budget`.
    pub async fn deliver(
        &self,
        req: &DeliveryRequest<'_>,
        budget: std::time::Duration,
    ) -> oncebox_core::DeliveryOutcome {
        match self {
            Adapter::Http(h) => h.deliver(req, budget).await,
            Adapter::Amqp(a) => a.deliver(req, budget).await,
            Adapter::Mcp(m) => m.deliver(req, budget).await,
        }
    }
}

/// How one action is delivered.
#[derive(Debug)]
pub struct Route {
    /// The destination's adapter.
    pub destination: Adapter,
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
    /// Its circuit breaker, if configured.
    pub breaker: Option<oncebox_core::config::BreakerSettings>,
    /// Its pool-wide request rate, if configured.
    pub rate_limit: Option<oncebox_core::config::RateLimitSettings>,
}

/// Action name → route, built once at start-up.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    by_action: HashMap<String, Arc<Route>>,
    /// Action → the destination its approval policy notifies (`approval.notify`).
    asks: HashMap<String, Arc<Route>>,
}

/// A route that cannot be built.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct RouteError(#[from] oncebox_delivery::BuildError);

impl Routes {
    /// Builds a route for every configured action (header secrets must be resolved); AMQP
    /// destinations without `amqp_url` use `default_amqp_url` (the `AMQP_URL` environment).
    ///
    /// # Errors
    /// [`RouteError`] naming the destination field at fault.
    pub fn from_config(
        config: &Config,
        default_amqp_url: Option<&str>,
    ) -> Result<Routes, RouteError> {
        let mut by_dest: HashMap<&str, Arc<Route>> = HashMap::new();
        for (name, dest) in &config.destinations {
            let shared = dest.shared();
            by_dest.insert(
                name,
                Arc::new(Route {
                    destination: match dest {
                        Destination::Http(h) => Adapter::Http(HttpDestination::new(name, h)?),
                        Destination::Amqp(a) => {
                            Adapter::Amqp(AmqpDestination::new(name, a, default_amqp_url)?)
                        }
                        Destination::Mcp(m) => Adapter::Mcp(McpDestination::new(name, m)?),
                    },
                    policy: shared.retry.policy(),
                    mode: shared.idempotency,
                    limit: shared
                        .max_in_flight
                        .map(|n| Arc::new(Semaphore::new(n.get()))),
                    lookup: match dest {
                        Destination::Http(h) => HttpLookup::for_destination(name, h)?,
                        Destination::Amqp(_) => None,
                        Destination::Mcp(m) => {
                            HttpLookup::configured(name, m.lookup.as_ref(), &m.headers)?
                        }
                    },
                    consistency_window: shared.consistency_window,
                    breaker: shared.breaker.cloned(),
                    rate_limit: shared.rate_limit.cloned(),
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
        let asks = config
            .actions
            .iter()
            .filter_map(|(action, a)| {
                let notify = a.approval.as_ref()?.notify.as_deref()?;
                by_dest.get(notify).map(|r| (action.clone(), r.clone()))
            })
            .collect();
        Ok(Routes { by_action, asks })
    }

    /// The destination `action`'s approval policy tells of each intent that waits; `None`
    /// when it names none.
    pub fn ask(&self, action: &str) -> Option<&Arc<Route>> {
        self.asks.get(action)
    }

    /// The route of `action`; `None` for an action no longer configured.
    pub fn get(&self, action: &str) -> Option<&Arc<Route>> {
        self.by_action.get(action)
    }

    /// Refuses a `lookup` destination whose consistency window cannot cover a request still on
    /// its way under a worker's `lease`: a request may reach the receiver as late as the lease
    /// plus the destination's timeout after its dispatch, and a lookup that finds nothing
    /// before then is no proof that nothing will be done — re-issuing it would make a second
    /// effect.
    ///
    /// # Errors
    /// The field (`destinations.X.consistency_window`) and the values: the window, the lease,
    /// the timeout.
    pub fn check_windows(&self, lease: std::time::Duration) -> Result<(), String> {
        let mut lookups: Vec<&Arc<Route>> = self
            .by_action
            .values()
            .filter(|r| r.mode == IdempotencyMode::Lookup)
            .collect();
        lookups.sort_by(|a, b| a.destination.name().cmp(b.destination.name()));
        for r in lookups {
            let timeout = r.destination.timeout();
            if r.consistency_window < lease + timeout {
                let human = oncebox_core::duration::format_duration;
                return Err(format!(
                    "destinations.{}.consistency_window ({}) must cover a request still on its \
                     way: at least the worker's lease ({}) plus the destination's timeout ({}), \
                     {}; raise the window or shorten the lease",
                    r.destination.name(),
                    human(r.consistency_window),
                    human(lease),
                    human(timeout),
                    human(lease + timeout),
                ));
            }
        }
        Ok(())
    }

    /// The longest request timeout of any destination.
    pub fn longest_timeout(&self) -> std::time::Duration {
        self.by_action
            .values()
            .chain(self.asks.values())
            .map(|r| r.destination.timeout())
            .max()
            .unwrap_or_default()
    }
}

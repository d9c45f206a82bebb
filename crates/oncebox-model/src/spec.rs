//! What is checked: the variants of the protocol, the intents and the bounds of a run.

use oncebox_core::config::IdempotencyMode;

/// Which version of the protocol is checked: the real one, or one with a mechanism removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The protocol as the code runs it.
    Correct,
    /// A record or a mark is applied whatever the lease's epoch: no fencing.
    NoFence,
    /// Rows for destinations that do not honour keys are sent without the dispatch mark.
    NoDispatchMark,
    /// An unknown outcome at a lookup destination is re-sent (as if it honoured keys) instead of
    /// being looked up.
    ResendWithoutLookup,
    /// The intent after an ordering lane's head may be claimed while the head is unreleased.
    SecondLaneHead,
    /// A lookup that finds nothing always looks again, even past the consistency window: an
    /// intent whose request was lost is never re-issued.
    NeverReissue,
    /// An intent awaiting approval is released one approval short of what its policy asks.
    OneApproverShort,
    /// Requests carry the bare idempotency key, without the tenant: two tenants' intents
    /// under one key look like one intent to the destination.
    BareKey,
}

/// The idempotency key an intent is submitted under, within its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyName {
    /// A key no other intent of the model has (intent `i`'s own).
    Own(usize),
    /// Key number `n`, which intents of other tenants may use too.
    Named(u8),
}

/// What a request carries as its intent's identity: the delivery key, its tenant and key
/// (the tenant left out by [`Variant::BareKey`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SentKey {
    /// The intent's tenant, when the key carries it.
    pub tenant: Option<u8>,
    /// The intent's key within its tenant.
    pub key: KeyName,
}

/// One intent of the model: its destination's idempotency mode, its ordering lane and whether
/// it has a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntentSpec {
    /// How its destination handles a repeated request.
    pub mode: IdempotencyMode,
    /// The ordering lane it was submitted to; intents of one lane are in submit order.
    pub lane: Option<u8>,
    /// Whether it has a deadline (which may pass at any moment before it is settled).
    pub deadline: bool,
    /// How many distinct people its action's approval policy asks to approve it (0: none).
    pub approvals: u8,
    /// Its tenant.
    pub tenant: u8,
    /// Its key within the tenant, when it is one other tenants use too (else its own).
    pub key: Option<u8>,
}

impl IntentSpec {
    /// An intent outside any lane, without a deadline.
    pub const fn alone(mode: IdempotencyMode) -> IntentSpec {
        IntentSpec {
            mode,
            lane: None,
            deadline: false,
            approvals: 0,
            tenant: 0,
            key: None,
        }
    }

    /// An intent of lane `lane`, without a deadline.
    pub const fn in_lane(mode: IdempotencyMode, lane: u8) -> IntentSpec {
        IntentSpec {
            mode,
            lane: Some(lane),
            deadline: false,
            approvals: 0,
            tenant: 0,
            key: None,
        }
    }

    /// The same intent with a deadline.
    pub const fn with_deadline(self) -> IntentSpec {
        IntentSpec {
            deadline: true,
            ..self
        }
    }

    /// The same intent, held for `approvals` distinct people to approve it.
    pub const fn needing(self, approvals: u8) -> IntentSpec {
        IntentSpec { approvals, ..self }
    }

    /// The same intent, submitted by `tenant` under key number `key` (which other tenants'
    /// intents may use too).
    pub const fn keyed(self, tenant: u8, key: u8) -> IntentSpec {
        IntentSpec {
            tenant,
            key: Some(key),
            ..self
        }
    }
}

/// The model's bounds and its variant.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// Worker processes.
    pub workers: u8,
    /// The intents, in submit order.
    pub intents: Vec<IntentSpec>,
    /// Worker crashes allowed in a run.
    pub crashes: u8,
    /// Requests or answers the network may lose in a run.
    pub losses: u8,
    /// Leases that may expire while their holder is alive and slow (a dead holder's lease
    /// always expires in the end: that is time passing, not a fault).
    pub expiries: u8,
    /// Attempts each intent's retry policy allows.
    pub max_attempts: u32,
    /// Lookups that may find nothing and look again, in a run (inside a consistency window;
    /// the bound keeps the run finite).
    pub early_looks: u8,
    /// Operator decisions (retry, resolve, cancel) in a run.
    pub decisions: u8,
    /// The protocol checked.
    pub variant: Variant,
}

impl Protocol {
    /// The first bounds the test command checks: two workers, two intents in one lane to a
    /// destination that honours keys and one alone to a lookup destination; two crashes (a dead
    /// worker's lease expires), one lost message, one early lookup, two attempts each.
    pub fn small(variant: Variant) -> Protocol {
        Protocol {
            workers: 2,
            intents: vec![
                IntentSpec::in_lane(IdempotencyMode::Key, 0),
                IntentSpec::in_lane(IdempotencyMode::Key, 0),
                IntentSpec::alone(IdempotencyMode::Lookup),
            ],
            crashes: 2,
            losses: 1,
            expiries: 0,
            max_attempts: 2,
            early_looks: 1,
            decisions: 0,
            variant,
        }
    }

    /// A slow worker: two intents alone (one to a destination that honours keys, with a
    /// deadline; one to a destination that does neither), a live worker's lease expiring under
    /// it, two crashes and one lost message.
    pub fn slow_workers(variant: Variant) -> Protocol {
        Protocol {
            intents: vec![
                IntentSpec::alone(IdempotencyMode::Key).with_deadline(),
                IntentSpec::alone(IdempotencyMode::None),
            ],
            expiries: 1,
            ..Protocol::small(variant)
        }
    }

    /// Reconciliation under faults: one intent to a lookup destination, with three crashes, two
    /// lost messages, three live workers' leases expiring and two early lookups.
    pub fn lookups(variant: Variant) -> Protocol {
        Protocol {
            intents: vec![IntentSpec::alone(IdempotencyMode::Lookup)],
            crashes: 3,
            losses: 2,
            expiries: 3,
            early_looks: 2,
            ..Protocol::small(variant)
        }
    }

    /// An operator deciding once (retry, resolve or cancel, whichever the tables allow at any
    /// moment), over two intents alone (honours keys; neither), with one crash, one lost message
    /// and one live worker's lease expiring: operator decisions restart an intent's attempts,
    /// which multiplies the states. (A person resolving a lane's head while a stalled worker's
    /// request is still on its way can put the lane's effects out of order: the operations
    /// guide says so, and this model leaves lanes out.)
    pub fn with_operator(variant: Variant) -> Protocol {
        Protocol {
            intents: vec![
                IntentSpec::alone(IdempotencyMode::Key),
                IntentSpec::alone(IdempotencyMode::None),
            ],
            crashes: 1,
            losses: 1,
            expiries: 1,
            decisions: 1,
            ..Protocol::small(variant)
        }
    }

    /// People approving, rejecting, or leaving intents to expire, racing two workers: an intent
    /// alone needing two approvals (to a destination that does neither, so a second request
    /// would show), a lane's head needing one and the intent behind it; one crash and one lost
    /// message.
    pub fn with_approvals(variant: Variant) -> Protocol {
        Protocol {
            workers: 2,
            intents: vec![
                IntentSpec::alone(IdempotencyMode::None).needing(2),
                IntentSpec::in_lane(IdempotencyMode::Key, 0).needing(1),
                IntentSpec::in_lane(IdempotencyMode::Key, 0),
            ],
            crashes: 1,
            losses: 1,
            early_looks: 0,
            ..Protocol::small(variant)
        }
    }

    /// Two tenants submitting one key to one destination that honours keys, with two crashes
    /// and one lost message.
    pub fn tenants(variant: Variant) -> Protocol {
        Protocol {
            intents: vec![
                IntentSpec::alone(IdempotencyMode::Key).keyed(0, 0),
                IntentSpec::alone(IdempotencyMode::Key).keyed(1, 0),
            ],
            ..Protocol::small(variant)
        }
    }

    /// Two tenants submitting one key to one lookup destination, with two crashes, one lost
    /// message and one early lookup: a lookup by the key must find only its own tenant's effect.
    pub fn tenant_lookups(variant: Variant) -> Protocol {
        Protocol {
            intents: vec![
                IntentSpec::alone(IdempotencyMode::Lookup).keyed(0, 0),
                IntentSpec::alone(IdempotencyMode::Lookup).keyed(1, 0),
            ],
            ..Protocol::small(variant)
        }
    }

    /// Deeper bounds, for `scripts/model-check.sh --deep`: the lane and the lookup intent of
    /// [`Protocol::small`] with a deadline on the lane's head and a live worker's lease expiring.
    pub fn deep(variant: Variant) -> Protocol {
        let mut deep = Protocol {
            expiries: 1,
            ..Protocol::small(variant)
        };
        deep.intents[0] = deep.intents[0].with_deadline();
        deep
    }

    /// The models the test command checks, or with `ONCEBOX_MODEL_BOUNDS=deep` the deep one.
    ///
    /// # Errors
    /// Any other value of `ONCEBOX_MODEL_BOUNDS`, named: a misspelt request for the deep bounds
    /// must not quietly check the small ones.
    pub fn from_env(variant: Variant) -> Result<Vec<Protocol>, String> {
        Protocol::bounds(
            std::env::var("ONCEBOX_MODEL_BOUNDS").ok().as_deref(),
            variant,
        )
    }

    /// The models the bounds named `bounds` check: `None` or `""` the test command's, `deep`
    /// the deep one.
    ///
    /// # Errors
    /// Any other name, with the names there are.
    pub fn bounds(bounds: Option<&str>, variant: Variant) -> Result<Vec<Protocol>, String> {
        match bounds {
            Some("deep") => Ok(vec![Protocol::deep(variant)]),
            None | Some("") => Ok(vec![
                Protocol::small(variant),
                Protocol::slow_workers(variant),
                Protocol::lookups(variant),
            ]),
            Some(other) => Err(format!(
                "ONCEBOX_MODEL_BOUNDS={other:?} names no bounds: use \"deep\", or leave it unset \
                 for the test command's"
            )),
        }
    }
}

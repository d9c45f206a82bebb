//! The delivery workers end to end: real `oncebox worker` processes, a real receiver, the real
//! Postgres and RabbitMQ; crashes are real SIGKILLs or aborts at named points. Effects are
//! counted at the receiver. One file per subject; `env` and `broker` hold what they share.

#[path = "../support/mod.rs"]
mod support;

mod amqp;
mod approvals;
mod breaker;
mod broker;
mod crashes;
mod dead_letters;
mod deferral;
mod delivery;
mod disable;
mod env;
mod fairness;
mod ops;
mod ordering;
mod probes;
mod rate;
mod reconciliation;
mod scaling;
mod secrets;
mod tenants;

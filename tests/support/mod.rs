//! The test kit shared by every end-to-end test binary: a database of the test's own, free
//! ports, child processes, the pinned Python tools. Each guard cleans up when dropped — the
//! database is dropped and the processes are killed — so a failing test leaves nothing behind,
//! and every wait has a deadline, so a hung process fails its test instead of hanging the suite.
// Each test binary uses a subset of the kit.
#![allow(dead_code, unused_imports)]

pub(crate) mod db;
pub(crate) mod heavy;
pub(crate) mod net;
pub(crate) mod output;
pub(crate) mod process;
pub(crate) mod tools;

pub(crate) use db::{TestDb, app_migrator, url_for};
pub(crate) use heavy::heavy;
pub(crate) use net::{
    PgProxy, assert_connection_cap, assert_lingering_connections_closed, free_addr,
};
pub(crate) use output::{assert_help, code, run_ok, stdout_json, subcommands};
pub(crate) use process::Proc;
pub(crate) use tools::pytools;

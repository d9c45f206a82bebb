//! `docs/reference/cli.md`, generated from the command tree: every command's `--help` as clap
//! renders it, so the reference cannot drift from the binary. With `ONCEBOX_BLESS=1` the test
//! writes the page; otherwise it fails when the page differs.

use crate::cli::{Cli, EXIT_CODES};
use clap::CommandFactory;

/// The page: the exit codes once, then each command depth-first with its long help.
fn page() -> String {
    fn hide_env_values(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| a.hide_env_values(true))
            .mut_subcommands(hide_env_values)
    }
    fn walk(cmd: &mut clap::Command, path: &str, out: &mut String) {
        let help = cmd.render_long_help().to_string();
        let lines: Vec<&str> = help.lines().map(str::trim_end).collect();
        out.push_str(&format!(
            "\n## `{path}`\n\n```text\n{}\n```\n",
            lines.join("\n")
        ));
        for sub in cmd.get_subcommands_mut() {
            if sub.get_name() != "help" && !sub.is_hide_set() {
                let path = format!("{path} {}", sub.get_name());
                walk(sub, &path, out);
            }
        }
    }
    let mut cmd = hide_env_values(Cli::command()).term_width(100);
    cmd.build();
    let mut out = String::from(
        "# CLI reference\n\n<!-- Generated from the command tree by crates/oncebox/src/reference.rs; \
         do not edit: run `ONCEBOX_BLESS=1 cargo test -p oncebox --bin oncebox reference`. -->\n\n\
         Every command of `oncebox`, with its `--help`. How the commands fit together: \
         [the command line](../cli.md) and [Operations](../operations.md).\n\n",
    );
    out.push_str(
        &EXIT_CODES
            .replace(" · ", "\n- ")
            .replace("Exit codes: ", "Exit codes:\n\n- "),
    );
    out.push('\n');
    walk(&mut cmd, "oncebox", &mut out);
    out
}

#[test]
fn the_cli_reference_is_generated_from_the_command_tree() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/reference/cli.md");
    let text = page();
    if std::env::var_os("ONCEBOX_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(file, &text).expect("write docs/reference/cli.md");
        return;
    }
    let on_disk = std::fs::read_to_string(file).unwrap_or_default();
    if on_disk != text {
        let line = on_disk
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| on_disk.lines().count().min(text.lines().count()));
        panic!(
            "docs/reference/cli.md differs from the command tree at line {}; regenerate it with \
             `ONCEBOX_BLESS=1 cargo test -p oncebox --bin oncebox reference`",
            line + 1
        );
    }
}

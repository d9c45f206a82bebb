//! What a finished command printed.

use std::process::Output;

use serde_json::Value;

/// The exit code (a signal is a failure of the test).
pub(crate) fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

/// Standard output as one JSON document.
pub(crate) fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// Runs `bin SUB… --help`: exit 0 and a usage text.
pub(crate) fn assert_help(bin: &str, sub: &[&str]) {
    let o = std::process::Command::new(bin)
        .args(sub)
        .arg("--help")
        .output()
        .expect("run");
    assert_eq!(code(&o), 0, "{sub:?} --help");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Usage"),
        "{sub:?} --help"
    );
}

/// The subcommands `bin SUB… --help` lists under "Commands:" (but `help`): each command's line is
/// indented two spaces, its description's next lines further.
pub(crate) fn subcommands(bin: &str, sub: &[&str]) -> Vec<String> {
    let o = std::process::Command::new(bin)
        .args(sub)
        .arg("--help")
        .output()
        .expect("run");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// Runs `cmd`, which must succeed (the failure shows its stderr); its output.
pub(crate) fn run_ok(cmd: &mut std::process::Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

//! `oncebox completions`: the shell's completion script, generated from the command tree, so that
//! every command, option and closed set of values (a status, a log format) completes as `--help`
//! lists it.

use clap::Args as ClapArgs;
use clap_complete::Shell;

use crate::exit::CliResult;

/// Print the completion script for a shell (bash, zsh, fish, elvish, powershell).
///
/// For bash: `oncebox completions bash > ~/.local/share/bash-completion/completions/oncebox`;
/// for zsh, write it as `_oncebox` into a directory of your `$fpath`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// The shell.
    #[arg(value_enum)]
    pub(crate) shell: Shell,
}

/// Writes the script to stdout.
pub(crate) fn run(args: Args) -> CliResult {
    let mut command = crate::cli::command();
    clap_complete::generate(args.shell, &mut command, "oncebox", &mut std::io::stdout());
    Ok(())
}

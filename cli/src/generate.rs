//! `roce completions SHELL` and `roce man`: shell completion scripts and manual pages made from
//! the same clap definitions as the parser, so they cannot drift from it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap_complete::Shell;

use crate::Failure;

pub const COMPLETION_EXAMPLES: &str = "\
Examples:
  roce completions bash > ~/.local/share/bash-completion/completions/roce
  roce completions zsh > ~/.zfunc/_roce        (with fpath+=~/.zfunc before compinit)
  roce completions fish > ~/.config/fish/completions/roce.fish";

pub const MAN_EXAMPLES: &str = "\
Examples:
  roce man | man -l -                     read roce(1) now
  roce man --dir /usr/local/share/man/man1    install roce(1), roce-demo(1), roce-host-serve(1), ...";

#[derive(clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

#[derive(clap::Args)]
pub struct ManArgs {
    /// Write roce.1 and a page for each subcommand (roce-host-serve.1, ...) into this directory
    /// instead of printing roce.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn completions(args: CompletionArgs, mut cmd: clap::Command) -> Result<ExitCode, Failure> {
    // Generated into memory: clap_complete panics on a failed write, and a closed pipe must
    // end the command quietly.
    let mut script = Vec::new();
    cmd = visible(&cmd);
    clap_complete::generate(args.shell, &mut cmd, "roce", &mut script);
    std::io::stdout()
        .lock()
        .write_all(&script)
        .map_err(Failure::output)?;
    Ok(ExitCode::SUCCESS)
}

/// The command as a user may type it: clap_complete offers hidden subcommands (such as the
/// demo's `demo-target`) like any other, so they are left out of the tree it is given.
fn visible(cmd: &clap::Command) -> clap::Command {
    let mut visible = clap::Command::new("roce").version(env!("CARGO_PKG_VERSION"));
    if let Some(about) = cmd.get_about() {
        visible = visible.about(about.clone());
    }
    visible.subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}

pub fn man(args: ManArgs, cmd: clap::Command) -> Result<ExitCode, Failure> {
    match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|e| {
                Failure::new(format!(
                    "cannot create the directory {}: {e}",
                    dir.display()
                ))
            })?;
            clap_mangen::generate_to(cmd, &dir).map_err(|e| {
                Failure::new(format!(
                    "cannot write the pages into {}: {e}",
                    dir.display()
                ))
            })?;
            let mut pages: Vec<String> = std::fs::read_dir(&dir)
                .map_err(|e| Failure::new(format!("cannot list {}: {e}", dir.display())))?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|name| name.starts_with("roce") && name.ends_with(".1"))
                .collect();
            pages.sort();
            out!(
                "wrote {} into {}",
                crate::output::count(pages.len() as u64, "page"),
                dir.display()
            )?;
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut page)
                .map_err(|e| Failure::new(format!("cannot render the page: {e}")))?;
            std::io::stdout()
                .lock()
                .write_all(&page)
                .map_err(Failure::output)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

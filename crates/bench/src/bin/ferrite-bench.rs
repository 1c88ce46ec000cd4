//! `ferrite-bench`: the same command as `ferrite bench`, as a binary of its own (for running
//! the harness without the CLI crate). Exit codes: 0 ok, 1 a point failed, 2 usage error.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use ferrite_bench::cli::{BenchArgs, run};

/// Ferrite's benchmark harness.
#[derive(Debug, Parser)]
#[command(name = "ferrite-bench", version)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    match run(&cli.args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferrite-bench: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

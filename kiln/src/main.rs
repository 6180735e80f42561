//! `kiln`: runs Kiln and talks to it. This binary only wires the library
//! crates together; each subcommand lives in a module of its own.

mod allocator;
mod cli;
mod client;
mod export;
mod gpu_dump;
mod local_agent;
mod roles;
mod symbols;
mod tenants;
mod up;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match try_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kiln: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn try_main(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Up(args) => up::run(args),
        Command::Import(args) => client::import(args),
        Command::Flamegraph(args) => client::flamegraph(args),
        Command::Symbols(cli::SymbolsCommand::Resolve(args)) => symbols::resolve(args),
        Command::Symbols(cli::SymbolsCommand::Upload(args)) => symbols::upload(args),
        Command::Symbols(cli::SymbolsCommand::Crawl(args)) => symbols::crawl(args),
        Command::Export(cli::ExportCommand::Perfetto(args)) => export::perfetto(args),
        Command::Gpu(cli::GpuCommand::Dump(args)) => gpu_dump::run(args),
        Command::Gateway(args) => roles::gateway(args),
        Command::Worker(args) => roles::worker(args),
        Command::Query(args) => roles::query(args),
        Command::Store(cli::StoreCommand::Migrate(args)) => roles::migrate(args),
        Command::Tenant(command) => tenants::tenant(command),
        Command::Key(command) => tenants::key(command),
    }
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "info,actix_server=warn,fjall=warn,lsm_tree=warn,aya=warn,kiln::http=warn",
        1 => "debug,actix_server=info,fjall=info,lsm_tree=info",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("KILN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

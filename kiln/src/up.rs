//! `kiln up`: the embedded server.

use std::path::PathBuf;

use anyhow::Context;
use kiln_actors::{EmbeddedOptions, start_embedded};
use kiln_symbolizer_workers::SymbolizerConfig;
use kiln_symbolizer_workers::debuginfod::Debuginfod;

use crate::cli::UpArgs;
use crate::local_agent;

pub fn run(args: UpArgs) -> anyhow::Result<()> {
    let data_dir = match args.data_dir {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    let agent_config = match args.no_agent {
        true => None,
        false => Some(local_agent::config(args.agent_frequency)?),
    };
    if let Some(dir) = args.ui_dir {
        kiln_actors::http::set_ui_dir(dir);
    }
    let mut options = EmbeddedOptions::new(data_dir.clone(), args.listen);
    if let Some(urls) = &args.debuginfod_urls {
        options.symbolizer = SymbolizerConfig::with_debuginfod(Debuginfod::parse_urls(urls));
    }
    actix_rt::System::new().block_on(async move {
        let running = start_embedded(options)
            .await
            .with_context(|| format!("starting Kiln with data in {}", data_dir.display()))?;
        println!("Kiln is up: http://{}/", running.local_addr);
        println!("  data:   {}", data_dir.display());
        let ui_dir = kiln_actors::http::ui_dir();
        if !ui_dir.join("index.html").is_file() {
            println!(
                "  ui:     not built in {} (run scripts/build-ui.sh)",
                ui_dir.display()
            );
        }
        println!(
            "  import: kiln import --server http://{} FILE",
            running.local_addr
        );
        let agent = agent_config
            .and_then(|config| local_agent::start(config, running.local_addr, &data_dir));
        if agent.is_some() {
            println!("  agent:  profiling this machine (--no-agent to turn off)");
        }
        let served = running.server.await.context("serving HTTP");
        if let Some(agent) = agent {
            agent.stop();
        }
        served
    })
}

fn default_data_dir() -> anyhow::Result<PathBuf> {
    let base = dirs::data_dir()
        .context("no data directory for this user (set --data-dir or KILN_DATA_DIR)")?;
    Ok(base.join("kiln"))
}

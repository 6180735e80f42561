//! `kiln up`: the embedded server.

use std::path::PathBuf;

use anyhow::Context;
use kiln_actors::{ADMIN_TOKEN_FILE, EmbeddedOptions, start_embedded};

use crate::cli::{DEFAULT_OTLP_GRPC_LISTEN, GrpcListen, UpArgs};
use crate::local_agent;

pub(crate) fn run(args: UpArgs) -> anyhow::Result<()> {
    let data_dir = match args.data_dir {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    let agent_config = match args.no_agent {
        true => None,
        false => Some(local_agent::config(
            args.agent_frequency,
            args.agent_cgroup,
        )?),
    };
    if let Some(dir) = args.ui_dir {
        kiln_actors::http::set_ui_dir(dir);
    }
    let mut options = EmbeddedOptions::new(data_dir.clone(), args.listen);
    options.symbolizer = args.debuginfod.symbolizer_config();
    options.admin_token = args.admin.token()?;
    options.metrics_tenants = args.admin.metrics_tenants.into();
    options.quota = args.quota.defaults();
    options.query = args.query_limits.query_options();
    options.rollup_every = args.query_limits.rollup_every();
    options.regions = args.regions.regions()?;
    options.global_symbols_every = args.regions.global_symbols_every;
    // An address given is required; the default one may be another
    // collector's, and then kiln up runs without gRPC.
    (options.otlp_grpc_listen, options.otlp_grpc_required) = match args.otlp_grpc_listen {
        Some(GrpcListen::Off) => (None, false),
        Some(GrpcListen::At(addr)) => (Some(addr), true),
        None => (Some(DEFAULT_OTLP_GRPC_LISTEN.parse()?), false),
    };
    let region_note = options.regions.as_ref().map(ToString::to_string);
    let token_note = match options.admin_token {
        Some(_) => "from --admin-token".to_owned(),
        None => format!("in {}", data_dir.join(ADMIN_TOKEN_FILE).display()),
    };
    actix_rt::System::new().block_on(async move {
        let running = start_embedded(options)
            .await
            .with_context(|| format!("starting Kiln with data in {}", data_dir.display()))?;
        println!("Kiln is up: http://{}/", running.local_addr);
        if let Some(login) = &running.login_path {
            // The one-time link logs a browser in without typing a key.
            println!("  login:  http://{}{login}", running.local_addr);
        }
        let otlp_http = format!(
            "http://{}{}",
            running.local_addr,
            kiln_actors::http::otlp::PATH
        );
        match &running.otlp_grpc {
            Some(grpc) => println!("  otlp:   grpc {}, http {otlp_http}", grpc.local_addr),
            None => println!("  otlp:   http {otlp_http} (grpc off)"),
        }
        println!(
            "  pyroscope: http://{} (Pyroscope SDKs: basic auth, any user, the key as password)",
            running.local_addr
        );
        println!("  data:   {}", data_dir.display());
        if let Some(note) = &region_note {
            println!("  region: {note}");
        }
        println!(
            "  key:    {} (kiln import, kiln flamegraph and kiln symbols on this machine use it)",
            data_dir.join(kiln_actors::API_KEY_FILE).display()
        );
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
        println!("  admin:  token {token_note} (kiln tenant, kiln key, kiln symbols crawl)");
        let agent = agent_config
            .and_then(|config| local_agent::start(config, running.local_addr, &data_dir));
        if agent.is_some() {
            println!("  agent:  profiling this machine (--no-agent to turn off)");
        }
        let served = running.server.await.context("serving HTTP");
        if let Some(agent) = agent {
            agent.stop();
        }
        if let Some(grpc) = running.otlp_grpc {
            grpc.stop();
        }
        served
    })
}

/// Where `kiln up` keeps its data when not told.
pub(crate) fn default_data_dir() -> anyhow::Result<PathBuf> {
    let base = dirs::data_dir()
        .context("no data directory for this user (set --data-dir or KILN_DATA_DIR)")?;
    Ok(base.join("kiln"))
}

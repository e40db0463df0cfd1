//! `protomolt-node`: the example node host.
//!
//! It reads a TOML node config (`--config`, every value overridable from the
//! environment as `PROTOMOLT_<SECTION>__<KEY>`, e.g. `PROTOMOLT_NODE__BIND`; librdkafka
//! options as `PROTOMOLT_KAFKA_OPTION_<NAME>`; either with `_FILE` to read the value
//! from a file: see [`config`]), mounts
//! the roles the config enables (`[node].roles`), serves the shared actions route,
//! logs with `tracing` (JSON with `--log-format json`), and shuts down gracefully on
//! SIGINT or SIGTERM. `protomolt-node demo` runs the demo.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::Layer;

mod config;
mod demo;
mod node;
mod parse;

/// The ProtoMolt example node.
#[derive(Debug, Parser)]
#[command(name = "protomolt-node", version, about)]
struct Cli {
    /// The node's TOML config; without it, the defaults (and the environment) apply.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Log as text lines or as JSON objects.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the node (the default).
    Run,
    /// Check the config as `run` would (without starting anything) and print it as
    /// TOML, secrets masked.
    CheckConfig,
    /// List every key a config file may set, with the environment variable that
    /// overrides it.
    ConfigKeys,
    /// Start the demo: fixture gRPC services, stored workflows, one run, then serve.
    Demo {
        /// Run the example and exit instead of serving.
        #[arg(long)]
        once: bool,
    },
}

/// Logs to stderr (text or JSON lines); with `[telemetry].otlp_endpoint`, also sends
/// the spans to that collector. The returned provider flushes them when shut down.
fn init_logging(
    format: LogFormat,
    telemetry: &config::TelemetrySection,
) -> Result<Option<opentelemetry_sdk::trace::SdkTracerProvider>, String> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // The log filter (RUST_LOG) filters the log lines only: the spans a trace needs
    // stay on whatever the logs show.
    // Colour only on a terminal (and never with NO_COLOR set): a file or a pipe gets
    // plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    let fmt = match format {
        LogFormat::Text => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
    };
    let (provider, traces) = match &telemetry.otlp_endpoint {
        Some(endpoint) => {
            let service = telemetry
                .service_name
                .as_deref()
                .unwrap_or("protomolt-node");
            let (provider, layer) = registry_stub::telemetry::otlp_layer(endpoint, service)?;
            (Some(provider), Some(layer))
        }
        None => (None, None),
    };
    let traces =
        traces.map(|layer| layer.with_filter(tracing_subscriber::filter::LevelFilter::INFO));
    tracing_subscriber::registry().with(fmt).with(traces).init();
    Ok(provider)
}

/// `check-config`: what `run` checks before it serves, without starting anything;
/// then the warnings about the environment, on stderr, and the effective config as
/// TOML with the secrets masked, on stdout.
async fn check_config(config: &config::HostConfig, warnings: &[String]) -> Result<(), String> {
    warn_on_stderr(warnings);
    node::check(config).await?;
    print!("{}", config.to_masked_toml()?);
    Ok(())
}

fn warn_on_stderr(warnings: &[String]) {
    for warning in warnings {
        eprintln!("protomolt-node: warning: {warning}");
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Needs no config: the keys come from the config's types.
    if matches!(cli.command, Some(Command::ConfigKeys)) {
        for (key, variable) in config::HostConfig::key_listing() {
            println!("{key}\t{variable}");
        }
        return ExitCode::SUCCESS;
    }
    let env = config::EnvOverrides::from_process();
    // `PROTOMOLT_*` variables that set nothing; on stderr before a config error (which
    // they may explain), or logged once logging is up.
    let env_warnings = env.warnings();
    let config = match config::HostConfig::load_with(cli.config.as_deref(), env) {
        Ok(config) => config,
        Err(e) => {
            warn_on_stderr(&env_warnings);
            eprintln!("protomolt-node: {e}");
            return ExitCode::from(2);
        }
    };
    let traces = match init_logging(cli.log_format, &config.telemetry) {
        Ok(traces) => traces,
        Err(e) => {
            warn_on_stderr(&env_warnings);
            eprintln!("protomolt-node: {e}");
            return ExitCode::from(2);
        }
    };
    let command = cli.command.unwrap_or(Command::Run);
    if !matches!(command, Command::CheckConfig) {
        for warning in &env_warnings {
            tracing::warn!("{warning}");
        }
    }
    let result = match command {
        Command::Run => node::run(config).await,
        Command::CheckConfig => check_config(&config, &env_warnings).await,
        Command::Demo { once } => demo::run(config, once).await,
        // Answered above, before the config is read.
        Command::ConfigKeys => Ok(()),
    };
    // Send the last spans before exiting.
    if let Some(traces) = traces {
        let _ = traces.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("protomolt-node: {e}");
            ExitCode::from(2)
        }
    }
}

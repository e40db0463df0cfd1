//! The command line as clap reads it: the global flags and every command.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Submit, follow and operate workflow jobs on a ProtoMolt node.
#[derive(Debug, Parser)]
#[command(
    name = "protomolt",
    version,
    about = "protomolt: the command line of a ProtoMolt node (its actions route)"
)]
pub(crate) struct Cli {
    /// The node's URL.
    #[arg(
        long,
        global = true,
        env = "PROTOMOLT_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub(crate) url: String,
    /// A bearer token (when the node has `[auth]`).
    #[arg(long, global = true, env = "PROTOMOLT_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Print JSON (one object per line) instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Submit a workflow as a job (a stored name, or a workflow file).
    Submit {
        /// A stored workflow's name.
        #[arg(
            long,
            conflicts_with = "workflow",
            required_unless_present = "workflow"
        )]
        name: Option<String>,
        /// A workflow envelope file (JSON).
        #[arg(long)]
        workflow: Option<PathBuf>,
        /// The input: JSON, or @file.
        #[arg(long, default_value = "{}")]
        input: String,
        /// Your own job id (also the idempotency key).
        #[arg(long)]
        job_id: Option<String>,
        /// Claim order, 0 to 9 (higher first).
        #[arg(long)]
        priority: Option<u8>,
        /// Not before this instant (RFC 3339).
        #[arg(long)]
        run_at: Option<String>,
        /// Attempts allowed.
        #[arg(long)]
        max_attempts: Option<u32>,
        /// Metadata to find the job by (repeat: --meta customer=acme --meta region=eu).
        #[arg(long = "meta", value_name = "KEY=VALUE")]
        meta: Vec<String>,
        /// Wait until the job finishes (or parks on a step) and print its result, or
        /// what the step asks.
        #[arg(long, conflicts_with = "watch")]
        wait: bool,
        /// Follow the job's events until it ends.
        #[arg(long)]
        watch: bool,
    },
    /// Show a job.
    Get {
        /// The job's id.
        job_id: String,
        /// Wait up to this many seconds (at most 60) for it to finish or park on a
        /// step.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=60))]
        wait: u32,
    },
    /// List jobs, newest first.
    List {
        /// Only this status.
        #[arg(long)]
        status: Option<String>,
        /// Only this workflow.
        #[arg(long)]
        workflow: Option<String>,
        /// At most this many (up to 500).
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Only jobs whose metadata holds this entry (repeat for several).
        #[arg(long = "meta", value_name = "KEY=VALUE")]
        meta: Vec<String>,
    },
    /// Follow a job's events as they land, until it ends.
    Watch {
        /// The job's id.
        job_id: String,
    },
    /// Answer a job's parked step.
    Complete {
        /// The job's id.
        job_id: String,
        /// The parked step.
        step: String,
        /// The response: JSON, or @file.
        #[arg(long)]
        response: String,
    },
    /// Send an event to every job waiting on its key (an event step's eventKey).
    SendEvent {
        /// The key the jobs wait on.
        key: String,
        /// The event: JSON of the waiting steps' outputType, or @file.
        #[arg(long)]
        payload: String,
        /// Makes sending idempotent: a second send of one id resumes nothing.
        #[arg(long)]
        event_id: Option<String>,
    },
    /// Fail a job's parked step, as a verdict.
    Reject {
        /// The job's id.
        job_id: String,
        /// The parked step.
        step: String,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Cancel a job.
    Cancel {
        /// The job's id.
        job_id: String,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Re-queue a DEAD, FAILED or CANCELLED job (a COMPLETED one from a step).
    Retry {
        /// The job's id.
        job_id: String,
        /// Run again from this step.
        #[arg(long)]
        from_step: Option<String>,
        /// A new retry budget.
        #[arg(long)]
        max_attempts: Option<u32>,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// Run the workflow stored under the job's name now, not the snapshot it was
        /// submitted with (when the results it keeps fit it).
        #[arg(long)]
        current: bool,
    },
    /// Stop new claims of a workflow's jobs (or of one concurrency key's) on every node.
    Pause {
        /// The workflow.
        #[arg(long, conflicts_with = "key", required_unless_present = "key")]
        workflow: Option<String>,
        /// One concurrency key, as `get` shows it (<workflow>:<expression>=<value>).
        #[arg(long)]
        key: Option<String>,
        /// Why (kept with the pause).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Let claims take a paused workflow's (or key's) jobs again.
    Resume {
        /// The workflow.
        #[arg(long, conflicts_with = "key", required_unless_present = "key")]
        workflow: Option<String>,
        /// One concurrency key.
        #[arg(long)]
        key: Option<String>,
    },
    /// The fleet at a glance: live jobs, the database primary, pauses, the busiest
    /// concurrency keys, the fleet-wide limits.
    Fleet,
    /// This node (the one at --url).
    #[command(subcommand)]
    Node(Node),
    /// Stored workflows.
    #[command(subcommand, visible_alias = "workflow")]
    Workflows(Workflows),
    /// Schedules: stored workflows run as jobs at the ticks of a cron expression.
    #[command(subcommand, visible_alias = "schedule")]
    Schedules(Schedules),
    /// Publish again jobs' dead-lettered (FAILED) events, and those held behind them.
    Redrive {
        /// The jobs' ids.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        job_ids: Vec<String>,
        /// Every job with a dead-lettered event (up to --limit).
        #[arg(long)]
        all: bool,
        /// With --all: only this workflow's jobs.
        #[arg(long, requires = "all")]
        workflow: Option<String>,
        /// With --all: at most this many jobs (up to 10,000).
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
    /// The request records the Kafka consumer dead-lettered, newest first.
    Rejects {
        /// At most this many (up to 500).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// The contract's .proto files.
    #[command(subcommand)]
    Proto(Proto),
    /// Bearer tokens for a node's [auth].
    #[command(subcommand)]
    Token(Token),
    /// Whether the node is ready (its database, its broker).
    Health,
    /// Print the node's OpenAPI 3.1 document (every verb of its roles), to generate a
    /// client from: `protomolt openapi > openapi.json`.
    Openapi,
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum Workflows {
    /// List the stored workflows.
    List,
    /// Show one.
    Get {
        /// Its name.
        name: String,
    },
    /// Store one from a file (JSON).
    Put {
        /// The workflow envelope file.
        file: PathBuf,
    },
    /// Build an envelope on this machine: compile your .proto files, embed their
    /// descriptor set in a JSON skeleton (the envelope without `schema`), check it as
    /// the node would, and print it.
    Build {
        /// A .proto file of your service (repeat for several); its imports resolve
        /// against its own directory, the --include directories, the Google
        /// well-known types and buf/validate/validate.proto.
        #[arg(long = "proto", required = true)]
        protos: Vec<PathBuf>,
        /// Another directory imports resolve against.
        #[arg(long = "include")]
        includes: Vec<PathBuf>,
        /// The envelope without `schema` (JSON): name, inputType, steps, output.
        #[arg(long)]
        skeleton: PathBuf,
        /// Set (or replace) the skeleton's inputType.
        #[arg(long)]
        input_type: Option<String>,
        /// Check the envelope on the node at this URL too (`put-workflow` with
        /// `dryRun`: its outbound policy and stored child workflows), storing nothing;
        /// --token is sent there (it needs registry:write).
        #[arg(long, value_name = "URL")]
        node: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum Node {
    /// Drain mode: the node claims nothing new and finishes what it runs (the token
    /// needs scope node:admin).
    Drain {
        /// Turn drain mode off: the node claims again.
        #[arg(long)]
        off: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum Token {
    /// Print a new random token (give it to its holder) and the [[auth.tokens]]
    /// entry that accepts it by its SHA-256, so the node's config never holds it.
    New {
        /// Who holds it (for the node's logs).
        #[arg(long, default_value = "client")]
        name: String,
        /// The scopes it grants (repeat; `*` grants every verb).
        #[arg(long = "scope", default_values_t = ["jobs:read".to_owned()])]
        scopes: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum Proto {
    /// Write the contract's .proto files (protomolt/jobs/v1/jobs.proto and
    /// buf/validate/validate.proto, with its licence) under DIR, to compile the
    /// events and requests in another language.
    Export {
        /// Where to write them (created if missing).
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum Schedules {
    /// List the schedules, with their next tick.
    List,
    /// Show one: its spec, next ticks and newest jobs.
    Get {
        /// Its name.
        name: String,
    },
    /// Make or replace one (the flags, over the body of --file when given).
    Put {
        /// Its name.
        name: String,
        /// A JSON file holding a put-schedule body (the flags override its fields).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The cron expression ("0 9 * * MON-FRI", "@hourly", "@every 90s").
        #[arg(long)]
        cron: Option<String>,
        /// The IANA time zone it is read in (default UTC).
        #[arg(long)]
        timezone: Option<String>,
        /// The stored workflow each tick runs.
        #[arg(long)]
        workflow: Option<String>,
        /// Each job's input (JSON).
        #[arg(long)]
        input: Option<String>,
        /// skip, buffer-one, allow or cancel-previous.
        #[arg(long)]
        overlap: Option<String>,
        /// none, last or all.
        #[arg(long)]
        catchup: Option<String>,
    },
    /// Stop its ticks until resumed.
    Pause {
        /// Its name.
        name: String,
        /// Why (kept with the pause).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Fire its ticks again, from the next one.
    Resume {
        /// Its name.
        name: String,
    },
    /// Make one job of it now.
    Trigger {
        /// Its name.
        name: String,
    },
    /// Make a job for each of its ticks in a past range [--from, --to).
    Backfill {
        /// Its name.
        name: String,
        /// The range's start (RFC 3339).
        #[arg(long)]
        from: String,
        /// The range's end (RFC 3339, not in the future).
        #[arg(long)]
        to: String,
    },
    /// Delete it (its jobs stay).
    Delete {
        /// Its name.
        name: String,
    },
}

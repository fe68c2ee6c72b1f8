//! `leasehold ctl` (also run as the kubectl plugin `kubectl-leasehold`): the REST API from a
//! terminal or a script. It lists clusters, instances, targets, history and operations as
//! tables (or `-o json|yaml`, the API's own documents); `rebalance` and `remove` show the plan
//! first and run it only with `--yes` — exactly the plan shown (the server refuses it if the
//! cluster changed meanwhile); `--watch` follows an operation to its end. The server comes
//! from `--server` or `LEASEHOLD_SERVER`, a token from `--token-file` or `LEASEHOLD_TOKEN`, and
//! the token is never printed. Exit codes are fixed ([`Exit`]) so a script can branch on them.
//!
//! It speaks only HTTP and JSON: no type of the server is shared, so it works against any
//! server version that keeps the documented fields (docs/api.md).

mod client;
mod render;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use self::client::{Answer, Client};

/// Exit codes of `leasehold ctl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done (a plan shown, an operation started, a list printed).
    Ok = 0,
    /// The server could not be reached, or failed (5xx), or answered something unexpected.
    Failed = 1,
    /// Bad usage, or a request the server refused as malformed (400, 415, 422).
    Usage = 2,
    /// Refused because the cluster changed or is busy (409): nothing was started.
    Conflict = 3,
    /// No such cluster, instance, target or operation (404).
    NotFound = 4,
    /// Not logged in, or not allowed (401, 403).
    Denied = 5,
    /// The operation followed with `--watch` ended failed or cancelled.
    OperationFailed = 6,
}

/// Flags of `leasehold ctl`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// Leasehold's address.
    #[arg(
        long,
        env = "LEASEHOLD_SERVER",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub server: String,
    /// A file holding the bearer token (its first line; a `--token-auth-file` line's first
    /// field works too). Without it, `LEASEHOLD_TOKEN`.
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
    /// Output: a table for people, or the API's own JSON or YAML.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Columns for people.
    Table,
    /// The API's JSON.
    Json,
    /// The API's JSON as YAML.
    Yaml,
}

/// `leasehold ctl` commands.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// Every cluster at a glance.
    Clusters,
    /// A cluster's instances (members).
    Instances {
        /// The cluster.
        cluster: String,
    },
    /// A cluster's targets (first page of `--limit`, or all with `--all`).
    Targets {
        /// The cluster.
        cluster: String,
        /// Only those this instance holds.
        #[arg(long)]
        owner: Option<String>,
        /// Only those in this state (owned, unassigned, moving, expired, unworked, orphaned).
        #[arg(long)]
        state: Option<String>,
        /// Only keys containing this.
        #[arg(short = 'q', long)]
        query: Option<String>,
        /// Page size (1–1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Every page.
        #[arg(long)]
        all: bool,
    },
    /// History, newest first.
    History {
        /// Only this cluster.
        #[arg(long)]
        cluster: Option<String>,
        /// Only this kind (ownership, instance, audit).
        #[arg(long)]
        kind: Option<String>,
        /// Only this target.
        #[arg(long)]
        target: Option<String>,
        /// Only this instance.
        #[arg(long)]
        instance: Option<String>,
        /// How many (1–1000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Operations, newest first, or one with its moves.
    Operations {
        /// One operation.
        id: Option<String>,
        /// Only this cluster.
        #[arg(long)]
        cluster: Option<String>,
        /// Follow the operation (`id`) to its end.
        #[arg(long, requires = "id")]
        watch: bool,
    },
    /// Plan a rebalance; with `--yes`, run exactly the plan shown.
    Rebalance {
        /// The cluster.
        cluster: String,
        /// At most this many moves.
        #[arg(long)]
        max_moves: Option<u64>,
        /// Why (recorded with the operation).
        #[arg(long)]
        reason: Option<String>,
        /// Run the plan shown.
        #[arg(long)]
        yes: bool,
        /// Follow the started operation to its end.
        #[arg(long, requires = "yes")]
        watch: bool,
    },
    /// Plan removing an instance (drain, then its removal steps); with `--yes`, run it.
    Remove {
        /// The cluster.
        cluster: String,
        /// The instance (pod) to remove.
        instance: String,
        /// Run the plan shown.
        #[arg(long)]
        yes: bool,
        /// Follow the started operation to its end.
        #[arg(long, requires = "yes")]
        watch: bool,
    },
    /// Pause a cluster's automatic rebalancing (a join then waits until resumed).
    Pause {
        /// The cluster.
        cluster: String,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Resume a cluster's automatic rebalancing.
    Resume {
        /// The cluster.
        cluster: String,
    },
}

/// A failure, with the exit code it means.
#[derive(Debug)]
pub struct CtlError {
    /// What to print.
    pub message: String,
    /// The exit code.
    pub exit: Exit,
}

impl CtlError {
    fn new(exit: Exit, message: impl Into<String>) -> CtlError {
        CtlError {
            message: message.into(),
            exit,
        }
    }
}

/// Runs `leasehold ctl`; what it printed went to stdout, the failure (if any) is returned.
pub async fn run(args: CtlArgs) -> Result<(), CtlError> {
    let token = match &args.token_file {
        Some(path) => Some(client::token_from_file(path)?),
        None => std::env::var("LEASEHOLD_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
    };
    let c = Client::new(&args.server, token)?;
    let out = args.output;
    match args.command {
        CtlCommand::Clusters => {
            let v = c.get("/clusters").await?.ok()?;
            print(out, &v, || render::clusters(&v));
        }
        CtlCommand::Instances { cluster } => {
            let v = c
                .get(&format!("/clusters/{}/instances", seg(&cluster)))
                .await?
                .ok()?;
            print(out, &v, || render::instances(&v));
        }
        CtlCommand::Targets {
            cluster,
            owner,
            state,
            query,
            limit,
            all,
        } => {
            let mut params = vec![("limit", limit.to_string())];
            params.extend(owner.map(|o| ("owner", o)));
            params.extend(state.map(|s| ("state", s)));
            params.extend(query.map(|q| ("q", q)));
            let path = format!("/clusters/{}/targets", seg(&cluster));
            let v = c.pages(&path, &params, all).await?;
            print(out, &v, || render::targets(&v));
        }
        CtlCommand::History {
            cluster,
            kind,
            target,
            instance,
            limit,
        } => {
            let mut params = vec![("limit", limit.to_string())];
            params.extend(cluster.map(|x| ("cluster", x)));
            params.extend(kind.map(|x| ("kind", x)));
            params.extend(target.map(|x| ("target", x)));
            params.extend(instance.map(|x| ("instance", x)));
            let v = c.pages("/history", &params, false).await?;
            print(out, &v, || render::history(&v));
        }
        CtlCommand::Operations { id, cluster, watch } => match id {
            Some(id) => {
                let path = format!("/operations/{}", seg(&id));
                if watch {
                    return follow(&c, &path, out).await;
                }
                let v = c.get(&path).await?.ok()?;
                print(out, &v, || render::operation(&v));
            }
            None => {
                let params: Vec<(&str, String)> =
                    cluster.map(|x| ("cluster", x)).into_iter().collect();
                let v = c.pages("/operations", &params, false).await?;
                print(out, &v, || render::operations(&v));
            }
        },
        CtlCommand::Rebalance {
            cluster,
            max_moves,
            reason,
            yes,
            watch,
        } => {
            let path = format!("/clusters/{}/rebalance", seg(&cluster));
            let mut req = json!({"dry_run": true});
            if let Some(n) = max_moves {
                req["max_moves"] = n.into();
            }
            if let Some(r) = &reason {
                req["reason"] = r.as_str().into();
            }
            run_plan(&c, &path, req, yes, watch, out).await?;
        }
        CtlCommand::Remove {
            cluster,
            instance,
            yes,
            watch,
        } => {
            let path = format!(
                "/clusters/{}/instances/{}/remove",
                seg(&cluster),
                seg(&instance)
            );
            run_plan(&c, &path, json!({"dry_run": true}), yes, watch, out).await?;
        }
        CtlCommand::Pause { cluster, reason } => {
            let path = format!("/clusters/{}/automation", seg(&cluster));
            let v = c
                .post(&path, &json!({"paused": true, "reason": reason}))
                .await?
                .ok()?;
            print(out, &v, || render::automation(&cluster, &v));
        }
        CtlCommand::Resume { cluster } => {
            let path = format!("/clusters/{}/automation", seg(&cluster));
            let v = c
                .post(
                    &path,
                    &json!({"paused": false, "reason": "resumed from leasehold ctl"}),
                )
                .await?
                .ok()?;
            print(out, &v, || render::automation(&cluster, &v));
        }
    }
    Ok(())
}

/// Shows the plan `path` answers to `req` (a dry run); with `yes`, runs exactly that plan.
async fn run_plan(
    c: &Client,
    path: &str,
    mut req: Value,
    yes: bool,
    watch: bool,
    out: Output,
) -> Result<(), CtlError> {
    let plan = c.post(path, &req).await?.ok()?;
    if !yes {
        print(out, &plan, || {
            let mut s = render::plan(&plan);
            s.push_str("Dry run: nothing was started. Run it with --yes.\n");
            s
        });
        return Ok(());
    }
    if out == Output::Table {
        emit(&render::plan(&plan));
    }
    req["dry_run"] = false.into();
    req["plan_id"] = plan["id"].clone();
    let answer = c.post(path, &req).await?;
    match answer.status {
        202 => {
            let op = answer.json;
            let id = op["id"].as_str().unwrap_or_default().to_owned();
            match out {
                Output::Table => emit(&format!("Started operation {id}.\n")),
                _ => print(out, &op, String::new),
            }
            if watch {
                return follow(c, &format!("/operations/{}", seg(&id)), out).await;
            }
            Ok(())
        }
        200 => {
            match out {
                Output::Table => emit("Nothing to move: nothing was started.\n"),
                _ => print(out, &answer.json, String::new),
            }
            Ok(())
        }
        _ => answer.ok().map(drop),
    }
}

/// Follows the operation at `path` until it ends: a progress line on a terminal, a line per
/// change otherwise; the end decides the exit code.
async fn follow(c: &Client, path: &str, out: Output) -> Result<(), CtlError> {
    use std::io::IsTerminal as _;
    let tty = std::io::stdout().is_terminal() && out == Output::Table;
    let mut last = String::new();
    loop {
        let op = c.get(path).await?.ok()?;
        let line = render::progress(&op);
        if line != last {
            if tty {
                emit(&format!("\r\x1b[2K{line}"));
            } else if out == Output::Table {
                emit(&format!("{line}\n"));
            }
            last = line;
        }
        let state = op["state"].as_str().unwrap_or_default();
        if matches!(state, "succeeded" | "failed" | "cancelled") {
            if tty {
                emit("\n");
            }
            if out != Output::Table {
                print(out, &op, String::new);
            }
            return match state {
                "succeeded" => Ok(()),
                _ => Err(CtlError::new(
                    Exit::OperationFailed,
                    format!(
                        "operation {} {state}{}",
                        op["id"].as_str().unwrap_or_default(),
                        op["error"]
                            .as_str()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    ),
                )),
            };
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Prints `v` as asked: the table `table` makes, or the JSON or YAML of `v`.
fn print(out: Output, v: &Value, table: impl FnOnce() -> String) {
    match out {
        Output::Table => emit(&table()),
        Output::Json => emit(&(serde_json::to_string_pretty(v).unwrap_or_default() + "\n")),
        Output::Yaml => emit(&serde_saphyr::to_string(v).unwrap_or_default()),
    }
}

/// Writes `text` to stdout. A reader that went away (`| head`) ends the command quietly, as it
/// does for any Unix tool.
fn emit(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// `s` as one URL path segment.
fn seg(s: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

impl Answer {
    /// The JSON of a 2xx answer, or the failure it means.
    fn ok(self) -> Result<Value, CtlError> {
        if (200..300).contains(&self.status) {
            return Ok(self.json);
        }
        let detail = self.json["detail"]
            .as_str()
            .or(self.json["title"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("HTTP {}", self.status));
        let exit = match self.status {
            400 | 413 | 415 | 422 => Exit::Usage,
            401 | 403 => Exit::Denied,
            404 => Exit::NotFound,
            409 => Exit::Conflict,
            _ => Exit::Failed,
        };
        Err(CtlError::new(exit, detail))
    }
}

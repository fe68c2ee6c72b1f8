//! Logging set-up, and nothing else: `tracing` to stderr through one filter — `RUST_LOG`, or
//! else the default the command asks for, which the command may replace while it runs
//! ([`Logs::set_default`]; never a filter `RUST_LOG` chose) — written as JSON lines when stderr
//! is not a terminal, and for people (compact lines: local time, level, message, fields) when it
//! is; `LEASEHOLD_LOG_FORMAT` (`json` or `text`) overrides that choice. The filter chooses the
//! lines; the spans they happen in (at `info` and above) are always kept, so that a line names
//! where it comes from — a member's warning its member — even when its module's `info` lines are
//! left out. It knows no other module: the commands choose their filters.

use std::io::IsTerminal as _;

use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::filter::{FilterExt as _, LevelFilter};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::prelude::*;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// The environment variable that chooses the format (`json` or `text`).
pub const FORMAT_VAR: &str = "LEASEHOLD_LOG_FORMAT";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line, for log collectors.
    Json,
    /// Compact lines for people (coloured on a terminal, unless `NO_COLOR` is set).
    Text,
}

impl Format {
    /// The format `LEASEHOLD_LOG_FORMAT` names (`var`; unset or empty: JSON, unless stderr is a
    /// `terminal`), or why `var` names none.
    pub fn choose(var: Option<&str>, terminal: bool) -> Result<Format, String> {
        match var {
            Some("json") => Ok(Format::Json),
            Some("text") => Ok(Format::Text),
            None | Some("") if terminal => Ok(Format::Text),
            None | Some("") => Ok(Format::Json),
            Some(other) => Err(format!(
                "{FORMAT_VAR}={other:?} is not a log format (json or text)"
            )),
        }
    }
}

/// The installed logging, for the command to change its default filter as it runs.
#[derive(Debug)]
pub struct Logs {
    /// Replaces the filter; `None` when `RUST_LOG` chose it (the user's choice stands).
    filter: Option<reload::Handle<EnvFilter, Registry>>,
}

impl Logs {
    /// Filters by `filter` from now on, unless `RUST_LOG` chose the filter.
    pub fn set_default(&self, filter: &str) {
        if let Some(handle) = &self.filter
            && let Err(error) = handle.reload(EnvFilter::new(filter))
        {
            tracing::error!(%error, filter, "cannot change the log filter");
        }
    }
}

/// Installs the global subscriber: filtered by `RUST_LOG`, or else by `default_filter`, in the
/// format [`Format::choose`] picks. Once per process; an unknown `LEASEHOLD_LOG_FORMAT` is an
/// error.
pub fn init(default_filter: &str) -> anyhow::Result<Logs> {
    let terminal = std::io::stderr().is_terminal();
    let format = Format::choose(std::env::var(FORMAT_VAR).ok().as_deref(), terminal)
        .map_err(anyhow::Error::msg)?;
    let (filter, from_env) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, true),
        Err(_) => (EnvFilter::new(default_filter), false),
    };
    let (subscriber, handle) = subscriber(format, filter, std::io::stderr, terminal);
    subscriber.try_init()?;
    Ok(Logs {
        filter: (!from_env).then_some(handle),
    })
}

/// The subscriber [`init`] installs, writing to `writer` (in colour only on a `terminal`, and
/// unless `NO_COLOR` is set), and the handle to its filter.
fn subscriber<W>(
    format: Format,
    filter: EnvFilter,
    writer: W,
    terminal: bool,
) -> (
    impl tracing::Subscriber + Send + Sync + 'static,
    reload::Handle<EnvFilter, Registry>,
)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let (filter, handle) = reload::Layer::new(filter);
    let lines = tracing_subscriber::fmt::layer().with_writer(writer);
    let lines = if terminal {
        lines
    } else {
        lines.with_ansi(false)
    };
    let lines = match format {
        Format::Json => lines.json().boxed(),
        Format::Text => lines
            .compact()
            .with_target(false)
            .with_timer(WallClock)
            .boxed(),
    };
    let subscriber = tracing_subscriber::registry().with(lines.with_filter(filter.or(InfoSpans)));
    (subscriber, handle)
}

/// Keeps every span at `info` or above, whatever the filter says of its module (`RUST_LOG=warn`,
/// or the demo's `leasehold::agent=warn`): the lines inside it are still filtered, but those let
/// through carry its name and fields (`agent{cluster, identity}`, `operation{cluster,
/// operation}`).
struct InfoSpans;

impl InfoSpans {
    fn keeps(meta: &Metadata<'_>) -> bool {
        meta.is_span() && *meta.level() <= Level::INFO
    }
}

impl<S> Filter<S> for InfoSpans {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        Self::keeps(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if Self::keeps(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }
}

/// The time of a line for people: local wall-clock time to the millisecond (`14:03:07.215`).
struct WallClock;

impl FormatTime for WallClock {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        write!(w, "{}", jiff::Zoned::now().strftime("%H:%M:%S%.3f"))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn json_unless_a_terminal_or_asked() {
        assert_eq!(Format::choose(None, false), Ok(Format::Json));
        assert_eq!(Format::choose(None, true), Ok(Format::Text));
        assert_eq!(Format::choose(Some(""), true), Ok(Format::Text));
        assert_eq!(Format::choose(Some("json"), true), Ok(Format::Json));
        assert_eq!(Format::choose(Some("text"), false), Ok(Format::Text));
        let e = Format::choose(Some("pretty"), true).unwrap_err();
        assert_eq!(
            e,
            "LEASEHOLD_LOG_FORMAT=\"pretty\" is not a log format (json or text)"
        );
    }

    /// What a member of the demo logs through a subscriber filtered by `filter` (and then by
    /// `then`), in `format`: an `info` line per target and a warning, inside its `agent` span.
    fn member_logs(format: Format, filter: &str, then: &str) -> String {
        let written = Arc::new(Mutex::new(Vec::new()));
        let sink = written.clone();
        let writer = move || Sink(sink.clone());
        let (subscriber, handle) = subscriber(format, EnvFilter::new(filter), writer, false);
        let logs = Logs {
            filter: Some(handle),
        };
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: "app::agent", "agent", identity = "collector-1");
            let _in = span.enter();
            tracing::info!(target: "app::agent::member", target = "device-001", "starting work");
            tracing::warn!(target: "app::agent::member", targets = 100, "drain timeout");
            logs.set_default(then);
            tracing::warn!(target: "app::agent::member", targets = 99, "drain timeout");
        });
        String::from_utf8(written.lock().unwrap().clone()).unwrap()
    }

    /// A writer into a shared buffer.
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_names_its_span_when_the_filter_leaves_the_spans_module_out() {
        let text = member_logs(Format::Text, "info,app::agent=warn", "info,app::agent=warn");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        for (line, n) in lines.iter().zip([100, 99]) {
            assert!(
                line.contains(" WARN ")
                    && line.contains(&format!("drain timeout targets={n}"))
                    && line.ends_with("identity=\"collector-1\""),
                "{line}"
            );
        }
        let json = member_logs(Format::Json, "warn", "warn");
        let lines: Vec<serde_json::Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{json}");
        assert_eq!(lines[0]["span"]["identity"], "collector-1", "{json}");
        assert_eq!(lines[0]["target"], "app::agent::member", "{json}");
    }

    #[test]
    fn the_default_filter_can_be_replaced_as_the_command_runs() {
        let text = member_logs(
            Format::Text,
            "info,app::agent=warn",
            "info,app::agent=error",
        );
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("targets=100"), "{text}");
        let all = member_logs(Format::Text, "info", "info");
        assert_eq!(all.lines().count(), 3, "{all}");
    }
}

//! The history and operations store: Leasehold's only database boundary. It owns the connection
//! pool, the schema migrations (`migrations/sqlite`, `migrations/postgres`), the append-only
//! history of ownership changes, instance events and operation audit entries, the operations
//! with their moves, the cordon list, automation pauses, and idempotency keys with the
//! responses they replay.
//! Everything here is plain rows in, plain rows out.
//!
//! It must not: talk to Kubernetes, decide anything (the engine decides, this module records),
//! hold state outside the database, or log or return a database password (URLs are redacted by
//! [`redact_url`] before they reach a log line, an error or `Debug`).
//!
//! # One code path: sqlx's `Any` driver
//! SQLite (the embedded default) and PostgreSQL (HA) run the *same* SQL through `sqlx::AnyPool`
//! rather than an enum of two pools: every query here is written once, in the subset both
//! dialects accept (`$1` placeholders, which sqlx's SQLite driver maps by number;
//! `INSERT .. ON CONFLICT DO NOTHING`; `RETURNING`; `COUNT(CASE ..)`), so there is no
//! per-backend duplication to drift apart. The price is `Any`'s type set: times are `i64` unix
//! milliseconds, ids and JSON are `TEXT`, and integers are `BIGINT` on PostgreSQL. Only the DDL
//! differs, in the two migration folders. An enum of pools would have doubled every method (or
//! needed generic bounds over `sqlx::Database` far heavier than the SQL they guard).
//!
//! # Concurrency
//! Several control-plane replicas may share one PostgreSQL: ownership recording is idempotent
//! through a unique index, state changes are compare-and-set in one `UPDATE`, and every
//! transaction here starts with a write so SQLite takes its write lock up front (no lock
//! upgrade deadlocks) and waits on the busy timeout instead of failing.

mod automation;
mod churn;
mod cordons;
mod history;
mod idempotency;
mod operations;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sqlx::any::{Any, AnyArguments, AnyPoolOptions, AnyRow};
use sqlx::migrate::Migrator;
use sqlx::query::Query;
use sqlx::{AnyConnection, AnyPool};
use sqlx::{Executor as _, Row as _};

use crate::model::UnknownWord;

pub use automation::Pause;
pub use churn::FrequentMover;
pub use history::{HistoryEntry, HistoryKind, HistoryQuery, InstanceEvent, OwnershipChange};
pub use idempotency::{Claim, KeyRecord, KeyScope, StoredResponse};
pub use operations::{
    MoveCounts, MoveRecord, NewMove, NewOperation, Operation, OperationQuery, OperationSummary,
};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("migrations/postgres");

/// Largest page any listing returns.
pub const MAX_PAGE: u32 = 1000;
/// Page size when a query leaves `limit` at 0 (its `Default`).
pub const DEFAULT_PAGE: u32 = 100;

/// Errors at the store boundary. Messages never contain a database password.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is not `sqlite:..` or `postgres://..`.
    #[error("unsupported database URL {0}: expected sqlite:PATH, sqlite::memory: or postgres://..")]
    UnsupportedUrl(String),
    /// The first connection failed (the URL is redacted).
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    /// The lock that serialises SQLite migrations could not be taken (the URL is redacted).
    #[error("cannot take the migration lock beside {url}: {source}")]
    MigrationLock {
        url: String,
        #[source]
        source: std::io::Error,
    },
    /// Migrations failed (the URL is redacted).
    #[error("cannot migrate {url}: {source}")]
    Migrate {
        url: String,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// A query failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A pagination cursor that this store did not hand out (or for another listing).
    #[error("invalid cursor")]
    BadCursor,
    /// The operation (or move) does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The caller asked for something this store refuses (e.g. creating a running operation).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A stored value this build cannot read (an unknown word, broken JSON, a negative count).
    #[error("unreadable stored value: {0}")]
    Corrupt(String),
}

impl From<UnknownWord> for StoreError {
    fn from(e: UnknownWord) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}

/// Which database a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend a URL names, if any.
    pub fn of_url(url: &str) -> Option<Backend> {
        if url.starts_with("sqlite:") {
            Some(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else {
            None
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// One page of a listing, newest first. `next_cursor` is set when more items follow; pass it back
/// as the query's `cursor` for the next page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// The store: a cheap-to-clone handle on a connection pool.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// The URL with any password replaced (for logs and `Debug`).
    redacted_url: String,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not derived: the pool's Debug would print the connect options, password included.
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .field("url", &self.redacted_url)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Connects and runs the backend's migrations.
    ///
    /// - `sqlite:PATH` or `sqlite://PATH`: the file is created on first use; WAL journal, foreign
    ///   keys on, 5 s busy timeout. Extra sqlx query parameters (`?mode=ro`) are passed through.
    /// - `sqlite::memory:`: a private in-memory database (one connection, gone on drop).
    /// - `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?..]`: migrations take PostgreSQL's advisory
    ///   lock, so replicas starting together are safe.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        let redacted_url = redact_url(url);
        let backend =
            Backend::of_url(url).ok_or_else(|| StoreError::UnsupportedUrl(redacted_url.clone()))?;
        sqlx::any::install_default_drivers();

        let in_memory = backend == Backend::Sqlite && is_sqlite_memory(url);
        let mut options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(30));
        let connect_url = match backend {
            Backend::Postgres => {
                options = options.max_connections(10);
                url.to_owned()
            }
            Backend::Sqlite if in_memory => {
                // Each connection to `:memory:` is its own database: keep exactly one, forever.
                options = options
                    .max_connections(1)
                    .min_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None);
                url.to_owned()
            }
            Backend::Sqlite => {
                // SQLite has one writer at a time; a few connections serve concurrent readers.
                options = options.max_connections(4).after_connect(|conn, _meta| {
                    Box::pin(async move {
                        // Persistent in the file; `synchronous = NORMAL` is safe under WAL.
                        // (Foreign keys and the 5 s busy timeout are sqlx's defaults.)
                        conn.execute("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
                            .await?;
                        Ok(())
                    })
                });
                sqlite_create_if_missing(url)
            }
        };

        let pool = options
            .connect(&connect_url)
            .await
            .map_err(|source| StoreError::Connect {
                url: redacted_url.clone(),
                source,
            })?;
        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        // PostgreSQL migrations hold an advisory lock (sqlx); SQLite's take none, and two
        // replicas migrating one fresh file together collide ("table already exists"), so
        // they take turns under an OS lock on a file beside the database.
        let _turn =
            match backend {
                Backend::Sqlite if !in_memory => Some(migration_turn(url).await.map_err(
                    |source| StoreError::MigrationLock {
                        url: redacted_url.clone(),
                        source,
                    },
                )?),
                _ => None,
            };
        migrator
            .run(&pool)
            .await
            .map_err(|source| StoreError::Migrate {
                url: redacted_url.clone(),
                source,
            })?;
        tracing::info!(url = %redacted_url, backend = backend.as_str(), "history store ready");
        Ok(Store {
            pool,
            backend,
            redacted_url,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL this store was opened with, password redacted.
    pub fn url(&self) -> &str {
        &self.redacted_url
    }

    /// Closes every connection (waits for queries in flight). Later calls on any clone fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }
}

fn is_sqlite_memory(url: &str) -> bool {
    let rest = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    rest.starts_with(":memory:") || rest.contains("mode=memory")
}

/// Adds sqlx's `mode=rwc` (create the file if missing) unless the URL picks a mode itself.
/// The SQLite database file a `sqlite:` URL names.
fn sqlite_path(url: &str) -> &str {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    rest.split('?').next().unwrap_or(rest)
}

/// Waits for this process's turn to migrate the SQLite database at `url`: an exclusive OS lock
/// (`flock`) on `<file>-migrate.lock`, held until the returned file is dropped. The lock file
/// is left in place (removing a lock file races with the next taker).
async fn migration_turn(url: &str) -> std::io::Result<std::fs::File> {
    let path = format!("{}-migrate.lock", sqlite_path(url));
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        file.lock()?;
        Ok(file)
    })
    .await
    .map_err(std::io::Error::other)?
}

fn sqlite_create_if_missing(url: &str) -> String {
    match url.split_once('?') {
        Some((_, query)) if query.split('&').any(|p| p.starts_with("mode=")) => url.to_owned(),
        Some(_) => format!("{url}&mode=rwc"),
        None => format!("{url}?mode=rwc"),
    }
}

/// The URL with the password (if any) replaced by `***`, fit for logs and error messages. Also
/// hides a `password=` query parameter.
pub fn redact_url(url: &str) -> String {
    // The userinfo ends at the *last* '@' (an unescaped '/', '?' or '@' in a password must not
    // let it leak): over-redacting a path that holds an '@' is the safe failure.
    let hidden = match url.split_once("://") {
        Some((scheme, rest)) => match rest.rfind('@') {
            Some(at) => match rest[..at].split_once(':') {
                Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
                None => url.to_owned(),
            },
            None => url.to_owned(),
        },
        None => url.to_owned(),
    };
    match hidden.split_once('?') {
        Some((base, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_owned(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
        None => hidden,
    }
}

/// A database URL `server` with its database (path) replaced by `name`, query kept: for test
/// harnesses that create a database per run on one PostgreSQL server.
pub fn with_database(server: &str, name: &str) -> String {
    let (base, query) = match server.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (server, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// Now, as unix milliseconds (the unit of every time in this store).
pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// A requested page size: 0 (unset) is [`DEFAULT_PAGE`], anything else is capped at
/// [`MAX_PAGE`].
fn clamp_limit(limit: u32) -> i64 {
    match limit {
        0 => i64::from(DEFAULT_PAGE),
        n => i64::from(n.min(MAX_PAGE)),
    }
}

/// Encodes an opaque cursor: a tag naming the listing, then its key. (Also used by listings
/// served from the model, such as the API's target pages.)
pub(crate) fn encode_cursor(tag: &str, key: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{tag}:{key}"))
}

/// Decodes a cursor made by [`encode_cursor`] with the same tag, giving back its key.
pub(crate) fn decode_cursor(tag: &str, cursor: &str) -> Result<String, StoreError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor.trim())
        .map_err(|_| StoreError::BadCursor)?;
    let text = String::from_utf8(bytes).map_err(|_| StoreError::BadCursor)?;
    let key = text
        .strip_prefix(tag)
        .and_then(|k| k.strip_prefix(':'))
        .ok_or(StoreError::BadCursor)?;
    Ok(key.to_owned())
}

/// A bind value for SQL assembled at run time (filters). `Any` takes these two kinds.
#[derive(Debug, Clone)]
enum Arg {
    Int(i64),
    Text(String),
    OptText(Option<String>),
}

/// Dynamic SQL under construction: text plus its `$n` arguments, numbered as they are pushed.
#[derive(Debug, Default)]
struct Sql {
    text: String,
    args: Vec<Arg>,
    /// Kept prepared per connection (the default); off for statements whose text varies
    /// with their data (multi-row inserts), which would fill the statement cache.
    persistent: bool,
}

impl Sql {
    fn new(text: &str) -> Sql {
        Sql {
            text: text.to_owned(),
            args: Vec::new(),
            persistent: true,
        }
    }

    /// Not kept prepared: its text is one of many (see [`Sql::persistent`]).
    fn one_off(mut self) -> Sql {
        self.persistent = false;
        self
    }

    /// Appends SQL text (only ever string literals from this module: never user input).
    fn push(&mut self, text: &str) -> &mut Sql {
        self.text.push_str(text);
        self
    }

    /// Appends a placeholder for `arg` and returns its `$n`.
    fn arg(&mut self, arg: Arg) -> String {
        self.args.push(arg);
        format!("${}", self.args.len())
    }

    /// Appends `clause` with every `{}` replaced by the placeholder of one argument `arg`.
    fn filter(&mut self, clause: &str, arg: Arg) -> &mut Sql {
        let p = self.arg(arg);
        self.text.push_str(&clause.replace("{}", &p));
        self
    }

    fn query(self) -> Query<'static, Any, AnyArguments> {
        let mut q = sqlx::query(sqlx::AssertSqlSafe(self.text)).persistent(self.persistent);
        for a in self.args {
            q = match a {
                Arg::Int(i) => q.bind(i),
                Arg::Text(s) => q.bind(s),
                Arg::OptText(s) => q.bind(s),
            };
        }
        q
    }

    async fn fetch_all(self, store: &Store) -> Result<Vec<AnyRow>, StoreError> {
        Ok(self.query().fetch_all(store.pool()).await?)
    }

    async fn fetch_optional(self, conn: &mut AnyConnection) -> Result<Option<AnyRow>, StoreError> {
        Ok(self.query().fetch_optional(conn).await?)
    }

    /// Runs a statement; gives the number of rows it changed.
    async fn execute(self, conn: &mut AnyConnection) -> Result<u64, StoreError> {
        Ok(self.query().execute(conn).await?.rows_affected())
    }
}

/// Reads a column holding one of `model`'s words.
fn word<T: FromStr<Err = UnknownWord>>(row: &AnyRow, col: &str) -> Result<T, StoreError> {
    let s: String = row.try_get(col)?;
    Ok(s.parse()?)
}

/// Reads a nullable column holding one of `model`'s words.
fn opt_word<T: FromStr<Err = UnknownWord>>(
    row: &AnyRow,
    col: &str,
) -> Result<Option<T>, StoreError> {
    let s: Option<String> = row.try_get(col)?;
    Ok(s.map(|s| s.parse()).transpose()?)
}

/// Reads a non-negative integer column as `u32`.
fn u32_col(row: &AnyRow, col: &str) -> Result<u32, StoreError> {
    let v: i64 = row.try_get(col)?;
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("{col} = {v}")))
}

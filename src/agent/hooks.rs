//! What the member app is told when the agent starts or stops work on a target: a shell
//! command ([`CommandHooks`]), a local HTTP call ([`HttpHooks`]), nothing ([`NoHooks`]), or a
//! managed app the agent drives itself (`agent::gnmic`).
//! Every call names the target and the fencing generation of this member's hold on it
//! ([`Assignment`]). Hooks only report; the agent bounds every call with its hook timeout
//! (dropping the future, which kills a command) and decides what a failure means.

use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Which hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookEvent {
    /// The member now holds the target: start working on it.
    Acquire,
    /// The member is about to give the target up: stop working on it.
    Release,
    /// An overlap hand-off to this member: start working on the target before it is handed
    /// over, and answer once the work is proven ([`Hooks::prepares`]).
    Prepare,
    /// The overlap hand-off did not happen (moved elsewhere, authority lost, stopping): undo
    /// the prepare.
    Unprepare,
}

impl HookEvent {
    /// The word used in `LEASEHOLD_EVENT` and in hook URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::Acquire => "acquire",
            HookEvent::Release => "release",
            HookEvent::Prepare => "prepare",
            HookEvent::Unprepare => "unprepare",
        }
    }
}

/// One member's hold on one target, as its hooks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The target's key.
    pub target: String,
    /// The fencing generation: the target Lease's `leaseTransitions` as this member's acquiring
    /// write left it. Every acquisition of the Lease, by any member, writes a larger one, so an
    /// app can fence its writes to a database or device: accept a write only with a generation
    /// at least the largest it has seen for the target, and a stale owner's writes are
    /// refused. It starts again at 0 only if the Lease is deleted and created anew (the
    /// target left the configuration and came back).
    pub generation: u64,
    /// When this member's authority to work ends unless it is renewed meanwhile, as it stood
    /// when the call was made: milliseconds since the Unix epoch by this machine's clock
    /// (`None`: the member holds no authority now). An app that must never work beside another
    /// member, even when its agent stalls, stops all its work once this passes without fresher
    /// news — the agent's `--authority-listen` endpoint gives the current value
    /// (`docs/protocol.md`, "Hooks").
    pub deadline_unix_ms: Option<i64>,
}

impl Assignment {
    /// `target` held at `lease`'s generation, under authority until `deadline_unix_ms`.
    pub fn of(
        target: &str,
        lease: &k8s_openapi::api::coordination::v1::Lease,
        deadline_unix_ms: Option<i64>,
    ) -> Assignment {
        let transitions = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_transitions)
            .unwrap_or(0);
        Assignment {
            target: target.to_owned(),
            generation: u64::try_from(transitions).unwrap_or(0),
            deadline_unix_ms,
        }
    }
}

/// The member app's side of the protocol. Implementations must not borrow `work` in the
/// returned future (clone what they need). An `Err` is logged by the agent with the target.
pub trait Hooks: Send + Sync + 'static {
    /// Start working on `work.target` (called after the Lease was acquired).
    fn on_acquire(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>>;
    /// Stop working on `work.target` (called before the Lease is released or given up).
    fn on_release(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>>;
    /// Whether a release that returns `Ok` is proof the work stopped, and an `Err` (or a
    /// timeout) means it may go on. Then the agent hands a target over only after an `Ok`:
    /// on a failure it keeps the target and asks again. Otherwise (the default, for hooks that
    /// only report) a failed release is logged and the hand-over goes ahead.
    fn confirms_stop(&self) -> bool {
        false
    }
    /// The app's own account of the work it does, for apps the agent can ask (managed gnmic):
    /// written on the member Lease at each renewal, so that the control plane can tell held
    /// targets that are worked on from those that are not.
    fn work(&self) -> Option<crate::protocol::AppWork> {
        None
    }
    /// When (Unix ms) the app last worked on `work` (its target at its generation), if it
    /// knows — asked for a hand-over after a proven stop (`confirms_stop`) and written with it
    /// (`leasehold.io/stopped-at`), so history can record the hand-off's work-level gap. The
    /// scrape kind answers its scraper's last scrape of the target.
    fn last_worked_ms(&self, _work: &Assignment) -> Option<i64> {
        None
    }
    /// Whether calls go under the member's adaptive limit of hook calls (the default: a
    /// command hook starts a process per call, an HTTP hook a request, and thousands at once
    /// starve the machine). Hooks whose calls are cheap in-process work that waits on purpose
    /// (the scrape kind: a stop or start call waits up to 500 ms for its scraper's proof) say
    /// `false`: a deliberate wait is not an overwhelmed app, and limiting such calls would delay
    /// the delisting each one begins with.
    fn limited(&self) -> bool {
        true
    }
    /// Whether the app can start on a target before its hand-over and prove it works
    /// ([`on_prepare`](Hooks::on_prepare)): then this member takes part in overlap hand-offs
    /// as the next owner (docs/protocol.md, "Overlap hand-off"). Otherwise (the default) it
    /// waits for the hand-over, and the holder, given no proof, stops first once its bound
    /// passed.
    fn prepares(&self) -> bool {
        false
    }
    /// Start working on `work.target` ahead of its hand-over (at the generation the hand-over
    /// will give) and answer `Ok` once the work is proven, or `Err` when not yet: asked again
    /// at the member's next pass, at least 200 ms later (a call may wait for its proof a while
    /// itself, as the scrape kind's does, up to 500 ms).
    fn on_prepare(&self, _work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        futures::future::ready(Err("this app cannot start ahead of a hand-over".to_owned())).boxed()
    }
    /// Undo [`on_prepare`](Hooks::on_prepare): the target was not handed to this member.
    fn on_unprepare(&self, _work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        futures::future::ready(Ok(())).boxed()
    }
}

impl dyn Hooks {
    /// Calls the hook for `event`.
    pub fn call(&self, event: HookEvent, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        match event {
            HookEvent::Acquire => self.on_acquire(work),
            HookEvent::Release => self.on_release(work),
            HookEvent::Prepare => self.on_prepare(work),
            HookEvent::Unprepare => self.on_unprepare(work),
        }
    }
}

/// Hooks that do nothing (the app watches Leases itself, or there is no app).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {
    fn on_acquire(&self, _work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        futures::future::ready(Ok(())).boxed()
    }
    fn on_release(&self, _work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        futures::future::ready(Ok(())).boxed()
    }
}

/// Runs a shell command (`sh -c`) per event with `LEASEHOLD_TARGET`, `LEASEHOLD_EVENT`
/// (`acquire` | `release`), `LEASEHOLD_GENERATION` (the fencing generation, see
/// [`Assignment::generation`]), `LEASEHOLD_DEADLINE_UNIX_MS` (see
/// [`Assignment::deadline_unix_ms`]; empty without authority), `LEASEHOLD_CLUSTER` and
/// `LEASEHOLD_INSTANCE` in its environment.
/// A non-zero exit is an error; a missing command for an event means success. Output goes to
/// the agent's own stdout/stderr.
#[derive(Debug, Clone)]
pub struct CommandHooks {
    /// Command run on acquire.
    pub on_acquire: Option<String>,
    /// Command run on release.
    pub on_release: Option<String>,
    /// The cluster name passed as `LEASEHOLD_CLUSTER`.
    pub cluster: String,
    /// The member's identity passed as `LEASEHOLD_INSTANCE`.
    pub instance: String,
}

impl CommandHooks {
    async fn run(&self, event: HookEvent, work: Assignment) -> Result<(), String> {
        let cmd = match event {
            HookEvent::Acquire => &self.on_acquire,
            HookEvent::Release => &self.on_release,
            // Command hooks do not prepare (`Hooks::prepares`): never called.
            HookEvent::Prepare | HookEvent::Unprepare => &None,
        };
        let Some(cmd) = cmd else {
            return Ok(());
        };
        let status = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .env("LEASEHOLD_TARGET", &work.target)
            .env("LEASEHOLD_EVENT", event.as_str())
            .env("LEASEHOLD_GENERATION", work.generation.to_string())
            .env(
                "LEASEHOLD_DEADLINE_UNIX_MS",
                work.deadline_unix_ms
                    .map_or(String::new(), |d| d.to_string()),
            )
            .env("LEASEHOLD_CLUSTER", &self.cluster)
            .env("LEASEHOLD_INSTANCE", &self.instance)
            .stdin(std::process::Stdio::null())
            // A timed-out hook is dropped; the child must die with it.
            .kill_on_drop(true)
            .status()
            .await
            .map_err(|e| format!("{} hook could not start: {e}", event.as_str()))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{} hook exited with {status}", event.as_str()))
        }
    }
}

impl Hooks for CommandHooks {
    fn on_acquire(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.run(HookEvent::Acquire, work.clone()).boxed()
    }
    fn on_release(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.run(HookEvent::Release, work.clone()).boxed()
    }
}

/// POSTs `{"target", "generation", "deadline_unix_ms", "cluster", "instance"}` as JSON to a local HTTP URL per event. The URL
/// may contain `{event}` (replaced by `acquire` or `release`); otherwise `/{event}` is
/// appended. A non-2xx answer is an error. Plain `http://` only: the app is a local sidecar
/// peer, reached over loopback.
#[derive(Debug, Clone)]
pub struct HttpHooks {
    url: String,
    cluster: String,
    instance: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl HttpHooks {
    /// Hooks posting to `url` (see the type's doc for `{event}`).
    pub fn new(url: &str, cluster: &str, instance: &str) -> Self {
        Self {
            url: url.to_owned(),
            cluster: cluster.to_owned(),
            instance: instance.to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// The URL called for `event`.
    pub fn url_for(&self, event: HookEvent) -> String {
        if self.url.contains("{event}") {
            self.url.replace("{event}", event.as_str())
        } else {
            format!("{}/{}", self.url.trim_end_matches('/'), event.as_str())
        }
    }

    async fn post(&self, event: HookEvent, work: Assignment) -> Result<(), String> {
        let url = self.url_for(event);
        let body = serde_json::json!({
            "target": work.target,
            "generation": work.generation,
            "deadline_unix_ms": work.deadline_unix_ms,
            "cluster": self.cluster,
            "instance": self.instance,
        });
        let req = http::Request::post(&url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| format!("{} hook: bad request to {url}: {e}", event.as_str()))?;
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| format!("{} hook: POST {url}: {e}", event.as_str()))?;
        let status = resp.status();
        // Drain the body so the connection can be reused.
        let _ = resp.into_body().collect().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!(
                "{} hook: POST {url} answered {status}",
                event.as_str()
            ))
        }
    }
}

impl Hooks for HttpHooks {
    fn on_acquire(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.post(HookEvent::Acquire, work.clone()).boxed()
    }
    fn on_release(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.post(HookEvent::Release, work.clone()).boxed()
    }
}

/// Runs `event`'s hook for `work`, bounded by `timeout`.
pub(crate) async fn call_bounded(
    hooks: Arc<dyn Hooks>,
    event: HookEvent,
    work: Assignment,
    timeout: std::time::Duration,
) -> Result<(), String> {
    match tokio::time::timeout(timeout, hooks.call(event, &work)).await {
        Ok(res) => res,
        Err(_) => Err(format!(
            "{} hook timed out after {timeout:?}",
            event.as_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_urls() {
        let h = HttpHooks::new("http://127.0.0.1:8080/leasehold/", "c", "m-0");
        assert_eq!(
            h.url_for(HookEvent::Acquire),
            "http://127.0.0.1:8080/leasehold/acquire"
        );
        let h = HttpHooks::new("http://127.0.0.1:8080/hook?event={event}", "c", "m-0");
        assert_eq!(
            h.url_for(HookEvent::Release),
            "http://127.0.0.1:8080/hook?event=release"
        );
    }

    fn work(target: &str, generation: u64) -> Assignment {
        Assignment {
            target: target.into(),
            generation,
            deadline_unix_ms: Some(1_700_000_000_123),
        }
    }

    #[tokio::test]
    async fn commands_see_their_environment_and_fail_on_nonzero_exit() {
        let hooks = CommandHooks {
            on_acquire: Some(
                r#"test "$LEASEHOLD_TARGET/$LEASEHOLD_EVENT/$LEASEHOLD_GENERATION/$LEASEHOLD_DEADLINE_UNIX_MS/$LEASEHOLD_CLUSTER/$LEASEHOLD_INSTANCE" = "Spine/1/acquire/7/1700000000123/c/m-0""#
                    .into(),
            ),
            on_release: Some("exit 3".into()),
            cluster: "c".into(),
            instance: "m-0".into(),
        };
        assert_eq!(hooks.on_acquire(&work("Spine/1", 7)).await, Ok(()));
        assert!(hooks.on_acquire(&work("Spine/1", 8)).await.is_err());
        assert!(hooks.on_acquire(&work("other", 7)).await.is_err());
        let err = hooks.on_release(&work("Spine/1", 7)).await.unwrap_err();
        assert!(err.contains("exit status: 3"), "{err}");
    }

    #[test]
    fn the_generation_is_the_lease_transitions() {
        let mut lease = k8s_openapi::api::coordination::v1::Lease::default();
        let until = Some(1_700_000_000_123);
        assert_eq!(Assignment::of("t", &lease, until), work("t", 0));
        lease.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            lease_transitions: Some(41),
            ..Default::default()
        });
        assert_eq!(Assignment::of("t", &lease, until), work("t", 41));
    }

    #[tokio::test]
    async fn a_hanging_hook_is_cut_off_at_the_timeout() {
        let hooks: Arc<dyn Hooks> = Arc::new(CommandHooks {
            on_acquire: Some("sleep 30".into()),
            on_release: None,
            cluster: "c".into(),
            instance: "m-0".into(),
        });
        let started = std::time::Instant::now();
        let err = call_bounded(
            hooks.clone(),
            HookEvent::Acquire,
            work("t", 0),
            std::time::Duration::from_millis(200),
        )
        .await
        .unwrap_err();
        assert!(err.contains("timed out"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(
            call_bounded(
                hooks,
                HookEvent::Release,
                work("t", 0),
                std::time::Duration::from_millis(200)
            )
            .await,
            Ok(())
        );
    }
}

//! The one thread on which the engine builds, decides on and frees its cluster models (`views`,
//! `control`, the planner's plans): CPU-bound work kept off the async workers, as
//! `spawn_blocking` would keep it — but always on the same thread.
//!
//! Why one thread: a model of 50,000 targets is some 8 MB of small allocations. Built on one
//! thread of tokio's blocking pool and freed on another, its memory goes back to the building
//! thread's heap (the allocator's, per thread) only when that thread allocates again, and an
//! idle pool thread keeps it until it exits, 10 s later. Each model a reader or the control
//! loop built then added its size to the control plane's RSS for seconds: at 50,000 targets
//! the RSS of a quiet control plane climbed a model at a time, and while placing them it
//! peaked at 2.5–3× the live heap (docs/benchmarks.md). Built and freed on one thread, a
//! model's pages serve the next build at once.
//!
//! Jobs run one at a time, in the order given; at 50,000 targets a build is ~30 ms and the
//! control loop keeps building to a fifth of a core (`control::BUSY_FACTOR`), so a reader waits
//! for at most a build or a decision ahead of its own. A panic in a job is its caller's panic.
//! The thread ends once the engine is dropped (the last sender with it) and the queue is empty.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

/// The engine's model thread: cheap to clone, every clone queues on the same thread.
#[derive(Debug, Clone)]
pub(super) struct ModelThread {
    jobs: mpsc::Sender<Job>,
}

impl ModelThread {
    /// Starts the thread (named `leasehold-models`).
    ///
    /// # Panics
    /// If the OS refuses a new thread (at start-up, out of resources).
    pub(super) fn start() -> ModelThread {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("leasehold-models".into())
            .spawn(move || {
                for job in queue {
                    job();
                }
            })
            .expect("the OS refused the engine's model thread");
        ModelThread { jobs }
    }

    /// Runs `f` on the thread and returns what it returned. Dropping the future does not stop
    /// `f`; its result is then freed on the thread.
    pub(super) async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(f));
            // The caller gave up: what `f` returned is freed here, with the rest.
            drop(tx.send(outcome));
        });
        assert!(self.jobs.send(job).is_ok(), "the model thread has ended");
        match rx.await {
            Ok(Ok(value)) => value,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => unreachable!("a job sends its outcome, panic or not"),
        }
    }

    /// Frees `value` on the thread (where what it holds was built), without waiting.
    pub(super) fn free<T: Send + 'static>(&self, value: T) {
        // The thread is gone only when the engine is: `value` is then freed here.
        drop(self.jobs.send(Box::new(move || drop(value))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_job_runs_on_the_one_thread_in_order() {
        let models = ModelThread::start();
        let mut seen = Vec::new();
        for i in 0..4 {
            seen.push(models.run(move || (i, std::thread::current().id())).await);
        }
        let here = std::thread::current().id();
        assert!(
            seen.iter().all(|(_, t)| *t == seen[0].1 && *t != here),
            "{seen:?}"
        );
        assert_eq!(
            seen.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
    }

    #[tokio::test]
    async fn what_is_freed_is_dropped_on_the_thread() {
        struct Noted(std::sync::mpsc::Sender<std::thread::ThreadId>);
        impl Drop for Noted {
            fn drop(&mut self) {
                let _ = self.0.send(std::thread::current().id());
            }
        }
        let models = ModelThread::start();
        let runs_on = models.run(|| std::thread::current().id()).await;
        let (tx, rx) = std::sync::mpsc::channel();
        models.free(Noted(tx));
        let dropped_on = tokio::task::spawn_blocking(move || rx.recv().expect("dropped"))
            .await
            .unwrap();
        assert_eq!(dropped_on, runs_on);
    }

    #[tokio::test]
    async fn a_panic_in_a_job_is_the_callers_and_the_thread_goes_on() {
        let models = ModelThread::start();
        let m = models.clone();
        let panicked = tokio::spawn(async move { m.run(|| panic!("in a job")).await });
        assert!(panicked.await.unwrap_err().is_panic());
        assert_eq!(models.run(|| 7).await, 7);
    }
}

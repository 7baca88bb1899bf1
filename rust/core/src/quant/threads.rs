//! The rayon pool every codec runs in. `FOURCAST_THREADS` (read once, at first
//! use) caps its size; unset or invalid means rayon's default (one per core).

use rayon::{ThreadPool, ThreadPoolBuilder};
use std::sync::OnceLock;

static POOL: OnceLock<ThreadPool> = OnceLock::new();

/// Number of threads asked for by `FOURCAST_THREADS`, if any.
pub fn requested_threads() -> Option<usize> {
    std::env::var("FOURCAST_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
}

/// The shared pool (built on first use).
pub fn pool() -> &'static ThreadPool {
    POOL.get_or_init(|| {
        let mut b = ThreadPoolBuilder::new().thread_name(|i| format!("fourcast-{i}"));
        if let Some(n) = requested_threads() {
            b = b.num_threads(n);
        }
        b.build().unwrap_or_else(|_| {
            ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .expect("a one-thread pool always builds")
        })
    })
}

/// Run `f` inside the pool.
pub fn run<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    pool().install(f)
}

/// Threads the pool uses.
pub fn threads() -> usize {
    pool().current_num_threads()
}

//! The tokio runtimes the commands run on: the service's, sized by `--worker-threads`,
//! and a plain one for the commands that call a service.

/// A multi-threaded tokio runtime for the commands that need one.
pub(super) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Runtime::new().map_err(|e| format!("cannot start the runtime: {e}"))
}

/// The service's runtime: `workers` async threads, else half the CPUs; with 0, or by
/// default where half the CPUs is one or none, tokio's current-thread runtime: one thread
/// serves everything, with no worker to hand work to or wake, the cheapest per answer where
/// one worker would do (see `--worker-threads`).
pub(super) fn serve_runtime(workers: Option<u16>) -> Result<tokio::runtime::Runtime, String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = workers.map_or(default_workers(cpus), usize::from);
    let mut builder = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut multi = tokio::runtime::Builder::new_multi_thread();
        multi.worker_threads(workers);
        multi
    };
    builder
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// `--worker-threads` when not given: half of `cpus`, or 0 (one thread) where that is one
/// or none.
fn default_workers(cpus: usize) -> usize {
    match cpus / 2 {
        0 | 1 => 0,
        half => half,
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_workers_is_the_current_thread_runtime_and_more_is_multi_threaded() {
        use tokio::runtime::RuntimeFlavor;
        let flavor = |workers| {
            serve_runtime(workers)
                .expect("a runtime")
                .handle()
                .runtime_flavor()
        };
        assert_eq!(flavor(Some(0)), RuntimeFlavor::CurrentThread);
        assert_eq!(flavor(Some(1)), RuntimeFlavor::MultiThread);
        assert_eq!(flavor(Some(3)), RuntimeFlavor::MultiThread);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = u16::try_from(default_workers(cpus)).expect("fits");
        assert_eq!(flavor(None), flavor(Some(workers)));
    }

    #[test]
    fn the_default_is_one_thread_up_to_three_cpus_then_half_of_them() {
        let defaults: Vec<usize> = [1, 2, 3, 4, 5, 16].map(default_workers).to_vec();
        assert_eq!(defaults, [0, 0, 0, 2, 2, 8]);
    }
}

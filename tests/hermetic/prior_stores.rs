//! The position prior's state-dir file when it cannot be read: the service keeps serving
//! (the file never makes it unready), says so in `/readyz` and on `/metrics`, moves the file aside and learns afresh.

use crate::support;
use crate::support::fake_vllm::FakeVllm;
use crate::support::prior::{learn_until_corrected, plant_two, samples, synced};
use crate::support::replicas::{unique_prefix, Stoppable};

/// What a service started with `flags` learned into `dir` (its `--state-dir`), then `spoil`
/// applied to its file.
async fn spoiled_state_dir(
    fake: &FakeVllm,
    flags: &[&str],
    dir: &std::path::Path,
    spoil: impl Fn(&[u8]) -> Vec<u8>,
) {
    let config = support::config(&fake.base_url(), flags);
    let first = Stoppable::start(systemone::build_state(&config).expect("state")).await;
    learn_until_corrected(&first.service, 0).await;
    synced(&first.service, "file").await;
    first.stop().await;
    let path = dir.join("prior.redb");
    let bytes = std::fs::read(&path).expect("the prior's file");
    std::fs::write(&path, spoil(&bytes)).expect("spoiled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prior_file_that_cannot_be_read_is_reported_moved_aside_and_learned_afresh() {
    let fake = FakeVllm::start().await;
    plant_two(&fake);
    type Spoil = fn(&[u8]) -> Vec<u8>;
    let spoils: [(&str, Spoil); 2] = [
        ("truncated", |b| b[..b.len() / 2].to_vec()),
        ("random", |b| {
            (0..b.len()).map(|i| (i * 7919 % 251) as u8).collect()
        }),
    ];
    for (what, spoil) in spoils {
        let dir = std::env::temp_dir().join(format!("systemone-prior-{}", unique_prefix()));
        let dir_flag = dir.to_str().expect("utf-8");
        let flags = crate::support::prior::syncing(&["--state-dir", dir_flag]);
        spoiled_state_dir(&fake, &flags, &dir, spoil).await;

        let config = support::config(&fake.base_url(), &flags);
        let again = Stoppable::start(systemone::build_state(&config).expect("starts")).await;
        let service = &again.service;
        synced(service, "file").await;
        let ready = support::get(service, "/readyz").await;
        let prior = &ready.body["prior"];
        assert_eq!(prior["store"], "file", "{what}: {prior}");
        assert_eq!(prior["set_aside"], 1, "{what}: {prior}");
        assert_eq!(prior["synced"], true, "{what}: {prior}");
        let last = prior["last_set_aside"].as_str().unwrap_or_default();
        assert!(
            last.starts_with("unreadable: prior.redb (now prior.redb.unreadable-"),
            "{what}: {last}"
        );
        let metrics = support::metrics(service).await;
        let line = "systemone_prior_store_set_aside_total{reason=\"unreadable\",store=\"file\"} 1";
        assert!(metrics.contains(line), "{what}: {line} not in {metrics}");
        let aside = std::fs::read_dir(&dir)
            .expect("the dir")
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("prior.redb.unreadable-")
            })
            .count();
        assert_eq!(aside, 1, "{what}: moved aside, kept");
        assert_eq!(samples(service), 0, "{what}: nothing old is served");
        learn_until_corrected(service, 1000).await;
        synced(service, "file").await;
        assert!(samples(service) >= 4, "{what}: learned afresh");
        let ready = support::get(service, "/readyz").await;
        assert_eq!(
            ready.body["prior"]["set_aside"], 1,
            "{what}: the new file reads"
        );
        again.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

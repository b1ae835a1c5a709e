//! Rendezvous (highest-random-weight) hashing with bounded load, pure: which replica a key
//! goes to, and the order it tries the others in.
//!
//! Every replica gets a weight for the key, `mix(key ^ seed)`, where the seed is a hash of
//! the replica's URL; the key's order is the replicas by weight, highest first. Adding or
//! removing a replica moves only the keys whose first choice it is or becomes (about 1/n of
//! them), and two gateways with the same URLs in any order agree on every key.
//!
//! Bounded load (Mirrokni, Thorup and Zadimoghaddam, "Consistent Hashing with Bounded
//! Loads", 2018): a replica takes the request only while its requests in flight are under
//! `ceil(factor × mean)`, the mean counting the new request; else the next in the key's
//! order. With a factor of at least 1 some replica is always under it.

use sha2::{Digest, Sha256};

/// A replica's seed: the first 8 bytes of SHA-256 of its URL (stable across processes).
pub(super) fn seed(url: &str) -> u64 {
    let digest = Sha256::digest(url.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// SplitMix64's finaliser: every input bit moves every output bit, so the weights of one
/// key across replicas are as good as independent.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The replicas (by index into `seeds`) in `key`'s order: highest weight first (ties, which
/// need equal seeds, by index).
pub(super) fn order(key: u64, seeds: &[u64]) -> Vec<usize> {
    let mut ranked: Vec<(u64, usize)> = seeds
        .iter()
        .enumerate()
        .map(|(i, s)| (mix(key ^ s), i))
        .collect();
    ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    ranked.into_iter().map(|(_, i)| i).collect()
}

/// The most requests a replica may have in flight and still take one more: `ceil(factor ×
/// (in_flight + 1) / replicas)`, at least 1.
pub(super) fn capacity(factor: f64, in_flight_total: usize, replicas: usize) -> usize {
    let mean = (in_flight_total as f64 + 1.0) / replicas.max(1) as f64;
    ((factor * mean).ceil() as usize).max(1)
}

/// `order` with the replicas under capacity first (in order), then the others (in order):
/// the order one request tries, given each replica's requests in flight (`loads`, by
/// index) among the `order`'s replicas.
pub(super) fn bounded(order: &[usize], loads: &[usize], factor: f64) -> Vec<usize> {
    let total: usize = order.iter().map(|i| loads[*i]).sum();
    let cap = capacity(factor, total, order.len());
    let (under, over): (Vec<usize>, Vec<usize>) = order.iter().partition(|i| loads[**i] < cap);
    under.into_iter().chain(over).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds(n: usize) -> Vec<u64> {
        (0..n)
            .map(|i| seed(&format!("http://10.0.0.{i}:8000/v1")))
            .collect()
    }

    #[test]
    fn keys_spread_evenly_and_agree_whatever_the_list_order() {
        let s = seeds(3);
        let mut counts = [0usize; 3];
        for key in 0..30_000u64 {
            counts[order(mix(key), &s)[0]] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
        // Another gateway lists the same URLs in another order: same first choice by URL.
        let reversed: Vec<u64> = s.iter().rev().copied().collect();
        for key in 0..1_000u64 {
            let here = order(mix(key), &s)[0];
            let there = order(mix(key), &reversed)[0];
            assert_eq!(here, 2 - there);
        }
    }

    #[test]
    fn removing_a_replica_moves_only_its_own_keys() {
        let four = seeds(4);
        let three = &four[..3];
        let mut moved = 0;
        for key in 0..10_000u64 {
            let before = order(mix(key), &four)[0];
            let after = order(mix(key), three)[0];
            if before != 3 {
                assert_eq!(before, after, "key {key} moved off a replica that stayed");
            } else {
                moved += 1;
            }
        }
        assert!((2_000..3_000).contains(&moved), "{moved}");
    }

    #[test]
    fn bounded_load_skips_a_replica_past_the_factor_of_the_mean() {
        // Nothing in flight: the first choice takes it.
        assert_eq!(bounded(&[2, 0, 1], &[0, 0, 0], 1.25), [2, 0, 1]);
        // 4 in flight, all on replica 2: cap = ceil(1.25 × 5 / 3) = 3, so 2 goes last.
        assert_eq!(bounded(&[2, 0, 1], &[0, 0, 4], 1.25), [0, 1, 2]);
        // At the cap exactly (3 of 3 with 1 elsewhere): still full.
        assert_eq!(capacity(1.25, 4, 3), 3);
        assert_eq!(bounded(&[2, 0, 1], &[1, 0, 3], 1.25), [0, 1, 2]);
        // Under it: stays first.
        assert_eq!(bounded(&[2, 0, 1], &[1, 1, 2], 1.25), [2, 0, 1]);
        // One replica: always itself.
        assert_eq!(bounded(&[0], &[100], 1.25), [0]);
    }

    /// One hot key: with the factor's bound, no replica carries more than ⌈factor × mean⌉
    /// of the requests in flight however many arrive before any finishes.
    #[test]
    fn a_hot_key_never_loads_a_replica_past_the_bound() {
        let s = seeds(3);
        let hot = order(mix(42), &s);
        let mut loads = [0usize; 3];
        for n in 0..300usize {
            let pick = bounded(&hot, &loads, 1.25)[0];
            assert!(loads[pick] < capacity(1.25, n, 3));
            loads[pick] += 1;
        }
        let mean: f64 = 100.0;
        for l in loads {
            assert!(l as f64 <= (1.25 * mean).ceil(), "{loads:?}");
        }
    }
}

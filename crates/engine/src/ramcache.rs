//! The RAM tier of the prompt cache: sequence states (`kv_pack` snapshots) of prefixes that no
//! sequence holds any more, kept in host memory within a byte budget (llama-server's
//! `--cache-ram`). When the scheduler gives a sequence to a request that shares little with
//! what it holds, the old content is parked here first; a later request sharing it restores it
//! with `kv_unpack` instead of a prefill.
//!
//! Entries are found by their longest common token prefix with a prompt computed under the
//! same LoRA adapter set: a prefix computed under one set is never offered to another. A linear scan is
//! enough here: the budget bounds the entries to tens or hundreds, each compared only as far as
//! it shares a prefix.

use wick_backend::AdapterSet;
use wick_types::TokenId;

use crate::diskcache::Reuse;

/// One parked sequence.
#[derive(Debug)]
struct Entry {
    tokens: Vec<TokenId>,
    /// The adapters its cells were computed under.
    adapters: AdapterSet,
    snapshot: Vec<u8>,
    last_used: u64,
}

/// Parked sequence states, least recently used evicted first.
#[derive(Debug)]
pub(crate) struct RamCache {
    entries: Vec<Entry>,
    bytes: u64,
    budget: u64,
    clock: u64,
}

impl RamCache {
    /// An empty tier holding at most `budget` bytes of snapshots.
    pub(crate) fn new(budget: u64) -> Self {
        RamCache {
            entries: Vec::new(),
            bytes: 0,
            budget,
            clock: 0,
        }
    }

    /// Whether the tier keeps anything at all.
    pub(crate) fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// Bytes held now.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether some entry already holds `tokens` under `adapters` (or a longer sequence
    /// starting with them).
    pub(crate) fn covers(&self, tokens: &[TokenId], adapters: &AdapterSet) -> bool {
        self.entries
            .iter()
            .any(|e| e.adapters == *adapters && e.tokens.starts_with(tokens))
    }

    /// The entry computed under `adapters` sharing the longest prefix with `prompt` that
    /// `reuse` allows (at most `limit` tokens), when that prefix is longer than `better_than`:
    /// its index and the shared length.
    pub(crate) fn best(
        &self,
        prompt: &[TokenId],
        adapters: &AdapterSet,
        reuse: Reuse,
        limit: usize,
        better_than: usize,
    ) -> Option<(usize, usize)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.adapters == *adapters)
            .map(|(i, e)| (i, reuse.shared(&e.tokens, &[], prompt, limit)))
            .filter(|&(_, len)| len > better_than)
            .max_by_key(|&(i, len)| (len, self.entries[i].last_used))
    }

    /// The snapshot of entry `index`, marked as just used.
    pub(crate) fn get(&mut self, index: usize) -> &[u8] {
        self.clock += 1;
        let entry = &mut self.entries[index];
        entry.last_used = self.clock;
        &entry.snapshot
    }

    /// Removes entry `index` (a snapshot the backend refused).
    pub(crate) fn remove(&mut self, index: usize) {
        let entry = self.entries.swap_remove(index);
        self.bytes -= entry.snapshot.len() as u64;
    }

    /// Parks `snapshot` of `tokens` computed under `adapters`; entries of the same set it
    /// extends are dropped (it holds them), and the least recently used ones go until the
    /// budget holds. Returns how many were evicted.
    pub(crate) fn insert(
        &mut self,
        tokens: Vec<TokenId>,
        adapters: AdapterSet,
        snapshot: Vec<u8>,
    ) -> u64 {
        let size = snapshot.len() as u64;
        if size > self.budget || self.covers(&tokens, &adapters) {
            return 0;
        }
        let mut freed = 0;
        self.entries.retain(|e| {
            let superseded = e.adapters == adapters && tokens.starts_with(&e.tokens);
            if superseded {
                freed += e.snapshot.len() as u64;
            }
            !superseded
        });
        self.bytes -= freed;
        let mut evicted = 0;
        while self.bytes + size > self.budget {
            let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used)
            else {
                break;
            };
            self.remove(oldest);
            evicted += 1;
        }
        self.clock += 1;
        self.bytes += size;
        self.entries.push(Entry {
            tokens,
            adapters,
            snapshot,
            last_used: self.clock,
        });
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn base() -> AdapterSet {
        AdapterSet::default()
    }

    fn toks(ids: &[u32]) -> Vec<TokenId> {
        ids.iter().copied().map(TokenId).collect()
    }

    #[test]
    fn finds_the_longest_shared_prefix_and_skips_short_ones() {
        let mut cache = RamCache::new(1000);
        cache.insert(toks(&[1, 2, 3, 4]), base(), vec![0; 10]);
        cache.insert(toks(&[1, 2, 9]), base(), vec![0; 10]);
        let prompt = toks(&[1, 2, 3, 7]);
        assert_eq!(
            cache.best(&prompt, &base(), Reuse::AnyPrefix, 4, 0),
            Some((0, 3))
        );
        assert_eq!(
            cache.best(&prompt, &base(), Reuse::AnyPrefix, 2, 0),
            Some((1, 2)),
            "a tie goes to the most recently used"
        );
        assert_eq!(
            cache.best(&prompt, &base(), Reuse::AnyPrefix, 4, 3),
            None,
            "not better than 3"
        );
    }

    #[test]
    fn a_longer_sequence_supersedes_its_prefixes_and_a_covered_one_is_not_stored() {
        let mut cache = RamCache::new(1000);
        cache.insert(toks(&[1, 2]), base(), vec![0; 10]);
        cache.insert(toks(&[1, 2, 3]), base(), vec![0; 20]);
        assert_eq!(cache.entries.len(), 1);
        assert_eq!(cache.bytes(), 20);
        assert_eq!(cache.insert(toks(&[1, 2]), base(), vec![0; 10]), 0);
        assert_eq!(cache.entries.len(), 1, "[1, 2] is covered by [1, 2, 3]");
    }

    #[test]
    fn the_least_recently_used_entries_go_first() {
        let mut cache = RamCache::new(30);
        cache.insert(toks(&[1]), base(), vec![0; 10]);
        cache.insert(toks(&[2]), base(), vec![0; 10]);
        cache.insert(toks(&[3]), base(), vec![0; 10]);
        let _ = cache.get(0); // [1] is used again
        assert_eq!(cache.insert(toks(&[4]), base(), vec![0; 10]), 1);
        assert!(cache.covers(&toks(&[1]), &base()));
        assert!(
            !cache.covers(&toks(&[2]), &base()),
            "[2] was the least recently used"
        );
        assert_eq!(
            cache.insert(toks(&[5]), base(), vec![0; 40]),
            0,
            "larger than the budget"
        );
        assert!(!cache.covers(&toks(&[5]), &base()));
    }

    #[test]
    fn a_prefix_is_only_offered_under_the_adapters_it_was_computed_under() {
        use wick_backend::AdapterId;
        let lora = AdapterSet::new([(AdapterId(0), 0.5)]);
        let other = AdapterSet::new([(AdapterId(0), 0.25)]);
        let mut cache = RamCache::new(1000);
        cache.insert(toks(&[1, 2, 3]), lora.clone(), vec![0; 10]);
        let prompt = toks(&[1, 2, 3, 4]);
        assert_eq!(cache.best(&prompt, &base(), Reuse::AnyPrefix, 4, 0), None);
        assert_eq!(
            cache.best(&prompt, &other, Reuse::AnyPrefix, 4, 0),
            None,
            "another scale"
        );
        assert_eq!(
            cache.best(&prompt, &lora, Reuse::AnyPrefix, 4, 0),
            Some((0, 3))
        );
        assert!(!cache.covers(&toks(&[1, 2]), &base()));
        cache.insert(toks(&[1, 2, 3, 4]), base(), vec![0; 10]);
        assert_eq!(
            cache.entries.len(),
            2,
            "the base entry supersedes nothing of the adapter's"
        );
        let zero = AdapterSet::new([(AdapterId(0), 0.0)]);
        assert_eq!(zero, base(), "an adapter at scale 0 is the base model");
    }

    proptest! {
        #[test]
        fn the_budget_always_holds_and_bytes_add_up(
            ops in proptest::collection::vec((proptest::collection::vec(0u32..4, 1..6), 1usize..40), 1..60),
            budget in 0u64..100,
        ) {
            let mut cache = RamCache::new(budget);
            for (tokens, size) in ops {
                cache.insert(toks(&tokens), base(), vec![0; size]);
                prop_assert!(cache.bytes() <= budget);
                let sum: u64 = cache.entries.iter().map(|e| e.snapshot.len() as u64).sum();
                prop_assert_eq!(sum, cache.bytes());
                // No entry is a prefix of another: the longer one holds it.
                for a in &cache.entries {
                    for b in &cache.entries {
                        if !std::ptr::eq(a, b) {
                            prop_assert!(!b.tokens.starts_with(&a.tokens));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_model_whose_state_cannot_be_cut_back_reuses_whole_entries_only() {
        let mut cache = RamCache::new(1000);
        cache.insert(toks(&[1, 2, 3, 4]), base(), vec![0; 10]);
        let prompt = toks(&[1, 2, 3, 7]);
        assert_eq!(
            cache.best(&prompt, &base(), Reuse::AnyPrefix, 4, 0),
            Some((0, 3))
        );
        assert_eq!(
            cache.best(&prompt, &base(), Reuse::Whole, 4, 0),
            None,
            "three of its four tokens would be a cut"
        );
        let longer = toks(&[1, 2, 3, 4, 5]);
        assert_eq!(
            cache.best(&longer, &base(), Reuse::Whole, 5, 0),
            Some((0, 4)),
            "a prompt that extends all of it"
        );
        assert_eq!(
            cache.best(&longer, &base(), Reuse::Whole, 3, 0),
            None,
            "nor a whole entry cut to the limit"
        );
    }
}

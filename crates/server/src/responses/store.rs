//! Stored responses, for `GET /v1/responses/{id}` and `previous_response_id`: in memory,
//! bounded in count and bytes, the least recently used evicted first. A response is kept with
//! the conversation's input items (those of the responses it continued included), so
//! continuing it needs nothing else; the prompt cache makes the continuation cheap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

/// Most responses kept.
pub(crate) const MAX_COUNT: usize = 1024;
/// Most bytes kept (their JSON text).
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// One stored response.
#[derive(Debug)]
pub(crate) struct Stored {
    /// The response object, as `GET` returns it.
    pub(crate) response: Value,
    /// The conversation's input items, oldest first (its `output` follows them).
    pub(crate) items: Vec<Value>,
    bytes: usize,
}

impl Stored {
    pub(crate) fn new(response: Value, items: Vec<Value>) -> Self {
        let bytes =
            response.to_string().len() + items.iter().map(|i| i.to_string().len()).sum::<usize>();
        Stored {
            response,
            items,
            bytes,
        }
    }

    /// The items a continuation starts from: the input items, then the output.
    pub(crate) fn history(&self) -> Vec<Value> {
        let mut items = self.items.clone();
        if let Some(Value::Array(output)) = self.response.get("output") {
            items.extend(output.iter().cloned());
        }
        items
    }
}

/// The store; cheap to share (`&self` methods, one lock held only for map operations).
#[derive(Debug)]
pub(crate) struct ResponseStore {
    inner: Mutex<Lru>,
    max_count: usize,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct Lru {
    /// Each response with the tick of its last use.
    map: HashMap<String, (Arc<Stored>, u64)>,
    tick: u64,
    bytes: usize,
}

impl Default for ResponseStore {
    fn default() -> Self {
        ResponseStore::new(MAX_COUNT, MAX_BYTES)
    }
}

impl ResponseStore {
    pub(crate) fn new(max_count: usize, max_bytes: usize) -> Self {
        ResponseStore {
            inner: Mutex::new(Lru::default()),
            max_count,
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `stored` under `id`, evicting the least recently used past the limits; one
    /// larger than the byte limit alone is not kept.
    pub(crate) fn put(&self, id: String, stored: Stored) {
        if stored.bytes > self.max_bytes || self.max_count == 0 {
            tracing::warn!("response {id} not stored: {} bytes", stored.bytes);
            return;
        }
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        lru.bytes += stored.bytes;
        if let Some((old, _)) = lru.map.insert(id, (Arc::new(stored), tick)) {
            lru.bytes -= old.bytes;
        }
        while lru.map.len() > self.max_count || lru.bytes > self.max_bytes {
            let Some(oldest) = lru
                .map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((gone, _)) = lru.map.remove(&oldest) {
                lru.bytes -= gone.bytes;
            }
        }
    }

    /// The response under `id`, now the most recently used.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Stored>> {
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        let (stored, used) = lru.map.get_mut(id)?;
        *used = tick;
        Some(Arc::clone(stored))
    }

    /// Removes the response under `id`; whether there was one.
    pub(crate) fn remove(&self, id: &str) -> bool {
        let mut lru = self.lock();
        match lru.map.remove(id) {
            Some((gone, _)) => {
                lru.bytes -= gone.bytes;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(text: &str) -> Stored {
        Stored::new(
            json!({"output": [{"type": "message", "content": text}]}),
            vec![],
        )
    }

    #[test]
    fn the_least_recently_used_goes_first_past_the_count() {
        let store = ResponseStore::new(2, 1 << 20);
        store.put("a".into(), stored("1"));
        store.put("b".into(), stored("2"));
        assert!(store.get("a").is_some());
        store.put("c".into(), stored("3"));
        assert!(store.get("b").is_none(), "b was least recently used");
        assert!(store.get("a").is_some() && store.get("c").is_some());
    }

    #[test]
    fn bytes_are_bounded_and_an_oversized_response_is_not_kept() {
        let one = stored("x").bytes;
        let store = ResponseStore::new(100, one * 2);
        for id in ["a", "b", "c"] {
            store.put(id.into(), stored("x"));
        }
        assert!(store.get("a").is_none());
        assert!(store.get("b").is_some() && store.get("c").is_some());
        store.put("big".into(), stored(&"y".repeat(one * 3)));
        assert!(store.get("big").is_none());
        assert!(store.get("b").is_some(), "an oversized put evicts nothing");
        assert!(store.remove("b"));
        assert!(!store.remove("b"));
        assert_eq!(store.lock().bytes, one);
    }

    #[test]
    fn history_is_the_input_then_the_output() {
        let s = Stored::new(
            json!({"output": [{"type": "message", "role": "assistant", "content": "hi"}]}),
            vec![json!({"role": "user", "content": "hello"})],
        );
        let history = s.history();
        let roles: Vec<&str> = history
            .iter()
            .map(|i| i["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant"]);
    }
}

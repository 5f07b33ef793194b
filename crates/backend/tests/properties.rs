//! Property tests: snapshots and the stub's tokenizer on arbitrary input.

use proptest::prelude::*;
use wick_backend::{snapshot, Backend, BackendConfig, StubBackend};
use wick_types::TokenId;

proptest! {
    #[test]
    fn snapshots_round_trip(
        fingerprint in ".{0,40}",
        tokens in proptest::collection::vec(any::<u32>(), 0..64),
        payload in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let tokens: Vec<TokenId> = tokens.into_iter().map(TokenId).collect();
        let bytes = snapshot::encode(&fingerprint, &tokens, &payload);
        let snap = snapshot::decode(&fingerprint, &bytes).unwrap();
        prop_assert_eq!(snap.tokens, tokens);
        prop_assert_eq!(snap.payload, &payload[..]);
    }

    #[test]
    fn arbitrary_bytes_are_never_a_snapshot(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        prop_assert!(snapshot::decode("any", &bytes).is_err());
    }

    #[test]
    fn stub_tokenization_round_trips(text in any::<String>(), special in any::<bool>()) {
        let stub = StubBackend::new(&BackendConfig::new("unused.gguf")).unwrap();
        let tokens = stub.tokenize(&text, special).unwrap();
        prop_assert_eq!(stub.detokenize(&tokens).unwrap(), text.as_bytes());
        if !special {
            prop_assert!(tokens.iter().all(|t| !stub.info().special.is_control(*t)));
        }
    }
}

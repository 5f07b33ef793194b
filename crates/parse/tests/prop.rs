//! Property: for every corpus case and any chunking at the byte level (cuts inside UTF-8
//! characters, markers and JSON escapes included), the concatenated stream equals the whole
//! parse, and the stream obeys S1–S5.

mod common;

use std::sync::OnceLock;

use common::{check_stream, load_cases, parse_bytes, whole, Case};
use proptest::prelude::*;

fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(load_cases)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_chunking_equals_the_whole_parse(
        pick in any::<prop::sample::Index>(),
        raw_cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..40),
    ) {
        let case = &cases()[pick.index(cases().len())];
        let n = case.output.len();
        let mut cuts: Vec<usize> = raw_cuts.iter().map(|i| i.index(n.max(1))).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let (want, _) = whole(case);
        let (got, events) = parse_bytes(case, &cuts);
        prop_assert_eq!(&got, &want, "case {} cuts {:?}", case.id, cuts);
        let errs = check_stream(&events);
        prop_assert!(errs.is_empty(), "case {}: {:?}", case.id, errs);
        for call in &got.tool_calls {
            let v: serde_json::Value = serde_json::from_str(&call.arguments)
                .map_err(|e| TestCaseError::fail(format!("{}: {e}", case.id)))?;
            prop_assert!(v.is_object());
        }
    }
}

//! Every corpus case, whole and streamed (1 byte, 1 char, every two-chunk split, seeded
//! random splits): the parse matches `expected`, and every streamed parse equals the whole.

mod common;

use common::{check_stream, compare, load_cases, parse_bytes, parse_chars, random_cuts, whole};

#[test]
fn every_case_whole_and_streamed() {
    let cases = load_cases();
    assert!(!cases.is_empty());
    let mut failures = Vec::new();
    for case in &cases {
        let (want, events) = whole(case);
        let mut errs = compare(case, &want);
        errs.extend(check_stream(&events));
        let n = case.output.len();
        let all_bytes: Vec<usize> = (1..n).collect();
        let all_chars: Vec<usize> = case.output.char_indices().map(|(i, _)| i).skip(1).collect();
        let mut chunkings: Vec<(String, bool, Vec<usize>)> = vec![
            ("1-byte".into(), true, all_bytes),
            ("1-char".into(), false, all_chars),
        ];
        for seed in 0..4 {
            chunkings.push((format!("random {seed}"), true, random_cuts(n, seed)));
        }
        for cut in 1..n {
            chunkings.push((format!("split at {cut}"), true, vec![cut]));
        }
        for (label, bytes, cuts) in chunkings {
            let (got, events) = if bytes {
                parse_bytes(case, &cuts)
            } else {
                parse_chars(case, &cuts)
            };
            if got != want {
                errs.push(format!("{label}: streamed {got:?} != whole {want:?}"));
                break;
            }
            let s = check_stream(&events);
            if !s.is_empty() {
                errs.push(format!("{label}: {s:?}"));
                break;
            }
        }
        if !errs.is_empty() {
            failures.push(format!("{}:\n    {}", case.id, errs.join("\n    ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

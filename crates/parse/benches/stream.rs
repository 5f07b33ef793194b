//! Streams one tool call whose arguments hold a large string, one token-sized chunk (4 bytes)
//! at a time; the throughput must not fall as the size grows (linear total cost).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use wick_parse::{EndedBy, Format, ParseOptions, Parser};

fn output(size: usize) -> String {
    let mut s = String::from("<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\", \"content\": \"");
    let line = "fn main() { println!(\\\"hi\\\"); }\\n";
    while s.len() < size {
        s.push_str(line);
    }
    s.push_str("\"}}\n</tool_call>");
    s
}

fn stream(c: &mut Criterion) {
    let mut group = c.benchmark_group("hermes_tool_call_4_byte_chunks");
    for size in [64 << 10, 256 << 10, 1 << 20] {
        let text = output(size);
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.sample_size(10);
        group.bench_with_input(BenchmarkId::from_parameter(size), &text, |b, text| {
            b.iter(|| {
                let mut p = Parser::new(Format::Hermes, ParseOptions::new().id_seed(1));
                let mut n = 0;
                for chunk in text.as_bytes().chunks(4) {
                    n += p.feed_bytes(chunk).len();
                }
                n + p.finish(EndedBy::Stop).len()
            });
        });
    }
    group.finish();
}

criterion_group!(benches, stream);
criterion_main!(benches);

//! wick's GBNF checker (`wick_backend::check_gbnf`, which stands in front of llama.cpp so a bad
//! grammar gets a message with a line and column instead of a null and a stderr dump of the
//! user's grammar) accepts exactly what llama.cpp's own grammar parser accepts, on a corpus of
//! valid and broken grammars, with the real model's vocabulary.

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;

const CORPUS: &[&str] = &[
    // Valid.
    "root ::= \"yes\" | \"no\"",
    "root ::= [a-z]+ \"\\n\"",
    "root ::= \"é\" [α-ω] . \"\\u00e9\\x41\"",
    "root ::= <[12]> !<[2]>",
    "root ::= ( \"a\"\n  | \"b\" )* x{2,5} x{3} x{0,}\nx ::= \"x\"",
    "# a comment\nroot ::= \"a\" # trailing\n",
    "root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9]+",
    "root ::= \"a\" root | \"b\"",
    "root ::= [^\"\\\\] \"\\\\\" [\\-\\]]",
    "root ::= item{0,3}\nitem ::= \"i\"",
    // Broken.
    "root = \"a\"",
    "root ::= \"abc",
    "root ::= \"\\q\"",
    "root ::= [a-",
    "root ::= \"\\x4\"",
    "root ::= \"a\"\nitem ::= thing",
    "item ::= \"a\"",
    "root ::= * \"a\"",
    "root ::= (\"a\" \"b\"",
    "root ::= \"a\"{3001}",
    "root ::= \"a\" ) ",
    "root ::= <[12>",
    "root ::= root \"a\" | \"b\"",
    "root ::= e\ne ::= t | e \"+\" t\nt ::= \"1\"",
    "root ::= a root \"x\" | \"y\"\na ::= \"\" | \"z\"",
    "root ::= \"a\" {2,x}",
    "",
    "::= \"a\"",
];

#[test]
fn the_checker_accepts_exactly_what_llama_cpp_accepts() {
    let backend = LlamaBackend::init().expect("llama backend");
    let params = LlamaModelParams::default().with_vocab_only(true);
    let model = LlamaModel::load_from_file(&backend, wick_testutil::model_path(), &params)
        .expect("the test model");
    for grammar in CORPUS {
        let ours = wick_backend::check_gbnf(grammar);
        let theirs = LlamaSampler::grammar(&model, grammar, "root");
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "{grammar:?}: wick says {ours:?}, llama.cpp says {}",
            if theirs.is_ok() { "ok" } else { "invalid" }
        );
    }
}
